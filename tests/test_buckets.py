"""Shape buckets (``buckets=``): padding to a few sizes, the row check, slicing, counting."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import staticfield as sf

pytestmark = pytest.mark.usefixtures("check_buckets")

RNG = np.random.RandomState(0)
W1 = RNG.randn(16, 32).astype(np.float32)
W2 = RNG.randn(32, 8).astype(np.float32)


def mlp(x, w1, w2):
    return jax.nn.log_softmax(jnp.tanh(x @ w1) @ w2, axis=-1)


def rows(n, d=16, seed=None):
    return np.random.RandomState(n if seed is None else seed).randn(n, d).astype(np.float32)


def test_rows_equal_the_unpadded_call_and_outputs_are_sliced():
    """A row-wise MLP returns the real rows only, equal to plain jax.jit's unpadded call."""
    f = sf.jit(mlp, buckets={"x": 0})
    for n in (1, 3, 5, 8, 13, 100):
        x = rows(n)
        got = f(x, W1, W2)
        assert got.shape == (n, 8)
        np.testing.assert_allclose(got, jax.jit(mlp)(x, W1, W2), rtol=1e-5, atol=1e-6)


def test_bit_identical_where_plain_jit_of_the_padded_batch_is():
    """The rows are those of the bucket's program: what jax.jit gives for the padded batch."""
    f = sf.jit(mlp, buckets={"x": 0})
    for n in (3, 37, 100):
        x = rows(n)
        bucket = 1 << (n - 1).bit_length()
        padded = np.concatenate([x, np.zeros((bucket - n, 16), np.float32)])
        np.testing.assert_array_equal(f(x, W1, W2), jax.jit(mlp)(padded, W1, W2)[:n])


@pytest.mark.usefixtures("no_check_buckets")  # counts traces or compiles itself
def test_pow2_compiles_at_most_13_programs_for_300_sizes():
    """300 batch sizes drawn from 1..4096 compile at most 13 programs (plain jax.jit: one per size)."""
    traces = 0

    def small(x, w):
        nonlocal traces
        traces += 1
        return jnp.tanh(x @ w)

    f = sf.jit(small, buckets={"x": 0}, warn_compiles=None)
    sizes = np.random.RandomState(1).randint(1, 4097, size=300)
    w = np.ones((4, 2), np.float32)
    for n in sizes:
        assert f(np.ones((n, 4), np.float32), w).shape == (n, 2)
    # one trace per program, and one more for the row analysis (once per static key)
    assert f.compile_count == traces - 1 == len({1 << (int(n) - 1).bit_length() for n in sizes}) <= 13
    assert sum(v["calls"] for v in f.buckets().values()) == 300


def test_buckets_reports_calls_rows_and_padding():
    """f.buckets() counts calls, real rows and rows added per bucket."""
    f = sf.jit(mlp, buckets={"x": 0})
    for n in (3, 4, 5, 7):
        f(rows(n), W1, W2)
    assert f.buckets() == {4: {"calls": 2, "rows": 7, "padded": 1},
                           8: {"calls": 2, "rows": 12, "padded": 4}}


def test_explicit_bucket_list_and_a_batch_above_the_largest():
    """A listed size is the smallest that fits; above the largest is a ValueError, and the
    function keeps working."""
    f = sf.jit(mlp, buckets={"x": 0}, bucket_sizes=[8, 32])
    assert f(rows(9), W1, W2).shape == (9, 8)
    assert list(f.buckets()) == [32]
    with pytest.raises(ValueError, match=r"mlp: the bucketed argument `x` has 40 rows, more than the largest "
                                         r"bucket \(32\) of bucket_sizes=\[8, 32\]"):
        f(rows(40), W1, W2)
    assert f(rows(2), W1, W2).shape == (2, 8)
    assert f.compile_count == 2


