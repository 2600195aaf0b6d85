"""Case 10: time to first result in a fresh process (``sf.set_program_store``).

Two models, each an ``@sf.dataclass`` with one weight matrix and bias per layer and
a static ``activation``; its ``@sf.jit_method`` ``apply`` runs every layer: 64
layers called with 4 activations (4 programs), and a deep one of 256 layers (1
program). Each measurement is a new Python process that builds the model and calls
``apply`` once per static variant; the figure is the time from the first call to
the last result (imports, building the inputs and a garbage collection come before the clock starts and
are the same for every contender). Four contenders:

- ``cold``: no cache at all: traces, lowerings and compiles;
- ``JAX persistent cache (warm)``: ``jax_compilation_cache_dir`` filled by an earlier
  process: traces and lowerings, the compiles read from the cache;
- ``program store, trust="trace" (warm)``: the store filled by an earlier process:
  traces, each program loaded by its trace's digest (no lowering, no compile);
- ``program store, trust="source" (warm)``: programs loaded with no trace.

The median of 5 fresh processes each (interleaved, ``--rounds`` fewer), in µs. For the
two store contenders each process also says where its time went (``PARTS``): the
user's trace (which JAX's cache pays too), XLA's loading of the executable
(``deserialize``), the program's first run (the rest of the call, which JAX's cache
pays too), and the store's own work (keys, digests, record and entry reads, the
comparison, the source check: everything else the store's miss handler did). On a CPU
the design's targets are on that own work as a share of the time to first result
(≤15% ``trace``, ≤10% ``source``) and on the time against JAX's cache (≤1.0x); on a GPU
on the ratios against JAX's cache (≤0.85x, ≤0.5x). The report names the device.

On a GPU machine: ``python -m benchmarks --only restart --rounds 3`` (the two-process
job runs on CPU machines only, where each process gets a device of its own).
"""

from __future__ import annotations

import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
from typing import Any

import jax
import jax.numpy as jnp

import staticfield as sf

from ._harness import Config, Results

RESTART = "restart"
MODELS = {"64 layers, 4 variants": (64, ("tanh", "relu", "gelu", "silu")), "256 layers": (256, ("tanh",))}
COLD = "cold (no cache)"
PCACHE = "JAX persistent cache (warm)"
STORE = "program store, trust=\"trace\" (warm)"
SOURCE = "program store, trust=\"source\" (warm)"
MODES = {"cold": COLD, "pcache": PCACHE, "trace": STORE, "source": SOURCE}
PARTS = "restart parts"  # results.extra: where a store contender's time went, per model
PART_NAMES = ("trace", "deserialize", "first run", "store's own work", "agreement")
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


def _child(mode: str, folder: str, model: str, smoke: str = "") -> None:
    """One fresh process: the model, then the clock from the first call to the last result.
    With ``COORDINATOR`` set, one process of a two-process ``jax.distributed`` job. With
    ``smoke``, the model keeps its variants but only ``SMOKE_LAYERS`` layers."""
    import gc
    import time

    if os.environ.get("COORDINATOR"):
        jax.distributed.initialize(os.environ["COORDINATOR"], num_processes=2,
                                   process_id=int(os.environ["PROCESS_ID"]), initialization_timeout=30)
    if mode == "pcache":
        jax.config.update("jax_compilation_cache_dir", folder)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    elif mode in ("trace", "source"):
        sf.set_program_store(folder, trust=mode)
    spent = _timers() if mode in ("trace", "source") else None

    layers, variants = MODELS[model]
    layers = min(layers, SMOKE_LAYERS) if smoke else layers
    key = jax.random.PRNGKey(0)
    ws = [jax.random.normal(jax.random.fold_in(key, i), (32, 32)) * 0.1 for i in range(layers)]
    bs = [jnp.zeros(32) for _ in range(layers)]
    models = [Model(ws, bs, activation=a) for a in variants]
    x = jnp.ones((8, 32))
    jax.block_until_ready((ws, bs, x))
    # Collected before the clock, as for every timed case (``_harness.measure``): the building
    # above leaves enough objects pending that the first allocations after it trigger a
    # collection of the whole heap (30-100 ms here), charged to whichever code allocates
    # then. With trust="source", that was the store reading its JSON headers: the 256-layer
    # model's own work measured 0.23 of the time to first result, 0.05 with this collect
    # (with the collector off: 11 ms of 165 ms).
    gc.collect()
    t0 = time.perf_counter_ns()
    outs = [m.apply(x) for m in models]
    jax.block_until_ready(outs)
    us = (time.perf_counter_ns() - t0) / 1e3
    parts = None
    if spent is not None:  # µs: the miss handler's time less the trace, XLA's load and the agreement
        parts = {"trace": spent["trace"] * 1e6, "deserialize": spent["load"] * 1e6,
                 "first run": us - spent["program"] * 1e6,
                 "store's own work": (spent["program"] - spent["trace"] - spent["load"] - spent["agree"]) * 1e6,
                 "agreement": spent["agree"] * 1e6}
    print(json.dumps({"us": us, "compiles": Model.apply.compile_count, "loads": Model.apply.load_count,
                      "parts": parts, "device": jax.devices()[0].device_kind}))


