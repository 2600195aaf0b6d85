"""Run one script as the two processes of a ``jax.distributed`` job on this machine.

Each process has two CPU devices; the coordinator binds 127.0.0.1 on a free port,
with short timeouts. The children are polled, and when one fails or the deadline
passes every child is ended by its PID, so a failure costs seconds, not JAX's
initialization timeout. The script gets ``PROCESS_ID`` and ``COORDINATOR`` in its
environment (``PREAMBLE`` connects it) and prints one JSON line last.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from typing import Any

PREAMBLE = '''
import os
import jax
jax.distributed.initialize(os.environ["COORDINATOR"], num_processes=2,
                           process_id=int(os.environ["PROCESS_ID"]), initialization_timeout=20)
'''


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run(script: str, env: dict[str, str] | None = None, timeout: float = 50.0) -> list[Any]:
    """Both processes' last JSON lines, process 0 first; raises with their stderr on failure."""
    base = dict(os.environ, **(env or {}))
    base["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"
    base["COORDINATOR"] = f"127.0.0.1:{free_port()}"
    base.setdefault("PYTHONDONTWRITEBYTECODE", "1")
    procs = [subprocess.Popen([sys.executable, "-c", PREAMBLE + script], env=dict(base, PROCESS_ID=str(i)),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
             for i in range(2)]
    deadline = time.monotonic() + timeout
    failed = None
    while any(p.poll() is None for p in procs):
        if any(p.returncode not in (None, 0) for p in procs):
            failed = "a process failed"
            break
        if time.monotonic() > deadline:
            failed = f"the job ran past {timeout:.0f} s"
            break
        time.sleep(0.05)
    if failed:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
    outputs = [p.communicate() for p in procs]
    if failed or any(p.returncode != 0 for p in procs):
        details = "\n".join(f"--- process {i} (exit {p.returncode}):\n{err[-3000:]}"
                            for i, (p, (_, err)) in enumerate(zip(procs, outputs)))
        raise AssertionError(f"{failed or 'a process failed'}\n{details}")
    return [json.loads(out.strip().splitlines()[-1]) for out, _ in outputs]
