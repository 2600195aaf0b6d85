"""Processes agree on static values by the cross-process form of the one identity: in a
two-process job (two CPU devices each, on 127.0.0.1), a function static (``jax.nn.relu``,
a module-level lambda) or an object with the default ``repr`` is the same on both
processes, a NumPy static differing in one of 2000 elements differs (``repr`` truncates
it), and abstract evaluation (``.lower()``, ``.eval_shape()``, ``.trace()``) publishes
nothing."""

from __future__ import annotations

import json
import os
import sys

import pytest

from _launch import PREAMBLE, launch, run

USER = '''
import jax
import numpy as np
import staticfield as sf

SQUARE = lambda v: v * v  # noqa: E731


@sf.identity_hashed
class Tag:
    pass


TAG = Tag()


@sf.dataclass
class Layer:
    act: object = sf.static(default=jax.nn.relu)
    table: object = sf.static(default=None)
    tag: object = sf.static(default=None)
    names: object = sf.static(default=None)

    @sf.jit_method
    def total(self, batch):
        out = self.act(batch - 1.0)
        if self.table is not None:
            out = out * float(self.table[-1])
        if self.names is not None:
            out = out * len(self.names)
        return out.sum()
'''

SCRIPT = '''
import os, time
import jax, numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P
import staticfield as sf
import identity_user as user

me = jax.process_index()
mesh = jax.make_mesh((4,), ("x",))
batch = jax.make_array_from_process_local_data(NamedSharding(mesh, P("x")), np.full((4, 3), 3.0, np.float32), (8, 3))
which = os.environ["WHICH"]
out = {}
start = time.monotonic()
try:
    if which == "relu":
        layer = user.Layer()
    elif which == "lambda":
        layer = user.Layer(act=user.SQUARE, tag=user.TAG)
    elif which == "names":  # a set of strings: it iterates in each process's hash-seed order
        layer = user.Layer(names=frozenset(["alpha", "beta", "gamma", "delta"]))
        out["order"] = list(layer.names)
    else:  # "table": 2000 elements; process 1's differs in one
        table = np.ones(2000, np.float32)
        if me == 1 and os.environ.get("DIFFER"):
            table[1000] = 2.0
        layer = user.Layer(table=table)
    if os.environ.get("ABSTRACT") and me == 1:
        other = user.Layer(act=user.SQUARE)  # another variant, on one process only
        other.total.lower(batch)
        other.total.eval_shape(batch)
        other.total.trace(batch)
    out["total"] = float(layer.total(batch))
except sf.HostMismatchError as exc:
    out["error"] = str(exc)
out["seconds"] = time.monotonic() - start
done(out)
'''

linux = pytest.mark.skipif(sys.platform != "linux", reason="jax.distributed on CPU is tested on Linux")


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    root = tmp_path_factory.mktemp("identity")
    (root / "identity_user.py").write_text(USER)
    return {"PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]),
            "STATICFIELD_HOST_CHECK_TIMEOUT": "20"}


@linux
@pytest.mark.parametrize("which, total", [("relu", 48.0), ("lambda", 96.0)])
def test_function_statics_and_tags_agree_across_processes(env, which, total):
    """jax.nn.relu, a module-level lambda and an identity-hashed tag are written without
    memory addresses: a correct job runs (different PYTHONHASHSEEDs)."""
    results = run(SCRIPT, dict(env, WHICH=which, PYTHONHASHSEED="random"), timeout=90)
    assert [r.get("total") for r in results] == [total, total], results


@linux
def test_numpy_statics_that_differ_past_repr_s_truncation_raise_in_seconds(env):
    results = run(SCRIPT, dict(env, WHICH="table", DIFFER="1"), timeout=90)
    for me, result in enumerate(results):
        assert "error" in result, results
        assert f"process {me} of 2 is about to run another program" in result["error"]
        assert "self.table" in result["error"]
        assert result["seconds"] < 15, results


@linux
def test_numpy_statics_that_agree_run(env):
    results = run(SCRIPT, dict(env, WHICH="table"), timeout=90)
    assert [r.get("total") for r in results] == [48.0, 48.0], results


@linux
def test_abstract_evaluation_on_one_process_publishes_nothing(env):
    results = run(SCRIPT, dict(env, WHICH="relu", ABSTRACT="1"), timeout=90)
    assert [r.get("total") for r in results] == [48.0, 48.0], results


@linux
def test_a_set_static_agrees_across_processes_with_other_hash_seeds(env):
    """A frozenset of strings iterates in another order in each process (its own
    PYTHONHASHSEED), yet it is the same value: the processes agree and the job runs
    (DESIGN: the same digest "whatever PYTHONHASHSEED")."""
    command = ["sh", "-c", 'PYTHONHASHSEED=$((PROCESS_ID + 11)) exec "$1" -c "$0"', PREAMBLE + SCRIPT, sys.executable]
    finished = launch(command, 2, 2, dict(env, WHICH="names"), timeout=90)
    results = [json.loads(f.out.strip().splitlines()[-1]) for f in finished]
    assert results[0]["order"] != results[1]["order"]  # the seeds did give other orders
    assert [r.get("total") for r in results] == [192.0, 192.0], results
