"""``@sf.jit_method(deps="read")``: record the statics a method reads, and share its programs.

A *variant* is one ``jax.jit`` traced with ``self`` rebuilt from a *base* static key.
Every trace of it runs with a recording ``self`` (``_trace``) and adds the
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
  a stored reference), or a nested instance, or a tuple that holds nested instances
  (``layers = self.layers`` in a closure): checked by reference count before the trace
  returns to JAX, so the program of a trace that let any of them escape is never shared.
- A call returns a result only if its key was still installed on the variant it
  ran when the call ended: a key moved off a program while the call ran (another
  thread, or a nested call, traced it again and evicted the key) calls again. So a
  lookup and the call need not be atomic, and the hit path takes no lock.
- A read after the trace has finished (which the reference count rules out) still
  marks every static read and evicts the other keys, as a last line of defence.
- A program loaded from the program store was traced in another process: nothing here
  recorded what it read, so its variant counts as reading every static (``loaded``),
  before the program runs; a key that was sharing the variant is evicted, and its
  call, which may be running that program, calls again (the rule above).
"""

from __future__ import annotations

import dataclasses
import gc
import logging
import operator
import sys
import threading
from typing import Any, Callable

from . import _check
from .._core._errors import Retrace as Abort  # raised here, caught by the hit paths
from .._core._deep import exact_of
from ._read import Trace, Variant, display, part
from ._trace import stand_in
from .._explain._diff import Change, Recompile
from .._core._registry import SPECS
from .._core._state import DEEP_ATTR

logger = logging.getLogger("staticfield")
deep_flat = operator.attrgetter(DEEP_ATTR)  # (children as JAX sees them, key): see _core/_deep

DEPS = ("all", "read")
_ESCAPED = "self kept past its trace (a callback, a custom_vjp rule or a stored reference)"
_SHADOWED = "{name} answered by a class attribute (counted as read)"
_LOADED = "a program loaded from the program store (what its trace read is not known)"
_LOADED_READ = "read by the trace of a program loaded from the program store"
_RETRIES = 8