def test_a_new_bucket_is_a_bucket_change():
    """A compile for a new bucket is explained as kind "bucket": rows → bucket (was the earlier one)."""
    f = sf.jit(mlp, buckets={"x": 0})
    f(rows(3), W1, W2)
    f(rows(4), W1, W2)
    f(rows(37), W1, W2)
    [event] = f.recompiles
    [change] = event.changes
    assert (change.path, change.kind, change.old, change.new) == ("x.shape[0]", "bucket", "4", "64")
    assert str(change) == "x.shape[0]: 37 → bucket 64 (was bucket 4)"


def test_device_arrays_pad_without_compiling_the_users_function():
    """Device arrays of many sizes in one bucket compile the user's function once."""
    f = sf.jit(mlp, buckets={"x": 0})
    for n in range(33, 64):
        assert f(jnp.asarray(rows(n)), W1, W2).shape == (n, 8)
    assert f.compile_count == 1


@pytest.mark.usefixtures("no_check_buckets")  # counts traces or compiles itself
def test_watch_lists_padding_apart_and_budgets_leave_it_out():
    """sf.watch puts the pad and slice programs on a line of their own, and max_compiles
    counts the user's programs only."""
    f = sf.jit(mlp, buckets={"x": 0}, max_compiles=2)
    with sf.watch() as w:
        for n in (33, 34, 35, 70) * 2:  # a size seen again gets its pad and slice programs
            f(jnp.asarray(rows(n)), W1, W2)
    report = w.report()
    assert "staticfield watch: 1 jitted function(s), 2 compile(s)" in report
    assert re.search(r"bucket padding \(buckets=: staticfield's pad and slice programs, not your "
                     r"functions\): \d+ compile", report)
    assert w.over_budget(2) == []
    with pytest.raises(sf.RecompileError):
        f(rows(200), W1, W2)


def test_sliced_outputs_keep_dtype_and_weak_type_whichever_way_they_are_sliced():
    """A size seen once (sliced on the host on the CPU) and again (by the slice program) gives
    outputs of the same dtype and weak type."""
    f = sf.jit(lambda x: (x * 2, x[:, 0] * 0 + 1, x.astype(jnp.int8)), buckets={"x": 0})
    first = f(jnp.asarray(rows(23, 2)))
    second = f(jnp.asarray(rows(23, 2)))
    assert [(a.dtype, a.weak_type, a.shape) for a in first] == [(b.dtype, b.weak_type, b.shape) for b in second]
    for a, b in zip(first, second):
        np.testing.assert_array_equal(a, b)


def test_numpy_inputs_pad_on_the_host():
    """NumPy inputs compile no pad program; device arrays of a size seen again compile one
    (on the CPU, a size seen once is padded and sliced on the host and compiles nothing)."""
    f = sf.jit(lambda x: x * 3, buckets={"x": 0})
    with sf.watch() as w:
        f(rows(29, 3))
        f(rows(29, 3))
    assert "staticfield_pad_rows" not in [fn.name for fn in w.functions if fn.padding]
    with sf.watch() as w:
        once = f(jnp.asarray(rows(27, 3)))
    assert [fn.name for fn in w.functions if fn.padding] == []
    with sf.watch() as w:
        again = f(jnp.asarray(rows(27, 3)))
    assert "staticfield_pad_rows" in [fn.name for fn in w.functions if fn.padding]
    np.testing.assert_array_equal(once, again)
    np.testing.assert_array_equal(once, rows(27, 3) * 3)


