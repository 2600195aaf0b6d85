"""Whole-instance operations on arrays spread over processes: 2 processes x 4 CPU devices.

``==``, ``sf.from_state_dict`` and ``sf.unstack`` of instances whose leaves are global
arrays (shards in both processes) run in tests/_multiprocess_checks.py, launched here as two
processes on localhost (gloo collectives), as the multi-host example of the sharding
tests is.
"""

from __future__ import annotations

import json
import os
import pathlib
import socket
import subprocess
import sys

import pytest

HERE = pathlib.Path(__file__).resolve().parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def results() -> list[dict[str, dict]]:
    """Each process's check results, by check name."""
    port = _free_port()
    base = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    procs = [
        subprocess.Popen(
            [sys.executable, str(HERE / "_multiprocess_checks.py")],
            env={**base, "XLA_FLAGS": "--xla_force_host_platform_device_count=4",
                 "JAX_CPU_COLLECTIVES_IMPLEMENTATION": "gloo", "COORDINATOR_ADDRESS": f"localhost:{port}",
                 "NUM_PROCESSES": "2", "PROCESS_ID": str(i)},
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        for i in range(2)
    ]
    outputs = []
    try:
        for p in procs:
            out, err = p.communicate(timeout=240)
            outputs.append((p.returncode, out, err))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert all(rc == 0 for rc, _, _ in outputs), "\n".join(
        f"process {i} exited with {rc}:\n{err[-3000:]}" for i, (rc, _, err) in enumerate(outputs))
    return [{r["check"]: r for r in map(json.loads, (line for line in out.splitlines() if line.startswith("{")))}
            for _, out, _ in outputs]


@pytest.mark.parametrize("check", ["eq", "eq_refused", "state_dict", "unstack", "reversed_mesh", "local_state"])
def test_on_arrays_spread_over_two_processes(results, check):
    """== (bitwise, as in one process), from_state_dict (jax and host state) and unstack work
    on instances of global arrays, in both processes, on a mesh in jax.devices() order and
    in another order; == against an array on other devices is a ValueError naming the class
    and field; a process-local instance restores in each process."""
    for i, by_name in enumerate(results):
        assert by_name[check]["ok"], f"process {i}: {by_name[check]['detail']}"
