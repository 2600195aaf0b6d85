"""Case 13: what a cache hit costs, each call form against plain ``jax.jit``, as the
median over fresh processes.

One process's minimum is not a stable estimate of a hit on this machine (the
allocator, the order classes were made in, and the hash table's layout all move it
by a few percent), so the case runs ``PROCESSES`` fresh Python processes; each times
every contender in interleaved rounds (``_harness.measure``) and reports its
minimum, and the figure is the median of those minima.

Every contender computes ``a * x + b * n`` (``a``, ``b``, ``x``: ``f32[4]``; ``n`` a
static int, or ``k`` a static argument). Ours are paired with the same call through
plain ``jax.jit`` with ``jax.tree_util.register_dataclass`` (a ``@jax.jit`` method
for method calls), and flax.struct's ``@jax.jit`` method is shown beside them. The
last pair times the hit on the last-inserted of ``VARIANTS`` static variants of a
class against a fresh class with one (plain ``jax.jit``'s own pair beside it: JAX's
C++ cache does not hash pytree metadata, so its variants share one bucket).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import statistics
import subprocess
import sys
import tempfile
from typing import Any, Callable

import jax
import jax.numpy as jnp

import staticfield as sf

from ._harness import Config, Contender, Results, measure, optional

HITS = "hits"
PROCESSES = 5
VARIANTS = 1000

OBJ_METHOD = "obj.method(x)"
CLS_METHOD = "Cls.method(obj, x)"
INSTANCE = "jit(f)(obj, x)"
ARRAYS = "jit(f)(a, b, x)"
STATIC = "jit(f, static_argnames)(a, b, x, k=3)"
STATIC_METHOD = "obj.method(x, k=3), static_argnames"
STATIC_T = "obj.method(x, 3), k: sf.Static[int]"
DEPS = 'obj.method(x), deps="read"'
DEPS_STATIC = 'obj.method(x, k=3), deps="read" + static_argnames'
MANY = f"obj.method(x), last of {VARIANTS} variants"
ONE = "obj.method(x), 1 variant"
FORMS = (OBJ_METHOD, CLS_METHOD, INSTANCE, ARRAYS, STATIC, STATIC_METHOD, STATIC_T, DEPS, MANY, ONE, DEPS_STATIC)

OURS = "staticfield"
JAX = "jax.jit + register_dataclass"
FLAX = "jax.jit + flax.struct"


def name(who: str, form: str) -> str:
    return f"{who}: {form}"


def _inputs() -> tuple[jax.Array, jax.Array, jax.Array, int]:
    return jnp.arange(4, dtype=jnp.float32), jnp.ones(4, jnp.float32), jnp.full(4, 2.0, jnp.float32), 3


def _ours(variants: int) -> list[Contender]:
    a, b, x, n = _inputs()

    @sf.dataclass
    class Params:
        a: jax.Array
        b: jax.Array
        n: int = sf.static()

        @sf.jit_method
        def step(self, x):
            return self.a * x + self.b * self.n

        @sf.jit_method(static_argnames=("k",))
        def step_k(self, x, k):
            return self.a * x + self.b * k

        @sf.jit_method
        def step_t(self, x, k: sf.Static[int]):
            return self.a * x + self.b * k

        @sf.jit_method(deps="read")
        def step_read(self, x):
            return self.a * x + self.b * self.n

        @sf.jit_method(deps="read", static_argnames=("k",))
        def step_read_k(self, x, k):
            return self.a * x + self.b * k

    p = Params(a, b, n)
    free = sf.jit(lambda p, x: p.a * x + p.b * p.n)
    arrays = sf.jit(lambda a, b, x: a * x + b * 3)
    static = sf.jit(lambda a, b, x, k: a * x + b * k, static_argnames="k")
    many, one = _families(variants)
    return _contenders(OURS, "ours", (
        lambda: p.step(x), lambda: Params.step(p, x), lambda: free(p, x), lambda: arrays(a, b, x),
        lambda: static(a, b, x, k=3), lambda: p.step_k(x, k=3), lambda: p.step_t(x, 3),
        lambda: p.step_read(x), many, one, lambda: p.step_read_k(x, k=3)))


def _contenders(who: str, kind: str, calls: tuple) -> list[Contender]:
    """``who``'s contenders, one call per form of ``FORMS``, in that order."""
    assert len(calls) == len(FORMS)
    return [Contender(name(who, form), call, kind) for form, call in zip(FORMS, calls)]