# ----- refusals: each operation and its message -------------------------------------------
REFUSED = {
    "mean over rows": (lambda x: x - x.mean(axis=0), r"`reduce_sum` \(axes=\(0,\)\) at .*test_buckets.py:\d+.* "
                                                    r"reduces over axis 0, the rows"),
    "sort rows": (lambda x: jnp.sort(x, axis=0), r"`sort` \(dimension=0\) at .*test_buckets.py:\d+.* sorts "
                                                 r"along axis 0, the rows"),
    "cumsum rows": (lambda x: jnp.cumsum(x, axis=0), r"`cumsum` \(axis=0\) at .*test_buckets.py:\d+.* accumulates "
                                                     r"along axis 0"),
    "gram": (lambda x: x @ x.T, r"`dot_general` .* multiplies rows with each other"),
    "first rows": (lambda x: x[1:], r"`gather` .* gathers rows by index"),
    "reverse": (lambda x: x[::-1], r"`gather` .* gathers rows by index"),
    "roll": (lambda x: jnp.concatenate([x[-1:], x[:-1]]), r"`gather` .* gathers rows by index"),
    "flatten": (lambda x: x.reshape(-1), r"`reshape` .* reshapes the row axis together with another axis"),
    "scan over rows": (lambda x: jax.lax.scan(lambda c, r: (c + r, c), jnp.zeros(x.shape[1]), x)[1],
                       r"`scan` .* scans over the rows"),
    "write a row": (lambda x: x.at[0].set(0.0), r"`scatter` .* scatters into rows by position"),
    "fft along the rows": (lambda x: jnp.fft.fft(x, axis=0).real, r"`fft` .*\(where the rows are on axis 1\) at "
                                                                  r".*test_buckets.py:\d+.* transforms along the rows"),
    "no rule": (lambda x: jax.lax.approx_max_k(x, 2)[0], r"`approx_top_k` at .*test_buckets.py:\d+.* has no row rule"),
}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_row_mixing_functions_are_refused(name):
    """Each row-mixing operation is refused with BucketError naming the argument, axis,
    operation, line, and the fix."""
    fn, detail = REFUSED[name]

    def user(x):
        return fn(x)

    f = sf.jit(user, buckets={"x": 0})
    with pytest.raises(sf.BucketError, match=r"^test_row_mixing_functions_are_refused.<locals>.user: the bucketed argument `x` has its rows on axis 0, "
                                             r"and " + detail) as info:
        f(rows(3))
    assert 'pass mask="valid"' in str(info.value)
    assert isinstance(info.value, TypeError)
    assert f.compile_count == 0


COUNT_USED = {
    "noise": (lambda x: x + jax.random.normal(jax.random.key(0), x.shape),
              r".*test_buckets.py:\d+.* \(builds a value of the row count's size with `random_bits` .*`add` at "
              r".*test_buckets.py:\d+.* combines it with the rows"),
    "divide by the count": (lambda x: x / x.shape[0], r".*test_buckets.py:\d+.* \(uses the row count as a number"
                                                      r"\), and `div` at .*test_buckets.py:\d+.* combines it with the rows"),
}


@pytest.mark.parametrize("name", sorted(COUNT_USED))
def test_the_row_count_used_as_a_value_is_refused(name):
    """A value computed from the row count (random numbers drawn for x.shape, x / x.shape[0])
    is refused, naming where the count became a value and where it meets the rows."""
    fn, detail = COUNT_USED[name]

    def user(x):
        return fn(x)

    f = sf.jit(user, buckets={"x": 0})
    with pytest.raises(sf.BucketError, match=r"^test_the_row_count_used_as_a_value_is_refused.<locals>.user: the "
                                             r"row count of the bucketed argument\(s\) `x` becomes a value at "
                                             + detail) as info:
        f(rows(3))
    assert 'mask="valid"' in str(info.value) and "valid.sum()" in str(info.value)
    assert f.compile_count == 0


def test_an_output_free_of_the_rows_is_returned_as_it_is():
    """An output that does not depend on the rows (`jnp.sum(w ** 2)` beside them, a constant of
    the bucket's size) is returned as it is, not sliced; one computed from the rows without
    their axis is a reduction over them, refused."""
    w = jnp.full((4, 4), 0.5)
    fn = lambda x, w: (x @ w, jnp.sum(w ** 2), jnp.ones(4))  # noqa: E731
    f = sf.jit(fn, buckets={"x": 0})
    for n in (3, 5):
        got, want = f(rows(n, 4), w), jax.jit(fn)(rows(n, 4), w)
        for g, e in zip(got, want):
            np.testing.assert_allclose(g, e, rtol=1e-6)
        loss = lambda h: lambda w: sum(jnp.sum(o) for o in h(rows(n, 4), w))  # noqa: E731
        np.testing.assert_allclose(jax.grad(loss(f))(w), jax.grad(loss(jax.jit(fn)))(w), rtol=1e-5)
    g = sf.jit(lambda x: (x * 2, x.sum(1).sum()), buckets={"x": 0})
    with pytest.raises(sf.BucketError, match="the rows"):
        g(rows(3))


