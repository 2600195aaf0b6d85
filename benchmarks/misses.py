"""Case 7: the miss path, a trace and a compile, against plain ``jax.jit``.

All of staticfield's tracking (describing the arguments, explaining the recompile,
the budget, the counters) runs on a miss. This case times first calls, each one a
miss: a new shape through ``sf.jit`` against a new shape through ``jax.jit``, and
a new static field through ``@sf.jit_method`` against a new ``static_argnums``
value through ``jax.jit``. Every call compiles a program no earlier call compiled
(the contenders take alternate shapes and statics, so neither reuses the other's
program from JAX's in-memory or persistent caches). A one-off miss cannot be
repeated, and other load only adds to it, so the figure is the fastest of the
misses timed (as ``timeit`` advises); the rounds interleave the contenders.
"""

from __future__ import annotations

import time
from typing import Any, Callable

import jax
import jax.numpy as jnp

import staticfield as sf

from ._harness import Config, Results

MISSES = "misses"
RAW_SHAPE = "jax.jit, new shape"
OURS_SHAPE = "sf.jit, new shape"
RAW_STATIC = "jax.jit + static_argnums, new static"
OURS_STATIC = "sf.jit_method, new static field"
KINDS = {RAW_SHAPE: "baseline", OURS_SHAPE: "ours", RAW_STATIC: "baseline", OURS_STATIC: "ours"}


def _body(x: jax.Array, n: Any) -> jax.Array:
    y = jnp.sin(x) * n + jnp.cos(x)
    return jnp.tanh(y @ y.T).sum(axis=0)


def _contenders() -> dict[str, Callable[[int], Any]]:
    raw_shape = jax.jit(lambda x: _body(x, 2.0))
    ours_shape = sf.jit(lambda x: _body(x, 2.0), warn_compiles=None)
    raw_static = jax.jit(_body, static_argnums=1)

    @sf.dataclass
    class Model:
        x: jax.Array
        n: sf.Static[int] = 0

        @sf.jit_method(warn_compiles=None)
        def step(self) -> jax.Array:
            return _body(self.x, self.n)

    x = jnp.ones((8, 8), jnp.float32)
    # Contender j of a pair takes the j-th of each pair of sizes/statics: all programs differ.
    return {
        RAW_SHAPE: lambda i: raw_shape(jnp.ones((8, 2 * i + 8), jnp.float32)),
        OURS_SHAPE: lambda i: ours_shape(jnp.ones((8, 2 * i + 9), jnp.float32)),
        RAW_STATIC: lambda i: raw_static(x, 2 * i + 1000),
        OURS_STATIC: lambda i: Model(x, 2 * i + 1001).step(),
    }


def run(cfg: Config, results: Results) -> None:
    print("misses: trace + compile per first call", flush=True)
    count = 3 if cfg.smoke else 60
    contenders = _contenders()
    times: dict[str, list[float]] = {name: [] for name in contenders}
    for i in range(count):
        order = list(contenders) if i % 2 == 0 else list(reversed(contenders))
        for name in order:
            t0 = time.perf_counter_ns()
            jax.block_until_ready(contenders[name](i))
            times[name].append((time.perf_counter_ns() - t0) / 1e3)
    measured = {name: min(ts) for name, ts in times.items()}
    results.add(MISSES, "", measured, KINDS)
    for name, us in measured.items():
        print(f"  {name}: {us:,.0f} µs per miss", flush=True)
