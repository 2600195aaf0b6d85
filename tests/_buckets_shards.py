"""Bucketed functions holding a ``shard_map`` that splits the rows over 4 virtual CPU
devices, run by tests/test_buckets_accepted.py in a subprocess.

``XLA_FLAGS=--xla_force_host_platform_device_count=4`` only takes effect if it is set
before JAX starts, so these checks run in their own process. Each check prints one JSON
line ``{"check": name, "ok": bool, "detail": str}``; the tests assert on those lines.
"""

from __future__ import annotations

import os

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"
os.environ.pop("STATICFIELD_CHECK_BUCKETS", None)

import json  # noqa: E402
import re  # noqa: E402
import traceback  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

import staticfield as sf  # noqa: E402

try:
    from jax import shard_map  # noqa: E402
except ImportError:  # jax 0.10
    from jax.experimental.shard_map import shard_map  # noqa: E402

MESH = jax.sharding.Mesh(np.array(jax.devices()[:4]), ("d",))
COUNTS = (5, 3, 7, 2, 9, 1, 8)
CHECKS = []


def check(fn):
    CHECKS.append(fn)
    return fn


def same(got, want):
    for g, w in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)):
        assert np.shape(g) == np.shape(w), (np.shape(g), np.shape(w))
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-4, atol=1e-5)


def mlp(x, w):
    """Row-wise on any number of rows: a shard of them, or all."""
    return jnp.tanh(x @ w[0]) @ w[1] + jnp.sin(x)


def split(body, in_specs=(P("d"), P()), out_specs=P("d")):
    return lambda x, w: shard_map(body, mesh=MESH, in_specs=in_specs, out_specs=out_specs)(x, w)


def weights():
    rng = np.random.RandomState(1)
    return (jnp.asarray(rng.randn(4, 6), jnp.float32) * 0.5, jnp.asarray(rng.randn(6, 4), jnp.float32) * 0.5)


def rows(n):
    return np.random.RandomState(n).randn(n, 4).astype(np.float32)


def loss(g):
    return lambda x, w: jnp.sum(g(x, w) ** 2)


@check
def row_split_mlp_equals_plain_jit():
    """Outputs and gradients (for the weights and the rows) equal plain jax.jit's of the body
    on the unpadded rows, for counts that 4 devices do not divide too; each bucket a
    multiple of the device count, compiled once."""
    w = weights()
    f, plain = sf.jit(split(mlp), buckets={"x": 0}), jax.jit(mlp)
    for n in COUNTS:
        x = rows(n)
        same(f(x, w), plain(x, w))
        same(jax.grad(loss(f), argnums=(0, 1))(x, w), jax.grad(loss(plain), argnums=(0, 1))(x, w))
    assert sorted(f.buckets()) == [4, 8, 16], f.buckets()
    assert f.compile_count == 2 * 3, f.compile_count  # the call and its gradient, once per bucket
    again = f.compile_count
    for n in COUNTS:
        f(rows(n), w)
    assert f.compile_count == again, f.compile_count
    g = sf.jit(split(mlp, (P("d", None), P()), P("d", None)), buckets={"x": 0})  # the spec written out
    for n in (5, 3):
        same(g(rows(n), w), plain(rows(n), w))
    return f"buckets {sorted(f.buckets())}, {f.compile_count} compiles"


@jax.custom_vjp
def _doubled(x):
    return x * 2.0


_doubled.defvjp(lambda x: (x * 2.0, None), lambda r, g: (g * 2.0,))


@jax.custom_vjp
def _centred_gradient(x):
    return x


_centred_gradient.defvjp(lambda x: (x, None), lambda r, g: (g - g.mean(0),))


@check
def custom_rules_in_the_body_are_analysed_on_the_shard():
    """softplus (JAX's custom_jvp) and a row-wise custom_vjp in a row-splitting body are
    accepted with plain jax.jit's gradients; a bwd that mixes the shard's rows is refused."""
    w = weights()
    for body in (lambda x, w: jax.nn.softplus(x @ w[0]) @ w[1], lambda x, w: _doubled(x @ w[0]) @ w[1]):
        f = sf.jit(split(body), buckets={"x": 0})
        for n in (5, 3):
            same(f(rows(n), w), jax.jit(body)(rows(n), w))
            same(jax.grad(loss(f), argnums=(0, 1))(rows(n), w), jax.grad(loss(jax.jit(body)), argnums=(0, 1))(rows(n), w))
        assert sorted(f.buckets()) == [4, 8], f.buckets()
    return refused(lambda x, w: _centred_gradient(x @ w[0]) @ w[1])


