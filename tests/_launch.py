"""Run one script as the N processes of a ``jax.distributed`` job on this machine.

The one launcher of the multi-process tests. Each process gets ``devices`` CPU devices
(``XLA_FLAGS``), gloo collectives, and the coordinator on 127.0.0.1 at a free port, in
``COORDINATOR_ADDRESS``, ``NUM_PROCESSES`` and ``PROCESS_ID`` (the names the docs'
scripts read). Every child starts a process group of its own; the children are polled,
and when one fails or the deadline passes every group is ended, so a failing job costs
seconds, not JAX's initialization timeout, and leaves nothing behind. Output goes to
files, never pipes, so a chatty child cannot block on a full pipe.

``launch`` runs a command and gives back each process's exit status and output;
``run`` runs Python source after ``PREAMBLE`` (which connects the process, with a short
initialization timeout) and gives back each process's last line of output, as JSON.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from typing import Any

PREAMBLE = '''
import json as _json
import os
import time as _time

import jax

jax.distributed.initialize(os.environ["COORDINATOR_ADDRESS"], num_processes=int(os.environ["NUM_PROCESSES"]),
                           process_id=int(os.environ["PROCESS_ID"]), initialization_timeout=30)


def barrier(name, seconds=60):
    """Wait until every process of the job reaches ``name`` (no program is compiled)."""
    from jax._src import distributed
    distributed.global_state.client.wait_at_barrier(name, int(seconds * 1000))


def done(result):
    """Print ``result`` as this process's last line, wait for the others, and leave without
    jax.distributed's shutdown (a process whose partner raised must not wait in it); the
    coordinator, process 0, leaves last."""
    print(_json.dumps(result), flush=True)
    try:
        barrier("tests/_launch/done")
    finally:
        if jax.process_index() == 0:
            _time.sleep(0.5)
        os._exit(0)
'''


@dataclasses.dataclass
class Finished:
    """One process of a job, ended: its exit status, and what it printed."""

    returncode: int
    out: str
    err: str


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def launch(command: list[str], processes: int = 2, devices: int = 2, env: dict[str, str] | None = None,
           timeout: float = 120.0, cwd: str | os.PathLike | None = None) -> list[Finished]:
    """Run ``command`` as the ``processes`` processes of one job, ``devices`` CPU devices
    each; each process's exit status and output, process 0 first. Raises
    ``AssertionError`` with every process's output tail when one fails or the job runs
    past ``timeout`` seconds (every process is ended first)."""
    base = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "JAX_PLATFORM_NAME")}
    base.update(JAX_PLATFORMS="cpu", JAX_CPU_COLLECTIVES_IMPLEMENTATION="gloo", PYTHONDONTWRITEBYTECODE="1",
                XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}",
                COORDINATOR_ADDRESS=f"127.0.0.1:{free_port()}", NUM_PROCESSES=str(processes))
    base.update(env or {})
    with tempfile.TemporaryDirectory(prefix="sf-launch-") as logs:
        files = [(open(os.path.join(logs, f"{i}.out"), "w+"), open(os.path.join(logs, f"{i}.err"), "w+"))
                 for i in range(processes)]
        procs: list[subprocess.Popen] = []
        failed = ""
        try:
            for i, (out, err) in enumerate(files):
                procs.append(subprocess.Popen(command, env=dict(base, PROCESS_ID=str(i)), stdout=out, stderr=err,
                                              cwd=cwd, start_new_session=True))
            deadline = time.monotonic() + timeout
            while any(p.poll() is None for p in procs):
                if any(p.returncode not in (None, 0) for p in procs):
                    failed = "a process failed"
                    break
                if time.monotonic() > deadline:
                    failed = f"the job ran past {timeout:.0f} s"
                    break
                time.sleep(0.05)
        finally:
            _end(procs)
        finished = []
        for p, (out, err) in zip(procs, files):
            out.seek(0)
            err.seek(0)
            finished.append(Finished(p.returncode, out.read(), err.read()))
            out.close()
            err.close()
    if failed or any(f.returncode != 0 for f in finished):
        details = "\n".join(f"--- process {i} (exit {f.returncode}):\n{f.out[-1000:]}\n{f.err[-3000:]}"
                            for i, f in enumerate(finished))
        raise AssertionError(f"{failed or 'a process failed'}\n{details}")
    return finished


def _end(procs: list[subprocess.Popen]) -> None:
    """End every child still running, with its process group (what it started too)."""
    for p in procs:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    for p in procs:
        p.wait()


def run(script: str, env: dict[str, str] | None = None, timeout: float = 60.0, processes: int = 2,
        devices: int = 2) -> list[Any]:
    """Every process's last line of output as JSON, process 0 first, for Python source
    run after ``PREAMBLE`` (it may end with ``done(result)``)."""
    finished = launch([sys.executable, "-c", PREAMBLE + script], processes, devices, env, timeout)
    return [json.loads(f.out.strip().splitlines()[-1]) for f in finished]
