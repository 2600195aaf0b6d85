"""The diff of two descriptions of a traced call (see ``_describe``), with hints.

``diff`` lists the ``Change``s between two descriptions; ``closest`` picks the
earlier description with the fewest changes (the newest on a tie), so a dtype
change is explained as a dtype change even when a static value also differed
from the most recent compile.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from .._explain._diff import Change
from ._describe import Description, Leaf, Node, Static, one_line, short


HINTS = {
    "shape": "every new shape compiles once; pad or bucket inputs to a few fixed shapes",
    "dtype": "pass one dtype on every call, e.g. x.astype(jnp.float32) before the call",
    "weak_type": (
        "a Python scalar is weakly typed and compiles apart from an array of the same dtype; "
        "pass the same kind each time, e.g. jnp.asarray(x, jnp.float32)"
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
    "sharding": "inputs with another sharding compile again; device_put them with one sharding",
    "new function": (
        "a new function object with the same code (a lambda or closure made on each call) "
        "misses the cache; define it once and reuse it, e.g. at module level"
    ),
}
HINT_IDENTITY = (
    "the old and new values print the same but are not equal (compared by identity); "
    "reuse one object, or give {type} value-based __eq__/__hash__"
)


def placement_changes(old: Sequence[tuple[str, str]], new: Sequence[tuple[str, str]]) -> list[Change]:
    """Sharding changes between two flat lists of (argument path, placement)."""
    if len(old) != len(new):
        return []
    return [
        Change(path, "sharding", a, b, HINTS["sharding"])
        for (path, a), (_, b) in zip(old, new)
        if a and b and a != b
    ]


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
        changes.append(Change(p, "structure", _show(old[p]), "absent", HINTS["structure"]))
    for p in _tops(came):
        changes.append(Change(p, "structure", "absent", _show(new[p]), HINTS["structure"]))
    for p, a in old.items():
        b = new.get(p)
        if b is None:
            continue
        changes += _entry_changes(p, a, b)
    return changes


def _entry_changes(path: str, a: Any, b: Any) -> list[Change]:
    if isinstance(a, Leaf) and isinstance(b, Leaf):
        out = []
        for kind, x, y in (("shape", a.shape, b.shape), ("dtype", a.dtype, b.dtype)):
            if x != y:
                out.append(Change(path, kind, a.show(), b.show(), HINTS[kind]))
        if a.weak_type != b.weak_type:
            show = lambda leaf: leaf.show() + (" (weak, a Python scalar)" if leaf.weak_type else "")
            out.append(Change(path, "weak_type", show(a), show(b), HINTS["weak_type"]))
        if a.sharding and b.sharding and a.sharding != b.sharding:
            out.append(Change(path, "sharding", a.sharding, b.sharding, HINTS["sharding"]))
        return out
    if isinstance(a, Static) and isinstance(b, Static) and a.kind == b.kind:
        if _same(a.value, b.value):
            return []
        old, new = short(a.value), short(b.value)
        hint = b.hint or HINTS[a.kind]
        if one_line(a.value) == one_line(b.value):
            hint = HINT_IDENTITY.format(type=type(b.value).__name__)
        return [Change(path, a.kind, old, new, hint)]
    if a != b:
        return [Change(path, "structure", _show(a), _show(b), HINTS["structure"])]
    return []


def _show(entry: Any) -> str:
    if isinstance(entry, Leaf):
        return entry.show()
    if isinstance(entry, Node):
        return entry.type_name
    return short(entry.value)


def _tops(paths: list[str]) -> list[str]:
    """Drop paths whose ancestor is also listed (report a removed subtree once)."""
    chosen = set(paths)

    def has_ancestor(p: str) -> bool:
        return any(p != q and p.startswith(q) and p[len(q)] in ".[" for q in chosen)

    return [p for p in paths if not has_ancestor(p)]


CLOSEST_WINDOW = 64  # compare with at most this many of the latest compiles


def closest(earlier: Sequence[Description], new: Description) -> tuple[int, list[Change]]:
    """Index of the earlier description with the fewest changes (newest on a tie), and them.

    Only the latest ``CLOSEST_WINDOW`` are compared, and an identical one ends the
    search, so a function compiled thousands of times costs no more per compile.
    """
    best: tuple[int, list[Change]] = (-1, [])
    for i in range(len(earlier) - 1, max(-1, len(earlier) - 1 - CLOSEST_WINDOW), -1):
        changes = diff(earlier[i], new)
        if best[0] < 0 or len(changes) < len(best[1]):
            best = (i, changes)
            if not changes:
                break
    return best


def new_function(fun: Callable) -> Change:
    name = getattr(fun, "__qualname__", type(fun).__name__)
    return Change(
        "(the function)", "new function", "an earlier function object",
        f"a new {name} object, same code", HINTS["new function"],
    )
