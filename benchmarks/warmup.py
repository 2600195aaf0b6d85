"""Case 12: time to ready in a fresh process with ``sf.warmup()``.

K = 8 programs of a 64-layer model (4 static activations × 2 batch sizes). Each
measurement is a new Python process that builds the model and its inputs (before the
clock), then makes every program ready and runs each once; the figure is the time from
the start of warm-up (or of the first call, without it) to the last result:

- ``no store (cold)``: the calls trace, lower and compile every program;
- ``store warm, sf.warmup()``: the store filled by an earlier process; warm-up loads
  every program (``trust="trace"``: a trace each), then the calls run;
- ``records only, sf.warmup(workers=1)`` and ``(workers=2)``: the programs cleared and
  the records kept (``--clear-programs``): warm-up traces and compiles every program,
  on one thread or two.

The median of 3 fresh processes each (interleaved), in µs.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

import jax
import jax.numpy as jnp

import staticfield as sf

from ._harness import Config, Results

WARMUP = "warmup"
COLD = "no store (cold)"
WARM = "store warm, sf.warmup()"
ONE = "records only, sf.warmup(workers=1)"
TWO = "records only, sf.warmup(workers=2)"
MODES = {"cold": COLD, "warm": WARM, "one": ONE, "two": TWO}
ACTIVATIONS = ("tanh", "relu", "gelu", "silu")
BATCHES = (8, 16)
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@sf.dataclass
class Model:
    """Dense layers with one static activation."""

    ws: list
    activation: str = sf.static(default="tanh")

    @sf.jit_method
    def apply(self, x):
        act = getattr(jax.nn, self.activation) if self.activation != "tanh" else jnp.tanh
        for w in self.ws:
            x = act(x @ w)
        return x.sum()


def _child(mode: str, folder: str, layers: int) -> None:
    import time

    if mode != "cold":
        sf.set_program_store(folder)
    key = jax.random.PRNGKey(0)
    ws = [jax.random.normal(jax.random.fold_in(key, i), (32, 32)) * 0.1 for i in range(layers)]
    models = [Model(ws, activation=a) for a in ACTIVATIONS]
    xs = [jnp.ones((n, 32)) for n in BATCHES]
    jax.block_until_ready((ws, xs))
    t0 = time.perf_counter_ns()
    summary = None
    if mode in ("warm", "one", "two"):
        summary = sf.warmup(workers={"one": 1, "two": 2}.get(mode), progress=False)
    outs = [m.apply(x) for m in models for x in xs]
    jax.block_until_ready(outs)
    us = (time.perf_counter_ns() - t0) / 1e3
    print(json.dumps({"us": us, "compiles": Model.apply.compile_count, "loads": Model.apply.load_count,
                      "threads": summary.threads if summary else 0}))


def _fresh(mode: str, folder: str, layers: int) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("STATICFIELD_PROGRAM_STORE")}
    done = subprocess.run([sys.executable, "-m", "benchmarks.warmup", mode, folder, str(layers)], cwd=_ROOT,
                          env=env, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"the {mode} process failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _records_only(store: str, into: str) -> str:
    """A copy of ``store`` with its programs gone and its records kept."""
    shutil.copytree(store, into)
    for name in os.listdir(into):
        if name.endswith((".sfprog", ".sfsrc")):
            os.unlink(os.path.join(into, name))
    return into


def run(cfg: Config, results: Results) -> None:
    rounds, layers = (1, 4) if cfg.smoke else (3, 64)
    param = f"{layers} layers, {len(ACTIVATIONS) * len(BATCHES)} programs"
    print(f"case 12: time to ready with sf.warmup ({param})", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        store = os.path.join(tmp, "store")
        _fresh("warm", store, layers)  # an empty store: the calls compile and record (not timed)
        times: dict[str, list[float]] = {name: [] for name in MODES.values()}
        counts: dict[str, str] = {}
        for r in range(rounds):
            order = list(MODES.items())
            for mode, name in order if r % 2 == 0 else order[::-1]:
                folder = store if mode in ("cold", "warm") else _records_only(
                    store, os.path.join(tmp, f"records-{mode}-{r}"))
                got = _fresh(mode, folder, layers)
                times[name].append(got["us"])
                counts[name] = f"{got['compiles']} compile(s), {got['loads']} load(s)" + (
                    f", {got['threads']} thread(s)" if got["threads"] else "")
    median = {name: statistics.median(ts) for name, ts in times.items()}
    results.add(WARMUP, param, median, {COLD: "baseline", WARM: "ours", ONE: "ours", TWO: "ours"}, notes=counts)
    for name, us in median.items():
        print(f"  {name}: {us / 1e6:.3f} s ({counts[name]})", flush=True)


if __name__ == "__main__":
    _child(sys.argv[1], sys.argv[2], int(sys.argv[3]))
