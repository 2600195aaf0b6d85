"""Exception classes and the messages that explain them.

Every message says who (class and field), what went wrong, why it matters for
the jit cache, and the fix, in one or two sentences.
"""

from __future__ import annotations

import dataclasses


class RecompileError(RuntimeError):
    """A jitted function was about to trace more times than its ``max_compiles`` budget allows."""


class HostMismatchError(RuntimeError):
    """In a multi-process job, another process did not make the program this process is
    about to run (another static value or argument shape), so the job would hang in the
    program's first collective."""


class Retrace(BaseException):
    """Internal: staticfield stops a trace on purpose and makes it again (``deps="read"``:
    a shared program's retrace read a static its keys disagree on). Never reaches the user;
    a ``BaseException`` so that a user's ``except Exception`` cannot swallow it."""


class DepsCheckError(RuntimeError):
    """``STATICFIELD_CHECK_DEPS=1``: a ``deps="read"`` method shared a program with a static
    key for which it traces differently (a read of a static escaped the recording)."""


DEPS_CHECK_FIRST = (
    "{function}: deps=\"read\" traced the method for {base} with a recording self, and "
    "it traces differently from an ordinary self ({what}): a read of a static escaped "
    "the recording. Read statics as attributes (self.{field}), or use deps=\"all\" "
    "(the default) for this method."
)
DEPS_CHECK = (
    "{function}: deps=\"read\" shared the program traced for {base} with {key}, but the "
    "method traces differently for them ({what}), so a read of {fields} escaped the recording "
    "and the shared program would compute the wrong result. Please report this to staticfield "
    "with the method; until it is fixed, use deps=\"all\" (the default) for this method."
)


class StoreCheckError(RuntimeError):
    """``STATICFIELD_CHECK_STORE=1``: a program the store found without tracing
    (``trust="source"``) is not the program a trace gives now."""


STORE_CHECK = (
    "{function}: the program store (trust=\"source\") found a program stored for this call, "
    "but tracing it now gives another program: {what}. So the function depends on something "
    "its source and arguments do not show (a value read from the environment, a file or a "
    "global changed at run time), and loading the stored program would give a stale result. "
    "Use trust=\"trace\" (the default) for this code, or make the function a pure function "
    "of its source, arguments and statics."
)


class StaticFieldWarning(UserWarning):
    """A staticfield construct works, but is likely to cost recompiles."""


JAX_ARRAY_IN_STATIC = (
    "{where}: a {what} cannot be a static field value (static values are part of the "
    "jit cache key and must be hashable and concrete). Make `{field}` a dynamic field{mixed}, "
    "or pass np.asarray(...) / a Python value."
)

BOUND_METHOD = (
    "{where}: the bound method {method} cannot be stored in a field: it captures its "
    "instance, {captured}, which is half-built while __init__ runs and stale after "
    "sf.replace. Store an @sf.jit_method bound method in a dynamic field instead, or a "
    "plain function that takes the instance as an argument."
)

IDENTITY_STATIC = (
    "{where}: {a_type} is hashed by identity, so changes made inside it in place do not "
    "recompile (the jit cache key is the object's id). Give {type} value-based __eq__ and "
    "__hash__ (e.g. make it a frozen dataclass or an @sf.dataclass), or store its "
    "settings instead of the object in `{field}`."
)

IDENTITY_ARGUMENT = (
    "{function}: `{path}` is {a_type}, which static=\"auto\" keys by identity (it is "
    "{why}), so changes made inside it in place do not recompile: the old program runs. "
    "Pass a new object after each change, give {type} value-based __eq__ and __hash__ (a frozen "
    "dataclass, an @sf.dataclass, a tuple or frozenset), or pass its settings instead."
)

IDENTITY_LEAF = (
    "{where}: a leaf of this leaves=\"any\" field is {a_type}, which is keyed by identity (it is "
    "{why}), so changes made inside it in place do not recompile: the old program runs. Give "
    "{type} value-based __eq__ and __hash__ (a frozen dataclass, an @sf.dataclass, a tuple or "
    "frozenset), or build a new one after each change."
)

RECURSIVE_STATIC = (
    "{where}: the static value refers to itself or is nested too deeply to be frozen into "
    "a cache key. Pass a value without cycles in `{field}`, or make it a dynamic field."
)

# Added to the static-side hints when the offending value sits inside the field's value:
# the field may hold arrays among other leaves, which a plain dynamic field refuses.
MIXED_HINT = ' (`sf.field(leaves="any")` if it also holds functions or other non-array leaves)'

