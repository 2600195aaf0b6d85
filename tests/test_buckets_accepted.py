"""Programs people bucket are accepted: each runs in buckets (not at exact sizes), and its
outputs and gradients equal plain ``jax.jit``'s on the unpadded call."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import staticfield as sf

pytestmark = pytest.mark.usefixtures("no_check_buckets")
COUNTS = (5, 3, 7)
HERE = pathlib.Path(__file__).resolve().parent


def same(got, want):
    for g, w in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)):
        assert np.shape(g) == np.shape(w), (np.shape(g), np.shape(w))
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-4, atol=1e-5)


def outputs_and_gradients_agree(f, plain, w):
    """``f(x, w)`` and its gradients with respect to both (finite) equal ``plain``'s, for
    ``COUNTS`` rows of 4 features."""
    loss = lambda g: lambda x, w: jnp.sum(g(x, w) ** 2)  # noqa: E731
    for n in COUNTS:
        x = np.random.RandomState(n).randn(n, 4).astype(np.float32)
        same(f(x, w), plain(x, w))
        got = jax.grad(loss(f), argnums=(0, 1))(x, w)
        assert all(np.isfinite(np.asarray(g)).all() for g in got)
        same(got, jax.grad(loss(plain), argnums=(0, 1))(x, w))


def images(n):
    return np.random.RandomState(n).randn(n, 6, 6, 2).astype(np.float32)


@sf.dataclass
class CNN:
    kernel: jax.Array
    bias: jax.Array
    head: jax.Array
    act: str = sf.static(default="relu")

    @sf.jit_method(buckets={"x": 0})
    def __call__(self, x):
        return self.plain(x)

    def plain(self, x):
        h = jax.lax.conv_general_dilated(x, self.kernel, (1, 1), "SAME",
                                         dimension_numbers=("NHWC", "HWIO", "NHWC"))
        h = getattr(jax.nn, self.act)(h + self.bias)
        return h.mean((1, 2)) @ self.head


@pytest.mark.parametrize("act", ["relu", "gelu", "softplus"])
def test_a_cnn_forward_and_backward(act):
    rng = np.random.RandomState(0)
    model = CNN(jnp.asarray(rng.randn(3, 3, 2, 4), jnp.float32) * 0.3, jnp.asarray(rng.randn(4), jnp.float32),
                jnp.asarray(rng.randn(4, 3), jnp.float32), act=act)
    plain = jax.jit(lambda m, x: m.plain(x))
    for n in COUNTS:
        x = images(n)
        same(model(x), plain(model, x))
        same(jax.grad(lambda m: jnp.sum(m(x) ** 2))(model), jax.grad(lambda m: jnp.sum(plain(m, x) ** 2))(model))
        same(jax.grad(lambda x: jnp.sum(model(x) ** 2))(x), jax.grad(lambda x: jnp.sum(plain(model, x) ** 2))(x))
    assert set(CNN.__call__.buckets()) >= {4, 8}


def test_a_bucketed_function_called_inside_another():
    """The inner one runs inside the outer's program, on the outer's padded rows."""
    inner = sf.jit(lambda x, w: jnp.tanh(x @ w), buckets={"x": 0})
    fn = lambda x, w: inner(x, w) * 2 + 1  # noqa: E731
    outer = sf.jit(fn, buckets={"x": 0})
    w = jnp.asarray(np.random.RandomState(1).randn(4, 3), jnp.float32)
    for n in COUNTS:
        x = np.random.RandomState(n).randn(n, 4).astype(np.float32)
        same(outer(x, w), jax.jit(fn)(x, w))
        same(jax.grad(lambda w: jnp.sum(outer(x, w) ** 2))(w), jax.grad(lambda w: jnp.sum(jax.jit(fn)(x, w) ** 2))(w))
    assert set(outer.buckets()) == {4, 8}


def test_a_pure_callback_returning_rows_keeps_its_buckets():
    def host(a):
        return np.asarray(a) * 2

    fn = lambda x: jax.pure_callback(host, jax.ShapeDtypeStruct(x.shape, x.dtype), x) + 1  # noqa: E731
    f = sf.jit(fn, buckets={"x": 0})
    for n in (3, 5, 6, 7):
        x = np.random.RandomState(n).randn(n, 4).astype(np.float32)
        same(f(x), x * 2 + 1)
    assert set(f.buckets()) == {4, 8} and f.compile_count == 2


def test_a_zero_or_one_row_call_does_not_end_bucketing():
    """JAX writes some programs otherwise for 0 or 1 rows (a size-1 axis broadcasts); those
    programs serve their own size only, so the other buckets stay."""
    fn = lambda x: jnp.take_along_axis(x, jnp.argsort(x, axis=1), axis=1) * 2  # noqa: E731
    f = sf.jit(fn, buckets={"x": 0})
    for n in (0, 1, 5, 3, 7):
        x = np.random.RandomState(n).randn(n, 4).astype(np.float32)
        same(f(x), jax.jit(fn)(x))
        if n:
            same(jax.grad(lambda x: jnp.sum(f(x) ** 2))(x), jax.grad(lambda x: jnp.sum(jax.jit(fn)(x) ** 2))(x))
    assert set(f.buckets()) == {0, 1, 4, 8}


@pytest.mark.parametrize("name", ["rfft", "fft", "irfft"])
def test_an_fft_along_the_features(name):
    fn = lambda x: jnp.abs(getattr(jnp.fft, name)(x, axis=1)) ** 2  # noqa: E731
    f = sf.jit(fn, buckets={"x": 0})
    for n in COUNTS:
        x = np.random.RandomState(n).randn(n, 8).astype(np.float32)
        same(f(x), jax.jit(fn)(x))
        same(jax.grad(lambda x: jnp.sum(f(x)))(x), jax.grad(lambda x: jnp.sum(jax.jit(fn)(x)))(x))
    assert set(f.buckets()) == {4, 8}
    with pytest.raises(sf.BucketError, match="transforms along the rows"):
        sf.jit(lambda x: jnp.fft.fft(x, axis=0).real, buckets={"x": 0})(np.ones((5, 8), np.float32))


def _per_row_steps(r, w):
    """A per-row while_loop: each row iterates until its own value passes a threshold."""
    def body(c):
        k, h = c
        return k + 1, jnp.tanh(h @ w) + h

    return jax.lax.while_loop(lambda c: (jnp.sum(c[1] ** 2) < 40.0) & (c[0] < 50), body, (0, r))[1]


def test_a_per_row_while_loop_under_vmap():
    """The batched loop runs until every row is done, each row frozen at its own end: the pad
    rows (copies of the last real row) end with it, so the real rows are plain jax.jit's.
    (A while_loop has no reverse-mode derivative: its forward-mode one is compared.)"""
    w = jnp.asarray(np.random.RandomState(1).randn(4, 4), jnp.float32) * 0.5
    fn = lambda x, w: jax.vmap(_per_row_steps, in_axes=(0, None))(x, w)  # noqa: E731
    f, plain = sf.jit(fn, buckets={"x": 0}), jax.jit(fn)
    for n in COUNTS:
        x = np.random.RandomState(n).randn(n, 4).astype(np.float32) * np.arange(1, n + 1, dtype=np.float32)[:, None]
        same(f(x, w), plain(x, w))
        tangent = np.ones_like(x)
        same(jax.jvp(lambda x: f(x, w), (x,), (tangent,)), jax.jvp(lambda x: plain(x, w), (x,), (tangent,)))
        same(jax.jacfwd(lambda w: f(x, w))(w), jax.jacfwd(lambda w: plain(x, w))(w))
    assert set(f.buckets()) == {4, 8}


def test_a_while_loop_on_all_rows_is_still_refused():
    """A loop whose condition reads every row (a sum over the batch) is not per row."""
    def fn(x):
        return jax.lax.while_loop(lambda h: jnp.sum(h) < 100.0, lambda h: h * 2.0, x)

    with pytest.raises(sf.BucketError, match=r"test_buckets_accepted.py:\d+"):
        sf.jit(fn, buckets={"x": 0})(np.ones((3, 4), np.float32))


def _shard_map():
    try:
        from jax import shard_map
    except ImportError:  # jax 0.10
        from jax.experimental.shard_map import shard_map
    return shard_map


def test_a_replicated_shard_map():
    """in_specs/out_specs P() on a one-device mesh: every device computes the whole batch, so
    the rows go through the body as through a call."""
    from jax.sharding import PartitionSpec as P

    mesh = jax.sharding.Mesh(np.array(jax.devices()[:1]), ("d",))
    body = lambda x, w: jnp.tanh(x @ w) * jnp.sqrt(6.5 - jnp.arange(x.shape[0])[:, None])  # noqa: E731
    fn = lambda x, w: _shard_map()(body, mesh=mesh, in_specs=(P(), P()), out_specs=P())(x, w) + 1.0  # noqa: E731
    w = jnp.asarray(np.random.RandomState(1).randn(4, 4), jnp.float32)
    f, plain = sf.jit(fn, buckets={"x": 0}), jax.jit(fn)
    outputs_and_gradients_agree(f, plain, w)
    assert set(f.buckets()) == {4, 8}


def test_a_shard_map_that_splits_the_rows_and_mixes_them_in_its_shard_is_refused():
    """Each device's shard of the rows goes through the body, which must be row-wise on it."""
    from jax.sharding import PartitionSpec as P

    mesh = jax.sharding.Mesh(np.array(jax.devices()[:1]), ("d",))
    fn = lambda x: _shard_map()(lambda a: a - a.sum(0), mesh=mesh, in_specs=P("d"), out_specs=P("d"))(x)  # noqa: E731
    with pytest.raises(sf.BucketError, match=r"reduce_sum.*test_buckets_accepted.py:\d+"):
        sf.jit(fn, buckets={"x": 0})(np.ones((3, 4), np.float32))


