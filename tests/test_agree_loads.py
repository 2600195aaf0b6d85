"""Processes agree on loaded programs and on what a ``deps="read"`` trace read: in a
two-process job (two CPU devices each, on 127.0.0.1), a program loaded from the store with
``trust="source"`` (no trace) publishes the same digest as one compiled by the other process,
and a ``deps="read"`` method's digest holds only the statics its trace read."""

from __future__ import annotations

import os
import sys

import pytest

from _launch import run

USER = '''
import staticfield as sf

TRACES = []


@sf.dataclass
class Scaler:
    n: int = sf.static(default=2)

    @sf.jit_method
    def total(self, batch):
        TRACES.append("total")
        return (batch * self.n).sum()


@sf.dataclass
class Reader:
    n: int = sf.static(default=2)
    tag: str = sf.static(default="a")  # never read by total

    @sf.jit_method(deps="read")
    def total(self, batch):
        return (batch * self.n).sum()
'''

SCRIPT = '''
import os
import jax, numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P
import staticfield as sf
import agree_user as user

me = jax.process_index()
if os.environ.get(f"STORE_{me}"):
    sf.set_program_store(os.environ[f"STORE_{me}"], trust="source")
mesh = jax.make_mesh((4,), ("x",))
batch = jax.make_array_from_process_local_data(NamedSharding(mesh, P("x")), np.ones((4, 3), np.float32), (8, 3))
n = int(os.environ.get(f"N_{me}", "2"))
out = {}
try:
    if os.environ["WHICH"] == "scaler":
        out["total"] = float(user.Scaler(n=n).total(batch))
        out["traces"], out["loads"] = len(user.TRACES), user.Scaler.total.load_count
    else:
        out["total"] = float(user.Reader(n=n, tag=os.environ.get(f"TAG_{me}", "a")).total(batch))
except sf.HostMismatchError as exc:
    out["error"] = str(exc)
done(out)
'''

linux = pytest.mark.skipif(sys.platform != "linux", reason="jax.distributed on CPU is tested on Linux")


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    """The environment of a job importing the user's module, and a store in which process 1
    has the program of ``Scaler(n=2).total`` (made by a first run where both compiled it)."""
    root = tmp_path_factory.mktemp("agree")
    (root / "agree_user.py").write_text(USER)
    env = {"PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]),
           "STATICFIELD_HOST_CHECK_TIMEOUT": "4", "WHICH": "scaler",
           "STATICFIELD_CHECK_STORE": "0"}  # the counts below are of loads without a trace
    first = run(SCRIPT, dict(env, STORE_1=str(root / "store")), timeout=40)
    assert [(r["total"], r["traces"], r["loads"]) for r in first] == [(48.0, 1, 0), (48.0, 1, 0)]
    return dict(env, STORE_1=str(root / "store"))


@linux
def test_a_program_loaded_without_a_trace_agrees_with_one_compiled_elsewhere(job):
    """Process 1 loads the program by source (no trace), process 0 compiles it: the digests
    (one from a trace's avals, one from the call's arrays) are equal, and the job runs."""
    results = run(SCRIPT, job, timeout=40)
    assert results == [{"total": 48.0, "traces": 1, "loads": 0}, {"total": 48.0, "traces": 0, "loads": 1}]


@linux
def test_a_loaded_program_for_another_static_raises_the_named_error(job):
    """Process 1 loads the n=2 program, process 0 compiles n=3: each raises
    HostMismatchError naming `self.n` on both processes, instead of hanging."""
    results = run(SCRIPT, dict(job, N_0="3"), timeout=40)
    for me, result in enumerate(results):
        other = 1 - me
        mine, theirs = (3, 2) if me == 0 else (2, 3)
        assert f"self.n: {mine} on process {me}, {theirs} on process {other}" in result.get("error", ""), results


@linux
def test_the_store_checking_mode_keeps_the_named_error(job):
    """STATICFIELD_CHECK_STORE=1 traces a source load anyway, and that trace agrees between
    the processes: the n=2 / n=3 mismatch still raises HostMismatchError naming `self.n`
    (the load used to take it for an unreadable entry, and the job aborted)."""
    results = run(SCRIPT, dict(job, N_0="3", STATICFIELD_CHECK_STORE="1"), timeout=40)
    for me, result in enumerate(results):
        other = 1 - me
        mine, theirs = (3, 2) if me == 0 else (2, 3)
        assert f"self.n: {mine} on process {me}, {theirs} on process {other}" in result.get("error", ""), results


@linux
def test_deps_read_agrees_when_only_an_unread_static_differs(job):
    """deps="read": the processes differ in `tag`, which the method never reads; the
    digest holds only the statics the trace read, so they agree and run."""
    results = run(SCRIPT, dict(job, WHICH="reader", TAG_1="b"), timeout=40)
    assert results == [{"total": 48.0}, {"total": 48.0}]


