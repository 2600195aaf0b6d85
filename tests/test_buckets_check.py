"""The checking mode (``STATICFIELD_CHECK_BUCKETS=1``) under transformations: a bucketed
function called only under ``jax.grad`` (a training step), ``jax.vmap`` or an outer
``jax.jit`` is compared inside the program, outputs and gradients. A wrong bucketed program
raises (``sf.BucketCheckError``; under an outer ``jit``, JAX's runtime error carrying its
message); a correct one does not, and returns what plain ``jax.jit`` returns."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import staticfield as sf
from staticfield._buckets import _trace, _verdict

pytestmark = pytest.mark.usefixtures("check_buckets")

W = np.linspace(-1, 1, 16, dtype=np.float32).reshape(4, 4)
DIFFERS = r"of the call with 5 row\(s\) padded to bucket 8 differs from the unpadded call"


def rows(n, d=4):
    return (np.arange(n * d, dtype=np.float32).reshape(n, d) + 1) / (n * d)


def same(got, want):
    for g, w in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)):
        assert np.shape(g) == np.shape(w), (np.shape(g), np.shape(w))
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-5, atol=1e-6)


def case5(x, w):
    """The issue's case 5: a row index under sqrt (negative on pad rows 6 and 7 unclamped)."""
    return (x @ w) * jnp.sqrt(5.5 - jnp.arange(x.shape[0])[:, None])


def mixes(x, w):
    h = x @ w
    return h - h.sum(axis=0)


def step(f):
    """A training step's gradient with respect to the parameters."""
    return jax.grad(lambda w, x: jnp.sum(f(x, w) ** 2))


TRANSFORMED = {  # each a call of a bucketed function only under a transformation
    "grad": lambda f: np.asarray(step(f)(W, rows(5))),
    "grad of device rows": lambda f: np.asarray(step(f)(W, jnp.asarray(rows(5)))),
    "outer jit": lambda f: np.asarray(jax.jit(lambda x, w: f(x, w) * 1.0)(rows(5), W)),
    "jit of grad": lambda f: np.asarray(jax.jit(step(f))(W, rows(5))),
    "vmap": lambda f: np.asarray(jax.vmap(f, in_axes=(0, None))(np.stack([rows(5), rows(5) * 2]), W)),
    "vmap of grad": lambda f: np.asarray(jax.vmap(step(f), in_axes=(None, 0))(W, np.stack([rows(5), rows(5) * 2]))),
}


@pytest.fixture
def accept_all(monkeypatch):
    """An analysis that wrongly accepts every function (a mixing one is then run padded)."""
    real = _verdict._run
    monkeypatch.setattr(_verdict, "_run", lambda analysis, closed, states, *a, **k: real(
        analysis.__class__(analysis.rules, analysis.control, True), closed, states, *a, **k))


@pytest.fixture
def unclamped(monkeypatch):
    """A bucket program whose row indices are not clamped on pad rows (as before round 3):
    its outputs are right, its parameter gradient NaN."""
    real = _trace.run
    monkeypatch.setattr(_trace, "run", lambda closed, args, callbacks, count, bucket, iotas, drops: real(
        closed, args, callbacks, count, bucket, frozenset(), drops))


@pytest.mark.usefixtures("accept_all")
@pytest.mark.parametrize("how", sorted(TRANSFORMED))
def test_a_wrong_output_is_caught_under_a_transformation(how):
    f = sf.jit(mixes, buckets={"x": 0})
    with pytest.raises(RuntimeError, match=DIFFERS) as info:
        TRANSFORMED[how](f)
    if "jit" not in how:
        assert isinstance(info.value, sf.BucketCheckError)


@pytest.mark.usefixtures("unclamped")
@pytest.mark.parametrize("how", sorted(h for h in TRANSFORMED if "grad" in h))
def test_a_wrong_gradient_is_caught_under_a_transformation(how):
    """Case 5 under grad: the forward rows are right, the gradient for `w` is not."""
    f = sf.jit(case5, buckets={"x": 0})
    with pytest.raises(RuntimeError, match=r"the gradient with respect to `[xw]` " + DIFFERS + ".*nan"):
        TRANSFORMED[how](f)


