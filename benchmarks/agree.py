"""Case 14: what the agreement between processes costs per compile.

A two-process ``jax.distributed`` job on this machine (two CPU devices each, on
127.0.0.1). Each process calls a ``jit_method`` on a batch sharded over all four
devices, for a new static value on every call, so every call traces, compiles and
runs a program that spans both processes. Calls alternate between the check on
(the default: publish the program's digest in ``jax.distributed``'s key-value store
and wait for the other process's) and off (``STATICFIELD_HOST_CHECK=0``, read on
every compile), in the same order on both processes, so every program differs from
every other. The figure is the 10th percentile of each, in µs per first call
(trace, compile, and the run with its collective), measured on process 0; the
report's note on the first gives the median time of the check itself (publish,
then wait for the other process's digest), which includes waiting for the slower
process.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time

from ._harness import Config, Results

AGREE = "agree"
PARAM = "2 processes × 2 CPU devices"
ON = "new program, agreement check on"
OFF = "new program, STATICFIELD_HOST_CHECK=0"
CHECK = "the check alone (publish, wait)"
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _child(count: int) -> None:
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.experimental import multihost_utils
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    jax.distributed.initialize(os.environ["COORDINATOR"], num_processes=2,
                               process_id=int(os.environ["PROCESS_ID"]), initialization_timeout=30)
    import staticfield as sf

    @sf.dataclass
    class Model:
        w: jax.Array
        n: int = sf.static(default=0)

        @sf.jit_method(warn_compiles=None)
        def total(self, batch: jax.Array) -> jax.Array:
            y = batch
            for _ in range(4):
                y = jnp.tanh(y @ self.w) * self.n
            return y.sum()

    mesh = jax.make_mesh((4,), ("x",))
    batch = jax.make_array_from_process_local_data(NamedSharding(mesh, P("x")), np.ones((4, 64), np.float32), (8, 64))
    w = jax.device_put(np.full((64, 64), 0.01, np.float32), NamedSharding(mesh, P()))
    from staticfield._jit import _agreement

    checks: list[float] = []
    agree = _agreement.agree

    def timed_agree(*args: object) -> None:  # the check itself: publish, then wait for the other
        t0 = time.perf_counter_ns()
        try:
            agree(*args)  # type: ignore[arg-type]
        finally:
            checks.append((time.perf_counter_ns() - t0) / 1e3)

    _agreement.agree = timed_agree
    jax.block_until_ready(Model(w, 1).total(batch))  # the first compile of a process: not timed
    checks.clear()
    times: dict[str, list[float]] = {ON: [], OFF: [], CHECK: checks}
    for i in range(count):
        for name in (ON, OFF) if i % 2 == 0 else (OFF, ON):
            os.environ["STATICFIELD_HOST_CHECK"] = "" if name == ON else "0"
            model = Model(w, 2 * i + 2 + (name == ON))
            t0 = time.perf_counter_ns()
            jax.block_until_ready(model.total(batch))
            times[name].append((time.perf_counter_ns() - t0) / 1e3)
    print(json.dumps(times), flush=True)
    multihost_utils.sync_global_devices("staticfield benchmark done")
    if jax.process_index() == 0:  # the coordinator goes last
        time.sleep(1)
    os._exit(0)


def _job(count: int, timeout: float) -> dict[str, list[float]]:
    """Process 0's times from one two-process job; every child is ended by its PID on failure."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith("STATICFIELD_")}
    env.update(XLA_FLAGS="--xla_force_host_platform_device_count=2", COORDINATOR=f"127.0.0.1:{port}")
    procs = [subprocess.Popen([sys.executable, "-m", "benchmarks.agree", str(count)], cwd=_ROOT,
                              env=dict(env, PROCESS_ID=str(i)), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, start_new_session=True) for i in range(2)]
    deadline = time.monotonic() + timeout
    while any(p.poll() is None for p in procs):
        if time.monotonic() > deadline or any(p.returncode not in (None, 0) for p in procs):
            for p in procs:
                if p.poll() is None:
                    os.killpg(p.pid, signal.SIGKILL)
            break
        time.sleep(0.05)
    out, err = procs[0].communicate()
    procs[1].communicate()
    if any(p.returncode != 0 for p in procs):
        raise RuntimeError(f"the two-process job failed: {err[-1500:]}")
    return json.loads(out.strip().splitlines()[-1])


def _low(times: list[float]) -> float:
    ordered = sorted(times)
    return ordered[len(ordered) // 10]


def run(cfg: Config, results: Results) -> None:
    print("case 14: the agreement check per compile, two processes", flush=True)
    if sys.platform != "linux":
        results.note("agree: skipped (jax.distributed on CPU is measured on Linux)")
        return
    try:
        times = _job(3 if cfg.smoke else 60, 120 if cfg.smoke else 480)
    except Exception as exc:
        results.note(f"agree: skipped ({exc})")
        return
    checks = sorted(times.pop(CHECK))
    check = f"the check itself: {checks[len(checks) // 2]:,.0f} µs median" if checks else ""
    measured = {name: _low(ts) for name, ts in times.items()}
    results.add(AGREE, PARAM, measured, {ON: "ours", OFF: "baseline"}, notes={ON: check})
    for name, us in measured.items():
        print(f"  {name}: {us:,.0f} µs per first call", flush=True)
    print(f"  {check}", flush=True)


if __name__ == "__main__":
    _child(int(sys.argv[1]))