OPAQUE_HINT = ' declared `sf.field(leaves="any")` (it keeps the value as it is, keyed by identity under jit)'

UNHASHABLE_STATIC = (
    "{where}: a static value of type {type} is unhashable, so it cannot be part of the "
    "jit cache key. Give {type} value-based __eq__ and __hash__ (for example make it an "
    "@sf.dataclass), pass a tuple/frozenset/dict of hashable values, or make `{field}` "
    "a dynamic field{mixed}."
)

BAD_DYNAMIC_VALUE = (
    "{where}: {a_type} is not an array, so it cannot be a dynamic (traced) field value. "
    "Mark the field static: `{field}: {ann} = sf.static()` (or annotate it "
    "`sf.Static[{ann}]`), or decorate the class with @sf.dataclass(check=False) to "
    "skip this check."
)

UNHASHABLE_DYNAMIC = (
    "{where}: {a_type} is not an array, and it is unhashable, so it can be neither a "
    "dynamic (traced) nor a static value of `{field}`. Declare the field "
    "`{field}: {ann} = sf.field(leaves=\"any\")`: the value is kept as it is (its array "
    "leaves, if it is a pytree, are traced) and under jit its other leaves are static, a "
    "{type} keyed by identity. To trace the arrays inside a {type}, register {type} as a "
    "pytree (jax.tree_util.register_dataclass) or make it an @sf.dataclass."
)

BAD_DYNAMIC_LEAF = (
    "{cls}.{field}: the value holds {a_type} at {where}, which is not an array, so "
    "`{field}` cannot be a plain dynamic (traced) field. If it holds arrays as well as "
    "other leaves, declare it `{field}: {ann} = sf.field(leaves=\"any\")`: its array "
    "leaves are traced and the others are static under jit. If it holds no arrays, mark it "
    "static: `{field}: {ann} = sf.static()`."
)

JAXPR_IN_FIELD = (
    "{where}: {a_type} (a closure-converted function) is not an array, so `{field}` cannot "
    "be a checked dynamic field. Keep it a plain field and skip the check for the class: "
    "`@sf.dataclass(check=False)` (or `class {name}(sf.Struct, check=False)`), so that the "
    "library's own eqx.partition sees the Jaxpr as a leaf (under sf.jit(static=\"auto\"), one "
    "held directly by the field is static). Not sf.field(leaves=\"any\"): a Jaxpr kept in the tree's metadata breaks jax.grad "
    "through an implicit adjoint, which traces the solve twice and compares the two trees' Jaxprs "
    "by identity."
)

BAD_DYNAMIC_DTYPE = (
    "{where}: a NumPy array of dtype {dtype} is not numeric, so it cannot be a dynamic "
    "(traced) field value (JAX arrays hold numbers). Mark the field static "
    "(`{field}: ... = sf.static()`), or convert the array to a numeric dtype."
)

BAD_CONVERTER = (
    "{cls}.{field}: converter={type} is not callable, so it cannot convert the value "
    "passed for `{field}`. Pass a function such as jnp.asarray or tuple, or drop `converter`."
)

CONTRADICTORY_MARKS = (
    "{cls}.{field}: the field is marked both static ({static}) and dynamic ({dynamic}). "
    "A field is one or the other: keep the mark you mean and drop the other."
)

STATIC_SHARDING = (
    "{cls}.{field}: a static field holds no arrays, so it cannot have a sharding. Drop "
    "`sharding=...`, or make `{field}` a dynamic field."
)

ABSTRACT_UNDEFINED = (
    "{cls}: cannot construct an abstract class: it leaves the {what} undefined. Define "
    "{how} in a subclass, and construct that subclass."
)

ABSTRACT_WITH_VALUE = (
    "{cls}.{field}: an AbstractVar/AbstractClassVar declares a variable that subclasses "
    "define, so it takes no value where it is declared. Drop the value, or declare "
    "`{field}` as a field (`{field}: T = value`) or a ClassVar."
)

BAD_LEAVES = (
    "{cls}.{field}: leaves={leaves!r} is not one of 'arrays' (the default: array leaves "
    "only) or 'any' (any pytree leaves; the non-array ones are static under jit). Pass "
    "one of those."
)

STATIC_LEAVES = (
    "{cls}.{field}: a static field has no leaves (its whole value is in the jit cache "
    "key), so leaves='any' does not apply to it. Drop `leaves=...`, or make `{field}` "
    "a dynamic field."
)

