"""``sf.jit(fn, static="auto")``: arguments partitioned as ``eqx.filter_jit`` partitions them,
with staticfield's counting, explanations and type-strict keys."""

from __future__ import annotations

import functools
import gc
import os
import pickle
import sys

import jax
import jax.extend
import jax.numpy as jnp
import numpy as np
import pytest
from jax.tree_util import Partial

import staticfield as sf

X = jnp.arange(3.0)


def _counted(fn):
    """``sf.jit(fn, static="auto")`` and a list holding the trace count of ``fn``."""
    traces = [0]

    @functools.wraps(fn)  # as a well-behaved decorator: the signature (and defaults) are fn's
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


# ----- outputs, check=False fields, defaults, the hit (DESIGN.md, `static="auto"`) ----------
def test_outputs_come_back_as_the_function_returned_them():
    """Arrays come back as arrays, every other output leaf as the very object the function
    returned: an int stays an int (not Array(256)), a Jaxpr and a function come back as
    themselves, on the first call and on hits."""

    def solve(y, max_steps):
        jaxpr = jax.make_jaxpr(jnp.sin)(y)
        return {"value": jnp.cos(y), "stats": {"max_steps": max_steps, "name": "newton"},
                "jaxpr": jaxpr, "fn": jnp.sin}

    f, traces = _counted(solve)
    first = f(X, 256)
    again = f(X + 1, 256)
    assert traces[0] == 1
    for out in (first, again):
        assert type(out["stats"]["max_steps"]) is int and out["stats"]["max_steps"] == 256
        assert out["stats"]["name"] == "newton" and out["fn"] is jnp.sin
        assert isinstance(out["jaxpr"], jax.extend.core.ClosedJaxpr)
        assert isinstance(out["value"], jax.Array)
    assert again["jaxpr"] is first["jaxpr"]
    np.testing.assert_array_equal(again["value"], jnp.cos(X + 1))
    shapes = f.eval_shape(X, 256)
    assert shapes["stats"]["max_steps"] == 256 and shapes["value"].shape == (3,)


def test_outputs_match_eqx_filter_jit():
    """Where both apply, the outputs are those of eqx.filter_jit, leaf for leaf and type for type."""
    eqx = pytest.importorskip("equinox")

    def f(x, n):
        return x * n, n, "done", (x, None)

    ours, theirs = sf.jit(f, static="auto")(X, 3), eqx.filter_jit(f)(X, 3)
    assert jax.tree.structure(ours) == jax.tree.structure(theirs)
    for a, b in zip(jax.tree.leaves(ours), jax.tree.leaves(theirs)):
        assert type(a) is type(b)
        np.testing.assert_array_equal(a, b)


class Norms(sf.Struct, check=False):
    """A solver-like class whose plain fields hold a function and a Python bool."""

    rtol: float
    norm: object
    scaled: bool
    w: jax.Array


def _normed(s, y):
    return s.norm(y * s.w) * s.rtol if s.scaled else s.norm(y)


def test_check_false_fields_non_array_leaves_are_static():
    """A function and a Python bool held directly by fields of a check=False class are
    static under static="auto" (Python control flow works; a new array value reuses the
    program); a new function recompiles, explained as kind "static" at path s.norm."""
    f, traces = _counted(_normed)
    s = Norms(1e-3, jnp.linalg.norm, True, jnp.ones(3))
    assert float(f(s, X)) == pytest.approx(float(jnp.linalg.norm(X)) * 1e-3 * 1)
    f(sf.replace(s, w=jnp.ones(3) * 2), X)
    assert traces[0] == 1
    f(sf.replace(s, norm=jnp.max), X)
    assert traces[0] == 2
    (event,) = f.recompiles
    assert [(c.path, c.kind) for c in event.changes] == [("s.norm", "static")]
    assert float(f(sf.replace(s, scaled=False), X)) == pytest.approx(float(jnp.linalg.norm(X)))
    assert [(c.path, c.kind) for c in f.recompiles[-1].changes] == [("s.scaled", "static")]


