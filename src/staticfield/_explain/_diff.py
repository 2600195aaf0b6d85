"""Diffing two descriptions of a trace (see ``_describe``) into ``Change``/``Recompile`` events.

A recompile is explained by the differences from the closest earlier description,
with a hint where the change reads as nothing (a new function object with the same
code, an equal static of another type, a weak type, a keyword passed by position).
"""

from __future__ import annotations

import dataclasses
import types
from collections.abc import Mapping
from typing import Any

import numpy as np

from ._describe import PASSING as _PASSING
from ._transform import TRANSFORM, transform_changes
from ._text import aval_text, entry_text
from ._text import short as short  # (the program store's misses read values so too)
from ._names import NEW_CLOSURE, class_names, function_change, qualified, types_apart
from .._core._identity import difference
from .._core._keys import keyable

KINDS = ("static", "shape", "dtype", "weak_type", "structure", "sharding", "committed", "static_arg", "context",
         "bucket")

_NO_CHANGE = (
    "JAX's caches were cleared (jax.clear_caches() or .clear_cache()), or a setting "
    "staticfield does not watch changed"
)
NO_CHANGE_CUSTOM_VJP = (
    "the call is in the backward pass of a custom_vjp, which JAX traces on its own, so "
    "the same arguments are traced again once; results are not affected"
)
_HINT_CONTEXT = (
    "a JAX setting in effect at the call is part of the cache key, so each new value "
    "compiles once; set it once, before the first call"
)
_HINT_WEAK = (
    "a Python scalar and arrays made from one (jnp.full(n, 0.5)) are weakly typed, a "
    "jnp.asarray(x, dtype) is not; pass one kind each time"
)
_HINT_PASSING = (
    "jax.jit keys a call by which arguments are passed by keyword: pass `{name}` the "
    "same way every time"
)
_HINT_TYPE = (
    "equal value, another type: equal values of different types ({old} → {new}) are different static keys, on "
    "purpose (they can trace differently); convert before the call, e.g. {conv}({name})"
)

HINT_STATIC_TO_TRACED = (
    "a value that is not an array is static under static=\"auto\" (keyed by value), an array is "
    "traced: pass one kind on every call, e.g. jnp.asarray({name}) each time"
)

_HINT_FUNCTION = NEW_CLOSURE
_HINT_ORDER = (
    "same elements, another order (the same items in another order): iteration order is part of a static value (a trace "
    "that iterates it computes in that order), so each order compiles once; build it in one "
    "order, e.g. sorted"
)
_HINT_IDENTITY = (
    "a new {type} with the same content compares by identity; reuse one instance, or "
    "give {type} value-based __eq__/__hash__ (e.g. decorate it with @sf.dataclass)"
)


@dataclasses.dataclass(frozen=True)
class Change:
    """One difference between a trace and the closest earlier one.

    ``kind`` is one of ``"static"``, ``"shape"``, ``"dtype"``, ``"weak_type"``,
    ``"structure"``, ``"sharding"``, ``"committed"`` (an array placed on a device, or not),
    ``"static_arg"``, ``"context"`` (a JAX setting of the
    trace context, ``path`` its name), ``"bucket"``; ``old``/``new`` are short strings.
    ``read`` says, for a ``deps="read"`` method, where it read this static
    (``"read at model.py:14"``); it is empty otherwise. A ``"bucket"`` change (``buckets=``)
    is a new bucket: ``old`` and ``new`` are the earlier and new bucket sizes (``exact 37``
    for a program of one row count), ``rows`` the row count of the call that needed it
    (``x.shape[0]: 37 → bucket 64 (was bucket 32)``, ``x.shape[0]: 0 → exact 0 (was bucket 4)``).
    """

    path: str
    kind: str
    old: str
    new: str
    hint: str = ""
    read: str = ""  # deps="read": where the method read this static (``read at model.py:14``)
    rows: str = ""  # "bucket": the row count of the call

    def __str__(self) -> str:
        if self.kind == "bucket":  # the program's size: a bucket, or exact (0 rows, "auto", a guard)
            new, old = (v if v.startswith("exact") else f"bucket {v}" for v in (self.new, self.old))
            return f"{self.path}: {self.rows} → {new} (was {old})"
        kind = f"{self.kind}; {self.read}" if self.read else self.kind
        new = self.new[len("batch "):] if self.path == "vmap" and self.old.startswith("batch ") else self.new
        text = f"{self.path}: {self.old} → {new} ({kind})"  # vmap: batch 4 → 8
        return f"{text}\n    {self.hint}" if self.hint else text


