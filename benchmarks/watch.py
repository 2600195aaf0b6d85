"""Case 6: what ``sf.watch`` costs, on a cache hit and on a compile.

Hit (``watch_hit``): one plain ``jax.jit`` function of a small pytree (a dict of
two ``f32[4]`` arrays and an ``f32[4]`` input), already compiled, called with
the watcher off and inside ``with sf.watch()``. JAX's C++ dispatch serves a hit
without entering Python, so the two should be the same figure.

Miss (``watch_miss``): the same computation as a new function object on every
call, so every call traces, lowers and compiles; with the watcher on, each
compile is also described, diffed against the closest earlier one and timed.
The figure is the fastest single miss of each, in interleaved rounds.

Each round measures the watcher-off figure, then the watcher-on figure inside a
fresh ``sf.watch()``, and keeps the best of each (the watcher cannot be on for one
contender and off for the other within one interleaved measurement).
"""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp

import staticfield as sf

from ._harness import Config, Contender, Results, measure

HIT = "watch_hit"
MISS = "watch_miss"
OFF = "jax.jit, no watcher"
ON = "jax.jit inside sf.watch()"


def has_watch() -> bool:
    return hasattr(sf, "watch")


def _inputs() -> tuple[dict, jax.Array]:
    params = {"a": jnp.arange(4, dtype=jnp.float32), "b": jnp.ones(4, dtype=jnp.float32)}
    return params, jnp.full(4, 2.0, dtype=jnp.float32)


def _body(params: dict, x: jax.Array) -> jax.Array:
    return jnp.tanh(params["a"] * x + params["b"]).sum()


def _best_of(contender: Contender, watched: bool, cfg: Config, results: Results,
             rounds: int, best: dict[str, float]) -> None:
    if watched:
        with sf.watch():
            got = measure([contender], cfg, results, rounds=1)
    else:
        got = measure([contender], cfg, results, rounds=1)
    for name, us in got.items():
        best[name] = min(best.get(name, float("inf")), us)


def _pair(group: str, off: Contender, on: Contender, cfg: Config, results: Results,
          rounds: int) -> None:
    best: dict[str, float] = {}
    for r in range(rounds):
        order = ((off, False), (on, True)) if r % 2 == 0 else ((on, True), (off, False))
        for contender, watched in order:
            _best_of(contender, watched, cfg, results, rounds, best)
    results.add(group, "", best, {OFF: "baseline", ON: "ours"})


def run(cfg: Config, results: Results) -> None:
    print("case 6: sf.watch on a cache hit and on a compile", flush=True)
    if not has_watch():
        results.note("sf.watch does not exist yet: the watch case is skipped")
        return
    params, x = _inputs()
    hit = jax.jit(_body)
    hit(params, x)
    _pair(HIT, Contender(OFF, lambda: hit(params, x), "baseline"),
          Contender(ON, lambda: hit(params, x), "ours"), cfg, results, 3 * cfg.rounds)

    _misses(params, x, cfg, results)


def _misses(params: dict, x: jax.Array, cfg: Config, results: Results) -> None:
    """The fastest single miss of each (a miss cannot be repeated, and load only adds
    to it); each round runs a few misses under one watcher, so later ones are diffed
    against earlier compiles, as in a program that keeps compiling."""

    def miss() -> float:
        t0 = time.perf_counter_ns()
        jax.block_until_ready(jax.jit(lambda p, v: _body(p, v))(params, x))  # a new function
        return (time.perf_counter_ns() - t0) / 1e3

    per_round = 2 if cfg.smoke else 6
    times: dict[str, list[float]] = {OFF: [], ON: []}
    for r in range(cfg.rounds):
        for name in ((OFF, ON) if r % 2 == 0 else (ON, OFF)):
            if name == ON:
                with sf.watch():
                    times[ON] += [miss() for _ in range(per_round)]
            else:
                times[OFF] += [miss() for _ in range(per_round)]
    results.add(MISS, "", {n: min(ts) for n, ts in times.items()}, {OFF: "baseline", ON: "ours"})
