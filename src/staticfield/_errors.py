"""Exception classes and the messages that explain them.

Every message says who (class and field), what went wrong, why it matters for
the jit cache, and the fix, in one or two sentences.
"""

from __future__ import annotations

import dataclasses


class RecompileError(RuntimeError):
    """A jitted function was about to trace more times than its ``max_compiles`` budget allows."""


class StaticFieldWarning(UserWarning):
    """A staticfield construct works, but is likely to cost recompiles."""


JAX_ARRAY_IN_STATIC = (
    "{where}: a {what} cannot be a static field value (static values are part of the "
    "jit cache key and must be hashable and concrete). Make `{field}` a dynamic field, "
    "or pass np.asarray(...) / a Python value."
)

UNHASHABLE_STATIC = (
    "{where}: a static value of type {type} is unhashable, so it cannot be part of the "
    "jit cache key. Give {type} value-based __eq__ and __hash__ (for example make it an "
    "@sf.dataclass), pass a tuple/frozenset/dict of hashable values, or make `{field}` "
    "a dynamic field."
)

BAD_DYNAMIC_LEAF = (
    "{where}: a {type} is not an array, so it cannot be a dynamic (traced) field value. "
    "Mark the field static: `{field}: {ann} = sf.static()` (or annotate it "
    "`sf.Static[{ann}]`), or decorate the class with @sf.dataclass(check=False) to "
    "skip this check."
)

BAD_CONVERTER = (
    "{cls}.{field}: converter={type} is not callable, so it cannot convert the value "
    "passed for `{field}`. Pass a function such as jnp.asarray or tuple, or drop `converter`."
)

STATIC_SHARDING = (
    "{cls}.{field}: a static field holds no arrays, so it cannot have a sharding. Drop "
    "`sharding=...`, or make `{field}` a dynamic field."
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

UNKNOWN_REPLACE = (
    "{cls} has no field(s) {names} to replace. Valid field names: {valid}."
)

TRACED_EQ = (
    "{cls}.__eq__: cannot compare instances whose field `{field}` holds a traced value "
    "({type}): the result would depend on runtime values, which are unknown while "
    "tracing. Compare the arrays explicitly inside the traced function (e.g. "
    "jnp.array_equal(a.{field}, b.{field})), or compare outside jit."
)


def frozen_error(cls: type, name: str, deleting: bool = False) -> dataclasses.FrozenInstanceError:
    template = FROZEN_DELETE if deleting else FROZEN_ASSIGN
    return dataclasses.FrozenInstanceError(template.format(cls=cls.__qualname__, field=name))