def test_eqx_tree_at_on_a_function_field():
    """eqx.tree_at can reach a plain field of a check=False class (what diffrax does to a
    solver's norm at import); the result runs under static="auto" with the new function."""
    eqx = pytest.importorskip("equinox")
    f, traces = _counted(_normed)
    s = Norms(1e-3, jnp.linalg.norm, False, jnp.ones(3))
    swapped = eqx.tree_at(lambda m: m.norm, s, jnp.max)
    assert isinstance(swapped, Norms) and swapped.norm is jnp.max
    assert float(f(swapped, X)) == float(jnp.max(X))
    assert float(f(s, X)) == pytest.approx(float(jnp.linalg.norm(X)))
    assert traces[0] == 2


def test_a_keyword_equal_to_its_default_keys_as_the_default():
    """max_steps=256 where 256 is the default, passed by keyword or by position, reaches
    the program compiled without it; another value compiles, explained at its name."""

    def solve(y, max_steps=256, rtol=1e-3):
        return y * max_steps * rtol

    f, traces = _counted(solve)
    f(X)
    f(X, max_steps=256)
    f(X, 256)
    f(X, rtol=1e-3)
    f(y=X, rtol=1e-3, max_steps=256)
    assert traces[0] == f.compile_count == 1
    f(X, max_steps=100)
    assert [(c.path, c.kind) for c in f.recompiles[-1].changes] == [("max_steps", "static_arg")]
    assert traces[0] == 2


def test_a_hit_is_two_python_frames():
    """A hit runs two Python frames of staticfield's (the call and its shape's generated hit)
    and no other Python call, whatever the mix of arrays, Python atoms, functions,
    containers and non-array outputs."""

    def step(x, n, flag, mode, fn, cfg):
        return fn(x) * n * cfg["scale"] if flag else x, {"mode": mode, "n": n}

    f = sf.jit(step, static="auto")
    args = (X, 3, True, "fast", jnp.sin, {"scale": jnp.ones(3), "tag": "t"})
    for _ in range(3):
        f(*args)
    frames = []

    def profile(frame, event, arg):
        if event == "call":
            frames.append((os.path.basename(frame.f_code.co_filename), frame.f_code.co_name))

    gc.collect()  # a collection during the loop may run other objects' finalizers: not a hit's calls
    gc.disable()
    sys.setprofile(profile)
    try:
        for _ in range(100):
            f(*args)
    finally:
        sys.setprofile(None)
        gc.enable()
    assert len(frames) == 200, frames[:5]
    assert set(frames[0::2]) == {("_auto.py", "__call__")} and len(set(frames[1::2])) == 1, frames[:5]
    assert frames[1][0].startswith('<generated static="auto" hit #') and frames[1][1] == "hit", frames[:5]
    assert f.compile_count == 1


def test_unhashable_statics_are_keyed_by_identity():
    """A static leaf that cannot be hashed is keyed by identity: the same object reuses the
    program, another (even equal) one compiles; the first such call warns that a change made
    inside it would not recompile."""

    class Opts:
        __hash__ = None  # type: ignore[assignment]

        def __eq__(self, other):
            return isinstance(other, Opts)

    def f(x, opts):
        return x + 1

    g, traces = _counted(f)
    opts = Opts()
    with pytest.warns(sf.StaticFieldWarning, match="`opts` is an? .*Opts, which static=\"auto\" keys by identity"):
        g(X, opts)
    g(X + 1, opts)
    assert traces[0] == 1
    g(X, Opts())
    assert traces[0] == 2


def test_wrong_calls_raise_the_functions_own_error():
    """A call the function would refuse is its own TypeError, naming it."""

    def solve(y, max_steps=256):
        return y

    f = sf.jit(solve, static="auto")
    with pytest.raises(TypeError, match=r"solve\(\) got an unexpected keyword argument 'steps'"):
        f(X, steps=3)
    with pytest.raises(TypeError, match=r"solve\(\) missing 1 required positional argument: 'y'"):
        f()


def test_budget_counters_and_pickling():
    """max_compiles refuses a third program; counters and cache_size read through; the
    function pickles by reference and its copy starts afresh."""

    g = sf.jit(_module_level, static="auto", max_compiles=2)
    g(X, 1), g(X, 2)
    with pytest.raises(sf.RecompileError, match=r"n: 2 → 3"):
        g(X, 3)
    assert g.compile_count == 2 and g.cache_size() == 2
    assert pickle.loads(pickle.dumps(g)) is g


def _module_level(x, n):
    return x * n
