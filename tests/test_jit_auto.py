"""``sf.jit(fn, static="auto")``: arguments partitioned as ``eqx.filter_jit`` partitions them,
with staticfield's counting, explanations and type-strict keys."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.tree_util import Partial

import staticfield as sf

X = jnp.arange(3.0)


def _counted(fn):
    """``sf.jit(fn, static="auto")`` and a list holding the trace count of ``fn``."""
    traces = [0]

    def body(*args, **kwargs):
        traces[0] += 1
        return fn(*args, **kwargs)

    return sf.jit(body, static="auto"), traces


def test_bool_and_str_arguments_are_static():
    """A Python bool and a str are static: Python control flow on them works, and each value
    compiles once."""

    def step(x, flag, mode):
        if flag and mode == "double":
            return x * 2
        return x

    f, traces = _counted(step)
    assert jnp.array_equal(f(X, True, "double"), X * 2)
    assert jnp.array_equal(f(X + 1, True, "double"), (X + 1) * 2)
    assert traces[0] == f.compile_count == 1
    assert jnp.array_equal(f(X, False, "double"), X)
    assert jnp.array_equal(f(X, True, mode="plain"), X)
    assert traces[0] == f.compile_count == 3


def test_python_numbers_are_static_and_type_strict():
    """1 and 1.0 are different static values (they compile apart), and the recompile is
    explained as a static argument at the parameter's name."""

    traces = [0]

    def scale(x, k):
        traces[0] += 1
        return x * k

    f = sf.jit(scale, static="auto")
    assert f(X, 1).dtype == X.dtype
    f(X, 1)
    assert traces[0] == 1
    f(X, 1.0)
    assert traces[0] == f.compile_count == 2
    (event,) = f.recompiles
    assert [(c.path, c.kind) for c in event.changes] == [("k", "static_arg")]


def test_functions_and_partials():
    """A function argument is static (by identity); a Partial's arrays are traced and its
    function is static."""

    def apply(fn, x):
        return fn(x)

    f, traces = _counted(apply)
    assert jnp.array_equal(f(jnp.sin, X), jnp.sin(X))
    assert jnp.array_equal(f(jnp.sin, X + 1), jnp.sin(X + 1))
    assert traces[0] == 1
    f(jnp.cos, X)
    assert traces[0] == 2

    def mul(a, x):
        return a * x

    assert jnp.array_equal(f(Partial(mul, jnp.ones(3)), X), X)
    assert jnp.array_equal(f(Partial(mul, jnp.ones(3) * 2), X), X * 2)  # new values: no trace
    assert traces[0] == f.compile_count == 3


def test_pytree_with_non_array_leaves_and_an_object():
    """A dict mixing arrays, a callable and an object: arrays traced, the rest static."""
    marker = object()

    def run(cfg, x):
        return cfg["act"](x * cfg["w"]) if cfg["tag"] is marker else x

    f, traces = _counted(run)
    f({"w": jnp.ones(3), "act": jnp.tanh, "tag": marker}, X)
    f({"w": jnp.zeros(3), "act": jnp.tanh, "tag": marker}, X)
    assert traces[0] == 1


def test_sf_instances_keep_their_own_split():
    """An sf instance among the arguments keeps its static/dynamic split: a Python float in
    a dynamic field is traced (new value, no trace), a changed static compiles."""

    class Model(sf.Struct):
        w: jax.Array
        b: float
        n: sf.Static[int] = 1

    def apply(m, x):
        return m.w * x * m.n + m.b

    f, traces = _counted(apply)
    f(Model(jnp.ones(3), 0.5), X)
    f(Model(jnp.ones(3) * 2, 1.5), X)
    assert traces[0] == 1
    f(Model(jnp.ones(3), 0.5, n=2), X)
    assert traces[0] == 2
    assert f.compile_count == 2


def test_results_match_eqx_filter_jit():
    """Where eqx.filter_jit and static="auto" both apply, they give the same results."""
    eqx = pytest.importorskip("equinox")

    def f(x, n, flag, fn):
        for _ in range(n):
            x = fn(x)
        return x if flag else -x

    ours = sf.jit(f, static="auto")
    theirs = eqx.filter_jit(f)
    for args in [(X, 2, True, jnp.sin), (X, 3, False, jnp.cos), (np.ones(3), 1, True, jnp.tanh)]:
        np.testing.assert_array_equal(ours(*args), theirs(*args))


def test_static_option_is_checked():
    """static= other than "auto" is refused, naming the function and the choices."""

    def g(x):
        return x

    with pytest.raises(ValueError, match=r"g: static='all' is not a choice"):
        sf.jit(g, static="all")


def test_auto_is_shared_like_sf_jit():
    """sf.jit(f, static="auto") again gives the same function and counters."""

    def h(x, n):
        return x * n

    sf.jit(h, static="auto")(X, 2)
    sf.jit(h, static="auto")(X + 1, 2)
    assert sf.jit(h, static="auto").compile_count == 1
    assert sf.jit(h, static="auto").__name__ == "h"


def test_equal_atoms_of_other_types_or_signs_compile_apart():
    """True and 1, 0.0 and -0.0 are different static values (1/x tells the zeros apart)."""
    traces = [0]

    def inv(x, k):
        traces[0] += 1
        return x / k if isinstance(k, float) else x * k

    f = sf.jit(inv, static="auto")
    f(X, True)
    f(X, 1)
    assert traces[0] == 2
    assert float(f(jnp.ones(1), 0.0)[0]) == float("inf")
    assert float(f(jnp.ones(1), -0.0)[0]) == float("-inf")
    assert traces[0] == 4
