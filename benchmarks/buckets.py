"""Case 11: shape buckets (``buckets=``): a small MLP served with many batch sizes.

11a (``buckets_serve``): 300 batch sizes drawn from 1..4096 (seeded), NumPy batches as a
server receives them, one call each, compiles included: the total µs for
``sf.jit(buckets={"x": 0})`` with pow2 buckets against plain ``jax.jit`` (one compile
per distinct size). The compiles of the user's function, the pad and slice programs and
the padding waste (rows added / real rows) go to ``extra``.

11b (``buckets_hit``): one cache-hit call with 37 rows (bucket 64) against a plain
jitted call with 64 rows (the bucket's shape), and the pad and slice programs alone:
the goal is at most one pad and one slice more than the plain call. Both for a NumPy
batch (padded on the host) and a device batch (padded by the pad program). The target
compares the device-batch hit with plain JAX doing that work: the pad program, the
jitted call of the bucket's shape and the slice program, each on the one before's output
(the chain). The three measured apart are each only dispatched, none waiting for
another, which no chain of them can cost; their sum is given beside the target (on 2
idle CPU cores: the three apart 22 µs, the chain 36 µs, the bucketed hit 39-40 µs).

11c (``buckets_first``): the first call of a new bucket against plain ``jax.jit``'s first
call of the bucket's shape (a fresh function each time, median of a few), for the tiny
MLP and a 16-layer relu MLP: the function's first call ever (37 rows: the row analysis's
symbolic trace, the bucket's trace, its compile) and a new bucket of a function already
analysed (100 rows: bucket 128). Every first call compiles, as in a new process without
JAX's persistent cache: the benchmark's own cache is switched off *and reset*, since JAX
decides once per process whether it uses one (switching it off alone left every first
call a cache load, about 11 ms where a compile takes 50-100 ms on 2 CPU cores, and the
ratio then measured the analysis against a load: 1.6-1.7). A cache hit seen meanwhile
is reported in the notes. Goal ≤1.3x, the analysis included.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any, Iterator

import jax
import jax.numpy as jnp
import numpy as np

import staticfield as sf
from staticfield._buckets import _pad

from ._harness import Config, Contender, Results, kinds, measure

SERVE = "buckets_serve"
HIT = "buckets_hit"
COMPILES = "buckets_compiles"
OURS = 'sf.jit(buckets={"x": 0}), pow2'
RAW = "jax.jit (one program per size)"
OURS_NP = "bucketed hit, NumPy batch of 37 rows"
OURS_DEV = "bucketed hit, device batch of 37 rows"
RAW_HIT = "jax.jit hit, 64 rows (the bucket's shape)"
PAD = "pad program alone (37 → 64 rows)"
FIRST = "buckets_first"
FIRST_OURS = "first call ever, 37 rows (bucket 64, the analysis included)"
NEXT_OURS = "first call of a new bucket, 100 rows (bucket 128)"
FIRST_RAW = "jax.jit first call, 64 rows"
NEXT_RAW = "jax.jit first call, 128 rows"
SLICE = "slice program alone (64 → 37 rows)"
TINY, DEEP = "tiny MLP", "16-layer relu MLP"
CHAIN = "jax.jit chain: pad, the bucket's program, slice (each waits for the one before)"
D_IN, D_HIDDEN, D_OUT = 64, 128, 16


def _mlp(x, w1, w2):
    return jax.nn.log_softmax(jnp.tanh(x @ w1) @ w2, axis=-1)


def _fresh() -> tuple:
    """A new function object each time: its caches start empty."""

    def mlp(x, w1, w2):
        return _mlp(x, w1, w2)

    return mlp


def run(cfg: Config, results: Results) -> None:
    count, top = (20, 256) if cfg.smoke else (300, 4096)
    print(f"case 11: shape buckets, an MLP served with {count} batch sizes from 1..{top}", flush=True)
    rng = np.random.RandomState(0)
    w1 = jnp.asarray(rng.randn(D_IN, D_HIDDEN).astype(np.float32) / 8)
    w2 = jnp.asarray(rng.randn(D_HIDDEN, D_OUT).astype(np.float32) / 8)
    sizes = [int(n) for n in rng.randint(1, top + 1, size=count)]
    batches = [rng.randn(n, D_IN).astype(np.float32) for n in sizes]

    ours = sf.jit(_fresh(), buckets={"x": 0}, warn_compiles=None)
    raw = jax.jit(_fresh())
    totals = {}
    with sf.watch() as w:
        t0 = time.perf_counter_ns()
        for x in batches:
            ours(x, w1, w2).block_until_ready()
        totals[OURS] = (time.perf_counter_ns() - t0) / 1e3
    padding_compiles = sum(f.count for f in w.functions if f.padding)
    t0 = time.perf_counter_ns()
    for x in batches:
        raw(x, w1, w2).block_until_ready()
    totals[RAW] = (time.perf_counter_ns() - t0) / 1e3
    stats = ours.buckets()
    rows = sum(v["rows"] for v in stats.values())
    padded = sum(v["padded"] for v in stats.values())
    results.extra[COMPILES] = {
        "sizes": count, "distinct sizes": len(set(sizes)), OURS: ours.compile_count,
        "pad and slice programs": padding_compiles, RAW: len(set(sizes)),
        "padding waste": round(padded / rows, 3),
    }
    results.add(SERVE, "", totals, {OURS: "ours", RAW: "baseline"})
    print(f"  total: ours {totals[OURS] / 1e6:.2f} s ({ours.compile_count} compiles, {padding_compiles} pad/slice "
          f"programs), jax.jit {totals[RAW] / 1e6:.2f} s ({len(set(sizes))} compiles); padding waste "
          f"{padded / rows:.1%}", flush=True)

    x37 = rng.randn(37, D_IN).astype(np.float32)
    x37_dev = jnp.asarray(x37)
    x64 = jnp.asarray(np.concatenate([x37, np.zeros((27, D_IN), np.float32)]))
    out64 = raw(x64, w1, w2)
    contenders = [
        Contender(RAW_HIT, lambda: raw(x64, w1, w2), "baseline"),
        Contender(OURS_NP, lambda: ours(x37, w1, w2), "ours"),
        Contender(OURS_DEV, lambda: ours(x37_dev, w1, w2), "ours"),
        Contender(PAD, lambda: _pad.pad_rows([x37_dev], ((0, 64),)), "baseline"),
        Contender(SLICE, lambda: _pad.slice_rows([out64], ((0, 37),)), "baseline"),
        Contender(CHAIN, lambda: _pad.slice_rows([raw(_pad.pad_rows([x37_dev], ((0, 64),))[0], w1, w2)],
                                                 ((0, 37),)), "baseline"),
    ]
    results.add(HIT, "", measure(contenders, cfg, results), kinds(contenders))
    _first_calls(cfg, results)


def _deep_mlp(x, *ws):
    for w in ws[:-1]:
        x = jax.nn.relu(x @ w)
    return x @ ws[-1]


def _fresh_deep() -> Any:
    """A new 16-layer relu MLP function each time: its caches start empty."""

    def deep(x, *ws):
        return _deep_mlp(x, *ws)

    return deep


def _models() -> dict[str, tuple[Any, tuple]]:
    """11c's models: (a new function each time, its weights)."""
    rng = np.random.RandomState(2)
    tiny = (rng.randn(D_IN, D_HIDDEN) / 8, rng.randn(D_HIDDEN, D_OUT) / 8)
    deep = [rng.randn(D_IN, D_HIDDEN) / 8] + [rng.randn(D_HIDDEN, D_HIDDEN) / 11 for _ in range(14)]
    deep.append(rng.randn(D_HIDDEN, D_OUT) / 11)
    as_jax = lambda ws: tuple(jnp.asarray(w.astype(np.float32)) for w in ws)  # noqa: E731
    return {TINY: (_fresh, as_jax(tiny)), DEEP: (_fresh_deep, as_jax(deep))}


