"""``static="auto"``: the generated hit function of one bare call shape.

A hit of ``sf.jit(fn, static="auto")`` is ``AutoJit.__call__`` and the function generated
here for the bare call shape (``_auto_fast.Fast``) served last. Where JAX's bare flatten
would walk the call and build a treedef for the lookup to hash, the generated code reads
the call's containers in place, checking what the bare treedef and the leaf types say:
each container's exact class (``tuple``, ``list``, a named tuple, ``dict``; ``None``), its length, a
dict's keys (read in JAX's sorted order), each leaf's exact class. A call that passes
these checks has this shape's bare treedef and leaf types, so the shape's own key
(``Fast.key_source``, the one spelling ``Fast.keyof`` compiles too) and its fronts apply;
every other call, and a key not found, goes to ``fallback`` (its own shape's lookup, or
the miss). Nothing is decided on the hit.

The generated code is checked once, on the call it is made from: it must read exactly
the leaves JAX's bare flatten found, in order, or it is not used. Nor is it made for a call
of more than ``MAX_LEAVES`` leaves.

Imports: ``_core`` (code generation), ``_auto_fast``, ``_auto_out``.
"""

from __future__ import annotations

from typing import Any, Callable

from .._core._gen import compile_functions
from ._auto_fast import Fast, key_namespace
from ._auto_out import Restore

Fallback = Callable[[Any, tuple, dict], Any]  # (owner, args, kwargs) -> output
_MISSING = object()  # a dict key the call does not have: no leaf class is its class
MAX_LEAVES = 256  # past that, JAX's C flatten reads a call faster than generated Python would


def _named_tuple(t: type) -> bool:
    """A named tuple class whose items unpack as JAX reads them (no ``__iter__`` of its own)."""
    return issubclass(t, tuple) and hasattr(t, "_fields") and t.__iter__ is tuple.__iter__ and t.__len__ is tuple.__len__


class _Reader:
    """The generated statements that read one call's containers in place: checks first
    (each a ``return miss``), then the unpacking, node by node in JAX's flatten order."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.names: list[str] = []  # the leaves' variables, in the bare flatten's order
        self.values: list[Any] = []  # the leaves of the call the code is made from
        self.namespace: dict[str, Any] = {}
        self._count = 0

    def _new(self) -> str:
        self._count += 1
        return f"v{self._count}"

    def const(self, value: Any) -> str:
        """The name the generated code reads ``value`` by."""
        name = f"c{len(self.namespace)}"
        self.namespace[name] = value
        return name

    def node(self, var: str, value: Any) -> bool:
        """Read ``value`` (held in ``var``); ``False`` where it cannot be read in place (a
        dict whose keys do not sort: the call gets no generated hit)."""
        t = type(value)
        if value is None:
            self.lines.append(f"if {var} is not None: return miss(owner, args, kwargs)")
            return True
        if t is tuple or t is list or _named_tuple(t):
            self.lines.append(f"if type({var}) is not {self.const(t)} or len({var}) != {len(value)}: "
                              "return miss(owner, args, kwargs)")
            return self.items(var, list(value))
        if t is dict:
            self.lines.append(f"if type({var}) is not dict or len({var}) != {len(value)}: "
                              "return miss(owner, args, kwargs)")
            return self._keys(var, value)
        self.names.append(var)
        self.values.append(value)
        return True

    def items(self, var: str, items: list) -> bool:
        """Read the items of the tuple or list held in ``var``, in order."""
        names = [self._new() for _ in items]
        if names:
            self.lines.append(f"{', '.join(names)}, = {var}")
        return all(self.node(n, v) for n, v in zip(names, items))

    def _keys(self, var: str, value: dict) -> bool:
        try:
            keys = sorted(value)  # JAX's order of a dict's children
        except TypeError:
            return False
        names = [self._new() for _ in keys]
        for n, k in zip(names, keys):
            self.lines.append(f"{n} = {var}.get({self.const(k)}, MISSING)")
        return all(self.node(n, value[k]) for n, k in zip(names, keys))


def hit_function(fast: Fast, args: tuple, kwargs: dict, bare: list, fallback: Fallback) -> Callable | None:
    """``(owner, args, kwargs) -> output`` for calls of ``fast``'s shape, generated from one
    such call (``args``, ``kwargs``, its bare leaves ``bare``); ``None`` where the shape
    holds a node not read in place, or the code would not read ``bare`` exactly."""
    reader = _Reader()
    reader.lines.append(f"if len(args) != {len(args)}: return miss(owner, args, kwargs)")
    if not reader.items("args", list(args)) or not reader.node("kwargs", kwargs):
        return None
    if len(reader.values) != len(bare) or any(a is not b for a, b in zip(reader.values, bare)):
        return None  # the bare flatten walks the call otherwise (a tuple subclass it reads as a node)
    if len(bare) > MAX_LEAVES:
        return None
    classes = [reader.const(type(v)) for v in reader.values]
    checks = " or ".join(f"type({n}) is not {c}" for n, c in zip(reader.names, classes))  # (no __getattribute__)
    lines = ["def hit(owner, args, kwargs):"]
    lines += [f"    {line}" for line in reader.lines]
    if checks:
        lines.append(f"    if {checks}: return miss(owner, args, kwargs)")
    lines += [
        f"    bare = [{', '.join(reader.names)}]",
        "    try:",
        f"        front = fronts.get({fast.key_source})",
        "    except Exception:  # a static that cannot be hashed: the lookup of its own shape",
        "        front = None",
        "    if front is None:",
        "        return miss(owner, args, kwargs)",
        "    out = front(*dynamic(bare))  # from C++: as the function returned it",
        "    return out.value() if type(out) is Restore else out",
    ]
    namespace = {**key_namespace(fast), **reader.namespace, "fronts": fast.fronts, "dynamic": fast.dynamic,
                 "miss": fallback, "MISSING": _MISSING, "Restore": Restore}
    hit = compile_functions(lines, ["hit"], namespace, what='static="auto" hit')["hit"]
    return hit
