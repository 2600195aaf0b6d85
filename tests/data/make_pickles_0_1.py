"""Writes ``pickles_0_1.bin``: objects pickled by staticfield 0.1 (flat module layout).

Run once with staticfield 0.1 installed (``python tests/data/make_pickles_0_1.py``);
``tests/test_layout.py`` loads the file with today's code, so a module that moves
inside the package cannot break pickles users already hold. Leaves are NumPy arrays,
so the file does not depend on how a JAX version pickles its own arrays.
"""

import sys

import cloudpickle
import jax
import numpy as np

import staticfield as sf


class Cfg(sf.Struct):
    n: sf.Static[int] = 2
    table: sf.Static[dict] = sf.static(default_factory=lambda: {"a": (1, 2)})
    grid: sf.Static[np.ndarray] = sf.static(default_factory=lambda: np.arange(3))


class Model(sf.Struct):
    w: jax.Array
    cfg: sf.Static[Cfg] = sf.static(default_factory=Cfg)
    mode: sf.Static[str] = "a"

    @sf.jit_method
    def apply(self, x):
        return self.w * x * self.cfg.n

    @sf.jit_method(deps="read", warn_compiles=None)
    def scaled(self, x):
        return self.w * x + (1.0 if self.mode == "a" else 2.0)


def step(m, x):
    return m.apply(x) + 1.0


jitted_step = sf.jit(step)
jitted_static = sf.jit(lambda x, k: x * k, static_argnames="k", max_compiles=3)

m = Model(np.ones(2, np.float32))
m.apply(np.float32(2.0))  # a cached binding and flatten in the instance's state
key = jax.tree_util.tree_structure(m)
payload = (Model, Cfg, m, m.apply, jitted_step, jitted_static, sf.FrozenDict({"k": 1}))
sys.stdout.buffer.write(cloudpickle.dumps(payload))
