"""Case 11: shape buckets (``buckets=``): a small MLP served with many batch sizes.

11a (``buckets_serve``): 300 batch sizes drawn from 1..4096 (seeded), NumPy batches as a
server receives them, one call each, compiles included: the total µs for
``sf.jit(buckets={"x": 0})`` with pow2 buckets against plain ``jax.jit`` (one compile
per distinct size). The compiles of the user's function, the pad and slice programs and
the padding waste (rows added / real rows) go to ``extra``.

11b (``buckets_hit``): one cache-hit call with 37 rows (bucket 64) against a plain
jitted call with 64 rows (the bucket's shape), and the pad and slice programs alone:
the goal is at most one pad and one slice more than the plain call. Both for a NumPy
batch (padded on the host) and a device batch (padded by the pad program). The three
programs measured apart are each only dispatched; run as one chain, each waits for the
one before, which plain JAX pays too: the chain is reported beside them (on 2 idle CPU
cores: the three apart 22 µs, the chain 36 µs, the bucketed hit 39-40 µs).

11c (``buckets_first``): the first call of a new bucket against plain ``jax.jit``'s first
call of the bucket's shape (a fresh function each time, median of a few): the function's
first call ever (37 rows: the row analysis's symbolic trace, the bucket's trace, its
compile) and a new bucket of a function already analysed (100 rows: bucket 128), with
JAX's persistent compilation cache off (each first call compiles, as in a new process).
Goal ≤1.3x, the analysis included.
"""

from __future__ import annotations

import time
from typing import Any

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
    _first_calls(cfg, results, w1, w2)


def _first_calls(cfg: Config, results: Results, w1: jax.Array, w2: jax.Array) -> None:
    """11c: a new bucket's first call against plain jax.jit's first call of that shape."""
    rng = np.random.RandomState(1)
    x37, x100 = rng.randn(37, D_IN).astype(np.float32), rng.randn(100, D_IN).astype(np.float32)
    x64, x128 = rng.randn(64, D_IN).astype(np.float32), rng.randn(128, D_IN).astype(np.float32)
    times: dict[str, list[float]] = {FIRST_OURS: [], NEXT_OURS: [], FIRST_RAW: [], NEXT_RAW: []}

    def timed(call: Any) -> float:
        t0 = time.perf_counter_ns()
        call().block_until_ready()
        return (time.perf_counter_ns() - t0) / 1e3

    enabled = jax.config.jax_enable_compilation_cache
    jax.config.update("jax_enable_compilation_cache", False)  # each first call compiles, as in a new process
    try:
        for _ in range(3 if cfg.smoke else 7):
            ours = sf.jit(_fresh(), buckets={"x": 0}, warn_compiles=None)
            raw = jax.jit(_fresh())
            times[FIRST_RAW].append(timed(lambda: raw(x64, w1, w2)))
            times[FIRST_OURS].append(timed(lambda: ours(x37, w1, w2)))
            times[NEXT_RAW].append(timed(lambda: raw(x128, w1, w2)))
            times[NEXT_OURS].append(timed(lambda: ours(x100, w1, w2)))
    finally:
        jax.config.update("jax_enable_compilation_cache", enabled)
    medians = {k: float(np.median(v)) for k, v in times.items()}
    results.add(FIRST, "", medians, {FIRST_OURS: "ours", NEXT_OURS: "ours", FIRST_RAW: "baseline",
                                     NEXT_RAW: "baseline"})
    print(f"  first call: ours {medians[FIRST_OURS] / 1e3:.1f} ms vs jax.jit {medians[FIRST_RAW] / 1e3:.1f} ms; "
          f"a new bucket: {medians[NEXT_OURS] / 1e3:.1f} ms vs {medians[NEXT_RAW] / 1e3:.1f} ms", flush=True)
