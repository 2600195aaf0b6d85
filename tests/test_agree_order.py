"""Processes agree by program order, on 4 processes (2 CPU devices each, on 127.0.0.1):
the k-th cross-process program each process first runs of a function must be the same,
so a difference raises sf.HostMismatchError on every process as soon as all have
published the k-th digest, in seconds, with the default timeout of 60 s; the timeout is
only for a process that has not published at all.

One job runs the four cases one after the other, each on a function of its own, each
started together by a barrier: equal statics, a static that differs on process 3, a
process made slow before its compile, and a mismatch after warm-ups in different orders.
"""

from __future__ import annotations

import re
import sys

import pytest
from _launch import run

PROCESSES = 4
SLOW = 10.0  # seconds process 2 sleeps in its trace: longer than the others' whole call
QUICK = 10.0  # a mismatch raises within this many seconds of the call (the timeout is 60)

SCRIPT = '''
import os, time
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P
import staticfield as sf

me = jax.process_index()
TRACES = []


def body(name, self, batch):
    TRACES.append(name)
    if name == "slow" and me == 2:  # slow before its compile, in its trace
        time.sleep(float(os.environ["SLOW"]))
    return (batch * self.n).sum()


@sf.dataclass
class Scaler:
    """One method per case: each is a function of its own, with its own order."""

    n: int = sf.static(default=2)

    @sf.jit_method
    def same(self, batch):
        return body("same", self, batch)

    @sf.jit_method
    def differ(self, batch):
        return body("differ", self, batch)

    @sf.jit_method
    def slow(self, batch):
        return body("slow", self, batch)

    @sf.jit_method
    def warm(self, batch):
        return body("warm", self, batch)


mesh = jax.make_mesh((jax.device_count(),), ("x",))
batch = jax.make_array_from_process_local_data(NamedSharding(mesh, P("x")), np.ones((2, 3), np.float32), (8, 3))
out = {}


def timed(case, call):
    """Start ``call`` with every process; its result or error, and the seconds it took."""
    barrier(case)
    start = time.monotonic()
    try:
        found = {"result": call()}
    except sf.HostMismatchError as exc:
        found = {"error": str(exc)}
    found["seconds"] = time.monotonic() - start
    out[case] = found


timed("same", lambda: float(Scaler(n=2).same(batch)))
out["same"]["compiles"] = (Scaler.same.compile_count, TRACES.count("same"))
timed("differ", lambda: float(Scaler(n=3 if me == 3 else 2).differ(batch)))
timed("after", lambda: float(Scaler(n=2).differ(batch)))  # the job goes on, in step
timed("slow", lambda: float(Scaler(n=2).slow(batch)))

# Warm-ups in different orders: process 1 prepares other programs (7 for 4) in reverse.
sf.set_program_store(os.path.join(os.environ["STORE"], f"process{me}"))
prepared = [7, 6, 5, 3, 2, 1] if me == 1 else [1, 2, 3, 4, 5, 6]
try:
    for n in prepared:
        Scaler.warm.precompile(Scaler(n=n), batch)
    Scaler.warm.clear_cache()  # as if this were the next process
    summary = sf.warmup(workers=1, progress=False)
    out["warmup"] = {"prepared": summary.loaded + summary.compiled, "problems": summary.problems}
except sf.HostMismatchError as exc:  # a preparation must not wait for the other processes
    out["warmup"] = {"error": str(exc)}
compiles, totals = Scaler.warm.compile_count, []


def warm_calls():
    for n in [1, 2, 3, 7 if me == 1 else 4, 5, 6]:
        totals.append(float(Scaler(n=n).warm(batch)))


timed("warm", warm_calls)
out["warm"].update(totals=totals, compiles=Scaler.warm.compile_count - compiles)
done(out)
'''

linux = pytest.mark.skipif(sys.platform != "linux", reason="jax.distributed on CPU is tested on Linux")


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    """Each process's results, process 0 first (the default timeout of 60 s everywhere)."""
    store = tmp_path_factory.mktemp("agree_order")
    env = {"STORE": str(store), "SLOW": str(SLOW), "STATICFIELD_HOST_CHECK_TIMEOUT": ""}
    return run(SCRIPT, env, timeout=120, processes=PROCESSES)


@linux
def test_equal_statics_run_on_four_processes(job):
    """The same statics on all 4 processes: the program runs, once compiled, no error."""
    for result in job:
        assert result["same"]["result"] == 48.0 and result["same"]["compiles"] == [1, 1], result["same"]


@linux
def test_a_static_differing_on_one_process_raises_on_all_four_in_seconds(job):
    """Process 3 uses n=3, the others n=2: all 4 raise HostMismatchError naming the
    function, the processes and `self.n`, within 10 s of the call (not after the 60 s
    timeout)."""
    for me, result in enumerate(job):
        found = result["differ"]
        assert "error" in found, (me, found)
        assert found["seconds"] < QUICK, (me, found["seconds"])
        text = found["error"]
        assert text.startswith(f"Scaler.differ: process {me} of 4 is about to run another program"), text
        if me == 3:  # each other process that had published within a moment of the first
            assert re.search(r"self\.n: 3 on process 3, 2 on process(es)? [012](, [012])*\.", text), text
        else:
            assert f"self.n: 2 on process {me}, 3 on process 3" in text, text
        assert "STATICFIELD_HOST_CHECK_TIMEOUT" not in text


@linux
def test_processes_that_caught_a_mismatch_go_on_in_step(job):
    """After the mismatch, every process calls Scaler(n=2).differ: the 1st programs, which
    did not agree, keep their rank, so this one is the 2nd everywhere (on processes 0-2
    too, where it is the program that failed), agrees and runs."""
    for me, result in enumerate(job):
        assert result["after"].get("result") == 48.0 and result["after"]["seconds"] < QUICK, (me, result["after"])


@linux
def test_a_process_slow_before_its_compile_does_not_raise(job):
    """Process 2 sleeps 10 s in its trace (longer than the others' whole call, far below
    the 60 s timeout): the others wait for it, and every process gets its result."""
    for me, result in enumerate(job):
        found = result["slow"]
        assert found.get("result") == 48.0, (me, found)
        assert found["seconds"] >= SLOW, (me, found["seconds"])  # it waited for process 2


@linux
def test_a_mismatch_after_warmups_in_different_orders_is_caught(job):
    """Process 1 prepared other programs in another order (sf.warmup from its own store):
    the prepared programs publish when they first run, not when prepared, so the three
    common first calls agree and run without a compile, and the fourth (n=7 on process 1,
    n=4 elsewhere) raises on all 4 within 10 s, naming `self.n`."""
    for me, result in enumerate(job):
        assert result["warmup"] == {"prepared": 6, "problems": []}, (me, result["warmup"])
        found = result["warm"]
        assert found["totals"] == [24.0, 48.0, 72.0] and found["compiles"] == 0, (me, found)
        assert found["seconds"] < QUICK, (me, found["seconds"])
        mine, other = ("7", "4") if me == 1 else ("4", "7")
        assert f"self.n: {mine} on process {me}, {other} on process" in found.get("error", ""), (me, found)
