"""``@sf.jit_method(deps="read")``: record the statics a method reads, and share its programs.

A *variant* is one ``jax.jit`` traced with ``self`` rebuilt from a *base* static key.
Every trace of it runs with a recording ``self`` (``_deps_shadow``) and adds the
static fields it reads, with their base values, to the variant's *read set*.

The invariant, kept under ``Deps.lock``:

    A key K is installed on variant V (``variants[K] is V's entry``) only if K's
    values are type-strictly equal (``keyable``) to V's base values on every field
    of V's read set, and V's read set only ever grows.

So every program of V, traced reading only fields of its read set, computes for
any key installed on V what it computes for V's base. The rules that keep it:

- Lookup (a miss for a new full key): the committed variants are indexed by
  ``(class, read fields)`` then by the base values there; the first variant's reads
  decide what is compared, so conditional reads form a decision tree. A match
  installs the variant's ``jax.jit`` under the new key too (no trace, no compile).
- A trace reading a field outside the read set (a retrace for new shapes that takes
  another branch) checks the keys installed on V: if they all agree with the base
  there, the field joins the read set; otherwise the disagreeing keys are evicted
  (their next call looks up again) and the trace is aborted with ``Abort`` (a
  ``BaseException``, so a user's ``except Exception`` cannot swallow it). An aborted
  trace is neither counted nor cached; the hit path catches ``Abort`` and calls again.
- Using ``self`` as a whole is reading every static. So is keeping a reference to the
  recording ``self`` past the trace (a ``custom_vjp`` rule, a ``jax.debug.callback``,
  a stored reference): checked by reference count before the trace returns to JAX,
  so the program of a trace that let ``self`` escape is never shared.
- A read after the trace has finished (which the reference count rules out) still
  marks every static read and evicts the other keys, as a last line of defence.
"""

from __future__ import annotations

import dataclasses
import logging
import sys
import threading
from typing import Any, Callable

from ._deps_shadow import recording
from ._explain import Recompile
from ._freeze import keyable
from ._spec import SPECS
from ._state import flat
from ._variant import Split

logger = logging.getLogger("staticfield")

DEPS = ("all", "read")
_ESCAPED = "self kept past its trace (a callback, a custom_vjp rule or a stored reference)"
_RETRIES = 8


class Abort(BaseException):
    """Internal: a trace of a shared program read a static on which its keys disagree."""


class Variant:
    """One program family: its ``jax.jit`` entry, base key, read set and installed keys."""

    __slots__ = ("entry", "base", "names", "reads", "keys", "slot", "committed")

    def __init__(self, entry: tuple, base: Any) -> None:
        self.entry = entry
        self.base = base
        self.names: tuple[str, ...] = base.names  # the class's static fields
        self.reads: dict[str, tuple[Any, str]] = {}  # field -> (keyable base value, how it was read)
        self.keys: set = {base}  # keys installed on this variant
        self.slot: tuple | None = None  # where it is in the index
        self.committed = False  # a trace finished: it may be shared

    def reads_all(self) -> bool:
        return len(self.reads) == len(self.names)


class Recorder:
    """One trace's reads, reported by the recording ``self``; closed when the trace returns."""

    __slots__ = ("deps", "variant", "open")

    def __init__(self, deps: Deps, variant: Variant) -> None:
        self.deps, self.variant, self.open = deps, variant, True

    def read(self, name: str, value: Any, how: str) -> None:
        if name in self.variant.reads:  # all installed keys agree on it
            return
        self.deps.extend(self.variant, (name,), f"read at {how}" if how else "read", self.open)

    def read_all(self, what: str, how: str) -> None:
        if self.variant.reads_all():
            return
        text = f"self used as a whole ({what}) at {how}" if how else f"self used as a whole ({what})"
        self.deps.extend(self.variant, self.variant.names, text, self.open)


