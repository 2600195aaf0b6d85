"""``static="auto"``: what one call shape becomes, decided on a miss, and the trace side.

A call is flattened, as JAX flattens it, into leaves; a *shape* is the treedef of
``(args, kwargs)`` with each leaf's type. On the first call of a shape, ``Shape.make``
decides everything a hit needs:

- **the canonical call**: the arguments bound to the user's signature, defaults filled
  in (a default holding arrays is left to the function, as ``jax.jit`` leaves it), each
  parameter's value in order; so ``f(x, max_steps=256)`` and ``f(x)`` (256 the default)
  and ``f(x, 256)`` reach one program. Bound once per shape: never on a hit.
- **which leaves are static**: jax and NumPy arrays (and NumPy scalars, tracers) are
  traced; every other leaf is static, except inside an ``sf`` instance, which keeps its
  own split (a Python float in a dynamic field is traced) — but every non-array leaf
  anywhere below a field of a ``check=False`` class is static, however deep, as
  ``eqx.filter_jit`` makes it (a function in a plain field, a Python bool, the
  ``Jaxpr`` of a closure-converted function inside an equinox Module in a tuple); an
  ``sf`` instance found there keeps its own split.
- **C-level getters** (``operator.itemgetter``) that pick, from a call's leaves, its
  static values (the lookup key; floats by their bits, packed in one C call, so ``0.0``
  and ``-0.0`` differ) and its traced leaves in canonical order.

The variant is keyed by ``AutoKey``: the canonical treedef, which canonical leaves are
static, and their type-strict keys (by value where hashable, by identity otherwise).
While JAX traces the variant (``AutoKey.call``), the user's arguments are rebuilt from
the traced leaves and the statics, and the function's outputs are partitioned the same
way (``_auto_out.Restore``): arrays are the program's outputs, every other leaf comes
back as the very object the function returned.
"""

from __future__ import annotations

import inspect
import operator
import struct
from typing import Any, Callable

import jax

from .._core._anyleaves import ARRAY_LEAVES, AnyLeaves, leaf_key
from .._core._identity import exact_eq
from .._core._compat import Tracer
from .._core._registry import SPECS, is_instance
from .._explain import _describe
from ._auto_out import Restore as Restore, partition_out as partition_out  # (re-exported for _traced)

_FREE, _FORCED, _FIELD = 0, 1, 2  # a leaf's place: anywhere, inside an instance, a check=False field
TRACED, ARG, FIELD = 0, 1, 2  # a canonical leaf: traced, an argument's static, a check=False field's


def traced_kind(kind: type) -> bool:
    """Whether leaves of this type are traced (an array, a NumPy scalar, a tracer)."""
    return issubclass(kind, ARRAY_LEAVES) or issubclass(kind, Tracer)


def _getter(positions: list[int]) -> Callable[[list], Any]:
    """``leaves -> a sequence of the leaves at positions`` (C-level): a slice for none or
    one, so that a splat always gets a sequence."""
    if len(positions) > 1:
        return operator.itemgetter(*positions)
    if positions:
        return operator.itemgetter(slice(positions[0], positions[0] + 1))
    return operator.itemgetter(slice(0, 0))


def floats_key(count: int) -> Callable[..., bytes]:
    """``(*floats) -> bytes``: the floats' bits, in one C call: the identity's spelling of
    a float (``0.0`` and ``-0.0`` differ), which ``float.hex`` spells one string per float."""
    return struct.Struct(f"<{count}d").pack


# ----- where each leaf sits ------------------------------------------------------------
def _places(value: Any, out: list[int], inside: bool) -> None:
    """Each leaf of ``value``'s flatten (JAX's order): free, forced (in an instance's
    dynamic field) or a check=False field's own leaf."""
    spec = SPECS.get(type(value))
    if spec is not None:
        children = value._staticfield_flat[0]
        for name, child in zip(spec.dynamic_names, children):
            if child.__class__ is AnyLeaves:  # leaves="any": its arrays (and instances)
                for leaf in child.dynamic:
                    _places(leaf, out, True) if type(leaf) in SPECS else out.append(_FORCED)
                continue
            own = _FIELD if not spec.check else _FORCED  # check=False: every leaf below, however deep
            for leaf in jax.tree_util.tree_leaves(child, is_leaf=is_instance):
                _places(leaf, out, True) if type(leaf) in SPECS else out.append(own)
        return
    for leaf in jax.tree_util.tree_leaves(value, is_leaf=is_instance):
        _places(leaf, out, inside) if type(leaf) in SPECS else out.append(_FORCED if inside else _FREE)