@dataclasses.dataclass(frozen=True)
class Recompile:
    """A trace after the first: which function, what changed (``changes``), and the
    user's call site that caused it (``location``, ``path:line``); for a jit_method, the
    class of the instance it compiled for (``cls``: a method inherited by subclasses
    counts on the class that defines it)."""

    function: str
    changes: list[Change]
    compile_number: int = 0
    location: str = ""
    note: str = ""  # why the same arguments were traced again, when no change explains it
    store: str = ""  # with a program store set: why it had no program for this call
    cls: str = ""  # a jit_method's: the class of the instance it compiled for

    def __str__(self) -> str:
        store = f"\n  ({self.store})" if self.store else ""
        on = f", for {self.cls}" if self.cls and not self.function.startswith(self.cls + ".") else ""
        return f"{self.function} recompiled (compile #{self.compile_number}{on}){self.reasons()}{store}"

    def reasons(self) -> str:
        """`` because:`` and one indented line per change (or why there is none)."""
        if not self.changes:
            return f": no argument differs from an earlier compile ({self.note or _NO_CHANGE})"
        return " because:\n" + "\n".join(f"  {c}" for c in self.changes)


def _same_static(a: Any, b: Any) -> bool:
    if type(a) is not type(b):  # static keys are type-strict: np.int64(2) is not 2
        return False
    try:
        return bool(keyable(a) == keyable(b))
    except Exception:
        return a is b


def type_hint(old: Any, new: Any, path: str = "x") -> str:
    """The precise hint for a static that changed (equal values of two types, a new
    function object, a new identity-hashed object); '' when none fits. ``sf.watch`` gives
    the same words."""
    return _hint(old, new, path)


def _hint(old: Any, new: Any, path: str = "x") -> str:
    named = function_change(old, new)  # two functions, of one type or two (sin → <lambda>)
    if named is not None:
        return named[2]
    if type(old) is not type(new):
        try:
            equal = bool(old == new)
        except Exception:
            equal = False
        if not equal:
            return ""
        builtin = [t for t in (type(new), type(old)) if t.__module__ == "builtins"]
        conv = builtin[0].__name__ if builtin else qualified(type(new))
        return _HINT_TYPE.format(old=qualified(type(old)), new=qualified(type(new)),
                                 conv=conv, name=path.rpartition(".")[2])
    if isinstance(old, (frozenset, Mapping)) and _equal(old, new) and list(old) != list(new):
        return _HINT_ORDER
    t = type(old)
    if t.__eq__ is object.__eq__ and t.__hash__ is object.__hash__:
        try:
            same = vars(old) == vars(new)
        except TypeError:
            same = False
        if same:
            return _HINT_IDENTITY.format(type=t.__qualname__)
    return ""


def _equal(a: Any, b: Any) -> bool:
    try:
        return bool(a == b)
    except Exception:
        return False


def _static_texts(old: Any, new: Any) -> tuple[str, str]:
    """A static's old and new text: a function by its name (``max_norm``, ``an earlier
    function object``), an equal value of another type with its type (``100 (int)`` →
    ``100 (numpy.int64)``), anything else by its short repr."""
    named = function_change(old, new)
    if named is not None:
        return named[0], named[1]
    if difference(old, new) == "equal value, another type":  # np.int64(100) written 100 (numpy.int64)
        return tuple(f"{short(v.item() if isinstance(v, np.generic) else v)} ({qualified(type(v))})"
                     for v in (old, new))  # type: ignore[return-value]
    return short(old), short(new)


def retrace_note() -> str:
    """Why identical arguments were traced again, when the stack shows it (else "")."""
    import sys

    frame: types.FrameType | None = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_filename.endswith("custom_derivatives.py") and "bwd" in frame.f_code.co_name:
            return NO_CHANGE_CUSTOM_VJP
        frame = frame.f_back
    return ""


def _passing_changes(old: tuple | None, new: tuple | None) -> list[Change]:
    before = old[1] if old is not None else frozenset()
    after = new[1] if new is not None else frozenset()
    way = {False: "passed by position", True: "passed by keyword"}
    return [
        Change(name, "structure", way[name in before], way[name in after], _HINT_PASSING.format(name=name))
        for name in sorted(before ^ after)
    ]


