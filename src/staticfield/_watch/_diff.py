"""The diff of two descriptions of a traced call (see ``_describe``), with hints.

``diff`` lists the ``Change``s between two descriptions; ``closest`` picks the
earlier description with the fewest changes (the newest on a tie), so a dtype
change is explained as a dtype change even when a static value also differed
from the most recent compile.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
from typing import Any, Callable, Sequence

from .._explain._diff import HINT_STATIC_TO_TRACED, Change, type_hint
from .._explain._names import (CHOICE, SAME_CODE, another_instance, class_names, closure_change,
                               function_change, is_callable_value)
from ._describe import Description, Leaf, Node, Static, one_line, short

HINTS = {
    "shape": "every new shape compiles once; pad or bucket inputs to a few fixed shapes",
    "dtype": "pass one dtype on every call, e.g. x.astype(jnp.float32) before the call",
    "weak_type": (
        "a weakly typed value (a Python scalar, or an array made from one without a dtype) "
        "compiles apart from an array of the same dtype; pass the same kind each time, "
        "e.g. jnp.asarray(x, jnp.float32)"
    ),
    "static": (
        "a static value is part of the cache key, so each new value compiles once; "
        "if it takes many values, make it a dynamic (traced) field"
    ),
    "static_arg": (
        "static_argnums/static_argnames values are part of the cache key; "
        "if it takes many values, pass it as an array instead"
    ),
    "structure": (
        "the pytree structure changed (keys, lengths, None vs array, node type); "
        "pass the same structure on every call"
    ),
    "setting": (
        "a static value is part of the cache key, so each new value compiles once; "
        "expected for a setting that takes a few values (a name, a flag, a mode)"
    ),
    "sets a shape": (
        "this value sets an array's shape, so each new value compiles once; round it up "
        "to a few sizes (buckets) so that it takes few values"
    ),
    "sharding": "inputs with another sharding compile again; device_put them with one sharding",
    "committed": (
        "an array placed with jax.device_put(x, device) is committed to its device, one made by "
        "jnp or np is not, and JAX compiles each apart; make the inputs the same way on every "
        "call (jax.device_put every one, or none)"
    ),
    "node type": (
        "another class of the same name is another pytree node type, so its programs are "
        "its own; expected when several classes (two environments' State) pass through"
    ),
    "context": (
        "a JAX setting in effect at the call is part of the cache key (as if it were an "
        "argument), so each new value compiles once; set it once, before the first call"
    ),
    "transformation": (
        "a jitted function called under jax.vmap, jax.grad, ... compiles a program of its own "
        "for the transformation, per new shape; jit the transformed function once "
        "(jax.jit(jax.vmap(f))) and call that"
    ),
    "new function": (
        "a new function object with the same code (a lambda or closure made on each call) "
        "misses the cache; define it once and reuse it, e.g. at module level"
    ),
}
HINT_IDENTITY = (
    "the old and new values print the same but are not equal (compared by identity); "
    "reuse one object, or give {type} value-based __eq__/__hash__"
)


def _same(a: Any, b: Any) -> bool:
    if a is b:
        return True
    try:
        return type(a) is type(b) and bool(a == b)
    except Exception:
        return False


def diff(old: Description, new: Description) -> list[Change]:
    """The changes from ``old`` to ``new``: added or removed paths count once, at the top."""
    changes: list[Change] = []
    gone = [p for p in old if p not in new]
    came = [p for p in new if p not in old]
    for p in _tops(gone):
        changes.append(_absent(p, old[p], gone=True))
    for p in _tops(came):
        changes.append(_absent(p, new[p], gone=False))
    for p, a in old.items():
        b = new.get(p)
        if b is None:
            continue
        changes += _entry_changes(p, a, b)
    if any(c.path == "jax_enable_x64" for c in changes):  # 32 ↔ 64 bits follow from it
        changes = [c for c in changes if not (c.kind == "dtype" and _widened(old[c.path], new[c.path]))]
    retyped = [p for p, a in old.items() if isinstance(a, Node) and isinstance(new.get(p), Node)
               and a.node_type is not new[p].node_type]  # another node type: its fields follow
    changes = [c for c in changes if not any(_below(c.path, t) for t in retyped)]
    return _shape_setters(changes, old, new)


def _absent(path: str, entry: Any, gone: bool) -> Change:
    """A path only one side has: a static argument left to its default reads ``(default)``
    (as ``sf.Recompile`` says it), anything else is a change of structure."""
    if isinstance(entry, Static) and entry.kind == "static_arg":
        value = _show(entry)
        old, new = (value, "(default)") if gone else ("(default)", value)
        return Change(path, "static_arg", old, new, HINTS["static_arg"])
    old, new = (_show(entry), "absent") if gone else ("absent", _show(entry))
    return Change(path, "structure", old, new, HINTS["structure"])


_WIDTHS = {"float32": "float64", "int32": "int64", "uint32": "uint64", "complex64": "complex128"}


def _widened(a: Any, b: Any) -> bool:
    """Whether two leaves differ only as jax_enable_x64 makes them (f32 ↔ f64, i32 ↔ i64)."""
    return (isinstance(a, Leaf) and isinstance(b, Leaf) and a.shape == b.shape
            and (_WIDTHS.get(a.dtype) == b.dtype or _WIDTHS.get(b.dtype) == a.dtype))


def _entry_changes(path: str, a: Any, b: Any) -> list[Change]:
    if isinstance(a, Leaf) and isinstance(b, Leaf):
        out = []
        for kind, x, y in (("shape", a.shape, b.shape), ("dtype", a.dtype, b.dtype)):
            if x != y:
                out.append(Change(path, kind, a.show(), b.show(), HINTS[kind]))
        if a.weak_type != b.weak_type:
            out.append(Change(path, "weak_type", a.show_weak(), b.show_weak(), HINTS["weak_type"]))
        if a.sharding and b.sharding and a.sharding != b.sharding:
            out.append(Change(path, "sharding", a.sharding, b.sharding, HINTS["sharding"]))
        if not out and a.committed and b.committed and a.committed != b.committed:
            out.append(Change(path, "committed", a.committed, b.committed, HINTS["committed"]))
        return out
    if isinstance(a, Static) and isinstance(b, Static) and a.kind == b.kind:
        if _same(a.value, b.value):
            return []
        return [
            Change(p, a.kind, old, new, _static_hint(a.kind, x, y, p, b.hint))
            for p, x, y, old, new in _innermost(path, a.value, b.value)
        ]
    if isinstance(a, Node) and isinstance(b, Node) and a.node_type is not b.node_type \
            and a.type_name == b.type_name and isinstance(a.node_type, type) and isinstance(b.node_type, type):
        return [Change(path, "structure", *class_names(a.node_type, b.node_type), HINTS["node type"])]
    if isinstance(a, Static) and isinstance(b, Leaf) or isinstance(a, Leaf) and isinstance(b, Static):
        kinds = {a.kind if isinstance(a, Static) else "", b.kind if isinstance(b, Static) else ""}
        if "static_arg" in kinds:  # static="auto": a Python value, then an array (as sf.Recompile says)
            text = [x.show_weak().split(" (")[0] if isinstance(x, Leaf) else _show(x) for x in (a, b)]
            return [Change(path, "structure", *text, HINT_STATIC_TO_TRACED.format(name=path.rpartition(".")[2]))]
    if a != b:
        return [Change(path, "structure", _show(a), _show(b), HINTS["structure"])]
    return []


_SETTINGS = (str, bool, type(None), enum.Enum)
_MAX_INNER = 4  # changes named inside one static value; past that, the value itself


def _innermost(path: str, a: Any, b: Any, depth: int = 0) -> list[tuple]:
    """(path, old, new, old text, new text) of each innermost difference of two static
    values: inside tuples, NamedTuples, lists, dicts, dataclasses and partials, so that a
    rebuilt closure deep in a config reads `cfg.fns.update`, not two identical reprs."""
    named = function_change(a, b)
    if named is not None:  # max_norm → rms_norm; a new function object, same code
        return [(path, a, b, *named[:2])]
    inner = [] if depth > 8 or type(a) is not type(b) else [
        found
        for key, x, y in _children(a, b)
        if not _same(x, y)
        for found in _innermost(path + key, x, y, depth + 1)
    ]
    if inner and len(inner) <= _MAX_INNER:
        return inner
    return [(path, a, b, short(a), short(b))]


def _children(a: Any, b: Any) -> list[tuple[str, Any, Any]]:
    """(path suffix, a's child, b's child) for two values of one container type."""
    if isinstance(a, tuple) and hasattr(a, "_fields") and len(a) == len(b):
        return [(f".{n}", x, y) for n, x, y in zip(a._fields, a, b)]
    if type(a) is tuple and len(a) == len(b) == 2 and isinstance(a[0], str) and a[0] == b[0]:
        return [(f".{a[0]}", a[1], b[1])]  # a (name, value) pair, as in flax's GraphDef
    if isinstance(a, (tuple, list)) and len(a) == len(b):
        return [(f"[{i}]", x, y) for i, (x, y) in enumerate(zip(a, b))]
    if isinstance(a, dict) and list(a) == list(b):
        return [(f"[{k!r}]", a[k], b[k]) for k in a]
    if isinstance(a, functools.partial):
        return [(".func", a.func, b.func), (".args", a.args, b.args),
                (".keywords", a.keywords, b.keywords)]
    if dataclasses.is_dataclass(a) and not isinstance(a, type):
        return [(f".{f.name}", getattr(a, f.name, None), getattr(b, f.name, None))
                for f in dataclasses.fields(a)]
    return []


def _static_hint(kind: str, old: Any, new: Any, path: str = "x", held: str = "") -> str:
    """The hint that fits the value: a function (never told to become traced), ``held``
    (a library's own words, such as equinox's filter_jit's), a setting, one that prints
    alike, equal values of two types (``1 → 1.0``: the words ``sf.Recompile`` uses)."""
    if kind == "context":
        return HINTS["context"]
    named = function_change(old, new)
    if named is not None:
        return named[2]
    if is_callable_value(old) and is_callable_value(new):
        return CHOICE
    if held:
        return held
    if type(old) is not type(new) and (precise := type_hint(old, new, path)):
        return precise
    if isinstance(new, _SETTINGS) and isinstance(old, _SETTINGS):
        return HINTS["setting"]
    if one_line(old) == one_line(new):
        return HINT_IDENTITY.format(type=type(new).__name__)
    return HINTS[kind]


def _shape_setters(changes: list[Change], old: Description, new: Description) -> list[Change]:
    """An int static whose old and new values are in a leaf's old and new shapes, in the
    same compile, sets that shape (jax-md's max_occupancy): say so in its hint."""
    shapes = [(old[c.path].shape, new[c.path].shape) for c in changes if c.kind == "shape"
              and isinstance(old.get(c.path), Leaf) and isinstance(new.get(c.path), Leaf)]
    out = []
    for c in changes:
        if c.kind in ("static", "static_arg") and c.old.isdigit() and c.new.isdigit() and any(
            int(c.old) in a and int(c.new) in b for a, b in shapes
        ):
            c = dataclasses.replace(c, hint=HINTS["sets a shape"])
        out.append(c)
    return out


def _show(entry: Any) -> str:
    if isinstance(entry, Leaf):
        return entry.show()
    if isinstance(entry, Node):
        return "None" if entry.type_name == "NoneType" else entry.type_name  # as sf.Recompile says it
    return short(entry.value)


def _tops(paths: list[str]) -> list[str]:
    """Drop paths whose ancestor is also listed (report a removed subtree once)."""
    chosen = set(paths)

    def has_ancestor(p: str) -> bool:
        return any(p != q and p.startswith(q) and p[len(q)] in ".[" for q in chosen)

    return [p for p in paths if not has_ancestor(p)]


CLOSEST_WINDOW = 64  # compare with at most this many of the latest compiles


def closest(earlier: Sequence[Description | None], new: Description) -> tuple[int, list[Change]]:
    """Index of the earlier description with the fewest changes (newest on a tie), and them.

    Only the latest ``CLOSEST_WINDOW`` are compared, and an identical one ends the
    search, so a function compiled thousands of times costs no more per compile.
    """
    best: tuple[int, list[Change]] = (-1, [])
    for i in range(len(earlier) - 1, max(-1, len(earlier) - 1 - CLOSEST_WINDOW), -1):
        old = earlier[i]
        if old is None:  # not a candidate (another function object's compile)
            continue
        changes = diff(old, new)
        if best[0] < 0 or len(changes) < len(best[1]):
            best = (i, changes)
            if not changes:
                break
    return best


def new_function(fun: Callable, earlier: list, functions: Any = ()) -> Change:
    """The function object compiled is not one compiled before (``earlier``: the methods
    compiled, ``functions``: the function objects): a method bound to another instance of a
    plain class says so, another closure of a factory names what it captures; else a new
    object with the same code."""
    named = another_instance(fun, earlier)
    if named is not None:
        return Change("(the function)", "new function", *named)
    code = getattr(getattr(fun, "__func__", fun), "__code__", None)
    before = next((f for f in list(functions) if getattr(f, "__code__", None) is code), None)
    closure = closure_change(before, fun)  # make_rollout(env) for another env
    if closure is not None:
        return Change("(the function)", "new function", *closure)
    return Change("(the function)", "new function", *SAME_CODE, HINTS["new function"])


def _below(path: str, top: str) -> bool:
    return path != top and path.startswith(top) and path[len(top)] in ".[ "


DIRECT = "a direct call"
TRANSFORMED = "under a transformation (jax.vmap, jax.grad, ...)"


def transformation(into: bool) -> Change:
    """A compile for a transformation of the function (``into``), or its first direct
    compile after compiles for transformations only."""
    old, new = (DIRECT, TRANSFORMED) if into else (TRANSFORMED, DIRECT)
    return Change("(the call)", "context", old, new, HINTS["transformation"])
