"""``static="auto"``: which output leaves are arrays, and an output that captured a tracer.

A function under ``sf.jit(static="auto")`` may return leaves that are not arrays (an int,
a function, a ``Jaxpr``, a ``jax.ShapeDtypeStruct``); they come back as themselves (see
``_auto_plan.partition_out``). One that holds a tracer of the trace (a closure over a
traced value, an object whose attribute is one, a ``functools.partial`` over one) would
come back holding a dead tracer and fail later, in JAX's words, far from its cause: it is
a ``TypeError`` naming the output's path and what it captured, raised as the call returns.

Imports: ``_core`` (``Tracer``) and the standard library. Called by ``_auto_plan``.
"""

from __future__ import annotations

import functools
import types
from typing import Any

import jax
import numpy as np

from .._core._compat import Tracer

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
