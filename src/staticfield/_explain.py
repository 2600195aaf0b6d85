"""Diffing what a function was traced with into ``Change``/``Recompile`` events.

On every trace (never on a cache hit) the arguments are described as a flat map
from a path in the user's words (``self.a``, ``params.x_array``, ``state[0]``) to
what the cache key depends on there; a recompile is explained by the differences
from the closest earlier description.
"""

from __future__ import annotations

import dataclasses
import types
from typing import Any

import jax

from ._freeze import keyable
from ._display import short_dtype
from ._spec import SPEC_ATTR, Spec

KINDS = ("static", "shape", "dtype", "weak_type", "structure", "sharding", "static_arg")

_HINT_FUNCTION = (
    "a new function object with the same code (a lambda or closure made on each call) "
    "compares by identity; define it once and reuse it, e.g. at module level"
)
_HINT_IDENTITY = (
    "a new {type} with the same content compares by identity; reuse one instance, or "
    "give {type} value-based __eq__/__hash__ (e.g. decorate it with @sf.dataclass)"
)


@dataclasses.dataclass(frozen=True)
class Change:
    """One difference between a trace and the closest earlier one.

    ``kind`` is one of ``"static"``, ``"shape"``, ``"dtype"``, ``"weak_type"``,
    ``"structure"``, ``"sharding"``, ``"static_arg"``; ``old``/``new`` are short strings.
    """

    path: str
    kind: str
    old: str
    new: str
    hint: str = ""

    def __str__(self) -> str:
        text = f"{self.path}: {self.old} → {self.new} ({self.kind})"
        return f"{text}\n    {self.hint}" if self.hint else text


@dataclasses.dataclass(frozen=True)
class Recompile:
    """A trace after the first: which function, and what changed (``changes``)."""

    function: str
    changes: list[Change]
    compile_number: int = 0

    def __str__(self) -> str:
        return f"{self.function} recompiled (compile #{self.compile_number}){self.reasons()}"

    def reasons(self) -> str:
        """`` because:`` and one indented line per change (or why there is none)."""
        if not self.changes:
            return (
                ": no argument differs from an earlier compile (a global setting such as "
                "jax_enable_x64 may have changed, or JAX's caches were cleared)"
            )
        return " because:\n" + "\n".join(f"  {c}" for c in self.changes)


def short(value: Any, limit: int = 60) -> str:
    if isinstance(value, types.FunctionType):
        text = f"<function {value.__qualname__} at {id(value):#x}>"
    else:
        try:
            text = repr(value)
        except Exception:
            text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _aval_text(shape: tuple, dtype: Any, weak: bool) -> str:
    return f"{'weak ' if weak else ''}{short_dtype(dtype)}[{','.join(map(str, shape))}]"


def _is_instance(x: Any) -> bool:
    return SPEC_ATTR in type(x).__dict__


def _leaf_entry(leaf: Any) -> tuple:
    aval = getattr(leaf, "aval", None)
    if aval is None:  # a concrete value (not traced): describe it the same way
        aval = jax.core.get_aval(leaf)
    sharding = None
    try:
        s = aval.sharding
        if not s.mesh.empty:
            axes = ",".join(f"{name}={size}" for name, size in s.mesh.shape.items())
            sharding = f"{s.spec} on mesh({axes})"
    except Exception:
        pass
    return ("leaf", tuple(aval.shape), aval.dtype, bool(getattr(aval, "weak_type", False)), sharding)


def _walk(value: Any, path: str, out: dict[str, tuple]) -> None:
    if _is_instance(value):
        spec: Spec = type(value).__dict__[SPEC_ATTR]
        out[path] = ("class", type(value))
        d = value.__dict__
        for name in spec.static_names:
            out[f"{path}.{name}"] = ("static", d[name])
        for name in spec.dynamic_names:
            _walk(d[name], f"{path}.{name}", out)
        return
    leaves, treedef = jax.tree_util.tree_flatten_with_path(value, is_leaf=_is_instance)
    if not (len(leaves) == 1 and not leaves[0][0]):  # not a bare leaf
        out[path] = ("tree", str(treedef))
    for keypath, leaf in leaves:
        sub = path + jax.tree_util.keystr(keypath)
        if _is_instance(leaf):
            _walk(leaf, sub, out)
        else:
            out[sub] = _leaf_entry(leaf)


def describe(names: list[str], args: tuple, kwargs: dict, static_pos: frozenset, static_names: frozenset) -> dict[str, tuple]:
    """A flat description of everything the cache key depends on, by path."""
    out: dict[str, tuple] = {}
    for i, value in enumerate(args):
        name = names[i] if i < len(names) else f"args[{i}]"
        if i in static_pos:
            out[name] = ("static_arg", value)
        else:
            _walk(value, name, out)
    for name, value in kwargs.items():
        if name in static_names:
            out[name] = ("static_arg", value)
        else:
            _walk(value, name, out)
    return out