@linux
def test_deps_read_raises_naming_the_static_it_read(job):
    """deps="read": a difference in `n`, which the method reads, raises, naming `self.n`
    (and not the unread `tag`)."""
    results = run(SCRIPT, dict(job, WHICH="reader", N_1="3", TAG_1="b"), timeout=40)
    for me, result in enumerate(results):
        other = 1 - me
        mine, theirs = (2, 3) if me == 0 else (3, 2)
        text = result.get("error", "")
        assert f"self.n: {mine} on process {me}, {theirs} on process {other}" in text, results
        assert "self.tag" not in text


@linux
def test_deps_read_loaded_without_a_trace_agrees_on_the_statics_it_read(job, tmp_path):
    """deps="read", trust="source": process 1 loads the program (no trace) with the reads
    its trace stored beside it; process 0 traces it for another, unread `tag`. Both digests
    hold only `n`, so they agree and run."""
    env = dict(job, WHICH="reader", STORE_1=str(tmp_path / "store"))
    first = run(SCRIPT, env, timeout=40)  # process 1 compiles and stores Reader(n=2).total
    assert first == [{"total": 48.0}, {"total": 48.0}]
    results = run(SCRIPT, dict(env, TAG_0="b"), timeout=40)
    assert results == [{"total": 48.0}, {"total": 48.0}]


LINES = '''
import os
import jax, numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P
import staticfield as sf
import agree_user as user

me = jax.process_index()
mesh = jax.make_mesh((4,), ("x",))
batch = jax.make_array_from_process_local_data(NamedSharding(mesh, P("x")), np.ones((4, 3), np.float32), (8, 3))
scaler = user.Scaler(n=2)
if os.environ["HOW"] == "lines":
    if me == 0:
        total = scaler.total(batch)
    else:
        total = (
            scaler.total(batch))
else:  # one process prepares the program ahead of time, the other compiles it on the call
    if me == 0:
        scaler.total.precompile(batch)
    total = scaler.total(batch)
done({"total": float(total), "traces": len(user.TRACES)})
'''


@linux
@pytest.mark.parametrize("how", ["lines", "ahead"])
def test_processes_that_reach_a_method_by_other_paths_run_one_program(job, how):
    """Two processes call one method from different source lines, or one prepares it ahead
    (precompile) and the other compiles on the call: each lowers the same program (no
    source locations in a job of several processes), so the first collective meets instead
    of waiting forever (jax 0.12.1's CPU collectives meet only in the very same program)."""
    env = {k: v for k, v in job.items() if not k.startswith("STORE")}
    assert run(LINES, dict(env, HOW=how), timeout=40) == [{"total": 48.0, "traces": 1}] * 2


WARM = '''
import os
import jax, numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P
import staticfield as sf
import agree_user as user

me = jax.process_index()
sf.set_program_store(os.environ["STORE"])
mesh = jax.make_mesh((4,), ("x",))
batch = jax.make_array_from_process_local_data(NamedSharding(mesh, P("x")), np.ones((4, 3), np.float32), (8, 3))
out = {}
try:
    if os.environ["STEP"] == "record":
        out["totals"] = [float(user.Scaler(n=n).total(batch)) for n in range(1, 7)]
    else:
        summary = sf.warmup(workers=2, progress=False)
        out["prepared"] = summary.loaded + summary.compiled
        out["problems"] = summary.problems
        with sf.no_compiles():
            out["totals"] = [float(user.Scaler(n=n).total(batch)) for n in range(1, 7)]
except (sf.HostMismatchError, sf.RecompileError) as exc:
    out["error"] = str(exc)[:300]
done(out)
'''


@linux
def test_warmup_of_programs_over_both_processes_prepares_them_in_one_order(job, tmp_path):
    """Two processes warm up six programs whose arrays span both, on two worker threads
    each: every program agrees (each process prepares them in the same order, so no
    worker waits on a program the other process has not reached) and the calls after it
    compile nothing."""
    env = dict(job, STORE=str(tmp_path / "store"), STEP="record", STATICFIELD_HOST_CHECK_TIMEOUT="6")
    totals = [24.0 * n for n in range(1, 7)]
    assert run(WARM, env, timeout=60) == [{"totals": totals}] * 2
    for name in os.listdir(tmp_path / "store"):  # keep the records, drop the programs
        if name.endswith((".sfprog", ".sfsrc")):
            os.unlink(tmp_path / "store" / name)
    results = run(WARM, dict(env, STEP="warm"), timeout=60)
    assert results == [{"prepared": 6, "problems": [], "totals": totals}] * 2
