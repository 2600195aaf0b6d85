"""What one ``deps="read"`` trace records: read paths, variants, and the recorder.

A *path* names a static value as a tuple of steps: ``("mode",)`` is ``self.mode``,
``("layers", 2, "n")`` is ``self.layers[2].n`` of a nested instance held in a dynamic
field (see ``_core/_deep``). A static value is read whole (a nested *static* value is
returned as it is, so reading it reads all of it). ``part`` gives the type-strict
comparable value at a path of any key, so variants are compared with new keys exactly as
static keys are compared with each other. The policy (what a read does to the keys
sharing a program) is ``_share``'s.
"""

from __future__ import annotations

from typing import Any

from .._core._deep import display as display
from .._core._deep import paths_of, value_at
from .._core._keys import keyable


def part(key: Any, path: tuple) -> Any:
    """The type-strict comparable value at ``path`` of a key (``StaticKey`` or ``DeepKey``)."""
    return keyable(value_at(key, path))


class Variant:
    """One program family: its ``jax.jit`` entry, base key, read set and installed keys."""

    __slots__ = ("entry", "base", "tops", "reads", "keys", "slot", "committed")

    def __init__(self, entry: tuple, base: Any) -> None:
        self.entry = entry
        self.base = base
        self.tops: tuple[tuple, ...] = paths_of(base)  # every static, whole
        self.reads: dict[tuple[str, ...], tuple[Any, str]] = {}  # path -> (base value there, how read)
        self.keys: set = {base}  # keys installed on this variant
        self.slot: tuple | None = None  # where it is in the index
        self.committed = False  # a trace finished: it may be shared

    def reads_all(self) -> bool:
        return all(p in self.reads for p in self.tops)


class Trace:
    """One trace of a variant: open until it returns. ``seen`` gathers the paths this trace
    read (the variant's read set also holds what its earlier traces read)."""

    __slots__ = ("deps", "variant", "open", "seen")

    def __init__(self, deps: Any, variant: Variant, seen: set | None = None) -> None:
        self.deps, self.variant, self.open = deps, variant, True
        self.seen = seen if seen is not None else set()

    def record(self, paths: tuple[tuple[str, ...], ...], how: str) -> None:
        self.seen.update(paths)
        reads = self.variant.reads
        if all(p in reads for p in paths):  # all installed keys agree there
            return
        self.deps.extend(self.variant, paths, how, self.open)


class Recorder:
    """What a traced instance's dict reports its reads to: ``self``'s (``prefix`` empty), or
    a nested instance's at ``prefix``, whose statics are ``names``."""

    __slots__ = ("trace", "prefix", "names")

    def __init__(self, trace: Trace, prefix: tuple = (), names: tuple = ()) -> None:
        self.trace, self.prefix, self.names = trace, prefix, names

    def read(self, name: str, value: Any, how: str) -> Any:
        """A static field read: recorded whole (a nested static value keeps its identity)."""
        self.trace.record(((*self.prefix, name),), f"read at {how}" if how else "read")
        return value

    def read_all(self, what: str, how: str) -> None:
        """A whole-instance use: every static of ``self``, or of the nested instance."""
        where = f" at {how}" if how else ""
        if not self.prefix:
            self.trace.record(self.trace.variant.tops, f"self used as a whole ({what}){where}")
        else:
            who = display(self.trace.deps.self_name, self.prefix)
            self.trace.record(tuple((*self.prefix, n) for n in self.names),
                              f"{who} used as a whole ({what}){where}")