@check
def rows_already_sharded_over_the_mesh():
    """Device rows laid out over the same mesh axis (12 rows: 3 per device) go to bucket 16."""
    from jax.sharding import NamedSharding

    w = weights()
    f = sf.jit(split(mlp), buckets={"x": 0})
    for n in (12, 8, 4):
        x = jax.device_put(rows(n), NamedSharding(MESH, P("d")))
        same(f(x, w), jax.jit(mlp)(rows(n), w))
        same(jax.grad(loss(f), argnums=(0, 1))(x, w), jax.grad(loss(jax.jit(mlp)), argnums=(0, 1))(rows(n), w))
    assert sorted(f.buckets()) == [4, 8, 16], f.buckets()
    return str(f.buckets())


@check
def a_first_call_whose_bucket_the_devices_do_not_divide():
    """2 rows first: bucket 2 cannot be split over 4 devices; the call runs in bucket 4."""
    w = weights()
    f = sf.jit(split(mlp), buckets={"x": 0})
    for n in (2, 1, 3):
        same(f(rows(n), w), jax.jit(mlp)(rows(n), w))
    assert sorted(f.buckets()) == [4], f.buckets()
    auto = sf.jit(split(mlp), buckets={"x": 0}, bucket_sizes="auto")  # its first size exact where it can be
    for n in (5, 6, 5, 8):
        same(auto(rows(n), w), jax.jit(mlp)(rows(n), w))
    assert sorted(auto.buckets()) == [8], auto.buckets()
    return str(f.buckets())


@check
def ahead_of_time_the_bucket_a_call_runs():
    """precompile, eval_shape and lower of 2 rows first: bucket 2 cannot be split over 4
    devices; each prepares bucket 4, the program the call then runs without compiling."""
    import jax.numpy as jnp

    w = weights()
    f = sf.jit(split(mlp), buckets={"x": 0})
    f.precompile(jax.ShapeDtypeStruct((2, 4), jnp.float32), w)
    count = f.compile_count
    want = jax.jit(mlp)(rows(2), w)
    with sf.no_compiles():
        got = f(rows(2), w)
    same(got, want)
    assert f.compile_count == count and sorted(f.buckets()) == [4], (f.compile_count, f.buckets())
    g = sf.jit(split(mlp), buckets={"x": 0})
    assert g.eval_shape(rows(2), w).shape == (2, 4)
    h = sf.jit(split(mlp), buckets={"x": 0})
    assert "4" in str(h.lower(rows(2), w).as_text()).split("tensor<", 1)[1][:3]
    return f"{count} compile"


@check
def listed_sizes_skip_those_the_devices_do_not_divide():
    w = weights()
    f = sf.jit(split(mlp), buckets={"x": 0}, bucket_sizes=[4, 6, 8, 12])
    for n in (3, 5, 7, 9):
        same(f(rows(n), w), jax.jit(mlp)(rows(n), w))
    assert sorted(f.buckets()) == [4, 8, 12], f.buckets()
    g = sf.jit(split(mlp), buckets={"x": 0}, bucket_sizes=[4, 6])
    g(rows(3), w)
    try:
        g(rows(5), w)
    except ValueError as exc:
        assert "multiple of 4" in str(exc) and "bucket_sizes" in str(exc), str(exc)
        return str(exc)
    raise AssertionError("no error for 5 rows and no listed size that 4 devices divide")


DECISIONS = {  # each True for a multiple of 4 rows, False for 5 (or 3)
    "x.shape[0] % 4 == 0": lambda n: n % 4 == 0,
    "x.shape[0] // 4 * 4 == x.shape[0]": lambda n: n // 4 * 4 == n,
    "x.shape[0] >= 4": lambda n: n >= 4,
}