@contextlib.contextmanager
def _compiling() -> Iterator[list[str]]:
    """Every first call compiles, as in a new process without JAX's persistent cache: the
    cache is switched off and its state reset (JAX decides once per process whether it
    uses the cache), then restored. Yields the cache hits seen meanwhile (there must be none)."""
    from jax.experimental.compilation_cache import compilation_cache

    hits: list[str] = []

    def listen(event: str, **_: Any) -> None:
        if event == "/jax/compilation_cache/cache_hits":
            hits.append(event)

    enabled = jax.config.jax_enable_compilation_cache
    jax.config.update("jax_enable_compilation_cache", False)
    compilation_cache.reset_cache()
    jax.monitoring.register_event_listener(listen)
    try:
        yield hits
    finally:
        jax.monitoring.unregister_event_listener(listen)
        jax.config.update("jax_enable_compilation_cache", enabled)
        compilation_cache.reset_cache()


def _first_calls(cfg: Config, results: Results) -> None:
    """11c: the first call ever and a new bucket's first call, against plain jax.jit's first
    call of the bucket's shape, each compiling (no persistent cache)."""
    rng = np.random.RandomState(1)
    x37, x100 = rng.randn(37, D_IN).astype(np.float32), rng.randn(100, D_IN).astype(np.float32)
    x64, x128 = rng.randn(64, D_IN).astype(np.float32), rng.randn(128, D_IN).astype(np.float32)

    def timed(call: Any) -> float:
        t0 = time.perf_counter_ns()
        call().block_until_ready()
        return (time.perf_counter_ns() - t0) / 1e3

    for model, (fresh, ws) in _models().items():
        times: dict[str, list[float]] = {FIRST_OURS: [], NEXT_OURS: [], FIRST_RAW: [], NEXT_RAW: []}
        with _compiling() as hits:
            for _ in range(3 if cfg.smoke else 7):
                ours = sf.jit(fresh(), buckets={"x": 0}, warn_compiles=None)
                raw = jax.jit(fresh())
                times[FIRST_RAW].append(timed(lambda: raw(x64, *ws)))
                times[FIRST_OURS].append(timed(lambda: ours(x37, *ws)))
                times[NEXT_RAW].append(timed(lambda: raw(x128, *ws)))
                times[NEXT_OURS].append(timed(lambda: ours(x100, *ws)))
        if hits:
            results.notes.append(f"case 11c ({model}): {len(hits)} first call(s) loaded from JAX's persistent cache")
        medians = {k: float(np.median(v)) for k, v in times.items()}
        results.add(FIRST, model, medians, {FIRST_OURS: "ours", NEXT_OURS: "ours", FIRST_RAW: "baseline",
                                            NEXT_RAW: "baseline"})
        print(f"  first call, {model}: ours {medians[FIRST_OURS] / 1e3:.1f} ms vs jax.jit "
              f"{medians[FIRST_RAW] / 1e3:.1f} ms; a new bucket: {medians[NEXT_OURS] / 1e3:.1f} ms vs "
              f"{medians[NEXT_RAW] / 1e3:.1f} ms", flush=True)