@jax.custom_vjp
def clip_gradient(x):
    return x


clip_gradient.defvjp(lambda x: (x, None), lambda _, g: (jnp.clip(g, -1, 1),))


ACCEPTED = {
    "elementwise": lambda x: jnp.exp(x) * 2 + 1,
    "features reduce": lambda x: x.sum(axis=1),
    "softmax": lambda x: jax.nn.softmax(x, axis=-1),
    "transpose back": lambda x: (x.T * 2).T,
    "expand": lambda x: x[:, None, :] * jnp.ones((1, 3, 1)),
    "cumsum features": lambda x: jnp.cumsum(x, axis=1),
    "sort features": lambda x: jnp.sort(x, axis=1),
    "row index": lambda x: x + jnp.arange(x.shape[0])[:, None],
    "zeros like": lambda x: x + jnp.zeros_like(x),
    "cond": lambda x: jax.lax.cond(True, lambda a: a * 2, lambda a: a, x),
    "scan features": lambda x: jax.lax.scan(lambda c, col: (c + col, c), jnp.zeros(x.shape[0]), x.T)[1].T,
    "fori": lambda x: jax.lax.fori_loop(0, 3, lambda i, a: a * 2, x),
    "nested jit": lambda x: jax.jit(lambda a: a + 1)(x),
    "custom_jvp": lambda x: jax.nn.relu(x) + jax.nn.gelu(x),
    "checkpoint": lambda x: jax.checkpoint(lambda a: jnp.sin(a))(x),
    "custom_vjp": lambda x: clip_gradient(x) * 2,
    "where": lambda x: jnp.where(x > 0, x, 0.0),
    "per-row take": lambda x: jnp.take_along_axis(x, jnp.argsort(x, axis=1), axis=1),
    "max features": lambda x: jnp.max(x, axis=-1, keepdims=True) - x,
    "select column": lambda x: x[:, 2],
    "pad features": lambda x: jnp.pad(x, ((0, 0), (1, 1))),
    "concat features": lambda x: jnp.concatenate([x, x * 2], axis=1),
    "set a column": lambda x: x.at[:, 0].set(1.0),
    "add to a column": lambda x: x.at[:, 1].add(x[:, 0]),
    "fill zeros": lambda x: jnp.zeros_like(x).at[:, 2].set(x[:, 0]),
}


@pytest.mark.parametrize("name", sorted(ACCEPTED))
def test_row_wise_functions_are_accepted(name):
    """Row-wise functions run, and their rows equal the unpadded call's."""
    fn = ACCEPTED[name]
    f = sf.jit(fn, buckets={"x": 0})
    x = rows(5, 4)
    np.testing.assert_allclose(f(x), jax.jit(fn)(x), rtol=1e-5, atol=1e-6)


def test_embedding_lookup_and_per_row_batched_matmul():
    """A table lookup per row and a matmul batched on the rows are row-wise."""
    table = jnp.asarray(RNG.randn(10, 4).astype(np.float32))

    def fn(ids, m):
        return table[ids] + jnp.einsum("bij,bj->bi", m, table[ids])

    f = sf.jit(fn, buckets={"ids": 0, "m": 0})
    ids, m = np.arange(5) % 10, RNG.randn(5, 4, 4).astype(np.float32)
    np.testing.assert_allclose(f(ids, m), fn(ids, m), rtol=1e-5, atol=1e-5)


