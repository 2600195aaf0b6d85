"""Case 7: the miss path, a trace and a compile, against plain ``jax.jit``.

All of staticfield's tracking (describing the arguments, explaining the recompile,
the budget, the counters) runs on a miss. This case times first calls, each one a
miss: a new shape through ``sf.jit`` against a new shape through ``jax.jit``, and
a new static field through ``@sf.jit_method`` against a new ``static_argnums``
value through ``jax.jit``. Every call compiles a program no earlier call compiled
(the contenders take alternate shapes and statics, so neither reuses the other's
program from JAX's in-memory or persistent caches). A one-off miss cannot be
repeated, and other load only adds to it, so the figure is a low one: the 10th
percentile of 100 misses (the single fastest swung by ±6% between runs on a 2-core
machine). The rounds interleave the contenders; inputs are made before the clock
starts, and the two shape contenders alternate odd and even widths, which XLA
compiles at different speeds.
"""

from __future__ import annotations

import time
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

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


def _contenders() -> dict[str, tuple[Callable[[int], Any], Callable[[Any], Any]]]:
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

    def shaped(i: int) -> jax.Array:  # made before the clock starts: its own op-by-op compile is not timed
        return jax.block_until_ready(jnp.asarray(np.ones((8, i), np.float32)))

    # Contender j of a pair takes the j-th of each pair of sizes/statics: all programs differ.
    # Each is (make the input, untimed; the timed call).
    return {
        # odd and even widths alternate between the two: XLA compiles them at different speeds
        RAW_SHAPE: (lambda i: shaped(2 * i + 10 + i % 2), raw_shape),
        OURS_SHAPE: (lambda i: shaped(2 * i + 11 - i % 2), ours_shape),
        RAW_STATIC: (lambda i: 2 * i + 1000, lambda n: raw_static(x, n)),
        OURS_STATIC: (lambda i: Model(x, 2 * i + 1001), lambda m: m.step()),
    }


def _low(times: list[float]) -> float:
    """The 10th percentile: as robust to load as the minimum, without resting on one lucky miss."""
    ordered = sorted(times)
    return ordered[len(ordered) // 10]


def run(cfg: Config, results: Results) -> None:
    print("misses: trace + compile per first call", flush=True)
    count = 3 if cfg.smoke else 100
    contenders = _contenders()
    times: dict[str, list[float]] = {name: [] for name in contenders}
    for i in range(count):
        order = list(contenders) if i % 2 == 0 else list(reversed(contenders))
        for name in order:
            make, call = contenders[name]
            arg = make(i)
            t0 = time.perf_counter_ns()
            jax.block_until_ready(call(arg))
            times[name].append((time.perf_counter_ns() - t0) / 1e3)
    measured = {name: _low(ts) for name, ts in times.items()}
    results.add(MISSES, "", measured, KINDS)
    for name, us in measured.items():
        print(f"  {name}: {us:,.0f} µs per miss", flush=True)
