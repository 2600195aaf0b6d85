"""Processes agree: in a two-process job (two CPU devices each, on 127.0.0.1), a program
that one process makes for another static value than the other raises sf.HostMismatchError
naming the function, the processes and the difference, in seconds, instead of hanging; a
process that makes no program at all is waited for until the timeout."""

from __future__ import annotations

import sys

import jax.numpy as jnp
import pytest

import staticfield as sf
from _launch import run

SCRIPT = '''
import json, os, time
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
barrier("call")
start = time.monotonic()
try:
    if not (os.environ.get("SKIP_ON_1") and jax.process_index() == 1):
        out["total"] = float(Scaler(n=n).total(batch))
        out["local"] = float(Scaler(n=n).total(jnp.ones(3)))  # host-local: not checked
    if jax.process_index() == 1:  # a host-local program of one process only: no wait, no error
        out["only_here"] = float(Scaler(n=7).total(jnp.ones(3)))
except sf.HostMismatchError as exc:
    out["error"] = str(exc)
    out["seconds"] = time.monotonic() - start
done(out)
'''

linux = pytest.mark.skipif(sys.platform != "linux", reason="jax.distributed on CPU is tested on Linux")


@linux
def test_processes_that_agree_run():
    """The same statics on both processes: the program runs, with no error."""
    results = run(SCRIPT, {"STATICFIELD_HOST_CHECK_TIMEOUT": "60"}, timeout=60)
    assert results == [{"total": 48.0, "local": 6.0}, {"total": 48.0, "local": 6.0, "only_here": 21.0}]


@linux
def test_a_different_static_on_one_process_raises_the_named_error_in_seconds():
    """Process 1 uses n=3, process 0 n=2: with the default timeout (60 s), both raise
    HostMismatchError naming the function, the other process and `self.n` on both, within
    10 s of the call: both published their first program of it, and they differ."""
    results = run(SCRIPT, {"N_ON_1": "3", "STATICFIELD_HOST_CHECK_TIMEOUT": ""}, timeout=60)
    for me, result in enumerate(results):
        other = 1 - me
        text = result.get("error", "")
        assert text.startswith(f"Scaler.total: process {me} of 2 is about to run another program"), results
        assert result["seconds"] < 10, results
        mine, theirs = (2, 3) if me == 0 else (3, 2)
        assert f"self.n: {mine} on process {me}, {theirs} on process {other}" in text
        assert "the 1st program of Scaler.total that spans processes" in text


@linux
def test_a_process_that_makes_no_program_is_waited_for_until_the_timeout():
    """Process 1 never calls Scaler.total on the shared batch: process 0 waits for it until
    STATICFIELD_HOST_CHECK_TIMEOUT (3 s here), then raises naming process 1, which has
    made no program of it, and the timeout to raise if a process is only slow."""
    results = run(SCRIPT, {"SKIP_ON_1": "1", "STATICFIELD_HOST_CHECK_TIMEOUT": "3"}, timeout=60)
    text = results[0].get("error", "")
    assert text.startswith("Scaler.total: process 0 of 2 is about to run a program that process(es) 1 "
                           "did not make within 3 s"), results
    assert "process 1 has made no program of it yet. " in text and "STATICFIELD_HOST_CHECK_TIMEOUT" in text
    assert ".." not in text
    assert 3 <= results[0]["seconds"] < 30, results
    assert results[1] == {"only_here": 21.0}


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