def _entry_changes(path: str, old: tuple | None, new: tuple | None) -> list[Change]:
    if path == _PASSING:
        return _passing_changes(old, new)
    if TRANSFORM in (old or ("",))[0:1] + (new or ("",))[0:1]:  # jax.vmap around the call
        return [Change(*found) for found in transform_changes(path, old, new)]
    if (old is None and new is not None and new[0] == "static_arg") or (
        new is None and old is not None and old[0] == "static_arg"
    ):
        return [Change(path, "static_arg", entry_text(old, "(default)"), entry_text(new, "(default)"))]
    if old is None or new is None or old[0] != new[0]:
        kinds = {old[0] if old else "", new[0] if new else ""}
        hint = HINT_STATIC_TO_TRACED.format(name=path.rpartition(".")[2]) if kinds == {"static_arg", "leaf"} else ""
        return [Change(path, "structure", entry_text(old), entry_text(new), hint)]
    kind = old[0]
    if kind == "context":
        if old[1] == new[1]:
            return []
        return [Change(path, "context", short(old[1]), short(new[1]), _HINT_CONTEXT)]
    if kind in ("static", "static_arg"):
        if _same_static(old[1], new[1]):
            return []
        return [Change(path, kind, *_static_texts(old[1], new[1]), _hint(old[1], new[1], path))]
    if kind in ("class", "tree"):
        if old[1] == new[1]:
            return []
        otext, ntext = entry_text(old), entry_text(new)
        if kind == "class" and otext == ntext:  # two classes of one name: say which
            otext, ntext = class_names(old[1], new[1])
        elif kind == "tree" and otext == ntext:  # two node types of one name: say which
            otext, ntext = types_apart(old[1].types, new[1].types) or (otext, ntext)
        return [Change(path, "structure", otext, ntext)]
    _, oshape, odtype, oweak, oshard = old
    _, nshape, ndtype, nweak, nshard = new
    changes = []
    otext, ntext = aval_text(oshape, odtype, oweak), aval_text(nshape, ndtype, nweak)
    if oshape != nshape:  # one change per leaf: its text shows the dtype too
        changes.append(Change(path, "shape", otext, ntext))
    elif odtype != ndtype:
        changes.append(Change(path, "dtype", otext, ntext))
    elif oweak != nweak:
        changes.append(Change(path, "weak_type", otext, ntext, _HINT_WEAK))
    if oshard != nshard:
        changes.append(Change(path, "sharding", str(oshard), str(nshard)))
    return changes


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
    # "passed by keyword" explains only an argument that is otherwise unchanged
    passing = [c for c in changes if c.old.startswith("passed by") and c.new.startswith("passed by")]
    changed = {c.path for c in changes if c not in passing}
    changes = [c for c in changes if c not in passing or c.path not in changed]
    if any(c.path == "jax_enable_x64" for c in changes):  # 32 ↔ 64 bits follow from it
        changes = [c for c in changes if not (c.kind == "dtype" and _widened(old.get(c.path), new.get(c.path)))]
    # a node of one type whose keys or length changed: the few paths added or removed say it
    # (as sf.watch does: d['b']: absent → f32[3]), not two tree texts
    changes = [c for c in changes if not (c.kind == "structure" and _same_node(old.get(c.path), new.get(c.path))
                                          and 0 < sum(_below(d.path, c.path) for d in changes) <= 4)]
    return _drop_redundant(changes)


def _same_node(a: tuple | None, b: tuple | None) -> bool:
    return (a is not None and b is not None and a[0] == b[0] == "tree"
            and getattr(a[1], "types", ())[:1] == getattr(b[1], "types", ())[:1] != ())


def _below(path: str, top: str) -> bool:
    return path != top and path.startswith(top) and path[len(top)] in ".["


_WIDER = {"float32": "float64", "int32": "int64", "uint32": "uint64", "complex64": "complex128"}


def _widened(a: tuple | None, b: tuple | None) -> bool:
    """Two leaves that differ only as jax_enable_x64 makes them (f32 ↔ f64, i32 ↔ i64)."""
    if a is None or b is None or a[0] != "leaf" or b[0] != "leaf" or a[1] != b[1]:
        return False
    x, y = str(a[2]), str(b[2])
    return _WIDER.get(x) == y or _WIDER.get(y) == x


def _drop_redundant(changes: list[Change]) -> list[Change]:
    """A structure change at a path explains the changes below it; keep the top one."""
    tops = [c.path for c in changes if c.kind == "structure"]
    return [c for c in changes if not any(_below(c.path, t) for t in tops)]


def _distance(old: dict[str, tuple], new: dict[str, tuple]) -> float:
    """How many things differ: one per differing static/structure entry, and one per
    differing aspect (shape, dtype, weak type, sharding) of each leaf; a static that is
    ``==`` to the earlier one but not the same identity (another type, another order)
    counts half, so the earlier compile it is closest to is the one it explains against."""
    d = 0.0
    for path, entry in new.items():
        prev = old.get(path)
        if prev is None or prev[0] != entry[0]:
            d += 1
        elif entry[0] == "leaf":
            d += sum(a != b for a, b in zip(prev[1:], entry[1:]))
        elif entry[0] in ("static", "static_arg"):
            if not _same_static(prev[1], entry[1]):
                d += 0.5 if difference(prev[1], entry[1]) else 1
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
