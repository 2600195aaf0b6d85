"""Whole-instance operations on arrays spread over processes: 2 processes x 4 CPU devices.

``==``, ``sf.from_state_dict`` and ``sf.unstack`` of instances whose leaves are global
arrays (shards in both processes) run in tests/_multiprocess_checks.py, launched here as two
processes on 127.0.0.1 (gloo collectives) by tests/_launch.py, as the multi-host example of
the sharding tests is.
"""

from __future__ import annotations

import json
import pathlib
import sys

import pytest

from _launch import launch

HERE = pathlib.Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def results() -> list[dict[str, dict]]:
    """Each process's check results, by check name."""
    finished = launch([sys.executable, str(HERE / "_multiprocess_checks.py")], processes=2, devices=4,
                      timeout=240)
    return [{r["check"]: r for r in map(json.loads, (line for line in f.out.splitlines() if line.startswith("{")))}
            for f in finished]


@pytest.mark.parametrize("check", ["eq", "eq_refused", "state_dict", "unstack", "reversed_mesh", "local_state"])
def test_on_arrays_spread_over_two_processes(results, check):
    """== (bitwise, as in one process), from_state_dict (jax and host state) and unstack work
    on instances of global arrays, in both processes, on a mesh in jax.devices() order and
    in another order; == against an array on other devices is a ValueError naming the class
    and field; a process-local instance restores in each process."""
    for i, by_name in enumerate(results):
        assert by_name[check]["ok"], f"process {i}: {by_name[check]['detail']}"
