"""The one home of a jitted function's counters: compiles, recompile events, the budget.

Everything here runs while JAX traces (a cache miss), never on a hit. A trace is
``begin`` (explain it, check the budget, reserve its compile number), then
``commit`` when it succeeded or ``abort`` when it raised. Reserving under the lock
keeps the counters exact under threads: with eight first calls of eight new
variants at once, one is the first compile and seven are recompiles, and
``max_compiles`` refuses exactly those over budget.

The public counters (``compile_count``, ``recompiles``, ``max_compiles``,
``warn_compiles``) live in the tracker's ``__dict__``, which ``sf.jit`` shares as
its function's ``__dict__``: ``f.max_compiles = 1`` sets the budget itself.

Explanations compare with earlier traces kept in a bounded history, indexed by the
argument structure (the paths described), so a miss costs the same after 50,000
compiles as after 5. Nothing in tracking may break a user's call: a failure to
describe or explain is logged on ``"staticfield"`` and the call goes on.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import os
import threading
import warnings
from typing import Any, Callable

import jax

from .._explain import _advice
from .._explain import _diff as _explain
from .._core._errors import RecompileError, StaticFieldWarning, recompile_budget_message
from .._explain._diff import Recompile
from .._core._traceback import call_site
from .._stance import _message as _stance_message
from .._stance import _state as _stance

logger = logging.getLogger("staticfield")

_NEW_VARIANT = ("static", "static_arg", "structure")  # kinds that make a program JAX has not seen
_FOR_JAX_EXPLAIN = (
    "  jax_explain_cache_misses: where JAX says 'never seen function' for this compile, it is the\n"
    "  first program of a new static variant (staticfield compiles one per static key); the\n"
    "  changes above are what made it."
)

class _Unset:
    """The default of ``warn_compiles``: read ``STATICFIELD_WARN_COMPILES``."""

    def __repr__(self) -> str:
        return "<default>"

    def __reduce__(self) -> str:
        return "UNSET"


UNSET: Any = _Unset()
TRACKER_SETTINGS = ("max_compiles", "warn_compiles")  # public and settable
TRACKER_COUNTERS = ("compile_count", "load_count", "recompiles", *TRACKER_SETTINGS)
HISTORY = 256  # earlier traces kept for explanations
PER_STRUCTURE = 32  # of which, per argument structure


def default_warn_compiles() -> int | None:
    """``STATICFIELD_WARN_COMPILES`` (``0`` turns the warning off), else 10."""
    raw = os.environ.get("STATICFIELD_WARN_COMPILES", "").strip()
    if not raw:
        return 10
    try:
        n = int(raw)
    except ValueError:
        logger.warning("STATICFIELD_WARN_COMPILES=%r is not an int; using 10", raw)
        return 10
    return n if n > 0 else None


def check_positive(owner: str, name: str, value: Any) -> None:
    if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
        raise TypeError(
            f"{owner}: {name} must be a positive int or None, got {value!r}. Pass a count "
            f"such as {name}=10, or {name}=None for no limit."
        )


@dataclasses.dataclass
class Ticket:
    """A trace in progress: what it was called with, where, and its explanation."""

    description: dict[str, tuple] | None
    location: str
    event: Recompile | None
    cls: type | None = None
    annotate: Callable[[Recompile], Recompile] | None = None
    new_bucket: bool = False  # buckets=: the first program of its bucket size for its other shapes and statics


class Tracker:
    """Counters, budget and explanation history of one jitted function."""

    __slots__ = ("__dict__", "function", "_lock", "_history", "_by_structure", "_pending", "_live_base",
                 "_live_programs", "_warned")

    compile_count: int
    load_count: int
    recompiles: list[Recompile]
    max_compiles: int | None
    warn_compiles: int | None

    def __init__(self, function: str, max_compiles: int | None, warn_compiles: int | None,
                 live_programs: Callable[[], int]) -> None:
        self.function = function
        self._live_programs = live_programs
        self.compile_count = 0
        self.load_count = 0  # programs loaded from the program store
        self.recompiles = []
        self.max_compiles = max_compiles
        self.warn_compiles = warn_compiles
        self._warned = 0  # the compiles warn_compiles counts: all but a bucket size's first
        self._lock = threading.Lock()
        self._history: collections.deque = collections.deque(maxlen=HISTORY)
        self._by_structure: dict[tuple, collections.deque] = {}
        self._pending: list[Ticket] = []
        self._live_base = 0  # compile_count when the programs were last cleared

    # ----- one trace ------------------------------------------------------------------
    def begin(self, description: dict[str, tuple] | None, cls: type | None = None,
              annotate: Callable[[Recompile], Recompile] | None = None, budget: bool = True) -> Ticket:
        """Explain a trace before it runs and reserve its number; refuse it over budget
        (``budget=False``: the program store may load its program, so ``commit`` checks).
        ``annotate`` rewrites the explanation (``deps="read"``: where each static was read)."""
        location = _safe(call_site, "")
        with self._lock:
            number = self.compile_count + len(self._pending) + 1
            event = self._explain(description, number, location, annotate) if number > 1 else None
            if budget:
                if _stance.refusing() and not _stance.abstract():
                    event = event or self._explain_loaded(description, location, annotate)
                    raise RecompileError(_stance_message.refused(
                        self.function, location, event.changes if event is not None else None))
                self._check_budget(number, event)
            ticket = Ticket(description, location, event, cls, annotate)
            self._pending.append(ticket)
            return ticket

    def _check_budget(self, number: int, event: Recompile | None) -> None:
        budget = self.max_compiles
        if budget is not None and number - self._live_base > budget:
            # Over budget by count; but programs JAX dropped (jax.clear_caches()) are
            # not live. JAX's count includes the traces in progress, this one too.
            live = _safe(self._live_programs, number)
            if live > budget:
                raise RecompileError(recompile_budget_message(self.function, number, budget, event))
            self._live_base = number - live

    def commit(self, ticket: Ticket, budget: bool = False, store: str = "") -> None:
        """Count a trace that succeeded, log it, and warn at the thresholds; ``budget``:
        refuse it over budget first (a trace begun with ``budget=False``); ``store``: why
        the program store had no program for it (kept in the explanation)."""
        if store and ticket.event is not None:
            ticket.event = dataclasses.replace(ticket.event, store=store)
        with self._lock:
            if budget and _stance.refusing():
                self._drop_pending(ticket)
                event = ticket.event or self._explain_loaded(ticket.description, ticket.location, ticket.annotate)
                raise RecompileError(_stance_message.refused(
                    self.function, ticket.location, event.changes if event is not None else None, store))
            if budget:
                try:
                    self._check_budget(self.compile_count + len(self._pending), ticket.event)
                except RecompileError:
                    self._drop_pending(ticket)
                    raise
            self._drop_pending(ticket)
            self.compile_count += 1
            n = self.compile_count
            event = ticket.event
            if n > 1 and event is None:  # a trace reserved as first failed before this one
                event = self._explain(ticket.description, n, ticket.location, ticket.annotate)
            if n > 1 and event is not None:
                event = dataclasses.replace(event, compile_number=n,
                                            cls=ticket.cls.__qualname__ if ticket.cls is not None else "")
                self.recompiles.append(event)
            self._remember(ticket.description)
            if not ticket.new_bucket:
                self._warned += 1
            warn = not ticket.new_bucket and self._threshold_reached(self._warned)
        if event is not None and n > 1:
            if jax.config.jax_explain_cache_misses and any(c.kind in _NEW_VARIANT for c in event.changes):
                # JAX's own line for a new static variant says "never seen function".
                logger.warning("%s\n  (called at %s)\n%s", event, ticket.location or "?", _FOR_JAX_EXPLAIN)
            else:
                logger.info("%s", event)
        else:
            logger.debug("%s compiled for the first time", self.function)
        if warn:  # not guarded: a user who made warnings errors gets the error
            self._warn(self._warned, n, event, ticket.location)

    def abort(self, ticket: Ticket) -> None:
        """A trace that raised: neither counted nor remembered."""
        with self._lock:
            self._drop_pending(ticket)

    def loaded(self, ticket: Ticket | None = None) -> None:
        """A program came from the program store, with no trace or after ``ticket``'s
        trace (``trust="trace"``: the trace is the check, not a compile)."""
        with self._lock:
            if ticket is not None:
                self._drop_pending(ticket)
                self._remember(ticket.description)  # later compiles are explained against it
            self.load_count += 1

    def remember(self, description: dict[str, tuple]) -> None:
        """A program of a trace already counted (its program under a transformation):
        later compiles are explained against it."""
        with self._lock:
            self._remember(description)

    def programs_cleared(self) -> None:
        """``clear_cache()``: the budget counts live programs from here; the history stays."""
        with self._lock:
            self._live_base = self.compile_count

    # ----- helpers ----------------------------------------------------------------------
    def _drop_pending(self, ticket: Ticket) -> None:
        for i, t in enumerate(self._pending):
            if t is ticket:
                del self._pending[i]
                return

    def _explain(self, description: dict[str, tuple] | None, number: int, location: str,
                 annotate: Callable[[Recompile], Recompile] | None = None) -> Recompile:
        changes: list = []
        if description is not None:
            candidates = self._candidates(description)
            changes = _safe(lambda: _explain.closest(candidates, description), [])
        note = "" if changes else _safe(_explain.retrace_note, "")
        event = Recompile(self.function, changes, number, location, note)
        if annotate is not None:
            event = _safe(lambda: annotate(event), event)
        return event

    def _explain_loaded(self, description: dict[str, tuple] | None, location: str,
                        annotate: Callable[[Recompile], Recompile] | None) -> Recompile | None:
        """A first compile refused by ``sf.no_compiles()`` after programs of this function
        were loaded from the store: explained against them (``None`` when none was)."""
        return self._explain(description, 1, location, annotate) if self._history else None

    def _candidates(self, description: dict[str, tuple]) -> list[dict[str, tuple]]:
        """Earlier traces to compare with: those of the same structure, else the latest."""
        pending = [t.description for t in self._pending if t.description is not None]
        same = [d for d in pending if d.keys() == description.keys()]
        bucket = self._by_structure.get(tuple(description))
        if bucket:
            return [*bucket, *same]
        return [*self._history, *pending]

    def _remember(self, description: dict[str, tuple] | None) -> None:
        if description is None:
            return
        self._history.append(description)
        structure = tuple(description)
        bucket = self._by_structure.get(structure)
        if bucket is None:
            if len(self._by_structure) >= HISTORY:
                self._by_structure.pop(next(iter(self._by_structure)))
            bucket = self._by_structure[structure] = collections.deque(maxlen=PER_STRUCTURE)
        bucket.append(description)

    def _threshold_reached(self, n: int) -> bool:
        first = self.warn_compiles
        return first is not None and n in (first, 10 * first, 100 * first)

    def _warn(self, counted: int, n: int, event: Recompile | None, location: str) -> None:
        latest = f"\nLatest: {event}" if event is not None else ""
        where = f" (called at {location})" if location else ""
        buckets = f" ({n} with new buckets)" if n != counted else ""
        with self._lock:  # the one cause of every compile, where there is one, first
            cause = _safe(lambda: _advice.float_static(list(self.recompiles), list(self._history)), "")
        where += f": {cause}" if cause else ""
        message = (
            f"{self.function} has compiled {counted} times{buckets}{where}. Each compile costs a trace "
            f"and an XLA compile; see .recompiles for why.{latest}\nSet warn_compiles=None "
            "on the decorator (or STATICFIELD_WARN_COMPILES=0) to silence this."
        )
        filename, _, line = location.rpartition(":")
        if filename and line.isdigit():
            warnings.warn_explicit(message, StaticFieldWarning, filename, int(line))
        else:
            warnings.warn(message, StaticFieldWarning, stacklevel=2)


def _safe(thunk: Any, fallback: Any) -> Any:
    """Run a piece of tracking; on any bug, log it and go on with ``fallback``."""
    try:
        return thunk()
    except Exception as exc:  # tracking must never break the user's call
        logger.warning("staticfield could not explain a compile (%s: %s); the call goes on",
                       type(exc).__name__, exc)
        return fallback
