"""A bucketed function ahead of time: precompile, eval_shape, lower and trace take the
arguments a call would and see the bucket's program, with arrays or ShapeDtypeStructs."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import staticfield as sf

W = np.random.RandomState(0).randn(4, 3).astype(np.float32)


def layer(x, w):
    return jnp.tanh(x @ w), x.sum(axis=1)


def rows(n):
    return np.random.RandomState(n).randn(n, 4).astype(np.float32)


def spec(n):
    return jax.ShapeDtypeStruct((n, 4), jnp.float32)


@pytest.mark.parametrize("given", ["numpy", "array", "spec"])
def test_precompile_prepares_the_bucket_a_call_runs(given):
    """precompile with 5 rows prepares bucket 8: later calls of 5 to 8 rows (NumPy or device
    arrays, as given) compile nothing, and a call of 9 rows compiles bucket 16."""
    f = sf.jit(layer, buckets={"x": 0})
    make = {"numpy": rows, "array": lambda n: jnp.asarray(rows(n)), "spec": spec}[given]
    f.precompile(make(5), W)
    assert f.compile_count == 1
    calls = [rows(n) if given != "array" else jnp.asarray(rows(n)) for n in (5, 6, 8)]
    with sf.no_compiles():
        outs = [f(x, W) for x in calls]
    assert f.compile_count == 1 and [o[0].shape[0] for o in outs] == [5, 6, 8]
    f(rows(9), W)
    assert f.compile_count == 2 and set(f.buckets()) == {8, 16}


def test_precompile_of_a_jit_method_with_mask_and_static_argnames():
    """A jit_method's Cls.method.precompile, with mask="valid" (the mask is made as a call
    makes it) and a static argument."""
    @sf.dataclass
    class Model:
        w: jax.Array

        @sf.jit_method(buckets={"x": 0}, mask="valid", static_argnames="k")
        def pooled(self, x, valid, k):
            return x @ self.w * k + jnp.sum(jnp.where(valid[:, None], x, 0.0))

    m = Model(jnp.asarray(W))
    Model.pooled.precompile(m, spec(3), k=2)
    Model.pooled.precompile(m, spec(20), k=2)
    assert Model.pooled.compile_count == 2
    xs = [rows(n) for n in (3, 4, 17, 32)]
    with sf.no_compiles():
        outs = [m.pooled(x, k=2) for x in xs]
    for x, out in zip(xs, outs):
        np.testing.assert_allclose(out, x @ W * 2 + x.sum(), rtol=1e-5, atol=1e-5)


def test_eval_shape_gives_the_shapes_a_call_returns():
    """eval_shape slices the row axis back, as a call does; outputs without rows stay."""
    def summary(x, w):
        return {"rows": jnp.tanh(x @ w), "cols": (x @ w)[:, :2].T}

    f = sf.jit(summary, buckets={"x": 0})
    for given in (rows(5), jnp.asarray(rows(5)), spec(5)):
        out = f.eval_shape(given, W)
        assert out["rows"].shape == (5, 3) and out["cols"].shape == (2, 5)
        assert out["rows"].dtype == jnp.float32
    called = f(rows(5), W)
    assert {k: v.shape for k, v in called.items()} == {k: v.shape for k, v in f.eval_shape(rows(5), W).items()}
    assert f.compile_count == 1  # eval_shape compiles nothing


def test_lower_and_trace_give_the_bucket_program():
    """lower/trace see the padded avals (bucket 8 for 5 rows); .compile() of the lowering
    takes arguments of the bucket's size."""
    f = sf.jit(layer, buckets={"x": 0})
    traced = f.trace(spec(5), W)
    assert [tuple(v.aval.shape) for v in traced.jaxpr.jaxpr.invars][0] == (8, 4)
    lowered = f.lower(rows(5), W)
    assert "8x4" in lowered.as_text()
    compiled = lowered.compile()
    padded = np.concatenate([rows(5), np.repeat(rows(5)[-1:], 3, axis=0)])
    result = compiled(padded, W)  # the bucket's program: its padded outputs and their row axes
    (out, _), axes = result.value, result.axes
    assert axes[0] == 0
    np.testing.assert_allclose(out[:5], np.tanh(rows(5) @ W), rtol=1e-5, atol=1e-6)


def test_auto_precompile_runs_the_size_a_call_would():
    """"auto": the first precompile is the exact size, as a first call would be."""
    f = sf.jit(layer, buckets={"x": 0}, bucket_sizes="auto")
    assert f.eval_shape(spec(5), W)[0].shape == (5, 3)
    f.precompile(spec(6), W)  # after 5 rows: pow2
    with sf.no_compiles():
        assert f(rows(7), W)[0].shape == (7, 3)


@pytest.mark.usefixtures("no_check_buckets")
def test_precompile_with_a_mask_prepares_the_program_a_call_runs():
    """sf.jit and jit_method with mask="valid": after precompile, a call of that shape
    compiles nothing (the mask is staticfield's argument, passed as a call passes it)."""
    def fn(x, w, valid):
        return jnp.where(valid[:, None], x @ w, 0.0)

    f = sf.jit(fn, buckets={"x": 0}, mask="valid")
    f.precompile(rows(5), W)
    with sf.no_compiles():
        f(rows(5), W)
        f(rows(7), W)
    assert f.compile_count == 1

    @sf.dataclass
    class Masked:
        w: jax.Array

        @sf.jit_method(buckets={"x": 0}, mask="valid")
        def apply(self, x, valid):
            return jnp.where(valid[:, None], x @ self.w, 0.0)

    m = Masked(jnp.asarray(W))
    Masked.apply.precompile(m, rows(5))
    with sf.no_compiles():
        m.apply(rows(6))
    assert Masked.apply.compile_count == 1