# ----- arguments, errors of use ------------------------------------------------------------
def test_wrong_uses_name_the_function_and_the_fix():
    """A name that is no parameter, a static one, bad sizes or mask: TypeErrors at decoration."""
    with pytest.raises(TypeError, match=r"mlp: buckets= names 'y', which is not one of its parameters "
                                        r"\(x, w1, w2\)"):
        sf.jit(mlp, buckets={"y": 0})
    with pytest.raises(TypeError, match=r"mlp: buckets= names 'w1', which is a static argument"):
        sf.jit(mlp, buckets={"w1": 0}, static_argnames="w1")
    with pytest.raises(TypeError, match=r"mlp: bucket_sizes must be \"pow2\", \"auto\" or a sorted list"):
        sf.jit(mlp, buckets={"x": 0}, bucket_sizes=[32, 8])
    with pytest.raises(TypeError, match=r"mlp: mask= must be \"valid\""):
        sf.jit(mlp, buckets={"x": 0}, mask="rows")
    with pytest.raises(TypeError, match=r"mlp: mask=\"valid\" passes the row mask as a keyword argument "
                                        r"`valid`, but the function takes no parameter `valid`"):
        sf.jit(mlp, buckets={"x": 0}, mask="valid")
    with pytest.raises(TypeError, match=r"mlp: bucket_sizes= and mask= apply to buckets="):
        sf.jit(mlp, bucket_sizes=[8])
    with pytest.raises(TypeError, match=r"mlp: buckets= maps parameter names to the row axis"):
        sf.jit(mlp, buckets=["x"])


def test_leaves_without_the_axis_or_disagreeing_rows_are_value_errors():
    """A 0-d leaf and leaves of different row counts are ValueErrors naming them."""
    f = sf.jit(lambda x, y: x + y, buckets={"x": 0, "y": 0})
    with pytest.raises(ValueError, match=r"the bucketed leaves `x` and `y` disagree on their number of rows "
                                         r"\(3 and 4\)"):
        f(np.ones(3), np.ones(4))
    g = sf.jit(lambda x: x["a"] * x["b"], buckets={"x": 0})
    with pytest.raises(ValueError, match=r"the bucketed argument x\['b'\] is a 0-d array of shape \(\), which "
                                         r"has no axis 0 to pad"):
        g({"a": np.ones(3), "b": np.array(2.0, np.float32)})


def test_non_array_leaves_pass_through_and_other_axes_work():
    """Python scalars in a bucketed pytree pass through; the row axis may be any axis."""
    f = sf.jit(lambda x: {"y": x["a"] * x["k"]}, buckets={"x": 0})
    assert f({"a": np.ones((3, 2), np.float32), "k": 2.0})["y"].shape == (3, 2)
    g = sf.jit(lambda x: jnp.tanh(x) * 2, buckets={"x": -1})
    x = rows(4, 5)
    np.testing.assert_allclose(g(x), np.tanh(x) * 2, rtol=1e-6)
    assert list(g.buckets()) == [8]


@sf.dataclass
class Batch:
    x: jax.Array
    ids: jax.Array
    scale: float = sf.static(default=1.0)


@sf.dataclass
class Model:
    w: jax.Array
    emb: jax.Array

    @sf.jit_method(buckets={"batch": 0})
    def apply(self, batch):
        return jnp.tanh(batch.x @ self.w) * batch.scale + self.emb[batch.ids]


def test_jit_method_with_an_instance_holding_the_batch():
    """@sf.jit_method(buckets={"batch": 0}) pads every leaf of an sf instance; statics stay."""
    m = Model(jnp.ones((4, 3)), jnp.arange(30.0).reshape(10, 3))
    before = Model.apply.compile_count
    for n in (3, 5, 6, 7):
        b = Batch(jnp.asarray(rows(n, 4)), jnp.arange(n) % 10, scale=2.0)
        want = np.tanh(np.asarray(b.x) @ np.ones((4, 3))) * 2.0 + np.arange(30.0).reshape(10, 3)[np.arange(n) % 10]
        np.testing.assert_allclose(m.apply(b), want, rtol=1e-5, atol=1e-5)
    assert Model.apply.compile_count - before == 2
    assert {8: {"calls": 3, "rows": 18, "padded": 6}}.items() <= Model.apply.buckets().items()
    assert str(Model.apply.recompiles[-1].changes[0]) == "batch.*.shape[0]: 5 → bucket 8 (was bucket 4)"


