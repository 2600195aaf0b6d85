"""sf.warmup() and buckets=: a process that called bucketed functions with a program store
set leaves records from which sf.warmup() in the next process prepares every bucket seen,
so that calls of any size in those buckets compile nothing there."""

from __future__ import annotations

import pytest
from _fresh_process import run

# Bucketed sf.jit and jit_method, with "pow2", a list and "auto", with and without
# mask="valid" and static_argnames. TRACES counts traces of the user's functions.
MODEL = '''
import jax, jax.numpy as jnp, numpy as np
import staticfield as sf

TRACES = []


def _scale(x, k):
    TRACES.append("scale")
    return jnp.tanh(x * k)


def _listed(x):
    TRACES.append("listed")
    return x * 2 + 1


def _auto(x):
    TRACES.append("auto")
    return jnp.sin(x)


def _early(x):
    TRACES.append("early")
    return jnp.cos(x)


scale = sf.jit(_scale, buckets={"x": 0}, static_argnames="k")
listed = sf.jit(_listed, buckets={"x": 0}, bucket_sizes=[4, 16, 64])
auto = sf.jit(_auto, buckets={"x": 0}, bucket_sizes="auto")
early = sf.jit(_early, buckets={"x": 0}, bucket_sizes="auto")  # precompiled, never called


@sf.dataclass
class Model:
    w: jax.Array
    n: int = sf.static(default=2)

    @sf.jit_method(buckets={"x": 0}, mask="valid")
    def pooled(self, x, valid):
        TRACES.append("pooled")
        total = jnp.sum(jnp.where(valid[:, None], x, 0.0))
        return x @ self.w * self.n + total

    @sf.jit_method(buckets={"x": 0}, bucket_sizes="auto", static_argnames="power")
    def rows(self, x, power):
        TRACES.append("rows")
        return (x @ self.w) ** power


FUNCTIONS = [scale, listed, auto, early, Model.pooled, Model.rows]


def precompile(sizes):
    for n in sizes:
        early.precompile(jax.ShapeDtypeStruct((n, 3), jnp.float32))


def inputs(sizes):
    """The model, and each size's rows as a NumPy array and as a device array."""
    xs = [np.arange(n * 3, dtype=np.float32).reshape(n, 3) / 50 for n in sizes]
    return Model(jnp.ones((3, 3)) / 3), [(x, jnp.asarray(x)) for x in xs]


def run(model, xs, early_too=True):
    """The calls (``early`` only where asked: the first process precompiles it)."""
    return [out for x, y in xs for out in (scale(x, k=2), listed(y), auto(x), model.pooled(y), model.rows(x, 2),
                                           *([early(y)] if early_too else []))]


def reference(model, xs):
    """The same calls, unbucketed and eager."""
    with jax.disable_jit():
        return [out for x, _ in xs for out in (
            _scale(x, 2), _listed(x), _auto(x),
            x @ model.w * model.n + x.sum(), (x @ model.w) ** 2, _early(x))]


def compiles():
    return sum(f.compile_count for f in FUNCTIONS)
'''

# "record" runs sizes 3, 5 and 17; "warm" warms up, then runs sizes 6, 3, 7, 20 and 30
# (all in buckets seen: "auto" starts at 6, which is not its first exact size, 3) under
# sf.no_compiles(), and compares with the unbucketed calls.
SCRIPT = '''
import sys, json
import numpy as np
import staticfield as sf
import model

if sys.argv[1] == "record":
    model.precompile([3, 5, 17])
    model.run(*model.inputs([3, 5, 17]), early_too=False)
    print(json.dumps({"compiles": model.compiles()}))
    sys.exit()
summary = sf.warmup(workers=1)
warm_compiles = model.compiles()
model.TRACES.clear()
args = model.inputs([6, 3, 7, 20, 30])
with sf.no_compiles():
    out = model.run(*args)
traces = list(model.TRACES)
same = all(np.allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-5)
           for a, b in zip(out, model.reference(*args)))
print(json.dumps({"same": same, "shapes": [list(o.shape) for o in out], "traces": traces,
                  "warm_compiles": warm_compiles, "run_compiles": model.compiles() - warm_compiles,
                  "loaded": summary.loaded, "compiled": summary.compiled, "skipped": summary.skipped,
                  "problems": summary.problems}))
'''


@pytest.mark.parametrize("trust", ["trace", "source"])
def test_warmup_prepares_every_bucket_seen(tmp_path, trust):
    """Buckets per function seen by the first process: scale 4, 8, 32; listed 4, 16, 64;
    auto 3 (exact), 8, 32; pooled 4, 8, 32; rows 3 (exact), 8, 32; early (precompiled,
    not called) 3 (exact), 8, 32: 18 programs. The second process loads all 18 and its
    calls, at other sizes in those buckets, trace and compile nothing, with the unbucketed
    results."""
    first = run(tmp_path, MODEL, SCRIPT, "record", trust=trust)
    assert first["compiles"] == 18
    second = run(tmp_path, MODEL, SCRIPT, "warm", trust=trust)
    assert second["skipped"] == 0, second["problems"]
    assert second["loaded"] == 18 and second["compiled"] == 0 and second["warm_compiles"] == 0
    assert second["run_compiles"] == 0 and second["traces"] == []
    assert second["same"]
    assert [s[0] for s in second["shapes"][::6]] == [6, 3, 7, 20, 30]  # rows sliced back
