"""Processes agree: in a two-process job (two CPU devices each, on 127.0.0.1), a program
that one process makes for another static value than the other raises sf.HostMismatchError
naming the function, the processes and the difference, instead of hanging."""

from __future__ import annotations

import sys
import time

import jax.numpy as jnp
import pytest

import staticfield as sf
from _two_processes import run

SCRIPT = '''
import json, os
import jax, jax.numpy as jnp, numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P
import staticfield as sf


@sf.dataclass
class Scaler:
    n: int = sf.static(default=2)

    @sf.jit_method
    def total(self, batch):
        return (batch * self.n).sum()


mesh = jax.make_mesh((4,), ("x",))
local = np.ones((4, 3), np.float32)
batch = jax.make_array_from_process_local_data(NamedSharding(mesh, P("x")), local, (8, 3))
n = int(os.environ.get("N_ON_1", "2")) if jax.process_index() == 1 else 2
out = {}
try:
    out["total"] = float(Scaler(n=n).total(batch))
    out["local"] = float(Scaler(n=n).total(jnp.ones(3)))  # host-local: not checked
    if jax.process_index() == 1:  # a host-local program of one process only: no wait, no error
        out["only_here"] = float(Scaler(n=7).total(jnp.ones(3)))
except sf.HostMismatchError as exc:
    out["error"] = str(exc)
print(json.dumps(out), flush=True)
if jax.process_index() == 0:  # the coordinator: let the other process print before it goes
    import time
    time.sleep(3)
os._exit(0)  # a process whose partner failed must not wait in jax.distributed's shutdown
'''

linux = pytest.mark.skipif(sys.platform != "linux", reason="jax.distributed on CPU is tested on Linux")


@linux
def test_processes_that_agree_run():
    """The same statics on both processes: the program runs, with no error."""
    results = run(SCRIPT, {"STATICFIELD_HOST_CHECK_TIMEOUT": "60"}, timeout=40)
    assert results == [{"total": 48.0, "local": 6.0}, {"total": 48.0, "local": 6.0, "only_here": 21.0}]


@linux
def test_a_different_static_on_one_process_raises_the_named_error_quickly():
    """Process 1 uses n=3, process 0 n=2: each raises HostMismatchError naming the function,
    the other process and `self.n` on both, within the timeout (not JAX's hang)."""
    start = time.monotonic()
    results = run(SCRIPT, {"N_ON_1": "3", "STATICFIELD_HOST_CHECK_TIMEOUT": "3"}, timeout=45)
    assert time.monotonic() - start < 45
    errors = [r.get("error", "") for r in results]
    assert any(errors), results
    for me, text in enumerate(errors):
        if text:
            other = 1 - me
            assert "Scaler.total" in text and f"process(es) {other} did not make" in text
            mine, theirs = (2, 3) if me == 0 else (3, 2)
            assert f"self.n: {mine} on process {me}, {theirs} on process {other}" in text
            assert "STATICFIELD_HOST_CHECK_TIMEOUT" in text


@linux
def test_the_check_can_be_turned_off():
    """STATICFIELD_HOST_CHECK=0: no check (the same statics run as before)."""
    results = run(SCRIPT, {"STATICFIELD_HOST_CHECK": "0"})
    assert [r["total"] for r in results] == [48.0, 48.0]


def test_one_process_checks_nothing(monkeypatch):
    """In one process the check is off whatever the variables say, and calls run."""
    monkeypatch.setenv("STATICFIELD_HOST_CHECK_TIMEOUT", "0.01")
    f = sf.jit(lambda x: x + 1)
    assert float(f(jnp.ones(()))) == 2.0