def _families(variants: int) -> tuple[Callable[[], Any], Callable[[], Any]]:
    """The hit on the last of ``variants`` compiled variants, and on a fresh class's one."""
    a, b, x, _ = _inputs()
    calls = []
    for count in (variants, 1):
        @sf.dataclass
        class Family:
            a: jax.Array
            b: jax.Array
            n: int = sf.static()

            @sf.jit_method(warn_compiles=None)
            def step(self, x):
                return self.a * x + self.b

        objs = [Family(a, b, i) for i in range(count)]
        for obj in objs:
            obj.step(x)
        last = objs[-1]
        calls.append(lambda last=last: last.step(x))
    return calls[0], calls[1]


def _jax(variants: int) -> list[Contender]:
    a, b, x, n = _inputs()

    @dataclasses.dataclass(frozen=True)
    class Params:
        a: jax.Array
        b: jax.Array
        n: int

        @jax.jit
        def step(self, x):
            return self.a * x + self.b * self.n

        @functools.partial(jax.jit, static_argnames=("k",))
        def step_k(self, x, k):
            return self.a * x + self.b * k

        @functools.partial(jax.jit, static_argnums=(2,))
        def step_t(self, x, k):
            return self.a * x + self.b * k

    jax.tree_util.register_dataclass(Params, data_fields=["a", "b"], meta_fields=["n"])
    p = Params(a, b, n)
    free = jax.jit(lambda p, x: p.a * x + p.b * p.n)
    arrays = jax.jit(lambda a, b, x: a * x + b * 3)
    static = jax.jit(lambda a, b, x, k: a * x + b * k, static_argnames="k")
    many, one = [], []
    for count, out in ((variants, many), (1, one)):
        @dataclasses.dataclass(frozen=True)
        class Family:
            a: jax.Array
            b: jax.Array
            n: int

            @jax.jit
            def step(self, x):
                return self.a * x + self.b

        jax.tree_util.register_dataclass(Family, data_fields=["a", "b"], meta_fields=["n"])
        objs = [Family(a, b, i) for i in range(count)]
        for obj in objs:
            obj.step(x)
        out.append(lambda last=objs[-1]: last.step(x))
    return _contenders(JAX, "baseline", (
        lambda: p.step(x), lambda: Params.step(p, x), lambda: free(p, x), lambda: arrays(a, b, x),
        lambda: static(a, b, x, k=3), lambda: p.step_k(x, k=3), lambda: p.step_t(x, 3),
        lambda: p.step(x), many[0], one[0], lambda: p.step_k(x, k=3)))


def _flax() -> list[Contender]:
    import flax.struct

    a, b, x, n = _inputs()

    @flax.struct.dataclass
    class Params:
        a: jax.Array
        b: jax.Array
        n: int = flax.struct.field(pytree_node=False)

        @jax.jit
        def step(self, x):
            return self.a * x + self.b * self.n

    p = Params(a, b, n)
    return [Contender(name(FLAX, OBJ_METHOD), lambda: p.step(x), "anchor")]


def worker(smoke: bool, rounds: int, out: str) -> None:
    """One fresh process: every contender's minimum µs per hit, written to ``out``."""
    cfg = Config.smoke_config() if smoke else dataclasses.replace(Config(), rounds=rounds)
    variants = 3 if smoke else VARIANTS
    contenders = _ours(variants) + _jax(variants) + (optional(Results(cfg), FLAX, _flax) or [])
    best = measure(contenders, cfg, Results(cfg))
    with open(out, "w") as f:
        json.dump(best, f)


def run(cfg: Config, results: Results) -> None:
    processes = 1 if cfg.smoke else PROCESSES
    minima: dict[str, list[float]] = {}
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]),
               STATICFIELD_WARN_COMPILES="0")
    cache = jax.config.jax_compilation_cache_dir  # the run's XLA cache: the variants compile once
    if cache:
        env.update(JAX_COMPILATION_CACHE_DIR=cache, JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
                   JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES="0")
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(processes):
            out = os.path.join(tmp, f"{i}.json")
            code = f"from benchmarks.hits import worker; worker({cfg.smoke!r}, {cfg.rounds!r}, {out!r})"
            subprocess.run([sys.executable, "-c", code], check=True, env=env, cwd=root)
            with open(out) as f:
                for key, value in json.load(f).items():
                    minima.setdefault(key, []).append(value)
    for key, values in minima.items():
        who, _, form = key.partition(": ")
        kind = "ours" if who == OURS else "anchor" if who == FLAX else "baseline"
        results.add(HITS, form, {who: statistics.median(values)}, {who: kind})
    results.extra[HITS] = {"processes": processes, "variants": 3 if cfg.smoke else VARIANTS}
