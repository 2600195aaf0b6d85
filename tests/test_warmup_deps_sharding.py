"""sf.warmup() prepares deps="read" methods (with and without static arguments) and
arguments sharded over a mesh of this process's devices: after it, the next process's
calls trace and compile nothing; a key that shares a program by the statics its method
read shares it in the next process too."""

from __future__ import annotations

import json

import pytest
from _fresh_process import run

FOUR = {"XLA_FLAGS": "--xla_force_host_platform_device_count=4"}

MODEL = '''
import jax, jax.numpy as jnp, numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
import staticfield as sf

TRACES = []


@sf.dataclass
class Net:
    w: jax.Array
    act: str = sf.static(default="tanh")
    tag: int = sf.static(default=0)  # never read: every tag shares a program

    @sf.jit_method(deps="read")
    def apply(self, x):
        TRACES.append("apply")
        y = x @ self.w
        return jnp.tanh(y) if self.act == "tanh" else jax.nn.relu(y)

    @sf.jit_method(deps="read", static_argnames="k")
    def scaled(self, x, k):
        TRACES.append("scaled")
        y = x @ self.w * k
        return jnp.tanh(y) if self.act == "tanh" else y


def _total(x, w):
    TRACES.append("total")
    return (x @ w).sum(axis=1)


total = sf.jit(_total)
FUNCTIONS = [Net.apply, Net.scaled, total]


def inputs(tags):
    """Nets of two activations and these tags; x sharded by rows, w by columns, on a
    2x2 mesh of the four CPU devices in a device order of its own."""
    mesh = Mesh(np.array(jax.devices())[[2, 0, 3, 1]].reshape(2, 2), ("data", "model"))
    x = jax.device_put(jnp.arange(32.0).reshape(8, 4) / 32, NamedSharding(mesh, P("data", None)))
    w = jax.device_put(jnp.ones((4, 4)) / 4, NamedSharding(mesh, P(None, "model")))
    return [Net(jnp.ones((4, 4)) / 4, act=a, tag=t) for a in ("tanh", "relu") for t in tags], x, w


def run(nets, x, w):
    return [n.apply(x) for n in nets] + [n.scaled(x, k=2) for n in nets] + [total(x, w)]


def compiles():
    return sum(f.compile_count for f in FUNCTIONS)
'''

SCRIPT = '''
import sys, json
import numpy as np
import staticfield as sf
import model

if sys.argv[1] == "record":
    out = model.run(*model.inputs([0, 1]))
    print(json.dumps({"compiles": model.compiles(), "out": [np.asarray(o).tolist() for o in out],
                      "shardings": [str(o.sharding) for o in out]}))
    sys.exit()
summary = sf.warmup(workers=1)
warm_compiles = model.compiles()
model.TRACES.clear()
args = model.inputs([0, 1, 2])  # tag 2: a key the first process never saw
with sf.no_compiles():
    out = model.run(*args)
print(json.dumps({"out": [np.asarray(o).tolist() for o in out], "traces": model.TRACES,
                  "shardings": [str(o.sharding) for o in out],
                  "warm_compiles": warm_compiles, "run_compiles": model.compiles() - warm_compiles,
                  "loaded": summary.loaded, "compiled": summary.compiled, "skipped": summary.skipped,
                  "problems": summary.problems}))
'''


@pytest.mark.parametrize("trust", ["trace", "source"])
def test_warmup_prepares_deps_read_methods_and_sharded_arguments(tmp_path, trust):
    """Programs: apply and scaled for each activation (tags share them), total: 5. The next
    process loads all 5; its calls, with a tag never seen, trace and compile nothing."""
    first = run(tmp_path, MODEL, SCRIPT, "record", env=FOUR, trust=trust)
    assert first["compiles"] == 5
    second = run(tmp_path, MODEL, SCRIPT, "warm", env=FOUR, trust=trust)
    assert second["skipped"] == 0, second["problems"]
    assert second["loaded"] == 5 and second["compiled"] == 0 and second["warm_compiles"] == 0
    assert second["run_compiles"] == 0 and second["traces"] == []
    n = 2  # tags per activation in the first process
    apply, scaled = first["out"][:2 * n], first["out"][2 * n:4 * n]
    expected = ([apply[0]] * 3 + [apply[n]] * 3 + [scaled[0]] * 3 + [scaled[n]] * 3 + [first["out"][-1]])
    assert second["out"] == expected
    assert second["shardings"][-1] == first["shardings"][-1] and "NamedSharding" in first["shardings"][-1]


def test_a_record_over_devices_this_process_lacks_is_skipped(tmp_path):
    """A record whose mesh names a device this process does not have (here: edited to
    device 7 of 4) is skipped, with the devices in the summary's problems; the other
    records are prepared."""
    run(tmp_path, MODEL, SCRIPT, "record", env=FOUR)
    edited = 0
    for path in (tmp_path / "store").glob("*.sfrec"):
        magic, header, rest = path.read_bytes().split(b"\n", 2)
        record = json.loads(header)
        for leaf in record["record"]["leaves"]:
            if leaf[0] == "array" and len(leaf) > 5:  # a NamedSharding: its mesh's device ids
                leaf[5]["devices"] = [7] + leaf[5]["devices"][1:]
                edited += 1
        path.write_bytes(b"\n".join([magic, json.dumps(record).encode(), rest]))
    assert edited == 6  # x in each of the 4 programs of Net; x and w in total's
    out = run(tmp_path, MODEL, '''
        import json, staticfield as sf, model
        s = sf.warmup(workers=1)
        print(json.dumps({"skipped": s.skipped, "loaded": s.loaded, "problems": s.problems}))
    ''', env=FOUR)
    assert out["skipped"] == 5 and out["loaded"] == 0
    assert all("device(s) 7, which this process does not have (it has 4)" in p for p in out["problems"]), \
        out["problems"]