@check
def a_decision_on_the_count_that_the_split_answers_is_a_guard():
    """The symbolic count is a multiple of the devices, so `x.shape[0] % 4 == 0` is True for
    it: a count it is False for (5, 3) never runs the program that took that branch (it runs
    at its own size, where the shard_map cannot split it, as with plain jax.jit)."""
    w = weights()
    said = []
    for text, decide in DECISIONS.items():
        def fn(x, w, decide=decide):
            y = split(mlp)(x, w)
            return y * 2 if decide(x.shape[0]) else y

        f = sf.jit(fn, buckets={"x": 0})
        try:
            got = f(rows(8), w)
        except sf.BucketError as exc:  # (an ordering JAX cannot decide: refused, naming the line)
            assert re.search(r"_buckets_shards\.py:\d+", str(exc)), str(exc)
            said.append(f"{text}: refused")
            continue
        same(got, jax.jit(fn)(rows(8), w))
        for n in (4, 16):
            same(f(rows(n), w), jax.jit(fn)(rows(n), w))
        for n in (5, 3):
            try:
                got = f(rows(n), w)
            except (ValueError, sf.BucketError) as exc:
                said.append(f"{text}, {n} rows: {type(exc).__name__}")
                continue
            same(got, jax.jit(mlp)(rows(n), w))  # (the branch plain Python takes for n rows)
            said.append(f"{text}, {n} rows: as mlp")
    return "; ".join(said)


@check
def the_checking_mode_checks_what_plain_jax_can_run():
    """STATICFIELD_CHECK_BUCKETS=1: 8 rows are compared (under grad too); 5 rows, which
    plain jax.jit cannot split over 4 devices, have no reference: said once, not an error."""
    import warnings

    os.environ["STATICFIELD_CHECK_BUCKETS"] = "1"
    try:
        w = weights()
        f = sf.jit(split(mlp), buckets={"x": 0})
        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always")
            for n in (8, 5, 3):
                same(f(rows(n), w), jax.jit(mlp)(rows(n), w))
                same(jax.grad(loss(f), argnums=(0, 1))(rows(n), w), jax.grad(loss(jax.jit(mlp)), argnums=(0, 1))(rows(n), w))
        texts = [str(x.message) for x in said]
        assert any("does not check a call with 5 row(s)" in t for t in texts), texts
        assert not any("8 row(s)" in t for t in texts), texts
        return texts[0]
    finally:
        os.environ.pop("STATICFIELD_CHECK_BUCKETS", None)


def refused(body, *words):
    f = sf.jit(split(body), buckets={"x": 0})
    try:
        f(rows(5), weights())
    except sf.BucketError as exc:
        text = str(exc)
        assert re.search(r"_buckets_shards\.py:\d+", text), text
        for word in words:
            assert word in text, (word, text)
        return text
    raise AssertionError("accepted")


@check
def a_body_that_mixes_the_rows_of_its_shard_is_refused():
    return refused(lambda a, w: a - a.sum(0), "reduce_sum")


@check
def a_psum_over_the_row_axis_is_refused():
    return refused(lambda a, w: jax.lax.psum(a, "d") @ w[0] @ w[1], "psum", "mesh axis 'd', which splits the rows")


@check
def an_all_gather_over_the_row_axis_is_refused():
    return refused(lambda a, w: jax.lax.all_gather(a, "d", tiled=True)[:a.shape[0]], "all_gather",
                   "rows held by different devices")


@check
def a_ppermute_over_the_row_axis_is_refused():
    return refused(lambda a, w: jax.lax.ppermute(a, "d", [(i, (i + 1) % 4) for i in range(4)]), "ppermute",
                   "rows held by different devices")


@check
def the_device_index_on_the_rows_is_refused():
    return refused(lambda a, w: a + jax.lax.axis_index("d"), "axis_index")


@check
def the_shards_row_index_is_refused():
    """``arange`` of a shard's rows is each row's index within its device's shard: another
    value for a row in another bucket."""
    return refused(lambda a, w: a * jnp.arange(a.shape[0])[:, None], "iota")


@check
def rows_left_on_one_device_are_refused():
    """out_specs that do not put the rows back on the mesh axis they were split on."""
    body = lambda a, w: a * 2  # noqa: E731
    f = sf.jit(lambda x, w: shard_map(body, mesh=MESH, in_specs=(P("d"), P()), out_specs=P(None, "d"),
                                      **_unchecked())(x, w), buckets={"x": 0})
    try:
        f(rows(5), weights())
    except sf.BucketError as exc:
        assert re.search(r"_buckets_shards\.py:\d+", str(exc)) and "out_specs" in str(exc), str(exc)
        return str(exc)
    raise AssertionError("accepted")


def _unchecked():
    import inspect

    params = inspect.signature(shard_map).parameters
    return {"check_vma": False} if "check_vma" in params else {"check_rep": False}


def main():
    for fn in CHECKS:
        try:
            detail, ok = fn(), True
        except Exception:
            detail, ok = traceback.format_exc()[-3000:], False
        print(json.dumps({"check": fn.__name__, "ok": ok, "detail": str(detail)[:3000]}), flush=True)


if __name__ == "__main__":
    main()
