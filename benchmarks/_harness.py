"""Timing and bookkeeping shared by every case group.

``measure`` times several contenders side by side: each round runs every
contender once (a batch of ``number`` calls, blocking on the last result when
the contender returns arrays), rotating which contender goes first, and a
contender's figure is the minimum over rounds of its per-call time. Interleaving
spreads background load over all contenders instead of charging it to whichever
happened to run while another process was busy; the minimum is the least noisy
estimate of what a call costs. The garbage collector is off while timing, as in
``timeit``.

A contender may carry a trace counter (a one-element list the traced function
bumps at trace time). ``measure`` checks that it does not move while timing, so
every jit figure is a verified cache hit.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import gc
import os
import platform
import subprocess
import sys
import time
from typing import Any, Callable

import jax

_ns = time.perf_counter_ns
CALIBRATE_BATCH_S = 0.001   # grow the calibration batch until it takes this long
CALIBRATE_REPEATS = 4


@dataclasses.dataclass(frozen=True)
class Config:
    """How hard to measure. ``smoke`` runs every case once, with tiny counts."""

    smoke: bool = False
    rounds: int = 25          # interleaved rounds per measurement
    batch_s: float = 0.004    # target wall time of one batch of calls
    max_number: int = 2000    # most calls in one batch
    variants: tuple[int, ...] = (1, 10, 100, 1000)
    field_counts: tuple[int, ...] = (1, 8, 64, 512)
    stack_size: int = 1000
    representative_fields: int = 8

    @classmethod
    def smoke_config(cls) -> Config:
        return cls(
            smoke=True, rounds=2, batch_s=0.0, max_number=3,
            variants=(1, 3), field_counts=(1, 8), stack_size=10,
        )


@dataclasses.dataclass
class Contender:
    """One way of doing the thing a case measures.

    ``kind`` is ``"ours"``, ``"anchor"`` (another library) or ``"baseline"``
    (plain JAX or plain Python written by hand).
    """

    name: str
    fn: Callable[[], Any]
    kind: str
    block: bool = True
    traces: list[int] | None = None


@dataclasses.dataclass
class Row:
    """One measured figure: microseconds per call of one contender in one case."""

    group: str
    param: str
    name: str
    kind: str
    us: float
    note: str = ""


@dataclasses.dataclass
class Results:
    """Everything a run measured, plus what it skipped and why."""

    config: Config
    rows: list[Row] = dataclasses.field(default_factory=list)
    notes: list[str] = dataclasses.field(default_factory=list)
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)

    def add(self, group: str, param: Any, measured: dict[str, float],
            kinds: dict[str, str], notes: dict[str, str] | None = None) -> None:
        """Record figures; ``kinds`` maps each contender name to its kind."""
        for name, us in measured.items():
            note = (notes or {}).get(name, "")
            self.rows.append(Row(group, str(param), name, kinds[name], us, note))

    def note(self, text: str) -> None:
        """Record and print something the reader must know (a skip, a retrace)."""
        print(f"  note: {text}", flush=True)
        self.notes.append(text)

    def get(self, group: str, param: Any, name: str) -> float | None:
        for row in self.rows:
            if row.group == group and row.param == str(param) and row.name == name:
                return row.us
        return None

    def select(self, group: str, param: Any | None = None) -> list[Row]:
        return [r for r in self.rows
                if r.group == group and (param is None or r.param == str(param))]


def fmt_us(us: float) -> str:
    """A figure in µs, with as many digits as it deserves."""
    if us >= 1000:
        return f"{us:,.0f}"
    if us >= 100:
        return f"{us:.0f}"
    return f"{us:.2f}"


def kinds(contenders: list[Contender]) -> dict[str, str]:
    return {c.name: c.kind for c in contenders}


def _batch(fn: Callable[[], Any], number: int, block: bool) -> int:
    """Nanoseconds for ``number`` calls of ``fn`` (blocking on the last result)."""
    out = None
    t0 = _ns()
    for _ in range(number):
        out = fn()
    if block:
        jax.block_until_ready(out)
    return _ns() - t0


def _calibrate(c: Contender, cfg: Config) -> int:
    """Calls per batch so that one batch takes about ``cfg.batch_s``.

    The per-call estimate is the minimum of a few batches: one batch slowed down
    by another process must not shrink the batch size, since a batch of one or
    two calls would add the cost of blocking to every call.
    """
    if cfg.batch_s <= 0:
        return cfg.max_number
    number = 1
    while True:
        elapsed = _batch(c.fn, number, c.block) / 1e9
        if elapsed >= CALIBRATE_BATCH_S or number >= cfg.max_number:
            break
        number = min(cfg.max_number, number * 4)
    per_call = min([elapsed / number] + [_batch(c.fn, number, c.block) / 1e9 / number
                                         for _ in range(CALIBRATE_REPEATS)])
    if per_call <= 0:
        return cfg.max_number
    return max(1, min(cfg.max_number, int(cfg.batch_s / per_call)))


def measure(contenders: list[Contender], cfg: Config, results: Results,
            rounds: int | None = None) -> dict[str, float]:
    """Microseconds per call for each contender, timed in interleaved rounds."""
    rounds = cfg.rounds if rounds is None else rounds
    for c in contenders:  # warm up: compile, fill caches
        for _ in range(3):
            _batch(c.fn, 1, c.block)
    before = {c.name: c.traces[0] for c in contenders if c.traces is not None}
    best = {c.name: float("inf") for c in contenders}
    gc.collect()
    gc_was_enabled = gc.isenabled()
    gc.disable()  # like timeit: a collection would land on whichever contender runs
    try:
        numbers = {c.name: _calibrate(c, cfg) for c in contenders}
        for r in range(rounds):
            k = r % len(contenders)
            for c in contenders[k:] + contenders[:k]:
                n = numbers[c.name]
                best[c.name] = min(best[c.name], _batch(c.fn, n, c.block) / n / 1e3)
    finally:
        if gc_was_enabled:
            gc.enable()
    for c in contenders:
        if c.traces is not None and c.traces[0] != before[c.name]:
            results.note(
                f"{c.name}: traced {c.traces[0] - before[c.name]} time(s) while being "
                "timed, so its figure includes compiles and is not a cache hit"
            )
    return best


def optional(results: Results, name: str, build: Callable[[], Any]) -> Any:
    """``build()``, or ``None`` with a printed note when an anchor is not installed."""
    try:
        return build()
    except ImportError as e:
        results.note(f"{name}: skipped, {e.name or e} is not installed (pip install -e '.[bench]')")
        return None


def traced(fn: Callable[..., Any]) -> tuple[Callable[..., Any], list[int]]:
    """Wrap ``fn`` so each trace bumps a counter; return the wrapper and the counter.

    The wrapper keeps ``fn``'s signature (``functools.wraps``), as a well-behaved
    decorator does, so wrappers that read signatures see the real parameters.
    """
    count = [0]

    @functools.wraps(fn)
    def body(*args: Any, **kwargs: Any) -> Any:
        count[0] += 1
        return fn(*args, **kwargs)

    return body, count


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _version(module: str) -> str:
    try:
        from importlib.metadata import version
        return version(module)
    except Exception:
        return "not installed"


def _commit() -> str:
    """The checkout's commit, and whether the library had uncommitted changes."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, text=True,
                              capture_output=True, timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "src"], cwd=root, text=True,
                               capture_output=True, timeout=10, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return f"{head} (with uncommitted changes in src/)" if dirty else head


def machine() -> dict[str, Any]:
    """What the figures were measured on."""
    try:
        load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        load = "n/a"
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "load average (1, 5, 15 min) at start": load,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "jax": jax.__version__,
        "jaxlib": _version("jaxlib"),
        "backend": jax.default_backend(),
        "staticfield": f"{_version('staticfield')}, commit {_commit()}",
        "flax": _version("flax"),
        "equinox": _version("equinox"),
        "jax_dataclasses": _version("jax_dataclasses"),
    }


def load_average() -> str:
    try:
        return ", ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "n/a"
