"""What one ``deps="read"`` trace records: read paths, variants, and the recorder.

A *path* names a static value inside ``self``: ``("mode",)`` is ``self.mode`` as a
whole, ``("cfg", "n")`` is ``self.cfg.n`` of a static field holding an
``@sf.dataclass`` instance, and ``("cfg", CLASS)`` is that instance's class. ``part``
gives the type-strict comparable value at a path of any static key, so variants
are compared with new keys exactly as static keys are compared with each other.
The policy (what a read does to the keys sharing a program) is ``_deps``'s.
"""

from __future__ import annotations

import sys
from typing import Any

from ._shadow import recording
from .._core._keys import keyable
from .._core._spec import SPECS


class Abort(BaseException):
    """Internal: a trace of a shared program read a static on which its keys disagree."""


CLASS = "__class__"  # path step: the class of a nested instance held by a static field


def part(state: dict[str, Any], path: tuple[str, ...]) -> Any:
    """The type-strict comparable value at ``path`` of a key's static values."""
    value = state[path[0]]
    for step in path[1:]:
        if step == CLASS:
            return value.__class__
        if value.__class__ not in SPECS or step not in value.__dict__:
            return _MISSING
        value = value.__dict__[step]
    return keyable(value)


_MISSING = object()  # no value there: equal to nothing but itself


def display(self_name: str, path: tuple[str, ...]) -> str:
    return ".".join((self_name, *(p for p in path if p != CLASS)))


class Variant:
    """One program family: its ``jax.jit`` entry, base key, read set and installed keys."""

    __slots__ = ("entry", "base", "tops", "reads", "keys", "slot", "committed")

    def __init__(self, entry: tuple, base: Any) -> None:
        self.entry = entry
        self.base = base
        self.tops: tuple[tuple[str], ...] = tuple((n,) for n in base.names)  # every static, whole
        self.reads: dict[tuple[str, ...], tuple[Any, str]] = {}  # path -> (base value there, how read)
        self.keys: set = {base}  # keys installed on this variant
        self.slot: tuple | None = None  # where it is in the index
        self.committed = False  # a trace finished: it may be shared

    def reads_all(self) -> bool:
        return all(p in self.reads for p in self.tops)


class Trace:
    """One trace of a variant: open until it returns; the nested recording instances it made."""

    __slots__ = ("deps", "variant", "open", "nested")

    def __init__(self, deps: Any, variant: Variant) -> None:
        self.deps, self.variant, self.open = deps, variant, True
        self.nested: dict[tuple[str, ...], Any] = {}

    def record(self, paths: tuple[tuple[str, ...], ...], how: str) -> None:
        reads = self.variant.reads
        if all(p in reads for p in paths):  # all installed keys agree there
            return
        self.deps.extend(self.variant, paths, how, self.open)


class Recorder:
    """What a recording instance reports to: the trace, and where the instance is in ``self``."""

    __slots__ = ("trace", "prefix")

    def __init__(self, trace: Trace, prefix: tuple[str, ...] = ()) -> None:
        self.trace, self.prefix = trace, prefix

    def read(self, name: str, value: Any, how: str) -> Any:
        """A static field read: recorded; a nested instance comes back recording too."""
        path = (*self.prefix, name)
        text = f"read at {how}" if how else "read"
        spec = SPECS.get(value.__class__)
        if spec is None or spec.dynamic_names or type(value) is not value.__class__:
            self.trace.record((path,), text)
            return value
        self.trace.record(((*path, CLASS),), text)
        twin = self.trace.nested.get(path)
        if twin is None:
            twin = recording(value, Recorder(self.trace, path))
            if twin is None:  # not recordable: read as a whole
                self.trace.record((path,), text)
                return value
            self.trace.nested[path] = twin
        return twin

    def read_all(self, what: str, how: str) -> None:
        """A whole-instance use: every static of ``self``, or the whole nested value."""
        where = f" at {how}" if how else ""
        if not self.prefix:
            self.trace.record(self.trace.variant.tops, f"self used as a whole ({what}){where}")
        else:
            name = display(self.trace.deps.self_name, self.prefix)
            self.trace.record((self.prefix,), f"{name} used as a whole ({what}){where}")


def _refs(objects: dict[Any, Any], key: Any) -> int:
    return sys.getrefcount(objects[key])


def kept(objects: dict[Any, Any]) -> list[Any]:
    """The keys of ``objects`` whose value something else refers to too (measured against
    an object only ``probe`` refers to, the same way)."""
    probe = {None: object()}
    alone = _refs(probe, None)
    return [key for key in list(objects) if _refs(objects, key) > alone]
