"""The program store in a two-process job: each process of a ``jax.distributed`` job
(two CPU devices each, on 127.0.0.1) keeps and loads its own programs in one shared
store, and every run gives the results of a run without a store, bit for bit."""

from __future__ import annotations

import os
import sys

import pytest

from _launch import run

USER = '''
import jax
import jax.numpy as jnp
import staticfield as sf

TRACES = []


@sf.jit
def by_process(x):
    TRACES.append("by_process")
    return x + jax.process_index()  # read while tracing: a constant of this process's program


@sf.dataclass
class Model:
    w: jax.Array
    lr: float = sf.static(default=0.1)

    @sf.jit_method
    def step(self, batch):
        TRACES.append("step")

        def loss(w):
            return jnp.mean((batch @ w - 1.0) ** 2)

        value, grad = jax.value_and_grad(loss)(self.w)
        return sf.replace(self, w=self.w - self.lr * grad), value
'''

SCRIPT = '''
import json
import jax, jax.numpy as jnp, numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P
import mp_user

mesh = jax.make_mesh((4,), ("x",))
out = {"by_process": np.asarray(mp_user.by_process(jnp.arange(4, dtype=jnp.float32))).tolist()}
local = np.arange(12, dtype=np.float32).reshape(4, 3) / 10 + jax.process_index()
batch = jax.make_array_from_process_local_data(NamedSharding(mesh, P("x")), local, (8, 3))
model = mp_user.Model(jax.device_put(jnp.full((3,), 0.5, jnp.float32), NamedSharding(mesh, P())))
for _ in range(3):
    model, loss = model.step(batch)
out["loss"] = np.asarray(loss).tolist()
out["w"] = np.asarray(model.w).tolist()
fs = (mp_user.by_process, mp_user.Model.step)
out["compiles"] = sum(f.compile_count for f in fs)
out["loads"] = sum(f.load_count for f in fs)
out["traces"] = len(mp_user.TRACES)
done(out)
'''


def _results(runs):
    return [{k: v for k, v in r.items() if k not in ("compiles", "loads", "traces")} for r in runs]


@pytest.mark.skipif(sys.platform != "linux", reason="jax.distributed on CPU is tested on Linux")
def test_two_processes_share_a_store_and_each_gets_its_own_programs(tmp_path):
    (tmp_path / "mp_user.py").write_text(USER)
    env = {"PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]),
           "STATICFIELD_CHECK_STORE": "1"}
    plain = run(SCRIPT, env)
    assert [r["by_process"] for r in plain] == [[0, 1, 2, 3], [1, 2, 3, 4]]
    store = dict(env, STATICFIELD_PROGRAM_STORE=str(tmp_path / "store"))
    first = run(SCRIPT, store)
    assert _results(first) == _results(plain)
    assert [(r["compiles"], r["loads"]) for r in first] == [(2, 0), (2, 0)]
    # Every program the first run made is loaded (on newer JAX the step's output sharding
    # makes a third signature, compiled from JAX's cached trace: a compile, not a trace).
    second = run(SCRIPT, store)
    assert _results(second) == _results(plain)
    assert [r["compiles"] for r in second] == [0, 0] and all(r["loads"] >= 2 for r in second)
    source = run(SCRIPT, dict(store, STATICFIELD_PROGRAM_STORE_TRUST="source"))
    assert _results(source) == _results(plain)
    assert [(r["compiles"], r["loads"]) for r in source] == [(r["compiles"], r["loads"]) for r in second]
    unchecked = run(SCRIPT, dict(store, STATICFIELD_PROGRAM_STORE_TRUST="source", STATICFIELD_CHECK_STORE="0"))
    assert _results(unchecked) == _results(plain)
    assert [r["traces"] for r in unchecked] == [0, 0]  # every signature of the first run, none traced
