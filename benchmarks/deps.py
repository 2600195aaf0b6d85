"""Case 8: ``@sf.jit_method(deps="read")``, which compiles only for the statics a method reads.

8a (``deps_hit``): a cache-hit call of a ``deps="read"`` method, against plain
``jax.jit`` with the static as ``static_argnums`` and the default ``deps="all"``.

8b (``deps_reuse``): the first call of a new instance that differs only in a static
the method never read: it reuses an existing program (a lookup by the read fields,
no trace, no compile). The fastest of the first calls timed, as in case 7; the
reference row is a cache-hit call of the same method.

8c (``deps_sweep``): jax-ml/jax#33043. N instances differing only in a static
``name`` that ``__call__`` never reads, each called once: µs per instance and the
number of compiles, for ``deps="read"``, ``deps="all"``, flax.struct and plain
``jax.jit`` with the name as ``static_argnums``.

8e (``deps_reuse_fresh``): what DESIGN.md bounds (≤100 µs): the first call of each of
``FRESH`` new instances differing only in an unread static, reusing the program, as the
median over those calls, then the median over ``PROCESSES`` fresh processes; for
``obj.method(x)`` and for ``obj.method(x, k=3)`` with ``static_argnames``.

8d (``deps_nested``): the same one level down: N models whose two layers (``sf``
instances in a tuple field) differ only in a static ``name`` the model's ``__call__``
never reads: compiles and µs per model, ``deps="read"`` (N models) against ``deps="all"``
(at most 100 of them: each compiles, and the figure is per model).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable

import jax
import jax.numpy as jnp

import staticfield as sf

from ._harness import Config, Contender, Results, kinds, measure, optional, traced

HIT = "deps_hit"
REUSE = "deps_reuse"
SWEEP = "deps_sweep"
RAW = "jax.jit, arrays + static_argnums"
READ = 'sf.jit_method(deps="read")'
ALL = 'sf.jit_method (deps="all")'
READ_REUSE = 'deps="read", first call of a new instance (program reused)'
READ_HIT = 'deps="read", cache hit'
FLAX = "jax.jit + flax.struct"
COMPILES = "deps_sweep_compiles"
NESTED = "deps_nested"
NESTED_COMPILES = "deps_nested_compiles"
FRESH_REUSE = "deps_reuse_fresh"
FRESH_PLAIN = 'obj.method(x), deps="read": first call of a new instance, reused'
FRESH_STATIC = 'obj.method(x, k=3), deps="read" + static_argnames: first call of a new instance, reused'
FRESH_HIT = ": cache hit (reference)"
FRESH = 200
PROCESSES = 5


def _body(a: jax.Array, b: jax.Array, x: jax.Array, n: int) -> jax.Array:
    return a * x + b * n


def _class(deps: str, count: list[int]) -> type:
    @sf.dataclass
    class Params:
        a: jax.Array
        b: jax.Array
        n: sf.Static[int] = 3
        name: sf.Static[str] = "p"  # never read by step

        @sf.jit_method(deps=deps, warn_compiles=None)
        def step(self, x):
            count[0] += 1
            return _body(self.a, self.b, x, self.n)

    return Params


def _classes(counts: dict[str, list[int]]) -> dict[str, type]:
    return {deps: _class(deps, counts.setdefault(deps, [0])) for deps in ("read", "all")}


def _inputs() -> tuple[jax.Array, jax.Array, jax.Array]:
    return jnp.arange(4, dtype=jnp.float32), jnp.ones(4, jnp.float32), jnp.full(4, 2.0, jnp.float32)


def _hit(results: Results, cfg: Config) -> None:
    a, b, x = _inputs()
    counts: dict[str, list[int]] = {}
    classes = _classes(counts)
    step, raw_count = traced(lambda ab, x, n: _body(ab[0], ab[1], x, n))
    raw = jax.jit(step, static_argnums=2)
    read, full = classes["read"](a, b), classes["all"](a, b)
    contenders = [
        Contender(RAW, lambda: raw((a, b), x, 3), "baseline", traces=raw_count),
        Contender(READ, lambda: read.step(x), "ours", traces=counts["read"]),
        Contender(ALL, lambda: full.step(x), "ours", traces=counts["all"]),
    ]
    results.add(HIT, "", measure(contenders, cfg, results), kinds(contenders))


def _reuse(results: Results, cfg: Config) -> None:
    a, b, x = _inputs()
    counts: dict[str, list[int]] = {}
    Params = _classes(counts)["read"]
    first = Params(a, b)
    jax.block_until_ready(first.step(x))
    number = 3 if cfg.smoke else 2000
    fresh = [Params(a, b, name=f"p{i}") for i in range(number)]  # built outside the timing
    times = []
    for p in fresh:
        t0 = time.perf_counter_ns()
        p.step(x)
        times.append((time.perf_counter_ns() - t0) / 1e3)
    if counts["read"][0] != 1:
        results.note(f"{READ_REUSE}: traced {counts['read'][0]} times; the figure is not a reuse")
    hit = measure([Contender(READ_HIT, lambda: first.step(x), "baseline", traces=counts["read"])], cfg, results)
    results.add(REUSE, "", {READ_REUSE: min(times), **hit}, {READ_REUSE: "ours", READ_HIT: "baseline"})
    print(f"  {READ_REUSE}: {min(times):.1f} µs (fastest of {number}), "
          f"median {sorted(times)[len(times) // 2]:.1f} µs", flush=True)


def fresh_worker(smoke: bool, out: str) -> None:
    """One fresh process: the median µs of the first call of each new instance (8e)."""
    count = [0]

    @sf.dataclass
    class Params:
        a: jax.Array
        b: jax.Array
        n: sf.Static[int] = 3
        name: sf.Static[str] = "p"  # never read

        @sf.jit_method(deps="read", warn_compiles=None)
        def step(self, x):
            count[0] += 1
            return _body(self.a, self.b, x, self.n)

        @sf.jit_method(deps="read", static_argnames=("k",), warn_compiles=None)
        def step_k(self, x, k):
            count[0] += 1
            return _body(self.a, self.b, x, self.n * k)

    a, b, x = _inputs()
    number = 3 if smoke else FRESH
    medians = {}
    for label, call in ((FRESH_PLAIN, lambda p: p.step(x)), (FRESH_STATIC, lambda p: p.step_k(x, k=3))):
        first = Params(a, b)
        jax.block_until_ready(call(first))
        fresh = [Params(a, b, name=f"{len(medians)}-{i}") for i in range(number)]  # built outside the timing
        times, hits = [], []
        for p in fresh:
            t0 = time.perf_counter_ns()
            call(p)
            t1 = time.perf_counter_ns()
            call(first)  # the reference: a cache hit of the same method, timed alike
            hits.append((time.perf_counter_ns() - t1) / 1e3)
            times.append((t1 - t0) / 1e3)
        medians[label] = statistics.median(times)
        medians[label.split(":")[0] + FRESH_HIT] = statistics.median(hits)
    medians["traces"] = count[0]
    with open(out, "w") as f:
        json.dump(medians, f)


def _fresh(results: Results, cfg: Config) -> None:
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]))
    found: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(1 if cfg.smoke else PROCESSES):
            out = os.path.join(tmp, f"{i}.json")
            code = f"from benchmarks.deps import fresh_worker; fresh_worker({cfg.smoke!r}, {out!r})"
            subprocess.run([sys.executable, "-c", code], check=True, env=env, cwd=root)
            with open(out) as f:
                for key, value in json.load(f).items():
                    found.setdefault(key, []).append(value)
    if any(t != 2 for t in found.pop("traces")):
        results.note(f"{FRESH_REUSE}: a process traced more than once per method; the figures are not reuses")
    figures = {k: statistics.median(v) for k, v in found.items()}
    results.add(FRESH_REUSE, "", figures, {k: "baseline" if k.endswith(FRESH_HIT) else "ours" for k in figures})
    for k, v in figures.items():
        print(f"  {k}: {v:.1f} µs (median of {FRESH}, median of processes)", flush=True)


def _flax_sweep() -> tuple[Callable[[int], Any], list[int]]:
    import flax.struct

    a, b, x = _inputs()
    count = [0]

    @flax.struct.dataclass
    class Params:
        a: jax.Array
        b: jax.Array
        n: int = flax.struct.field(pytree_node=False, default=3)
        name: str = flax.struct.field(pytree_node=False, default="p")

        @jax.jit
        def step(self, x):
            count[0] += 1
            return _body(self.a, self.b, x, self.n)

    return (lambda i: Params(a, b, 3, f"layer_{i}").step(x)), count


def _sweep(results: Results, cfg: Config) -> None:
    a, b, x = _inputs()
    number = 3 if cfg.smoke else 1000
    counts: dict[str, list[int]] = {}
    classes = _classes(counts)
    step, raw_count = traced(lambda ab, x, n, name: _body(ab[0], ab[1], x, n))
    raw = jax.jit(step, static_argnums=(2, 3))
    sweeps: dict[str, tuple[Callable[[int], Any], list[int], str]] = {
        RAW: (lambda i: raw((a, b), x, 3, f"layer_{i}"), raw_count, "baseline"),
        READ: (lambda i: classes["read"](a, b, name=f"layer_{i}").step(x), counts["read"], "ours"),
        ALL: (lambda i: classes["all"](a, b, name=f"layer_{i}").step(x), counts["all"], "ours"),
    }
    flax_sweep = optional(results, FLAX, _flax_sweep)
    if flax_sweep is not None:
        sweeps[FLAX] = (*flax_sweep, "anchor")
    measured, compiles = {}, {}
    for name, (call, count, _) in sweeps.items():
        t0 = time.perf_counter_ns()
        for i in range(number):
            jax.block_until_ready(call(i))
        measured[name] = (time.perf_counter_ns() - t0) / 1e3 / number
        compiles[name] = count[0]
        print(f"  {name}: {compiles[name]} compile(s) for {number} instances, "
              f"{measured[name]:,.0f} µs per instance", flush=True)
    notes = {name: f"{compiles[name]} compiles" for name in measured}
    results.add(SWEEP, number, measured, {n: s[2] for n, s in sweeps.items()}, notes)
    results.extra[COMPILES] = {"instances": number, **compiles}


def _nested_class(deps: str, count: list[int]) -> type:
    @sf.dataclass
    class Layer:
        w: jax.Array
        n: sf.Static[int] = 2
        name: sf.Static[str] = "layer"  # never read

    @sf.dataclass
    class Model:
        layers: tuple

        @sf.jit_method(deps=deps, warn_compiles=None)
        def __call__(self, x):
            count[0] += 1
            for layer in self.layers:
                x = x * layer.w + layer.n
            return x

    return lambda i, w: Model((Layer(w, name=f"first_{i}"), Layer(w, name=f"second_{i}")))


def _nested(results: Results, cfg: Config) -> None:
    a, _, x = _inputs()
    number = 3 if cfg.smoke else 1000
    measured, compiles, kind, ran = {}, {}, {}, {}
    for deps, label, role in (("read", READ, "ours"), ("all", ALL, "baseline")):
        count = [0]
        make = _nested_class(deps, count)
        count_here = number if deps == "read" else min(number, 100)  # "all" compiles every one
        models = [make(i, a) for i in range(count_here)]  # built outside the timing
        t0 = time.perf_counter_ns()
        for m in models:
            jax.block_until_ready(m(x))
        measured[label] = (time.perf_counter_ns() - t0) / 1e3 / count_here
        compiles[label], kind[label], ran[label] = count[0], role, count_here
        print(f"  {label}: {count[0]} compile(s) for {count_here} models, {measured[label]:,.0f} µs per model",
              flush=True)
    results.add(NESTED, number, measured, kind, {n: f"{c} compiles for {ran[n]} models" for n, c in compiles.items()})
    results.extra[NESTED_COMPILES] = {"instances": number, **compiles}


def run(cfg: Config, results: Results) -> None:
    print('case 8a: cache hit of a deps="read" method', flush=True)
    _hit(results, cfg)
    print('case 8b: a new instance reusing an existing program (deps="read")', flush=True)
    _reuse(results, cfg)
    print("case 8e: the first call of a new instance reusing a program, fresh processes (deps=\"read\")", flush=True)
    _fresh(results, cfg)
    print("case 8c: instances differing only in an unread static (jax#33043)", flush=True)
    _sweep(results, cfg)
    print("case 8d: models whose layers differ only in an unread static", flush=True)
    _nested(results, cfg)