@pytest.mark.parametrize("how", sorted(TRANSFORMED))
@pytest.mark.parametrize("fn", [case5, lambda x, w: jnp.tanh(x @ w) @ w], ids=["case5", "mlp"])
def test_a_correct_program_passes_under_a_transformation(how, fn):
    got = TRANSFORMED[how](sf.jit(fn, buckets={"x": 0}))
    same(got, TRANSFORMED[how](jax.jit(fn)))
    assert np.isfinite(got).all()


@pytest.mark.usefixtures("accept_all")
def test_the_check_is_off_without_the_setting(monkeypatch):
    monkeypatch.delenv("STATICFIELD_CHECK_BUCKETS")
    f = sf.jit(mixes, buckets={"x": 0})
    TRANSFORMED["grad"](f)  # wrongly accepted, and nothing compares: the mode is off


def test_a_bucketed_function_inside_another_is_checked_by_the_outer():
    """The inner call runs inside the outer's program traced at its bucket: the outer's check
    covers it, and the inner adds no comparison of its own there (the outer keeps its buckets)."""
    inner = sf.jit(lambda x, w: jnp.tanh(x @ w), buckets={"x": 0})
    fn = lambda x, w: inner(x, w) * 2 + 1  # noqa: E731
    outer = sf.jit(fn, buckets={"x": 0})
    for n in (5, 3, 7):
        same(outer(rows(n), W), jax.jit(fn)(rows(n), W))
        same(step(outer)(W, rows(n)), step(jax.jit(fn))(W, rows(n)))
    assert set(outer.buckets()) == {4, 8}


def _per_row_while(x, w):
    """No reverse-mode derivative (a while_loop): under jax.jvp the check compares outputs only."""
    def one(r):
        return jax.lax.while_loop(lambda c: jnp.sum(c ** 2) < 30.0, lambda c: jnp.tanh(c @ w) + c, r)

    return jax.vmap(one)(x)


WARM = {  # a call of a bucketed function, warmed up, then called again inside sf.no_compiles()
    "concrete call": (lambda x, w: jnp.tanh(x @ w), lambda f: f(rows(5), W)),
    "eager grad": (lambda x, w: jnp.tanh(x @ w), lambda f: step(f)(W, rows(5))),
    "eager grad of device rows": (lambda x, w: jnp.tanh(x @ w), lambda f: step(f)(W, jnp.asarray(rows(5)))),
    "eager jvp, outputs only": (_per_row_while, lambda f: jax.jvp(lambda x: f(x, W), (rows(5),),
                                                                   (np.ones((5, 4), np.float32),))),
}


@pytest.mark.parametrize("how", sorted(WARM))
def test_the_check_never_trips_no_compiles_nor_counts(how):
    """The reference call and its gradients are staticfield's own check, not the user's
    program: after a warm-up, the same call compiles nothing inside sf.no_compiles(), and
    compile_count counts the bucket's program only."""
    fn, call = WARM[how]
    f = sf.jit(fn, buckets={"x": 0})
    want = call(f)
    count = f.compile_count
    with sf.no_compiles():
        got = call(f)
        again = call(f)
    same(got, want)
    same(again, want)
    assert f.compile_count == count


@pytest.mark.usefixtures("unclamped")
def test_the_check_still_compares_inside_no_compiles():
    """Inside sf.no_compiles() the check still runs, and still catches a wrong gradient."""
    f = sf.jit(case5, buckets={"x": 0})
    with pytest.raises(sf.BucketCheckError, match="the gradient with respect to"):
        step(f)(W, rows(5))
    with sf.no_compiles(), pytest.raises(sf.BucketCheckError, match="the gradient with respect to"):
        step(f)(W, rows(5))
