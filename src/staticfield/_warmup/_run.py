"""``sf.warmup(workers=None)``: load or compile every recorded program, on worker threads.

The invariant: warm-up makes each program exactly as the program's first call would
(``StoredJit.precompile``: trace, key, load or compile, write), only in another order
and with the XLA compile on another thread; it never decides what a program is.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import os
import sys
import threading
import time
from typing import Any, Callable

from .. import _store
from .._core._traceback import call_site, located
from .._core import _front
from .._jit._engine import ENGINES, JitFunction
from .._jit._agreement import ahead
from .._jit._programs import aot
from .._store import _hooks, _records

NO_STORE = (
    "sf.warmup() prepares the programs a program store recorded, and no store is set. Set one "
    "first: sf.set_program_store(path) (or STATICFIELD_PROGRAM_STORE=path), run the program "
    "once to record its programs, then call sf.warmup() at the start of the next process."
)
PROGRESS_AFTER = 1.0  # seconds: a function that takes longer gets a progress line


@dataclasses.dataclass
class Counts:
    """Programs of one function (or of all): traced, loaded, compiled (XLA), skipped."""

    traced: int = 0
    loaded: int = 0
    compiled: int = 0
    skipped: int = 0
    seconds: float = 0.0

    def add(self, other: "Counts") -> None:
        for f in dataclasses.fields(Counts):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))


@dataclasses.dataclass
class Summary(Counts):
    """What ``sf.warmup`` did: the counts over all functions, ``functions`` (the same counts
    by qualified name), ``threads`` (how many worker threads prepared a program) and
    ``problems`` (why each skipped record was skipped)."""

    functions: dict[str, Counts] = dataclasses.field(default_factory=dict)
    threads: int = 0
    problems: list[str] = dataclasses.field(default_factory=list)

    def __str__(self) -> str:
        return (f"sf.warmup: {self.loaded} loaded, {self.compiled} compiled, {self.traced} traced, "
                f"{self.skipped} skipped, in {self.seconds:.2f} s on {self.threads} thread(s)")


def _engines() -> dict[tuple[str, str, Any], list[JitFunction]]:
    """The engines alive here, by (module, qualified name, jit options as a record writes them)."""
    found: dict[tuple[str, str, Any], list[JitFunction]] = {}
    for engine in list(ENGINES):
        fn = engine.fn
        key = (getattr(fn, "__module__", None) or "", getattr(fn, "__qualname__", ""),
               _records.options_text(engine._jit_kwargs))
        found.setdefault(key, []).append(engine)
    return found


def warmup(workers: int | None = None, progress: bool = True) -> Summary:
    """Prepare every program the program store recorded for the ``sf`` functions and methods
    that exist in this process: ``workers`` threads compile (``None``: one per CPU core)
    while this thread traces and lowers; with ``workers=1`` this thread does it all.

    Each record's arguments are rebuilt (instances from their static keys, arrays as
    ``jax.ShapeDtypeStruct``s); its program is loaded from the store where the store has
    it, else traced, lowered and compiled (and stored). After it, calls of the recorded
    variants trace and compile nothing (``deps="read"`` methods included, and keys that
    share their programs by the statics read). Records of functions that do not exist
    here, or that cannot be rebuilt (a mesh over devices this process lacks), are
    ``skipped`` (``problems`` says why); records of other processes or local device sets
    are left alone. ``progress``: a line on
    stderr for each function that took more than a second.
    """
    store = _store.current()
    if store is None:
        raise RuntimeError(NO_STORE)
    if workers is not None and (not isinstance(workers, int) or isinstance(workers, bool) or workers < 1):
        raise TypeError(f"sf.warmup: workers must be a positive int or None (one per CPU core), "
                        f"got {workers!r}.")
    start = time.perf_counter()
    summary = Summary()
    engines = _engines()
    tasks: list[tuple[JitFunction, _records.Record, str]] = []
    for record in _records.read(store[0]):
        if not record.here:
            continue
        matches = engines.get((record.module, record.qualname, record.options))
        name = f"{record.module}.{record.qualname}"
        if not matches:
            _skip(summary, name, f"{name}: no sf.jit or jit_method with these jax.jit options exists "
                  "in this process (import its module before sf.warmup())")
            continue
        for engine in matches:
            if engine.bucket_spec is not None:  # "auto": the recorded exact sizes stay exact
                engine.bucket_spec.restore(record.note)
            tasks.append((engine, record, name))
    # Every process of a job prepares its programs in one order (a program over several
    # processes agrees with the others on its first run, in the order the job runs them,
    # so no preparation waits for another process).
    tasks.sort(key=lambda task: task[1].order)
    threads: set[int] = set()
    lock = threading.Lock()
    pending = {name: 0 for _, _, name in tasks}
    for _, _, name in tasks:
        pending[name] += 1

    def part(name: str, counts: Counts, problem: str, thread: int) -> None:
        """Some of a record's work finished, on ``thread``: a trace, load or lowering, or a
        compile handed over."""
        with lock:
            if counts.traced + counts.loaded + counts.compiled:
                threads.add(thread)
            summary.functions.setdefault(name, Counts()).add(counts)
            summary.add(counts)
            if problem:
                summary.problems.append(f"{name}: {problem}")

    def record_done(name: str) -> None:
        with lock:
            pending[name] -= 1
            finished = summary.functions[name] if pending[name] == 0 else None
        if progress and finished is not None and finished.seconds > PROGRESS_AFTER:
            print(f"sf.warmup: {name}: {finished.loaded} loaded, {finished.compiled} compiled in "
                  f"{finished.seconds:.1f} s", file=sys.stderr)

    site = call_site()  # warm-up's compiles are located at the sf.warmup() call
    workers = workers or os.cpu_count() or 1
    with located(site):
        if workers == 1:  # one thread does everything, one record after another
            for engine, record, name in tasks:
                part(name, *_prepare_here(engine, record))
                record_done(name)
        else:
            _pipelined(tasks, workers, site, part, record_done)
    summary.threads = len(threads)
    summary.seconds = time.perf_counter() - start
    return summary


def _pipelined(tasks: list, workers: int, site: str, part: Callable[..., None],
               record_done: Callable[[str], None]) -> None:
    """The calling thread traces, keys, loads and lowers each record in order (Python's
    lock lets one thread at a time run that anyway) while ``workers`` threads run the XLA
    compiles it hands over, which run without that lock. It writes each compiled program
    to the store and keeps it while the workers have more queued than they run, and at
    the end: tracing first keeps them fed."""
    inflight: list[tuple[concurrent.futures.Future, Callable[[Any], Any], str]] = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="sf.warmup") as pool:
        for engine, record, name in tasks:
            handed: list[tuple[Callable[[], Any], Callable[[Any], Any]]] = []
            with _hooks.compiling_on(lambda fn, then: handed.append((fn, then))):
                part(name, *_prepare_here(engine, record))
            if not handed:
                record_done(name)
            inflight += [(pool.submit(_compile, fn, site), then, name) for fn, then in handed]
            if sum(not future.done() for future, _, _ in inflight) > workers:  # the workers are busy
                inflight = _settle(inflight, part, record_done, wait=False)
        _settle(inflight, part, record_done, wait=True)


def _settle(inflight: list, part: Callable[..., None], record_done: Callable[[str], None],
            wait: bool) -> list:
    """Write and keep the programs compiled so far (all of them, with ``wait``); the rest."""
    left = []
    for future, then, name in inflight:
        if not wait and not future.done():
            left.append((future, then, name))
            continue
        counts, problem, thread, compiled = future.result()
        if not problem:
            try:
                then(compiled)
            except Exception as exc:  # a program that cannot be written still runs
                problem = f"cannot be kept ({type(exc).__name__}: {exc})"
        part(name, counts, problem, thread)
        record_done(name)
    return left


def _compile(fn: Callable[[], Any], site: str) -> tuple[Counts, str, int, Any]:
    """A handed-over XLA compile, on a worker thread: its counts, why it failed, the
    thread, and the program."""
    with located(site):
        return _counted(fn, "cannot be compiled")


def _skip(summary: Summary, name: str, problem: str) -> None:
    summary.functions.setdefault(name, Counts()).skipped += 1
    summary.skipped += 1
    summary.problems.append(problem)


def _prepare_here(engine: JitFunction, record: _records.Record) -> tuple[Counts, str, int]:
    """Load, or trace and compile (or hand the compile over), one recorded program: its
    counts, why it was skipped (``""``: it was not), and the thread."""

    @ahead()  # a program over several processes agrees on its first run, not here
    def prepare() -> None:
        jitted = _front.unwrap(engine.variant(record.variant()))
        dyn, kwargs = record.arguments()
        if isinstance(jitted, _store.StoredJit):
            jitted.precompile(*dyn, **kwargs)
        else:  # made before the store was set: into jax.jit's own cache
            aot(jitted, "precompile")(*dyn, **kwargs)
            counts = _hooks.counts()
            counts["traced"] += 1
            counts["compiled"] += 1

    return _counted(prepare, "cannot be rebuilt or prepared")[:3]


def _counted(work: Callable[[], Any], failed: str) -> tuple[Counts, str, int, Any]:
    """Run ``work`` on this thread: the programs it traced, loaded and compiled here, why it
    failed (``""``: it did not; one record that cannot be made never stops the others),
    the thread, and what it returned."""
    counts = _hooks.counts()
    before = dict(counts)
    start = time.perf_counter()
    problem, result = "", None
    try:
        result = work()
    except _records.MissingDevices as exc:
        problem = f"cannot be rebuilt: {exc}"
    except Exception as exc:
        problem = f"{failed} ({type(exc).__name__}: {exc})"
    return (Counts(**{k: counts[k] - before[k] for k in before}, skipped=int(bool(problem)),
                   seconds=time.perf_counter() - start), problem, threading.get_ident(), result)
