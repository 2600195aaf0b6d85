"""Describing what a function was traced with, as a flat map by path in the user's words.

On every trace (never on a cache hit) the arguments are described as a flat map
from a path (``self.a``, ``params.x_array``, ``state[0]``) to what the cache key
depends on there: a static value, a leaf's shape/dtype/weak type/sharding, a
class or a tree structure, and which arguments were passed by keyword.
``_explain`` diffs two descriptions into ``Change`` events.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any, Iterator

import jax

from .._core._anyleaves import ARRAY_LEAVES, AnyLeaves
from .._core._compat import Tracer, traced_call
from .._core._display import sharding_text
from .._core._spec import Spec
from .._core._registry import SPEC_ATTR
from ._names import tree_types

PASSING = "(passed by keyword)"  # the entry naming the arguments passed by keyword


class TreeText(str):
    """``str(treedef)``, which a tree entry shows, and the node types it names, which tell
    apart two classes of one name that print alike: equal when both are."""

    types: tuple

    def __new__(cls, treedef: Any) -> "TreeText":
        text = super().__new__(cls, str(treedef))
        text.types = tree_types(treedef)
        return text

    def __eq__(self, other: object) -> bool:
        return str.__eq__(self, other) is True and getattr(other, "types", None) == self.types

    def __ne__(self, other: object) -> bool:
        return not self == other

    __hash__ = str.__hash__


def _is_instance(x: Any) -> bool:
    return SPEC_ATTR in type(x).__dict__


_traced = threading.local()


@contextlib.contextmanager
def call_shardings(traced: Any) -> Iterator[None]:
    """While a variant traces ``traced`` (its flat arguments, tracers): each tracer's
    description uses the sharding of the concrete array it stands for in the call being
    traced (``_compat.traced_call``), where that call's arguments match leaf for leaf."""
    outer = getattr(_traced, "shardings", None)
    found: dict[int, Any] = {}
    call = traced_call()
    if call is not None:
        given, here = jax.tree.leaves(call[1:]), jax.tree.leaves(traced)
        if len(given) == len(here):
            for c, t in zip(given, here):
                own = isinstance(c, (jax.Array, jax.ShapeDtypeStruct)) and not isinstance(c, Tracer)
                if own and c.sharding is not None and getattr(t, "shape", None) == c.shape:
                    found[id(t)] = _padded(c.sharding, len(c.shape))
    _traced.shardings = found
    try:
        yield
    finally:
        _traced.shardings = outer


def _padded(s: Any, ndim: int) -> Any:
    """A ``NamedSharding`` with its spec written out for every axis (``P()`` of a vector
    is ``P(None,)``), as a tracer's aval writes it: one placement, one text."""
    spec = getattr(s, "spec", None)
    if not isinstance(s, jax.sharding.NamedSharding) or spec is None or len(spec) >= ndim:
        return s
    return jax.sharding.NamedSharding(s.mesh, jax.sharding.PartitionSpec(*spec, *[None] * (ndim - len(spec))))


def _leaf_entry(leaf: Any) -> tuple:
    aval = getattr(leaf, "aval", None)
    if aval is None:  # a concrete value (not traced): describe it the same way
        aval = jax.typeof(leaf)
    sharding = None
    try:
        # A concrete array's own sharding (and a ShapeDtypeStruct's): its aval's drops the
        # Auto axes (P(None, None)). A tracer's: the concrete array's it stands for in the
        # call being traced, if known.
        known = getattr(_traced, "shardings", None)
        s = known.get(id(leaf)) if known else None
        if s is None:
            own = isinstance(leaf, (jax.Array, jax.ShapeDtypeStruct)) and not isinstance(leaf, Tracer)
            s = leaf.sharding if own else aval.sharding
        if not s.mesh.empty:
            sharding = sharding_text(s)
    except Exception:
        pass
    return ("leaf", tuple(aval.shape), aval.dtype, bool(getattr(aval, "weak_type", False)), sharding)


def _walk(value: Any, path: str, out: dict[str, tuple], any_leaves: bool = False, kind: str = "static") -> None:
    """Describe ``value`` at ``path`` into ``out``; with ``any_leaves`` (a ``leaves="any"``
    field, or an argument of ``static="auto"``: ``kind`` "static_arg") a leaf that is not
    an array is a static value there."""
    if value.__class__ is AnyLeaves:  # a static="auto" argument
        _walk(value.value, path, out, any_leaves=True, kind="static_arg")
        return
    if _is_instance(value):
        spec: Spec = type(value).__dict__[SPEC_ATTR]
        out[path] = ("class", type(value))
        d = value.__dict__
        for name in spec.static_names:
            out[f"{path}.{name}"] = ("static", d[name])
        for name in spec.dynamic_names:
            _walk(d[name], f"{path}.{name}", out, any_leaves=name in spec.any_set)
        return
    leaves, treedef = jax.tree_util.tree_flatten_with_path(value, is_leaf=_is_instance)
    if not (len(leaves) == 1 and not leaves[0][0]):  # not a bare leaf
        out[path] = ("tree", TreeText(treedef))
    for keypath, leaf in leaves:
        sub = path + jax.tree_util.keystr(keypath)
        if _is_instance(leaf):
            _walk(leaf, sub, out)
        elif any_leaves and not isinstance(leaf, ARRAY_LEAVES):
            out[sub] = (kind, leaf)
        else:
            out[sub] = _leaf_entry(leaf)


# The JAX settings in a trace's context that change its program (part of jit's key), by
# the name a user sets them with: a change of one is a "context" change, not the arguments'.
SETTINGS = ("jax_enable_x64", "jax_numpy_dtype_promotion", "jax_default_matmul_precision")


def arg_name(names: list[str], i: int, star: str | None = None) -> str:
    """Positional argument ``i`` by its parameter: ``k``, or ``rest[0]`` past the named ones
    into ``*rest`` (``args[i]`` only where the function has no signature to read)."""
    if i < len(names):
        return names[i]
    return f"{star}[{i - len(names)}]" if star else f"args[{i}]"


def describe(names: list[str], args: tuple, kwargs: dict, static_pos: frozenset, static_names: frozenset,
             star: str | None = None) -> dict[str, tuple]:
    """A flat description of everything the cache key depends on, by path (``star``: the
    name of the function's ``*args`` parameter, if any)."""
    out: dict[str, tuple] = {name: ("context", getattr(jax.config, name, None)) for name in SETTINGS}
    for i, value in enumerate(args):
        name = arg_name(names, i, star)
        if i in static_pos:
            out[name] = ("static_arg", value)
        else:
            _walk(value, name, out)
    if kwargs:
        out[PASSING] = ("passing", frozenset(kwargs))
    for name, value in kwargs.items():
        if name in static_names:
            out[name] = ("static_arg", value)
        else:
            _walk(value, name, out)
    return out
