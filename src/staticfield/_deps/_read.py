"""What one ``deps="read"`` trace records: read paths, variants, and the recorder.

A *path* names a static value of ``self`` as a tuple of steps: ``("mode",)`` is
``self.mode``, read whole (a nested static value is returned as it is, so reading it
reads all of it). ``part`` gives the type-strict comparable value at a path of any
static key, so variants are compared with new keys exactly as static keys are compared
with each other. The policy (what a read does to the keys sharing a program) is
``_share``'s.
"""

from __future__ import annotations

from typing import Any

from .._core._keys import keyable


def part(state: dict[str, Any], path: tuple[str, ...]) -> Any:
    """The type-strict comparable value at ``path`` of a key's static values."""
    return keyable(state[path[0]])


def display(self_name: str, path: tuple[str, ...]) -> str:
    return ".".join((self_name, *path))


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
    """One trace of a variant: open until it returns."""

    __slots__ = ("deps", "variant", "open")

    def __init__(self, deps: Any, variant: Variant) -> None:
        self.deps, self.variant, self.open = deps, variant, True

    def record(self, paths: tuple[tuple[str, ...], ...], how: str) -> None:
        reads = self.variant.reads
        if all(p in reads for p in paths):  # all installed keys agree there
            return
        self.deps.extend(self.variant, paths, how, self.open)


class Recorder:
    """What a traced ``self``'s dict reports its reads to."""

    __slots__ = ("trace",)

    def __init__(self, trace: Trace) -> None:
        self.trace = trace

    def read(self, name: str, value: Any, how: str) -> Any:
        """A static field read: recorded whole (a nested value keeps its identity)."""
        self.trace.record(((name,),), f"read at {how}" if how else "read")
        return value

    def read_all(self, what: str, how: str) -> None:
        """A whole-instance use: every static of ``self``."""
        where = f" at {how}" if how else ""
        self.trace.record(self.trace.variant.tops, f"self used as a whole ({what}){where}")