# ----- the variant's key and its trace --------------------------------------------------
class AutoKey:
    """A variant of ``static="auto"``: the canonical call's structure (parameter names and
    treedef), which of its leaves are static (and whether as arguments or fields), and
    their values, keyed type-strictly."""

    __slots__ = ("names", "treedef", "mask", "statics", "keys", "paths", "_hash")

    def __init__(self, names: tuple, treedef: Any, mask: tuple, statics: tuple, paths: tuple) -> None:
        self.names, self.treedef, self.mask, self.statics, self.paths = names, treedef, mask, statics, paths
        self.keys = tuple(leaf_key(s) for s in statics)
        self._hash = hash((names, treedef, mask, self.keys))

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return (other.__class__ is AutoKey and self._hash == other._hash  # type: ignore[attr-defined]
                and self.mask == other.mask and self.names == other.names  # type: ignore[attr-defined]
                and self.treedef == other.treedef and self.keys == other.keys)  # type: ignore[attr-defined]

    def __reduce__(self) -> Any:
        return AutoKey, (self.names, self.treedef, self.mask, self.statics, self.paths)

    def __repr__(self) -> str:
        return f"static='auto' call ({', '.join(self.names)}) with statics {self.statics!r}"

    def values(self, dyn: tuple, blank: bool = False) -> tuple:
        """Each parameter's value: traced leaves from ``dyn``, statics from the key (with
        ``blank``, ``None`` for each: no leaf)."""
        dyn_it, st_it = iter(dyn), iter(self.statics)
        leaves = [next(dyn_it) if not m else (None if blank else next(st_it)) for m in self.mask]
        return self.treedef.unflatten(leaves)

    def user_call(self, sig: inspect.Signature, dyn: tuple) -> tuple[tuple, dict]:
        """The user's ``(args, kwargs)`` rebuilt from the traced leaves."""
        bound = inspect.BoundArguments(sig, dict(zip(self.names, self.values(dyn))))  # type: ignore[arg-type]
        return bound.args, bound.kwargs

    def describe(self, dyn: tuple) -> dict[str, tuple]:
        """The trace's description in the user's words: statics at their paths, as
        ``static_arg`` (an argument's leaf) or ``static`` (a ``check=False`` field's)."""
        out = _describe.describe(list(self.names), self.values(dyn, blank=True), {}, frozenset(), frozenset())
        statics = iter(self.statics)
        for m, path in zip(self.mask, self.paths):
            if m:
                out[path] = ("static" if m == FIELD else "static_arg", next(statics))
        return out


def signature_of(key: AutoKey, sig: inspect.Signature, donating: bool = False) -> inspect.Signature:
    """What JAX is told of the variant's function: the user's parameters (each as a plain
    one, so that JAX names a ``**kwargs`` entry ``kwargs['k']`` and counts its leaves), binding the traced leaves as the
    user's arguments (statics left out), so that its errors and ``jax_explain_cache_misses``
    name them (``solver.rtol``), never ``args[3]``."""
    kinds = inspect.Parameter
    plain = inspect.Signature([kinds(n, kinds.POSITIONAL_OR_KEYWORD) for n in key.names])

    class AutoSignature(inspect.Signature):
        __slots__ = ()

        def bind(self, *dyn: Any, **kwargs: Any) -> inspect.BoundArguments:
            return inspect.BoundArguments(plain, dict(zip(key.names, key.values(dyn, blank=True))))  # type: ignore[arg-type]

    params = list(plain.parameters.values())
    if donating:  # JAX checks donate_argnums (positions among the traced leaves) against it
        params.append(kinds("__sf_traced_leaves", kinds.VAR_POSITIONAL))
    return AutoSignature(params, return_annotation=sig.return_annotation)


# ----- one call shape ----------------------------------------------------------------------
class _Arg:
    """A top-level argument of the call, standing in while it is bound to the signature."""

    __slots__ = ("start", "stop", "value")

    def __init__(self, start: int, stop: int, value: Any) -> None:
        self.start, self.stop, self.value = start, stop, value


class Shape:
    """What the calls of one shape (treedef and leaf types) do on a hit: ``key(leaves)``
    (and ``floats(leaves)``, their bits packed by ``pack``) is the lookup key of ``fronts``, which maps
    it to the variant's C++ front; ``dynamic(leaves)`` are its traced leaves. Everything
    here is C-level: ``operator.itemgetter`` and builtins."""

    __slots__ = ("names", "treedef", "mask", "paths", "sources", "key", "floats", "pack", "strict", "dynamic", "fronts")

    def vkey(self, leaves: list) -> AutoKey:
        """This call's variant key (on a miss)."""
        statics = tuple(leaves[src] if src.__class__ is int else src.value
                        for src, m in zip(self.sources, self.mask) if m)
        return AutoKey(self.names, self.treedef, self.mask, statics, self.paths)

    def lookup(self, leaves: list) -> Any:
        """The key ``fronts`` is looked up by (as the hit path computes it); ``None`` when
        it must not be kept: a NaN (never kept by a fast key: its calls take the
        miss, keyed by the identity)."""
        key = self.key(leaves)
        if self.floats is not None:
            floats = self.floats(leaves)
            if any(x != x for x in floats):
                return None
            key = (key, self.pack(*floats))
        if self.strict is not None:
            key = (key, tuple(map(leaf_key, self.strict(leaves))))
        return key