def test_a_shard_map_that_splits_the_rows_over_a_one_device_mesh():
    from jax.sharding import PartitionSpec as P

    mesh = jax.sharding.Mesh(np.array(jax.devices()[:1]), ("d",))
    body = lambda x, w: jnp.tanh(x @ w) + jnp.sin(x)  # noqa: E731
    fn = lambda x, w: _shard_map()(body, mesh=mesh, in_specs=(P("d"), P()), out_specs=P("d"))(x, w)  # noqa: E731
    w = jnp.asarray(np.random.RandomState(1).randn(4, 4), jnp.float32)
    f, plain = sf.jit(fn, buckets={"x": 0}), jax.jit(body)
    outputs_and_gradients_agree(f, plain, w)
    assert set(f.buckets()) == {4, 8}


@pytest.fixture(scope="module")
def four_devices():
    """tests/_buckets_shards.py on 4 virtual CPU devices (XLA_FLAGS must be set before JAX
    starts: a process of its own): each check's JSON line, by name."""
    env = dict(os.environ)
    env.pop("STATICFIELD_CHECK_BUCKETS", None)
    env["PYTHONPATH"] = os.pathsep.join([str(HERE.parent / "src"), env.get("PYTHONPATH", "")])
    proc = subprocess.run([sys.executable, str(HERE / "_buckets_shards.py")], env=env, capture_output=True,
                          text=True, timeout=600)
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert lines, f"exit {proc.returncode}\n{proc.stderr[-4000:]}"
    return {line["check"]: line for line in lines}