FROZEN_ASSIGN = (
    "{cls}.{field}: cannot assign to a field of a frozen staticfield dataclass "
    "(instances are pytrees and may be shared by compiled programs). Make a changed "
    "copy instead: sf.replace(obj, {field}=...) or obj.replace({field}=...)."
)

FROZEN_DELETE = (
    "{cls}.{field}: cannot delete a field of a frozen staticfield dataclass. Make a "
    "changed copy instead: sf.replace(obj, {field}=...)."
)

MISSING_AFTER_INIT = (
    "{cls}.__init__ returned without setting {names}. Every field must be set in a "
    "custom __init__ (self.<name> = value), or be given a default in the class body."
)

NOT_A_FIELD_ATTR = (
    "{cls}.__init__ set `{name}`, which is not a field, so it would be lost when JAX "
    "flattens and rebuilds the instance. Declare it as a field "
    "(`{name}: T = sf.static()` if it is not an array)."
)

UNDECORATED_SUBCLASS = (
    "{sub} subclasses the staticfield dataclass {base} but is not decorated itself, so "
    "JAX does not know how to flatten it. Decorate it with @sf.dataclass."
)

BAD_STATE = (
    "{cls}: cannot restore an instance from a pickled state with {problem}. The state "
    "must hold exactly the fields of {cls}; pickle the instance again with the current "
    "class definition."
)

MAPPABLE_CLASH = (
    "{cls}: a field named {name!r} would hide the Mapping method {name}() that mappable=True "
    "gives its instances. Rename the field, or drop mappable=True."
)

SLOTS = (
    "{cls} defines __slots__, but staticfield instances keep their fields in __dict__ "
    "(unflatten fills it in one update, and the flatten cache lives there). Remove "
    "__slots__ from {cls}."
)

REPLACE_CLASS = (
    "sf.replace expects an instance, got the class {cls} itself. Call it on an instance: "
    "sf.replace(obj, field=value) or obj.replace(field=value)."
)

UNKNOWN_REPLACE = (
    "{cls} has no field(s) {names} to replace. Valid field names: {valid}."
)

SPREAD_EQ = (
    "{cls}.__eq__: the field `{field}` holds an array spread over processes, which == "
    "compares on its devices, as a collective that every process must run; that failed "
    "({error}). Call == in every process with arrays on the same devices, or compare "
    "process-local values (jax.experimental.multihost_utils.process_allgather)."
)
TRACED_EQ = (
    "{cls}.__eq__: cannot compare instances whose field `{field}` holds a traced value "
    "({type}): the result would depend on runtime values, which are unknown while "
    "tracing. Compare the arrays explicitly inside the traced function (e.g. "
    "jnp.array_equal(a.{field}, b.{field})), or compare outside jit."
)


_BUDGET_FIX = {
    "shape": "Pad or bucket the changing shape to a few sizes, reuse an earlier shape, or raise max_compiles.",
    "dtype": "Cast the argument to one dtype before the call, or raise max_compiles.",
    "weak_type": (
        "Pass arrays of one weak type: a Python scalar and jnp.full(..., 0.5) are weakly typed, "
        "jnp.asarray(x, dtype) is not. Or raise max_compiles."
    ),
}
_BUDGET_FIX_DEFAULT = (
    "Keep the changing value dynamic (a traced field or argument), reuse an earlier "
    "value, or raise max_compiles."
)


def article(noun: str) -> str:
    """``noun`` with its indefinite article: ``a function``, ``an object``."""
    return f"{'an' if noun[:1].lower() in 'aeiou' else 'a'} {noun}"


def recompile_budget_message(function: str, number: int, budget: int, event: object) -> str:
    """``RecompileError``'s text: the budget, the explanation, and the fix for its kind."""
    changes = getattr(event, "changes", None) or []
    kinds = {c.kind for c in changes}
    fix = _BUDGET_FIX.get(kinds.pop(), _BUDGET_FIX_DEFAULT) if len(kinds) == 1 else _BUDGET_FIX_DEFAULT
    reasons = event.reasons() if event is not None else ""  # type: ignore[attr-defined]
    return f"{function} would compile {number} times, over its budget max_compiles={budget}{reasons}\n{fix}"


def frozen_error(cls: type, name: str, deleting: bool = False) -> dataclasses.FrozenInstanceError:
    template = FROZEN_DELETE if deleting else FROZEN_ASSIGN
    return dataclasses.FrozenInstanceError(template.format(cls=cls.__qualname__, field=name))