class _Const:
    """A canonical leaf that comes from a default, not from the call."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value


def _holds_arrays(value: Any) -> bool:
    """Whether a default holds arrays or instances (whose dynamic leaves are traced): it is
    left to the function, as ``jax.jit`` leaves it."""
    return any(traced_kind(type(leaf)) or type(leaf) in SPECS
               for leaf in jax.tree_util.tree_leaves(value, is_leaf=is_instance))


def make_shape(sig: inspect.Signature, args: tuple, kwargs: dict, leaves: list) -> Shape:
    """Decide a new shape from its first call (raises the ``TypeError`` of a wrong call)."""
    # Each top-level argument's leaves, in JAX's order: the positional ones, then keywords by name.
    stand: list[_Arg] = []
    start = 0
    for value in [*args, *(kwargs[k] for k in sorted(kwargs))]:
        n = jax.tree_util.tree_structure(value).num_leaves
        stand.append(_Arg(start, start + n, value))
        start += n
    by_name = dict(zip(sorted(kwargs), stand[len(args):]))
    bound = sig.bind(*stand[:len(args)], **{k: by_name[k] for k in kwargs})
    for name, param in sig.parameters.items():
        if name in bound.arguments:
            continue
        if param.kind is param.VAR_POSITIONAL:
            bound.arguments[name] = ()
        elif param.kind is param.VAR_KEYWORD:
            bound.arguments[name] = {}
        elif param.default is not param.empty and not _holds_arrays(param.default):
            bound.arguments[name] = param.default  # keyed as the default: no compile of its own

    names = tuple(name for name in sig.parameters if name in bound.arguments)  # the signature's order
    sources: list[Any] = []
    values: list[Any] = []

    def take(v: Any) -> Any:
        if v.__class__ is _Arg:
            sources.extend(range(v.start, v.stop))
            return v.value
        if isinstance(v, tuple) and any(x.__class__ is _Arg for x in v):  # *args
            return tuple(take(x) for x in v)
        if isinstance(v, dict) and any(x.__class__ is _Arg for x in v.values()):  # **kwargs
            return {k: take(v[k]) for k in sorted(v)}
        sources.extend(_Const(leaf) for leaf in jax.tree_util.tree_leaves(v))
        return v

    for name in names:
        values.append(take(bound.arguments[name]))
    flat, treedef = jax.tree_util.tree_flatten_with_path(tuple(values))
    places: list[int] = []
    _places(tuple(values), places, False)
    if len(flat) != len(sources) or len(places) != len(sources):  # pragma: no cover - a tree JAX walks differently twice
        raise TypeError("static=\"auto\": the arguments flatten differently twice; pass them as arrays or sf instances")
    mask = []
    for (_, leaf), place in zip(flat, places):
        if place == _FORCED or traced_kind(type(leaf)):
            mask.append(TRACED)
        else:
            mask.append(FIELD if place == _FIELD else ARG)
    paths = tuple(names[p[0].idx] + jax.tree_util.keystr(p[1:]) for p, _ in flat)  # type: ignore[attr-defined]

    shape = Shape()
    shape.names, shape.treedef, shape.mask, shape.paths = names, treedef, tuple(mask), paths
    shape.sources = tuple(sources)
    raw_static = [src for src, m in zip(sources, mask) if m and src.__class__ is int]
    # The fast key: a cheaper spelling of the identity (_identity), never a second opinion.
    # The shape already holds each leaf's type, so ``==``/``hash`` decide for the types
    # where they are the identity (exact_eq: int, str, a function, ...); a float enters as
    # its bits (``floats_key``, so 0.0 and -0.0 differ; a NaN is never kept: ``lookup``);
    # every other static (a frozenset: {1} == {True} and order; a complex; a dataclass
    # compared by fields) enters as its identity key, so nothing the identity keeps apart
    # shares a program.
    plain = [i for i in raw_static if exact_eq(type(leaves[i]))]
    floats = [i for i in raw_static if type(leaves[i]) is float]
    strict = [i for i in raw_static if not exact_eq(type(leaves[i])) and type(leaves[i]) is not float]
    shape.key = (len if not plain else operator.itemgetter(*plain))
    shape.floats = _getter(floats) if floats else None
    shape.pack = floats_key(len(floats))
    shape.strict = _getter(strict) if strict else None
    shape.dynamic = _getter([src for src, m in zip(sources, mask) if not m])
    shape.fronts = {}
    return shape
