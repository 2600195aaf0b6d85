"""What the program store gives the rooms above it, and takes from them, without importing them.

=====================  ====================================================================
``Hooks``              what the engine (``_jit``) gives each ``StoredJit``: its counters
                       around one trace, and what a load without a trace needs
                       (``_jit._traced.VariantHooks`` is the one)
``LOAD_LISTENERS``     ``sf.watch`` (``_watch._hooks``) hears of each program loaded
``MISS_LISTENERS``     ... and of why the store had no program for a call
``counts``             ``sf.warmup`` (``_warmup._run``) reads this thread's running counts
                       of programs traced, loaded and compiled
``compiling_on``       ... and hands each XLA compile of a ``precompile`` to a thread of
                       its own
=====================  ====================================================================

Imports: the standard library only. Called by the store's own ``_program``, ``_by_trace``
and ``_by_source`` (which count and tell here), and, through ``_store``, by ``_jit``,
``_watch`` and ``_warmup``.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any, Callable, Iterator, Protocol

LOAD_LISTENERS: list[Callable[[Callable, float, bool], None]] = []  # sf.watch: (function, seconds, traced)
MISS_LISTENERS: list[Callable[[Callable, str], None]] = []  # sf.watch: (function, why no program loaded)
_here = threading.local()  # .counts: this thread's traces, loads and compiles (sf.warmup reads them)


def loaded(fn: Callable, seconds: float, traced: bool) -> None:
    """Tell ``sf.watch`` that a program of ``fn`` was loaded in ``seconds`` (``traced``: after
    a trace here, else with none)."""
    for listener in list(LOAD_LISTENERS):
        listener(fn, seconds, traced)


def missed(fn: Callable, why: str) -> None:
    """Tell ``sf.watch`` why the store had no program for a call of ``fn``."""
    for listener in list(MISS_LISTENERS):
        listener(fn, why)


@contextlib.contextmanager
def compiling_on(submit: Callable[[Callable[[], Any], Callable[[Any], Any]], None]) -> Iterator[None]:
    """While open, this thread's ``precompile``s trace, key, load or lower and count here,
    and hand each XLA compile over as ``submit(compile, then)`` instead of running it
    (``sf.warmup``: the next program traces while this one compiles on another thread):
    ``compile()`` returns the program, and ``then(program)`` writes it to the store and
    keeps it."""
    outer = getattr(_here, "submit", None)
    _here.submit = submit
    try:
        yield
    finally:
        _here.submit = outer


def submitter() -> Callable[[Callable[[], Any], Callable[[Any], Any]], None] | None:
    """The ``submit`` of the innermost ``compiling_on`` open on this thread, or ``None``."""
    return getattr(_here, "submit", None)


def counts() -> dict[str, int]:
    """This thread's running counts of programs ``traced``, ``loaded`` and ``compiled`` here."""
    found = getattr(_here, "counts", None)
    if found is None:
        found = _here.counts = {"traced": 0, "loaded": 0, "compiled": 0}
    return found


class Hooks(Protocol):
    """What the engine gives a ``StoredJit``: its counters, around one trace."""

    def deferred(self) -> Any:
        """A context in which the variant's trace reserves its compile (tickets) instead of
        counting it."""

    def settle(self, tickets: list, loaded: bool, why: str = "") -> None:
        """The trace's program was loaded (a load) or is compiled now (a compile, budgeted;
        ``why``: why the store had no program for it)."""

    def agree(self, jitted: Any, dyn: tuple, kwargs: dict, kept: Any) -> None:
        """A program is about to come from the store with no trace here: in a multi-process
        job, agree on it with the other processes (``sf.HostMismatchError`` if they differ);
        ``kept`` as for ``loaded_untraced``."""

    def loaded_untraced(self, kept: Any) -> None:
        """A program came from the store with no trace here (``trust="source"``); ``kept``:
        what ``kept()`` said when it was made, or ``None``."""

    def note(self) -> dict[str, Any] | None:
        """What the record of the program made now keeps beside its arguments (``buckets=``:
        the bucket), or ``None``."""

    def description(self, tickets: list) -> dict[str, tuple] | None:
        """What the trace that reserved ``tickets`` was called with, by the user's paths
        (``_explain._describe``), or ``None``: a store miss is explained in those words."""

    def kept(self) -> dict[str, Any] | None:
        """What the trace made last on this thread found that a load without a trace needs
        (``buckets=``: which outputs carry the rows; ``deps="read"``: the statics read), as
        JSON, or ``None``; kept with the program's ``trust="source"`` key, read once."""
