"""``static="auto"``'s outputs: arrays from the program, every other leaf as itself.

A function under ``sf.jit(static="auto")`` may return leaves that are not arrays (an int,
a function, a ``Jaxpr``, a ``jax.ShapeDtypeStruct``); they come back as themselves
(``partition_out``, ``Restore``), as ``eqx.filter_jit`` returns them, and a hit that JAX
serves from C++ rebuilds the whole output there, with no Python call of staticfield's
(see ``Restore``). One that holds a tracer of the trace (a closure over a
traced value, an object whose attribute is one, a ``functools.partial`` over one) would
come back holding a dead tracer and fail later, in JAX's words, far from its cause: it is
a ``TypeError`` naming the output's path and what it captured, raised as the call returns.

Imports: ``_core`` (``Tracer``, the identity) and the standard library. Called by
``_auto_plan`` and ``_traced`` (through ``_auto_plan``) and ``_auto``.
"""

from __future__ import annotations

import functools
import operator
import types
from typing import Any

import jax
import numpy as np

from .._core._compat import Tracer
from .._core._identity import leaf_key

OUT_ARRAYS = (jax.Array, np.ndarray, np.generic, Tracer)  # the program's outputs; the rest come back as they are

TRACER_OUT = (
    "{function}: its output {path} is {a_type} that holds a tracer ({what}): it would come "
    "back from the call holding a dead tracer, and fail later. Return the array itself (it comes back as an array), or "
    "build the {type} outside the jitted function from the arrays it returns."
)

_LIMIT = 10_000  # objects looked into per output leaf: a search that never stops is no help


def captured(value: Any) -> str | None:
    """Where inside ``value`` (not an array) a tracer sits (``the closure cell `y```,
    ``.v``, ``a partial's argument 0``), or ``None``."""
    seen: set[int] = set()
    todo: list[tuple[Any, str]] = [(value, "")]
    while todo and len(seen) < _LIMIT:
        v, where = todo.pop()
        if id(v) in seen or isinstance(v, (type, types.ModuleType, str, bytes, int, float, complex)):
            continue
        seen.add(id(v))
        if isinstance(v, Tracer):
            return where or "the value itself"
        todo.extend(_inside(v, where))
    return None


def _inside(v: Any, where: str) -> list[tuple[Any, str]]:
    """What ``v`` holds, each with the words that say where."""
    if isinstance(v, types.FunctionType):
        cells = zip(v.__code__.co_freevars, v.__closure__ or ())
        held = [(_cell(c), f"the closure cell `{n}`") for n, c in cells]
        return held + [(d, "a default") for d in (v.__defaults__ or ())] + \
            [(d, f"the default of `{k}`") for k, d in (v.__kwdefaults__ or {}).items()]
    if isinstance(v, functools.partial):
        return ([(v.func, "a partial's function")] + [(a, f"a partial's argument {i}") for i, a in enumerate(v.args)]
                + [(a, f"a partial's argument `{k}`") for k, a in v.keywords.items()])
    if isinstance(v, types.MethodType):
        return [(v.__self__, "the bound method's object"), (v.__func__, where)]
    if isinstance(v, (tuple, list, set, frozenset)):
        return [(x, f"{where}[{i}]") for i, x in enumerate(v)]
    if isinstance(v, dict):
        return [(x, f"{where}[{k!r}]") for k, x in v.items()]
    try:
        attrs = vars(v)
    except TypeError:
        return []
    return [(x, f"{where}.{k}") for k, x in attrs.items()]


def _cell(cell: Any) -> Any:
    try:
        return cell.cell_contents
    except ValueError:  # an empty cell
        return None


def refuse_tracers(function: str, paths: list, leaves: list) -> None:
    """The ``TRACER_OUT`` error for the first non-array output leaf holding a tracer."""
    for path, leaf in zip(paths, leaves):
        what = captured(leaf)
        if what is not None:
            kind = type(leaf).__qualname__
            a_type = ("a function" if isinstance(leaf, (types.FunctionType, functools.partial))
                      else f"a {kind}")
            raise TypeError(TRACER_OUT.format(function=function, path=f"out{jax.tree_util.keystr(path)}",
                                              a_type=a_type, what=what, type=kind))


# ----- the output's two trees ------------------------------------------------------------------
_FIRST = operator.itemgetter(0)


class _Box:
    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value


