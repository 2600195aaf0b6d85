"""``static="auto"``: the hit function of one bare call shape.

A hit of ``sf.jit(fn, static="auto")`` is ``AutoJit.__call__`` and the function made here
for the bare call shape (``_auto_fast.Fast``) that was served last: the call's bare
flatten, one tuple key spelled as ``Fast.lookup`` spells it (the bare shape first: the
call's own treedef and leaf types; then the statics, the ids) looked up in that shape's
fronts, and the variant's C++ front. The shape's fronts hold keys of that shape only, so a
call of another shape, read with this shape's getters, never finds a front here (or a
getter fails on it): it goes to ``fallback`` (the lookup of its own shape, or the miss),
with the bare flatten already made. Nothing is decided on the hit.

Imports: ``_auto_fast``, ``_auto_out``.
"""

from __future__ import annotations

from typing import Any, Callable

from .._core._identity import leaf_key
from ._auto_fast import Fast, bare_flatten
from ._auto_out import Restore

Fallback = Callable[[Any, tuple, dict, list, Any], Any]  # (owner, args, kwargs, bare leaves, bare treedef)


def hit_function(fast: Fast, fallback: Fallback) -> Callable[[Any, tuple, dict], Any]:
    """``(owner, args, kwargs) -> output`` for calls of ``fast``'s shape; every other call
    (a new key, another shape, a static that cannot be hashed) is ``fallback``'s."""
    fronts, key, objects, dynamic = fast.fronts, fast.key, fast.objects, fast.dynamic
    if fast.simple:  # the statics == keys, then the ids
        def hit(owner: Any, args: tuple, kwargs: dict) -> Any:
            bare, treedef = bare_flatten((args, kwargs))
            try:
                front = fronts.get((treedef, *map(type, bare), key(bare), *map(id, objects(bare))))
            except Exception:  # noqa: BLE001 - another shape's leaves, an unhashable static
                front = None
            if front is None:
                return fallback(owner, args, kwargs, bare, treedef)
            out = front(*dynamic(bare))  # from C++: as the function returned it
            return out.value() if out.__class__ is Restore else out
        return hit

    floats, pack, strict = fast.floats, fast.pack, fast.strict

    def hit_keyed(owner: Any, args: tuple, kwargs: dict) -> Any:
        bare, treedef = bare_flatten((args, kwargs))
        try:
            front = fronts.get((treedef, *map(type, bare), key(bare), pack(*floats(bare)),
                                *map(leaf_key, strict(bare)), *map(id, objects(bare))))
        except Exception:  # noqa: BLE001
            front = None
        if front is None:
            return fallback(owner, args, kwargs, bare, treedef)
        out = front(*dynamic(bare))
        return out.value() if out.__class__ is Restore else out
    return hit_keyed