@pytest.mark.usefixtures("no_check_buckets")  # counts traces or compiles itself
def test_static_argnames_and_keyword_bucketed_arguments():
    """A static argument keys programs as usual; a bucketed argument passed by keyword is padded."""
    traces = 0

    def fn(x, power):
        nonlocal traces
        traces += 1
        return x ** power

    f = sf.jit(fn, buckets={"x": 0}, static_argnames="power")
    assert f(x=rows(3), power=2).shape == (3, 16)
    assert f(x=rows(4), power=2).shape == (4, 16)
    assert f(x=rows(3), power=3).shape == (3, 16)
    assert f.compile_count == 2 and traces == 4  # and one analysis trace per static key


def test_vmap_and_grad_outside_the_call():
    """jax.vmap and jax.grad of a bucketed function pad and slice inside the caller's trace."""
    f = sf.jit(mlp, buckets={"x": 0})
    xs = np.stack([rows(5, seed=1), rows(5, seed=2)])
    np.testing.assert_allclose(jax.vmap(lambda x: f(x, W1, W2))(xs), jax.vmap(lambda x: mlp(x, W1, W2))(xs),
                               rtol=1e-5, atol=1e-5)
    loss = lambda w, x: f(x, w, W2).sum()  # noqa: E731
    want = jax.grad(lambda w, x: mlp(x, w, W2).sum())(W1, rows(5))
    np.testing.assert_allclose(jax.grad(loss)(W1, rows(5)), want, rtol=1e-4, atol=1e-4)


def test_donation_donates_the_padded_copy_only():
    """With donation, a padded batch is a copy, so the caller's array stays alive; an exact
    bucket donates the caller's array as plain jax.jit would."""
    f = sf.jit(lambda x: x * 2, buckets={"x": 0}, donate_argnums=0)
    x = jnp.ones((3, 2))
    assert f(x).shape == (3, 2)
    assert not x.is_deleted()