class Kept:
    """A non-array output leaf inside the output tree JAX's C++ dispatch keeps: a node with
    no children whose aux data gives the very object back (``getattr(box, "value", ())``,
    a ``functools.partial``: C calls only, through ``operator.call``)."""

    __slots__ = ("give",)
    children = ()

    def __init__(self, value: Any) -> None:
        self.give = functools.partial(getattr, _Box(value), "value")


jax.tree_util.register_pytree_node(Kept, operator.attrgetter("children", "give"), operator.call)


class _Out:
    """The aux data of a partitioned output: its structure, which leaves were arrays, and
    the others, compared by their type-strict keys. ``template`` holds the others in
    place, ``positions`` where the arrays go; called with the arrays (JAX's unflatten,
    through ``operator.call``), it is the ``Restore`` that JAX's dispatch flattens."""

    __slots__ = ("treedef", "mask", "statics", "_keys", "template", "positions", "_kept")

    def __init__(self, treedef: Any, mask: tuple, statics: tuple) -> None:
        self.treedef, self.mask, self.statics = treedef, mask, statics
        self._keys = tuple(leaf_key(s) for s in statics)
        st = iter(statics)
        self.template = [None if m else next(st) for m in mask]
        self.positions = tuple(i for i, m in enumerate(mask) if m)
        self._kept: list | None = None

    def __eq__(self, other: object) -> bool:
        return (other.__class__ is _Out and self.mask == other.mask  # type: ignore[attr-defined]
                and self.treedef == other.treedef and self._keys == other._keys)  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash((self.treedef, self.mask, self._keys))

    def __reduce__(self) -> Any:
        return _Out, (self.treedef, self.mask, self.statics)

    def __call__(self, arrays: Any) -> Restore:
        return Restore(self, arrays, self)  # (``fdel`` set: unflattened by JAX, see _flatten)

    def fill(self, template: list, arrays: Any) -> Any:
        full = template.copy()
        for i, v in zip(self.positions, arrays):
            full[i] = v
        return self.treedef.unflatten(full)

    def kept(self, arrays: Any) -> Any:
        """The output with its arrays, each other leaf a ``Kept`` node."""
        if self._kept is None:
            self._kept = [leaf if m else Kept(leaf) for leaf, m in zip(self.template, self.mask)]
        return self.fill(self._kept, arrays)


class Restore(property):
    """A function's output under ``static="auto"`` when it holds non-array leaves. In the
    trace, JAX flattens it to its arrays (``fset``), with the ``_Out`` (``fget``) as aux
    data; the ``Restore`` JAX's unflatten makes from them (``fdel`` set) flattens, for the
    C++ dispatch's output tree, to the output itself with ``Kept`` nodes in place of the
    other leaves and ``itemgetter(0)`` as aux data: so that a hit served from C++ gets the
    output as the function returned it, built by JAX's unflatten alone. Any other call (a
    miss, a call under another transformation) gets this node; ``value`` is the output.
    A ``property`` for its C constructor and attributes."""

    __sf_trace_only__ = True  # the program store finds such a program by its trace only

    def value(self) -> Any:
        """The output as the function returned it."""
        return self.fget.fill(self.fget.template, self.fset)


def _flatten(r: Restore) -> tuple[Any, Any]:
    if r.fdel is None:  # in the trace (partition_out): the arrays, the _Out
        return r.fset, r.fget
    return (r.fget.kept(r.fset),), _FIRST  # made by JAX's unflatten: for its C++ dispatch


jax.tree_util.register_pytree_node(Restore, _flatten, operator.call)


def partition_out(out: Any, function: str = "") -> Any:
    """The function's output as the variant returns it to JAX: as it is when every leaf is
    an array (or a tracer), else a ``Restore`` node; a non-array leaf that holds a tracer
    is refused (``refuse_tracers``)."""
    leaves, treedef = jax.tree_util.tree_flatten(out)
    mask = tuple(isinstance(leaf, OUT_ARRAYS) for leaf in leaves)
    if all(mask):
        return out
    paths = [p for (p, _), m in zip(jax.tree_util.tree_flatten_with_path(out)[0], mask) if not m]
    refuse_tracers(function, paths, [leaf for leaf, m in zip(leaves, mask) if not m])
    return Restore(_Out(treedef, mask, tuple(leaf for leaf, m in zip(leaves, mask) if not m)),
                   [leaf for leaf, m in zip(leaves, mask) if m])