class Deps:
    """The variants of one ``deps="read"`` method: lookup, tracing with recording, eviction."""

    def __init__(self, variants: dict, make_jitted: Callable[[Any, dict, tuple], Any], self_name: str) -> None:
        self.variants = variants
        self.make_jitted = make_jitted
        self.self_name = self_name
        self.lock = threading.RLock()
        self.by_base: dict[Any, Variant] = {}
        self.index: dict[tuple, dict[tuple, Variant]] = {}

    # ----- misses: look up by the read fields, else a new variant -----------------------
    def miss(self, obj: Any) -> tuple[Any, tuple]:
        children, key = flat(obj)
        with self.lock:
            entry = self.variants.get(key)
            if entry is None:
                found = self._match(key)
                if found is not None:
                    found.keys.add(key)
                    entry = self.variants[key] = found.entry
                else:
                    entry = (self.make_jitted(key, {0: Split(SPECS[obj.__class__], key)}, ()), (0,))
                    self.variants[key] = entry
                    self.by_base[key] = Variant(entry, key)
        return entry[0], children

    def _match(self, key: Any) -> Variant | None:
        state = key.state
        for (cls, names), table in self.index.items():
            if cls is key.cls:
                found = table.get(tuple(keyable(state[n]) for n in names))
                if found is not None:
                    return found
        return None

    def retry(self, obj: Any, *args: Any, **kwargs: Any) -> Any:
        """After an ``Abort``: look ``obj``'s variant up again and call it."""
        for _ in range(_RETRIES):
            jitted, children = self.miss(obj)
            try:
                return jitted(children, *args, **kwargs)
            except Abort:
                continue
        jitted, children = self._isolate(obj)
        return jitted(children, *args, **kwargs)

    def _isolate(self, obj: Any) -> tuple[Any, tuple]:
        """A variant of ``obj``'s key alone, never shared (reads every static)."""
        children, key = flat(obj)
        with self.lock:
            entry = (self.make_jitted(key, {0: Split(SPECS[obj.__class__], key)}, ()), (0,))
            variant = Variant(entry, key)
            variant.reads = {n: (keyable(key.state[n]), "") for n in key.names}
            self._drop_keys(self.variants.get(key), key)
            self.variants[key] = entry
            self.by_base[key] = variant
        return entry[0], children

    def _drop_keys(self, entry: Any, key: Any) -> None:
        for variant in self.by_base.values():
            if variant.entry is entry:
                variant.keys.discard(key)

    # ----- tracing --------------------------------------------------------------------------
    def run(self, fn: Callable[..., Any], base: Any, args: tuple, kwargs: dict) -> Any:
        """Call ``fn`` with a recording ``self``; then check that nothing kept it."""
        with self.lock:
            variant = self.by_base[base]  # made with its jax.jit, by miss or _isolate
        recorder = Recorder(self, variant)
        twin = recording(args[0], recorder)
        before = sys.getrefcount(twin)
        call_args = (twin, *args[1:])
        try:
            out = fn(*call_args, **kwargs)
            del call_args
            if sys.getrefcount(twin) > before:
                self.extend(variant, variant.names, _ESCAPED, True)
        finally:
            recorder.open = False
        with self.lock:
            if not variant.committed:
                variant.committed = True
                self._reindex(variant)
        return out

    def extend(self, variant: Variant, names: tuple[str, ...], how: str, in_trace: bool) -> None:
        """Add ``names`` to the read set; evict the keys that disagree (and abort the trace)."""
        with self.lock:
            new = [n for n in names if n not in variant.reads]
            if not new:
                return
            state = variant.base.state
            for n in new:
                variant.reads[n] = (keyable(state[n]), how)
            evicted = [k for k in variant.keys if k is not variant.base
                       and any(keyable(k.state[n]) != variant.reads[n][0] for n in new)]
            for k in evicted:
                variant.keys.discard(k)
                if self.variants.get(k) is variant.entry:
                    del self.variants[k]
            self._reindex(variant)
        if evicted and not in_trace:
            logger.warning("%s: self was read after its trace (%s); its program is no longer "
                           "shared with other static values", self.self_name, how)
        if evicted and in_trace:
            raise Abort(variant.base)

    def _reindex(self, variant: Variant) -> None:
        if variant.slot is not None:
            table = self.index.get(variant.slot[0])
            if table is not None and table.get(variant.slot[1]) is variant:
                del table[variant.slot[1]]
                if not table:
                    del self.index[variant.slot[0]]
            variant.slot = None
        if not variant.committed or variant.reads_all():
            return  # only its own key can match it
        names = tuple(sorted(variant.reads))
        where = (variant.base.cls, names)
        values = tuple(variant.reads[n][0] for n in names)
        table = self.index.setdefault(where, {})
        if values not in table:
            table[values] = variant
            variant.slot = (where, values)

    # ----- explanations -----------------------------------------------------------------------
    def annotate(self, event: Recompile) -> Recompile:
        """Say where each changed static was read; drop statics no variant read."""
        prefix = self.self_name + "."
        with self.lock:
            how: dict[str, str] = {}
            for variant in self.by_base.values():
                for name, (_, text) in variant.reads.items():
                    how.setdefault(prefix + name, text)
            statics = {prefix + n for v in self.by_base.values() for n in v.names}
        changes = []
        for change in event.changes:
            if change.kind == "static" and change.path in statics:
                if change.path not in how:
                    continue
                change = dataclasses.replace(change, read=how[change.path])
            changes.append(change)
        if not changes:
            return event
        return dataclasses.replace(event, changes=changes)


def check_deps(owner: str, deps: Any) -> None:
    if deps not in DEPS:
        raise TypeError(
            f"@sf.jit_method: {owner}: deps must be \"all\" (the default: every static field of "
            f"self is in the cache key) or \"read\" (only the static fields the method reads), "
            f"got {deps!r}. Pass deps=\"read\" or leave it out."
        )