# ----- mask=, the checking mode, auto ------------------------------------------------------
def test_mask_valid_lets_a_function_mix_rows():
    """mask="valid" passes the row mask; row outputs are sliced, reductions returned whole."""

    def center(x, valid):
        w = valid[:, None].astype(x.dtype)
        mean = (x * w).sum(axis=0) / w.sum()
        return x - mean, mean

    f = sf.jit(center, buckets={"x": 0}, mask="valid")
    x = rows(5, 4)
    centered, mean = f(x)
    assert centered.shape == (5, 4) and mean.shape == (4,)
    np.testing.assert_allclose(mean, x.mean(axis=0), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(centered, x - x.mean(axis=0), rtol=1e-5, atol=1e-6)
    assert f.buckets() == {8: {"calls": 1, "rows": 5, "padded": 3}}


def test_checking_mode_catches_a_padded_program_that_differs(monkeypatch):
    """STATICFIELD_CHECK_BUCKETS=1 compares with the unpadded call and names the output: an
    analysis that wrongly accepted a function (simulated here by one that accepts all) is caught."""
    from staticfield._buckets import _verdict

    monkeypatch.setenv("STATICFIELD_CHECK_BUCKETS", "1")
    real = _verdict._run
    monkeypatch.setattr(_verdict, "_run", lambda analysis, closed, states, *a, **k: real(
        analysis.__class__(analysis.rules, analysis.control, True), closed, states, *a, **k))
    f = sf.jit(lambda x: {"y": x - x.sum(axis=0)}, buckets={"x": 0})
    with pytest.raises(sf.BucketCheckError, match=r"output \['y'\] of the call with 3 row\(s\) padded to "
                                                  r"bucket 4 differs from the unpadded call"):
        f(rows(3))
    monkeypatch.setattr(_verdict, "_run", real)
    g = sf.jit(mlp, buckets={"x": 0})
    assert g(rows(3), W1, W2).shape == (3, 8)  # row-wise: the check passes
    assert isinstance(sf.BucketCheckError("x"), RuntimeError)


def test_auto_is_exact_until_the_size_changes_then_pow2():
    """bucket_sizes="auto": the first size runs unpadded; after a change, pow2 buckets."""
    f = sf.jit(mlp, buckets={"x": 0}, bucket_sizes="auto")
    f(rows(37), W1, W2)
    f(rows(37), W1, W2)
    assert f.buckets() == {37: {"calls": 2, "rows": 74, "padded": 0}}
    f(rows(40), W1, W2)
    f(rows(50), W1, W2)
    f(rows(37), W1, W2)  # keeps its exact program
    assert f.compile_count == 2
    assert f.buckets()[64] == {"calls": 2, "rows": 90, "padded": 38}


def test_auto_checks_rows_of_the_exact_program_too():
    """Under "auto" the exact-size program goes through the row check as well."""
    f = sf.jit(lambda x: x - x.mean(axis=0), buckets={"x": 0}, bucket_sizes="auto")
    with pytest.raises(sf.BucketError):
        f(rows(3))


@pytest.mark.usefixtures("no_check_buckets")  # counts traces or compiles itself
def test_deps_read_shares_bucket_programs_across_unread_statics():
    """deps="read" with buckets=: a static the method does not read shares the bucket's program."""
    traces = 0

    @sf.dataclass
    class Net:
        w: jax.Array
        act: str = sf.static(default="tanh")
        tag: int = sf.static(default=0)

        @sf.jit_method(deps="read", buckets={"x": 0})
        def apply(self, x):
            nonlocal traces
            traces += 1
            return jnp.tanh(x @ self.w) if self.act == "tanh" else x @ self.w

    for n, tag in ((3, 0), (4, 1), (5, 2), (3, 3)):
        assert Net(jnp.ones((4, 2)), tag=tag).apply(np.ones((n, 4), np.float32)).shape == (n, 2)
    assert Net.apply.compile_count == traces - 1 == 2  # one more trace: the row analysis
    assert Net.apply.buckets() == {4: {"calls": 3, "rows": 10, "padded": 2}, 8: {"calls": 1, "rows": 5, "padded": 3}}


def test_an_exact_bucket_donates_the_callers_array():
    """Donation of a batch that is exactly a bucket's size donates the caller's own array."""
    f = sf.jit(lambda x: x * 2, buckets={"x": 0}, donate_argnums=0)
    x = jnp.ones((4, 2))
    f(x)
    assert x.is_deleted()


_STORE_SCRIPT = """
import jax.numpy as jnp, numpy as np
import staticfield as sf

@sf.jit(buckets={"x": 0})
def f(x, w):
    return jnp.tanh(x @ w), x[:, :1] * 2

y, z = f(np.ones((5, 3), np.float32), np.ones((3, 2), np.float32))
print(y.shape, z.shape, f.compile_count, f.load_count)
"""


def test_a_program_loaded_from_a_program_store_is_sliced(tmp_path):
    """A bucket program loaded from a program store (not traced in this process) still has
    its outputs sliced back to the real rows."""
    import os
    import subprocess
    import sys

    (tmp_path / "script.py").write_text(_STORE_SCRIPT)
    env = dict(os.environ, STATICFIELD_PROGRAM_STORE=str(tmp_path / "store"))
    lines = []
    for _ in range(2):
        done = subprocess.run([sys.executable, str(tmp_path / "script.py")], env=env, capture_output=True,
                              text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        lines.append(done.stdout.strip())
    assert lines == ["(5, 2) (5, 1) 1 0", "(5, 2) (5, 1) 0 1"]