class Deps:
    """The variants of one ``deps="read"`` method: lookup, tracing with recording, eviction."""

    def __init__(self, variants: dict, make_jitted: Callable[[Any], Any], self_name: str,
                 not_an_instance: Callable[[Any], Any], fn: Callable[..., Any], function: str,
                 static_pos: frozenset = frozenset(), static_names: frozenset = frozenset()) -> None:
        self.fn, self.function = fn, function  # the user's method and its qualified name
        self.static_pos, self.static_names = static_pos, static_names  # of fn, for the check
        self.checked: set = set()  # (key, base) pairs the checking mode has compared
        self.variants = variants
        self.make_jitted = make_jitted
        self.self_name = self_name
        self.not_an_instance = not_an_instance
        self.lock = threading.RLock()
        self.by_base: dict[Any, Variant] = {}
        self.index: dict[tuple, dict[tuple, Variant]] = {}

    # ----- misses: look up by the read fields, else a new variant -----------------------
    def miss(self, obj: Any) -> tuple[Any, tuple]:
        """The variant's jax.jit for ``obj`` (looked up, or made) and ``obj``'s children."""
        return self.entry(obj)[0], deep_flat(obj)[0]

    def entry(self, obj: Any) -> tuple:
        """``variants[key]`` for ``obj``'s key: installed, matched by its reads, or new."""
        if obj.__class__ not in SPECS:
            self.not_an_instance(obj)
        key = deep_flat(obj)[1]
        with self.lock:
            entry = self.variants.get(key)
            if entry is None:
                found = self._match(key)
                if found is not None:
                    found.keys.add(key)
                    entry = self.variants[key] = found.entry
                else:
                    entry = (self.make_jitted(key), (0,))
                    self.variants[key] = entry
                    self.by_base[key] = Variant(entry, key)
        return entry

    def _match(self, key: Any) -> Variant | None:
        exact = exact_of(key)
        for (where, paths), table in self.index.items():
            if where == exact:
                found = table.get(tuple(part(key, p) for p in paths))
                if found is not None:
                    return found
        return None

    def retry(self, obj: Any, *args: Any, **kwargs: Any) -> Any:
        """A miss, an ``Abort``, or a key moved during the call: look up again and call."""
        out = self.call(obj, lambda jitted, children: jitted(children, *args, **kwargs))
        if _check.enabled():  # after the call: its retraces have recorded what they read
            self.check(obj, args, kwargs)
        return out

    def check(self, obj: Any, args: tuple, kwargs: dict) -> None:
        """The checking mode: a key that shares a program traces as its base does (``_check``)."""
        key = deep_flat(obj)[1]
        with self.lock:
            entry = self.variants.get(key)
            variant = next((v for v in self.by_base.values() if v.entry is entry), None)
            if variant is None or (key, variant.base) in self.checked:
                return
            self.checked.add((key, variant.base))
            base, reads = variant.base, dict(variant.reads)
        if base == key:  # its own trace: recorded as an ordinary self would read
            _check.check_first(self.function, self.self_name, self.fn, obj, args, kwargs,
                               self.static_pos, self.static_names)
            return
        _check.check(self.function, self.self_name, self.fn, base, reads, obj, args, kwargs,
                     self.static_pos, self.static_names)

    def call(self, obj: Any, invoke: Callable[[Any, tuple], Any]) -> Any:
        """``invoke(jax.jit, children)`` on ``obj``'s variant, until it ran on a variant that
        ``obj``'s key was still installed on at the end (else on a variant of its own)."""
        for _ in range(_RETRIES):
            entry = self.entry(obj)
            children, key = deep_flat(obj)
            try:
                out = invoke(entry[0], children)
            except Abort:
                continue
            if self.variants.get(key) is entry:
                return out
        return invoke(self._isolate(obj)[0], deep_flat(obj)[0])

    def _isolate(self, obj: Any) -> tuple:
        """A variant of ``obj``'s key alone, never shared (reads every static): the last
        resort of ``call``. A variant ``obj``'s key was the base of is retired (its keys
        look up again), so that each base key has one variant."""
        key = deep_flat(obj)[1]
        with self.lock:
            for variant in list(self.by_base.values()):
                if variant.base == key or variant.entry is self.variants.get(key):
                    for k in list(variant.keys) if variant.base == key else [key]:
                        variant.keys.discard(k)
                        if self.variants.get(k) is variant.entry:
                            del self.variants[k]
                    if variant.base == key:
                        variant.committed = False
                        self._reindex(variant)  # out of the index
            entry = (self.make_jitted(key), (0,))
            variant = Variant(entry, key)
            variant.reads = {p: (part(key, p), "") for p in variant.tops}
            self.variants[key] = entry
            self.by_base[key] = variant
        return entry

    # ----- tracing --------------------------------------------------------------------------
    def run(self, fn: Callable[..., Any], base: Any, args: tuple, kwargs: dict,
            seen: set | None = None) -> Any:
        """Call ``fn`` with a recording ``self`` (``_trace``); then check that nothing kept it
        (nor a nested instance of it). ``seen`` receives the paths this trace read."""
        with self.lock:
            variant = self.by_base[base]  # made with its jax.jit, by miss or _isolate
        trace = Trace(self, variant, seen)
        traced, shadowed, nested = stand_in(args[0], trace, base)
        try:
            for path in shadowed:
                trace.record((path,), _SHADOWED.format(name=display(self.self_name, path)))
            before = sys.getrefcount(traced)
            kept = [sys.getrefcount(held) for _, held in nested]
            call_args = (traced, *args[1:])
            out = fn(*call_args, **kwargs)
            del call_args
            if sys.getrefcount(traced) > before or any(sys.getrefcount(h) > c for (_, h), c in zip(nested, kept)):
                gc.collect()  # a reference cycle the trace left (JAX keeps a caught error's frames) is no escape
            if sys.getrefcount(traced) > before:
                trace.record(variant.tops, _ESCAPED)
            for (path, held), count in zip(nested, kept):
                if sys.getrefcount(held) > count:  # kept: every instance in it is read whole
                    who = display(self.self_name, path)
                    trace.record(tuple((*p, n) for p, inner in nested if p[:len(path)] == path
                                       and inner.__class__ in SPECS
                                       for n in SPECS[inner.__class__].static_names),
                                 _ESCAPED.replace("self", who, 1))
        finally:
            trace.open = False
        with self.lock:
            if not variant.committed:
                variant.committed = True
                self._reindex(variant)
        return out

    def loaded(self, base: Any, reads: Any = None) -> None:
        """A program of ``base``'s variant came from the program store, not from a trace
        here: the variant reads what the program's trace read (``reads``, as ``reads_of``
        gave them when it was stored with its source), else every static from now on, so
        it is never shared again."""
        with self.lock:
            variant = self.by_base.get(base)
            if variant is None:
                return
            paths = stored_paths(reads)
            try:
                if paths is None:
                    raise ValueError(reads)
                for p in paths:
                    part(base, p)  # a path of this key (else every static counts as read)
            except Exception:
                self.extend(variant, variant.tops, _LOADED, in_trace=False, warn=False)
                return
            self.extend(variant, paths, _LOADED_READ, in_trace=False, warn=False)
            if not variant.committed:  # as a trace that read these would have
                variant.committed = True
                self._reindex(variant)

    def reads_of(self, base: Any) -> list | None:
        """The statics ``base``'s variant read so far (a superset of what any one of its
        programs read), as JSON, for the program store (``None``: no variant)."""
        with self.lock:
            variant = self.by_base.get(base)
            return None if variant is None else [list(p) for p in sorted(variant.reads, key=repr)]

    def made(self, base: Any) -> tuple:
        """The entry of the variant of ``base`` (made with no trace when it is new): for
        ``sf.warmup``, which has a recorded key and no instance."""
        with self.lock:
            entry = self.variants.get(base)
            if entry is None:
                entry = self.variants[base] = (self.make_jitted(base), (0,))
                self.by_base[base] = Variant(entry, base)
        return entry

    def extend(self, variant: Variant, paths: tuple[tuple[str, ...], ...], how: str, in_trace: bool,
               warn: bool = True) -> None:
        """Add ``paths`` to the read set; evict the keys that disagree (and abort the trace)."""
        with self.lock:
            new = [p for p in paths if p not in variant.reads]
            if not new:
                return
            for p in new:
                variant.reads[p] = (part(variant.base, p), how)
            evicted = [k for k in variant.keys if k is not variant.base
                       and any(part(k, p) != variant.reads[p][0] for p in new)]
            for k in evicted:
                variant.keys.discard(k)
                if self.variants.get(k) is variant.entry:
                    del self.variants[k]
            self._reindex(variant)
        if evicted and not in_trace and warn:
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
        paths = tuple(sorted(variant.reads))
        where = (exact_of(variant.base), paths)
        values = tuple(variant.reads[p][0] for p in paths)
        table = self.index.setdefault(where, {})
        if values not in table:
            table[values] = variant
            variant.slot = (where, values)

    # ----- explanations -----------------------------------------------------------------------
    def annotate(self, event: Recompile) -> Recompile:
        """``event`` with ``explain``'s changes."""
        changes = self.explain(event.changes)
        return event if changes == event.changes else dataclasses.replace(event, changes=changes)

    def explain(self, changes: list[Change]) -> list[Change]:
        """Say where each changed static was read; drop statics no variant read (unless
        nothing would be left). ``sf.Recompile`` and ``sf.watch`` explain with it."""
        with self.lock:
            how: dict[str, str] = {}
            for variant in self.by_base.values():
                for path, (_, text) in variant.reads.items():
                    how.setdefault(display(self.self_name, path), text)
            statics = {display(self.self_name, p) for v in self.by_base.values() for p in v.tops}
        out = []
        for change in changes:
            if change.kind == "static" and change.path in statics:
                text = how.get(change.path, "")
                if not text:
                    continue
                change = dataclasses.replace(change, read=text)
            out.append(change)
        return out or list(changes)


def stored_paths(reads: Any) -> tuple | None:
    """``reads`` (JSON lists of path steps) as paths; ``None`` when they are not a list of
    paths (then every static counts as read)."""
    if not isinstance(reads, list) or not all(isinstance(p, list) and p for p in reads):
        return None
    return tuple(tuple(p) for p in reads)


def check_deps(owner: str, deps: Any) -> None:
    if deps not in DEPS:
        raise TypeError(
            f"@sf.jit_method: {owner}: deps must be \"all\" (the default: every static field of "
            f"self is in the cache key) or \"read\" (only the static fields the method reads), "
            f"got {deps!r}. Pass deps=\"read\" or leave it out."
        )