FOUR_DEVICE_CHECKS = [
    "row_split_mlp_equals_plain_jit",
    "custom_rules_in_the_body_are_analysed_on_the_shard",
    "rows_already_sharded_over_the_mesh",
    "a_first_call_whose_bucket_the_devices_do_not_divide",
    "ahead_of_time_the_bucket_a_call_runs",
    "listed_sizes_skip_those_the_devices_do_not_divide",
    "a_decision_on_the_count_that_the_split_answers_is_a_guard",
    "a_body_that_mixes_the_rows_of_its_shard_is_refused",
    "a_psum_over_the_row_axis_is_refused",
    "an_all_gather_over_the_row_axis_is_refused",
    "a_ppermute_over_the_row_axis_is_refused",
    "the_device_index_on_the_rows_is_refused",
    "the_shards_row_index_is_refused",
    "rows_left_on_one_device_are_refused",
    "the_checking_mode_checks_what_plain_jax_can_run",
]


def test_every_four_device_check_ran(four_devices):
    assert sorted(four_devices) == sorted(FOUR_DEVICE_CHECKS)


@pytest.mark.parametrize("check", FOUR_DEVICE_CHECKS)
def test_a_shard_map_that_splits_the_rows_over_four_devices(four_devices, check):
    """A shard_map whose in_specs split the rows over 4 devices: a row-wise body is accepted,
    its outputs and gradients those of plain jax.jit, its buckets multiples of 4; a body that
    mixes rows (in its shard, or across devices by a collective) is refused naming its line."""
    assert check in four_devices, sorted(four_devices)
    assert four_devices[check]["ok"], four_devices[check]["detail"]