def _same_static(a: Any, b: Any) -> bool:
    try:
        return bool(keyable(a) == keyable(b))
    except Exception:
        return a is b


def _hint(old: Any, new: Any) -> str:
    if type(old) is not type(new):
        return ""
    if isinstance(old, types.FunctionType):
        if old.__code__ is new.__code__:
            return _HINT_FUNCTION
        return ""
    t = type(old)
    if t.__eq__ is object.__eq__ and t.__hash__ is object.__hash__:
        try:
            same = vars(old) == vars(new)
        except TypeError:
            same = False
        if same:
            return _HINT_IDENTITY.format(type=t.__qualname__)
    return ""


def _entry_changes(path: str, old: tuple | None, new: tuple | None) -> list[Change]:
    if (old is None and new[0] == "static_arg") or (new is None and old[0] == "static_arg"):
        return [Change(path, "static_arg", _entry_text(old, "(default)"), _entry_text(new, "(default)"))]
    if old is None or new is None or old[0] != new[0]:
        return [Change(path, "structure", _entry_text(old), _entry_text(new))]
    kind = old[0]
    if kind in ("static", "static_arg"):
        if _same_static(old[1], new[1]):
            return []
        return [Change(path, kind, short(old[1]), short(new[1]), _hint(old[1], new[1]))]
    if kind in ("class", "tree"):
        return [] if old[1] == new[1] else [Change(path, "structure", _entry_text(old), _entry_text(new))]
    _, oshape, odtype, oweak, oshard = old
    _, nshape, ndtype, nweak, nshard = new
    changes = []
    otext, ntext = _aval_text(oshape, odtype, oweak), _aval_text(nshape, ndtype, nweak)
    if oshape != nshape:
        changes.append(Change(path, "shape", otext, ntext))
    if odtype != ndtype:
        changes.append(Change(path, "dtype", otext, ntext))
    if oweak != nweak and not changes:  # the texts above already show the weak type
        changes.append(Change(path, "weak_type", otext, ntext))
    if oshard != nshard:
        changes.append(Change(path, "sharding", str(oshard), str(nshard)))
    return changes


def _entry_text(entry: tuple | None, absent: str = "absent") -> str:
    if entry is None:
        return absent
    kind = entry[0]
    if kind == "leaf":
        return _aval_text(entry[1], entry[2], entry[3])
    if kind == "class":
        return entry[1].__qualname__
    if kind == "tree":  # already text: clip it, do not quote it
        return entry[1] if len(entry[1]) <= 80 else entry[1][:79] + "…"
    return short(entry[1])


def diff(old: dict[str, tuple], new: dict[str, tuple]) -> list[Change]:
    """Changes from ``old`` to ``new``, in the order of ``new`` (then removed paths)."""
    changes: list[Change] = []
    for path, entry in new.items():
        prev = old.get(path)
        if prev is None or prev is not entry:
            changes.extend(_entry_changes(path, prev, entry))
    for path, entry in old.items():
        if path not in new:
            changes.extend(_entry_changes(path, entry, None))
    return _drop_redundant(changes)


def _drop_redundant(changes: list[Change]) -> list[Change]:
    """A structure change at a path explains the changes below it; keep the top one."""
    tops = [c.path for c in changes if c.kind == "structure"]
    return [
        c for c in changes
        if not any(c.path != t and c.path.startswith(t) and c.path[len(t)] in ".[" for t in tops)
    ]


def _distance(old: dict[str, tuple], new: dict[str, tuple]) -> int:
    """How many things differ: one per differing static/structure entry, and one per
    differing aspect (shape, dtype, weak type, sharding) of each leaf."""
    d = 0
    for path, entry in new.items():
        prev = old.get(path)
        if prev is None or prev[0] != entry[0]:
            d += 1
        elif entry[0] == "leaf":
            d += sum(a != b for a, b in zip(prev[1:], entry[1:]))
        elif entry[0] in ("static", "static_arg"):
            d += not _same_static(prev[1], entry[1])
        else:
            d += prev[1] != entry[1]
    return d + sum(path not in new for path in old)


def closest(history: list[dict[str, tuple]], new: dict[str, tuple]) -> list[Change]:
    """The changes against the earlier description that differs least (latest on ties)."""
    best, best_distance = None, None
    for old in reversed(history):
        distance = _distance(old, new)
        if best_distance is None or distance < best_distance:
            best, best_distance = old, distance
            if distance == 0:
                break
    return diff(best, new) if best is not None else []