def _timers() -> dict[str, float]:
    """Seconds spent in the store's miss handler (``StoredJit.program``), in the traces it
    asks for (each runs inside its variant's ``deferred()``, which counts it), in XLA's
    loading of an executable (``deserialize``), and, in a two-process job, in agreeing on
    a program loaded with no trace with the other process (``agree``: the processes'
    agreement, not the store's work), accumulated while the process runs."""
    import contextlib
    import gc
    import time

    from staticfield._jit import _traced
    from staticfield._store import _executable, _program

    spent = {"program": 0.0, "trace": 0.0, "load": 0.0, "agree": 0.0}

    def timed(fn: Any, part: str) -> Any:
        def timed_call(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                spent[part] += time.perf_counter() - start
        return timed_call

    _program.StoredJit.program = timed(_program.StoredJit.program, "program")  # type: ignore[method-assign]
    _executable.deserialize = timed(_executable.deserialize, "load")
    deferred = _traced.VariantHooks.deferred

    @contextlib.contextmanager
    def traced(self: Any) -> Any:
        start = time.perf_counter()
        try:
            with deferred(self) as tickets:
                yield tickets
        finally:
            spent["trace"] += time.perf_counter() - start

    _traced.VariantHooks.deferred = traced  # type: ignore[method-assign]
    _traced.VariantHooks.agree = timed(_traced.VariantHooks.agree, "agree")  # type: ignore[method-assign]
    return spent


def _env() -> dict[str, str]:
    env = dict(os.environ)
    for name in ("STATICFIELD_PROGRAM_STORE", "STATICFIELD_PROGRAM_STORE_TRUST", "JAX_COMPILATION_CACHE_DIR",
                 "COORDINATOR", "PROCESS_ID"):
        env.pop(name, None)
    return env


def _command(mode: str, folder: str, model: str, smoke: bool) -> list[str]:
    return [sys.executable, "-m", "benchmarks.restart", mode, folder, model, *(["smoke"] if smoke else [])]


def _fresh(mode: str, folder: str, model: str, smoke: bool = False) -> dict:
    done = subprocess.run(_command(mode, folder, model, smoke), cwd=_ROOT, env=_env(), capture_output=True,
                          text=True, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"the {mode} process failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _job(mode: str, folder: str, model: str, smoke: bool = False) -> dict:
    """A two-process job on 127.0.0.1 (one CPU device each): process 1's figures, where
    JAX's persistent cache never hits (only process 0 writes it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(_env(), COORDINATOR=f"127.0.0.1:{port}")
    procs = [subprocess.Popen(_command(mode, folder, model, smoke), cwd=_ROOT, env=dict(env, PROCESS_ID=str(i)),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(2)]
    try:
        outs = [p.communicate(timeout=600) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    if any(p.returncode != 0 for p in procs):
        raise RuntimeError(f"the {mode} job failed:\n" + "\n".join(err[-2000:] for _, err in outs))
    return json.loads(outs[1][0].strip().splitlines()[-1])


JOB = "64 layers, 4 variants, process 1 of 2"
SMOKE_LAYERS = 4  # a smoke run checks that every path runs, not what it costs


def run(cfg: Config, results: Results) -> None:
    rounds = 1 if cfg.smoke else min(cfg.rounds, 5)
    jobs = [(JOB, _job)] if jax.default_backend() == "cpu" else []
    if not jobs:
        results.note(f"case 10: the two-process job is measured on CPU machines only (here: "
                     f"{jax.default_backend()}, {jax.devices()[0].device_kind})")
    extra = results.extra.setdefault(PARTS, {})
    extra["device"] = f"{jax.default_backend()}: {jax.devices()[0].device_kind}"
    for model, start in [*((m, _fresh) for m in MODELS), *jobs]:
        print(f"case 10: time to first result in a fresh process ({model})", flush=True)
        with tempfile.TemporaryDirectory() as tmp:
            folders = {"cold": tmp, "pcache": os.path.join(tmp, "pcache"), "trace": os.path.join(tmp, "store"),
                       "source": os.path.join(tmp, "store")}
            os.makedirs(folders["pcache"])
            layers = model if model in MODELS else "64 layers, 4 variants"
            start("pcache", folders["pcache"], layers, cfg.smoke)  # fill the caches: not timed
            start("trace", folders["trace"], layers, cfg.smoke)
            times: dict[str, list[float]] = {name: [] for name in MODES.values()}
            parts: dict[str, dict[str, list[float]]] = {STORE: {}, SOURCE: {}}
            counts: dict[str, str] = {}
            for r in range(rounds):
                order = list(MODES.items())
                for mode, name in order if r % 2 == 0 else order[::-1]:
                    got = start(mode, folders[mode], layers, cfg.smoke)
                    times[name].append(got["us"])
                    counts[name] = f"{got['compiles']} compile(s), {got['loads']} load(s)"
                    for part, us in (got.get("parts") or {}).items():
                        parts[name].setdefault(part, []).append(us)
        median = {name: statistics.median(ts) for name, ts in times.items()}
        extra[model] = {name: {part: statistics.median(ts) for part, ts in found.items()}
                        for name, found in parts.items()}
        results.add(RESTART, model, median, {COLD: "baseline", PCACHE: "baseline", STORE: "ours", SOURCE: "ours"},
                    notes=counts)
        for name, us in median.items():
            print(f"  {name}: {us / 1e6:.3f} s ({counts[name]})", flush=True)
            split = extra[model].get(name)
            if split:
                print("    " + ", ".join(f"{part} {split[part] / 1e6:.3f} s" for part in PART_NAMES if split.get(part))
                      + f"; the store's own work is {split[PART_NAMES[3]] / us:.1%} of the time", flush=True)


if __name__ == "__main__":
    _child(*sys.argv[1:5])
