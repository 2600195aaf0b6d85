"""Case 3: hit-path cost against the number of cached static variants.

For each contender, variants ``n = 0, 1, ..., N-1`` of the same class (they
differ only in the static int ``n``) are compiled, then calls on one cached
variant are timed. JAX's treedef hash ignores aux_data, so with plain
``jax.jit`` all variants of a class share one hash bucket and a call may compare
its key with every cached one: which variant is compared last depends on the
hash table, so every cached variant is probed briefly and the slowest five are
then timed properly; the figure is the worst of those (the variant is named).
Alongside them, a fresh copy of the same class and function with a single
cached variant is timed, so "N variants / 1" divides figures taken side by side.

The program does not read ``n``, so every variant lowers to the same XLA
program (a full run uses JAX's persistent compilation cache, see ``_cli``, to
skip recompiling it thousands of times); the cache key still differs, which is
all this case is about.
"""

from __future__ import annotations

import gc
import time
from typing import Any, Callable

import jax
import jax.numpy as jnp

import staticfield as sf

from ._harness import Config, Contender, Results, measure, optional
from .dispatch import EQX_FILTER, FLAX, JIT_METHOD, has_jit

VARIANTS = "variants"
ONE_VARIANT = "variants_one"   # the same contender with one cached variant, timed alongside
PROBE_PASSES = 3
PROBE_PASS_BUDGET_NS = 500_000_000
PROBE_KEEP = 5


class Family:
    """One contender's variants: ``call(i)`` calls variant ``i`` (compiling it on first use)."""

    def __init__(self, name: str, kind: str, call_for: Callable[[int], Callable[[], Any]],
                 count: list[int]) -> None:
        self.name = name
        self.kind = kind
        self.call_for = call_for
        self.calls: list[Callable[[], Any]] = []
        self.count = count

    def compile_up_to(self, n: int) -> None:
        while len(self.calls) < n:
            call = self.call_for(len(self.calls))
            jax.block_until_ready(call())
            self.calls.append(call)


def _arrays() -> tuple[jax.Array, jax.Array, jax.Array]:
    return jnp.arange(4, dtype=jnp.float32), jnp.ones(4, jnp.float32), jnp.ones(4, jnp.float32)


def _ours() -> Family:
    a, b, x = _arrays()
    count = [0]

    @sf.dataclass
    class Params:
        a: jax.Array
        b: jax.Array
        n: int = sf.static()

        @sf.jit_method
        def step(self, x):
            count[0] += 1
            return self.a * x + self.b

    def call_for(i: int) -> Callable[[], Any]:
        p = Params(a, b, i)
        return lambda: p.step(x)

    return Family(JIT_METHOD, "ours", call_for, count)


def _flax() -> Family:
    import flax.struct

    a, b, x = _arrays()
    count = [0]

    @flax.struct.dataclass
    class Params:
        a: jax.Array
        b: jax.Array
        n: int = flax.struct.field(pytree_node=False)

        @jax.jit
        def step(self, x):
            count[0] += 1
            return self.a * x + self.b

    def call_for(i: int) -> Callable[[], Any]:
        p = Params(a, b, i)
        return lambda: p.step(x)

    return Family(FLAX, "anchor", call_for, count)


def _equinox() -> Family:
    import equinox as eqx

    a, b, x = _arrays()
    count = [0]

    class Params(eqx.Module):
        a: jax.Array
        b: jax.Array
        n: int = eqx.field(static=True)

        @eqx.filter_jit
        def step(self, x):
            count[0] += 1
            return self.a * x + self.b

    def call_for(i: int) -> Callable[[], Any]:
        p = Params(a, b, i)
        return lambda: p.step(x)

    return Family(EQX_FILTER, "anchor", call_for, count)


def _probe(fam: Family, keep: int) -> list[int]:
    """Indices of the ``keep`` slowest cached variants, by timing single calls.

    One call per variant per pass, the fastest pass counting; further passes
    only while a pass is cheap. Enough to pick candidates that ``measure`` then
    times properly, without spending seconds on a contender that takes
    milliseconds per call.
    """
    best = [float("inf")] * len(fam.calls)
    gc.collect()
    gc.disable()
    try:
        for _ in range(PROBE_PASSES):
            t_pass = time.perf_counter_ns()
            for i, call in enumerate(fam.calls):
                t0 = time.perf_counter_ns()
                jax.block_until_ready(call())
                best[i] = min(best[i], time.perf_counter_ns() - t0)
            if time.perf_counter_ns() - t_pass > PROBE_PASS_BUDGET_NS:
                break
    finally:
        gc.enable()
    order = sorted(range(len(best)), key=lambda i: best[i], reverse=True)
    return order[:keep]


def run(cfg: Config, results: Results) -> None:
    print("case 3: hit-path cost against the number of cached static variants", flush=True)
    candidates: list[tuple[str, Callable[[], Family]]] = [(FLAX, _flax), (EQX_FILTER, _equinox)]
    if has_jit():
        candidates.insert(0, (JIT_METHOD, _ours))
    else:
        results.note("sf.jit_method does not exist yet: the variants case runs without it")
    builders, families = [], []
    for name, build in candidates:
        fam = optional(results, name, build)
        if fam is not None:
            builders.append(build)
            families.append(fam)

    worst_variant: dict[str, dict[str, int]] = {}
    compile_s: dict[str, float] = {}
    for n in cfg.variants:
        contenders = []
        for build, fam in zip(builders, families, strict=True):
            t0 = time.perf_counter()
            fam.compile_up_to(n)
            compile_s[fam.name] = compile_s.get(fam.name, 0.0) + time.perf_counter() - t0
            if fam.count[0] != n:
                results.note(f"{fam.name}: {fam.count[0]} traces for {n} variants (expected {n})")
            keep = 1 if cfg.smoke else PROBE_KEEP
            for i in _probe(fam, min(keep, n)):
                contenders.append(Contender(f"{fam.name} [n={i}]", fam.calls[i], fam.kind,
                                            traces=fam.count))
            # The same class and function with a single cached variant, timed alongside,
            # so that "N variants / 1" compares figures taken under the same load.
            twin = build()
            twin.compile_up_to(1)
            contenders.append(Contender(f"{fam.name} [1 variant]", twin.calls[0], fam.kind,
                                        traces=twin.count))
        measured = measure(contenders, cfg, results)
        for fam in families:
            mine = {k: v for k, v in measured.items() if k.startswith(fam.name + " [n=")}
            label, us = max(mine.items(), key=lambda kv: kv[1])
            index = int(label.rsplit("n=", 1)[1].rstrip("]"))
            worst_variant.setdefault(fam.name, {})[str(n)] = index
            results.add(VARIANTS, n, {fam.name: us}, {fam.name: fam.kind},
                        {fam.name: f"worst of {n}: n={index}"})
            results.add(ONE_VARIANT, n, {fam.name: measured[f"{fam.name} [1 variant]"]},
                        {fam.name: fam.kind})
        print(f"  N={n}: " + ", ".join(
            f"{fam.name} {results.get(VARIANTS, n, fam.name):.2f} us "
            f"(1 variant: {results.get(ONE_VARIANT, n, fam.name):.2f})" for fam in families),
            flush=True)
    results.extra["variants_worst_index"] = worst_variant
    results.extra["variants_compile_s"] = {k: round(v, 1) for k, v in compile_s.items()}
