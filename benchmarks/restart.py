"""Case 10: time to first result in a fresh process (``sf.set_program_store``).

A 64-layer model (an ``@sf.dataclass`` with one weight matrix and bias per layer)
with a static ``activation`` of 4 values; its ``@sf.jit_method`` ``apply`` runs all
64 layers. Each measurement is a new Python process that builds the model and
calls ``apply`` once per static variant; the figure is the time from the first
call to the 4th result (imports and building the inputs come before the clock
starts and are the same for every contender). Three contenders:

- ``cold``: no cache at all: 4 traces, lowerings and compiles;
- ``JAX persistent cache (warm)``: ``jax_compilation_cache_dir`` filled by an earlier
  process: 4 traces and lowerings, the compiles read from the cache;
- ``program store (warm)``: ``STATICFIELD_PROGRAM_STORE`` filled by an earlier
  process: 4 programs loaded, no trace.

The fastest of a few fresh processes each (interleaved), in µs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

import jax
import jax.numpy as jnp

import staticfield as sf

from ._harness import Config, Results

RESTART = "restart"
LAYERS = 64
VARIANTS = ("tanh", "relu", "gelu", "silu")
COLD = "cold (no cache)"
PCACHE = "JAX persistent cache (warm)"
STORE = "program store (warm)"
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@sf.dataclass
class Model:
    """The model of this case: ``LAYERS`` dense layers, one static activation."""

    ws: list
    bs: list
    activation: str = sf.static(default="tanh")

    @sf.jit_method
    def apply(self, x):
        act = getattr(jax.nn, self.activation) if self.activation != "tanh" else jnp.tanh
        for w, b in zip(self.ws, self.bs):
            x = act(x @ w + b)
        return x.sum()


def _child(mode: str, folder: str) -> None:
    """One fresh process: the model, then the clock from the first call to the 4th result."""
    import time

    if mode == "pcache":
        jax.config.update("jax_compilation_cache_dir", folder)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    elif mode == "store":
        sf.set_program_store(folder)

    key = jax.random.PRNGKey(0)
    ws = [jax.random.normal(jax.random.fold_in(key, i), (32, 32)) * 0.1 for i in range(LAYERS)]
    bs = [jnp.zeros(32) for _ in range(LAYERS)]
    models = [Model(ws, bs, activation=a) for a in VARIANTS]
    x = jnp.ones((8, 32))
    jax.block_until_ready((ws, bs, x))
    t0 = time.perf_counter_ns()
    outs = [m.apply(x) for m in models]
    jax.block_until_ready(outs)
    us = (time.perf_counter_ns() - t0) / 1e3
    print(json.dumps({"us": us, "compiles": Model.apply.compile_count, "loads": Model.apply.load_count}))


def _fresh(mode: str, folder: str) -> dict:
    env = dict(os.environ)
    env.pop("STATICFIELD_PROGRAM_STORE", None)
    env.pop("JAX_COMPILATION_CACHE_DIR", None)
    done = subprocess.run([sys.executable, "-m", "benchmarks.restart", mode, folder], cwd=_ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"the {mode} process failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def run(cfg: Config, results: Results) -> None:
    print(f"case 10: time to first result in a fresh process ({LAYERS} layers, {len(VARIANTS)} variants)",
          flush=True)
    rounds = 1 if cfg.smoke else 3
    with tempfile.TemporaryDirectory() as tmp:
        pcache, store = os.path.join(tmp, "pcache"), os.path.join(tmp, "store")
        os.makedirs(pcache)
        os.makedirs(store, mode=0o755)
        _fresh("pcache", pcache)  # fill the caches: not timed
        _fresh("store", store)
        best: dict[str, float] = {}
        counts: dict[str, str] = {}
        for r in range(rounds):
            order = [("cold", COLD, ""), ("pcache", PCACHE, pcache), ("store", STORE, store)]
            for mode, name, folder in order if r % 2 == 0 else order[::-1]:
                got = _fresh(mode, folder or tmp)
                best[name] = min(best.get(name, float("inf")), got["us"])
                counts[name] = f"{got['compiles']} trace(s), {got['loads']} load(s)"
    results.add(RESTART, "", best, {COLD: "baseline", PCACHE: "baseline", STORE: "ours"}, notes=counts)
    for name, us in best.items():
        print(f"  {name}: {us / 1e6:.3f} s ({counts[name]})", flush=True)


if __name__ == "__main__":
    _child(sys.argv[1], sys.argv[2])
