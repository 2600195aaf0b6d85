"""pickle and cloudpickle round-trip staticfield instances, in this process and in a fresh one."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import staticfield as sf

cloudpickle = pytest.importorskip("cloudpickle")


@sf.dataclass
class Layer:
    w: jax.Array
    b: jax.Array
    act: sf.Static[str] = "tanh"
    sizes: tuple = sf.static(default=(2, 3))


@sf.dataclass
class Net:
    layers: tuple
    table: dict = sf.static(default_factory=dict)
    mask: np.ndarray = sf.static(default_factory=lambda: np.array([1, 0, 1]))


def _net() -> Net:
    layer = Layer(jnp.ones((2, 3)), jnp.zeros(3, jnp.bfloat16), sizes=[2, 3])
    return Net((layer, sf.replace(layer, act="relu")), table={"depth": [1, 2]})


def _run_fresh(code: str, data: bytes) -> str:
    """Run ``code`` in a fresh interpreter with ``data`` on stdin; return its stdout."""
    path = os.pathsep.join(p for p in sys.path if p)  # so the test module imports by name
    env = dict(os.environ, PYTHONPATH=path, JAX_PLATFORMS="cpu")
    result = subprocess.run(
        [sys.executable, "-c", code], input=data, capture_output=True, env=env, timeout=120
    )
    assert result.returncode == 0, result.stderr.decode()
    return result.stdout.decode()


def test_pickle_round_trip_keeps_values_dtypes_and_statics():
    """pickle round-trips nested instances: equal, same leaf dtypes, frozen statics stay frozen."""
    net = _net()
    back = pickle.loads(pickle.dumps(net))
    assert back == net
    assert back.layers[0].b.dtype == jnp.bfloat16
    assert back.layers[1].act == "relu" and back.layers[0].sizes == (2, 3)
    assert isinstance(back.table, sf.FrozenDict) and back.table["depth"] == (1, 2)
    assert not back.mask.flags.writeable


def test_unpickled_instance_hits_the_jit_cache():
    """An unpickled instance has an equal static key, so jit reuses the program traced for the original."""
    traces = 0

    @jax.jit
    def f(net):
        nonlocal traces
        traces += 1
        return sum(layer.w.sum() for layer in net.layers)

    net = _net()
    f(net)
    f(pickle.loads(pickle.dumps(net)))
    f(cloudpickle.loads(cloudpickle.dumps(net)))
    assert traces == 1


def test_pickle_in_a_fresh_process_by_reference():
    """A module-level class pickled by reference loads in a fresh process as a working pytree."""
    code = (
        "import pickle, sys, jax\n"
        "net = pickle.loads(sys.stdin.buffer.read())\n"
        "print(jax.tree_util.keystr(jax.tree_util.tree_flatten_with_path(net)[0][1][0]))\n"
        "print(net.layers[1].act, net.table['depth'])\n"
    )
    out = _run_fresh(code, pickle.dumps(_net()))
    assert out.split("\n")[:2] == [".layers[0].b", "relu (1, 2)"]


def _make_local_class() -> type:
    @sf.dataclass
    class Local:
        w: jax.Array
        n: sf.Static[int] = 2
        names: list = sf.static(default_factory=list)

    return Local


def test_cloudpickle_class_defined_in_a_function():
    """cloudpickle round-trips an instance (and the class) defined inside a function."""
    cls = _make_local_class()
    obj = cls(jnp.arange(3.0), n=5, names=["a", "b"])
    back = cloudpickle.loads(cloudpickle.dumps(obj))
    assert back == obj
    assert sf.static_fields(back) == ("n", "names")
    assert jax.tree.leaves(back)[0].shape == (3,)
    cls_back = cloudpickle.loads(cloudpickle.dumps(cls))
    assert cls_back(jnp.ones(2)).n == 2


def test_cloudpickle_local_class_in_a_fresh_process_is_a_pytree():
    """A cloudpickled local class loads in a fresh process as a pytree, with field names as keys."""
    cls = _make_local_class()
    obj = cls(jnp.arange(3.0), n=5, names=["a"])
    code = (
        "import pickle, sys, jax\n"
        "obj = pickle.loads(sys.stdin.buffer.read())\n"
        "paths = jax.tree_util.tree_flatten_with_path(obj)[0]\n"
        "print([jax.tree_util.keystr(p) for p, _ in paths], obj.n, obj.names)\n"
    )
    out = _run_fresh(code, cloudpickle.dumps(obj))
    assert out.strip() == "['.w'] 5 ('a',)"


def _make_jitted_class() -> type:
    @sf.dataclass
    class Model:
        w: jax.Array
        n: sf.Static[int] = 2

        @sf.jit_method
        def apply(self, x):
            """Apply the model."""
            return self.w * x * self.n

    return Model


def _scaled(x, k):
    return x * k


scaled = sf.jit(_scaled, static_argnames="k")


@sf.jit
def doubled(x):
    """Double x."""
    return 2 * x


def test_pickle_sf_jit_functions_by_reference():
    """pickle round-trips module-level sf.jit functions to the same objects."""
    assert pickle.loads(pickle.dumps(doubled)) is doubled
    assert pickle.loads(pickle.dumps(scaled)) is scaled


def test_cloudpickle_sf_jit_of_a_closure_in_a_fresh_process():
    """An sf.jit closure, cloudpickled, runs in a fresh process with its counters from zero."""
    k = 3.0
    f = sf.jit(lambda x: x * k)
    f(1.0)
    code = (
        "import pickle, sys\n"
        "f = pickle.loads(sys.stdin.buffer.read())\n"
        "print(float(f(2.0)), f.compile_count, f.__name__)\n"
    )
    assert _run_fresh(code, cloudpickle.dumps(f)).split() == ["6.0", "1", "<lambda>"]


def test_cloudpickle_class_with_jit_method_in_a_fresh_process():
    """A class with an @sf.jit_method defined in a function, cloudpickled, jits in a fresh process."""
    Model = _make_jitted_class()
    m = Model(jnp.ones(2), 3)
    m.apply(1.0)
    code = (
        "import pickle, sys\n"
        "m = pickle.loads(sys.stdin.buffer.read())\n"
        "out = m.apply(2.0)\n"
        "print(out.tolist(), type(m).apply.compile_count, type(m).apply.__doc__)\n"
    )
    out = _run_fresh(code, cloudpickle.dumps(m))
    assert out.strip() == "[6.0, 6.0] 1 Apply the model."


def test_pickle_bound_method_round_trip():
    """cloudpickle round-trips obj.method, which rebinds on the unpickled instance."""
    Model = _make_jitted_class()
    m = Model(jnp.ones(2), 3)
    back = cloudpickle.loads(cloudpickle.dumps(m.apply))
    np.testing.assert_allclose(back(2.0), np.full(2, 6.0))


def test_cloudpickle_main_module_jit_in_a_fresh_process():
    """An sf.jit function and a jitted class defined in __main__ round-trip through cloudpickle."""
    code = (
        "import sys, cloudpickle, jax, jax.numpy as jnp, staticfield as sf\n"
        "@sf.jit\n"
        "def f(x):\n"
        "    return x + 1\n"
        "@sf.dataclass\n"
        "class M:\n"
        "    w: jax.Array\n"
        "    @sf.jit_method\n"
        "    def g(self, x):\n"
        "        return self.w * x\n"
        "f(1.0); M(jnp.ones(2)).g(1.0)\n"
        "sys.stdout.buffer.write(cloudpickle.dumps((f, M(jnp.ones(2)))))\n"
    )
    path = os.pathsep.join(p for p in sys.path if p)
    env = dict(os.environ, PYTHONPATH=path, JAX_PLATFORMS="cpu")
    made = subprocess.run([sys.executable, "-c", code], capture_output=True, env=env, timeout=120)
    assert made.returncode == 0, made.stderr.decode()
    load = (
        "import pickle, sys\n"
        "f, m = pickle.loads(sys.stdin.buffer.read())\n"
        "print(float(f(1.0)), m.g(3.0).tolist(), f.compile_count)\n"
    )
    assert _run_fresh(load, made.stdout).split() == ["2.0", "[3.0,", "3.0]", "1"]
