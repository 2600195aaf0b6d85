"""Hypothesis properties of the row analysis: random compositions of row-wise operations are
accepted and equal the unpadded call; one row-mixing operation anywhere is refused."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import staticfield as sf

pytestmark = pytest.mark.usefixtures("check_buckets")

SETTINGS = settings(max_examples=25, deadline=None)
D = 6
W = np.random.RandomState(0).randn(D, D).astype(np.float32) / 3

# Each operation maps an (n, D) float batch to an (n, D) float batch.
ROW_WISE = {
    "tanh": jnp.tanh,
    "affine": lambda x: x * 0.5 + 1.0,
    "matmul": lambda x: x @ W,
    "softmax": lambda x: jax.nn.softmax(x, axis=-1),
    "cumsum features": lambda x: jnp.cumsum(x, axis=1) / D,
    "sort features": lambda x: jnp.sort(x, axis=1),
    "transpose twice": lambda x: (x.T * 2).T,
    "feature max": lambda x: x - jnp.max(x, axis=1, keepdims=True),
    "where": lambda x: jnp.where(x > 0, x, 0.1 * x),
    "concat and slice": lambda x: jnp.concatenate([x, -x], axis=1)[:, ::2],
    "expand and sum": lambda x: (x[:, :, None] * jnp.ones((1, 1, 3))).sum(-1) / 3,
    "nested jit": lambda x: jax.jit(jnp.sin)(x),
    "cond": lambda x: jax.lax.cond(True, jnp.cos, jnp.sin, x),
    "fori": lambda x: jax.lax.fori_loop(0, 2, lambda i, a: a * 0.9, x),
    "scan features": lambda x: jax.lax.scan(lambda c, col: (c + col, c + col), jnp.zeros(x.shape[0]), x.T)[1].T / D,
    "row index": lambda x: x + jnp.arange(x.shape[0], dtype=x.dtype)[:, None] * 0.01,
    "relu": jax.nn.relu,
}

MIXING = {
    "mean over rows": lambda x: x - x.mean(axis=0),
    "max over rows": lambda x: x - x.max(axis=0),
    "cumsum rows": lambda x: jnp.cumsum(x, axis=0),
    "sort rows": lambda x: jnp.sort(x, axis=0),
    "gram": lambda x: (x @ x.T) @ x,
    "reverse rows": lambda x: x[::-1],
    "roll rows": lambda x: jnp.roll(x, 1, axis=0),
    "first row": lambda x: x - x[0],
    "normalize batch": lambda x: x / jnp.linalg.norm(x),
    "noise": lambda x: x + jax.random.normal(jax.random.key(0), x.shape),
    "scan rows": lambda x: jax.lax.scan(lambda c, r: (c + r, c + r), jnp.zeros(x.shape[1]), x)[1],
    "while on rows": lambda x: jax.lax.while_loop(lambda a: jnp.any(a > 1), lambda a: a * 0.5, x),
}

row_wise = st.lists(st.sampled_from(sorted(ROW_WISE)), min_size=1, max_size=5)
sizes = st.integers(1, 40)


def compose(names, table=ROW_WISE, extra=()):
    ops = [table[n] for n in names]
    for where, op in extra:
        ops.insert(where, op)

    def fn(x):
        for op in ops:
            x = op(x)
        return x

    return fn


@SETTINGS
@given(names=row_wise, n=sizes)
def test_row_wise_compositions_are_accepted_and_equal_the_unpadded_call(names, n):
    """Accepted; rows equal the unpadded call to float rounding, and equal plain jax.jit of
    the padded batch (pad rows copies of the last real row) bit for bit."""
    fn = compose(names)
    f = sf.jit(fn, buckets={"x": 0}, warn_compiles=None)
    x = np.random.RandomState(n).randn(n, D).astype(np.float32)
    got = f(x)
    np.testing.assert_allclose(got, jax.jit(fn)(x), rtol=1e-4, atol=1e-5)
    bucket = 1 << (n - 1).bit_length()
    padded = np.concatenate([x, np.repeat(x[-1:], bucket - n, axis=0)])
    np.testing.assert_array_equal(got, np.asarray(jax.jit(fn)(padded))[:n])


@SETTINGS
@given(names=row_wise, mixer=st.sampled_from(sorted(MIXING)), where=st.integers(0, 5), n=sizes)
def test_one_row_mixing_operation_anywhere_is_refused(names, mixer, where, n):
    """A composition with one row-mixing operation is refused, whatever surrounds it."""
    fn = compose(names, extra=[(min(where, len(names)), MIXING[mixer])])
    f = sf.jit(fn, buckets={"x": 0}, warn_compiles=None)
    x = np.random.RandomState(n).randn(n, D).astype(np.float32)
    try:
        f(x)
    except sf.BucketError as exc:
        text = str(exc)
        assert "the bucketed argument `x` has its rows on axis 0" in text or \
            "the row count of the bucketed argument(s) `x` becomes a value" in text
        assert f.compile_count == 0
    else:
        raise AssertionError(f"{mixer} inside {names} was accepted")


@pytest.mark.usefixtures("no_check_buckets")  # the mixers here ignore the mask: their rows differ, by design
@SETTINGS
@given(names=row_wise, mixer=st.sampled_from(sorted(MIXING)), n=sizes)
def test_with_a_mask_the_row_outputs_are_still_sliced(names, mixer, n):
    """With mask="valid" rows may mix (only a use of the row count as a value is refused: it
    is the bucket's size), and an output that keeps the rows is sliced."""
    body = compose(names, extra=[(len(names), MIXING[mixer])])

    def fn(x, valid):
        return body(jnp.where(valid[:, None], x, 0.0))

    f = sf.jit(fn, buckets={"x": 0}, mask="valid", warn_compiles=None)
    x = np.random.RandomState(n).randn(n, D).astype(np.float32)
    try:
        out = f(x)
    except sf.BucketError as exc:
        assert "the row count of the bucketed argument(s) `x` becomes a value" in str(exc), str(exc)
    else:
        assert out.shape == (n, D)
