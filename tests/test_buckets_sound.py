"""Shape buckets never change a result: each path by which the row count or a pad row could
reach a result (gradients, custom derivative rules, callbacks, the count used as a number or
decided on in Python, outputs of the count's size) gives plain ``jax.jit``'s answer on the
unpadded call, or a ``BucketError`` naming the line."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import staticfield as sf

X = (np.arange(12, dtype=np.float32).reshape(3, 4) + 1) / 10  # 3 rows: bucket 4 under "pow2"
W = np.full((4, 4), 0.3, np.float32)


def same(got, want):
    for g, w in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)):
        assert np.shape(g) == np.shape(w), (np.shape(g), np.shape(w))
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-5, atol=1e-6)


# ----- 1. gradients through the call: pad rows are copies, never zeros -------------------
HEADS = {
    "log": lambda h: jnp.log(h),
    "sqrt": lambda h: jnp.sqrt(h),
    "reciprocal": lambda h: 1.0 / h,
    "normalize": lambda h: h / jnp.linalg.norm(h, axis=1, keepdims=True),
    "poisson": lambda h: h * jnp.log(h) - h,
}


@pytest.mark.parametrize("name", sorted(HEADS))
def test_parameter_gradients_are_finite_and_equal_plain_jit(name):
    """grad with respect to W of sum(head(x @ W)) equals plain jax.jit's (it was all NaN: a
    zero pad row has an infinite derivative, times its zero cotangent)."""
    head = HEADS[name]

    def f(x, w):
        return head(x @ w)

    g = sf.jit(f, buckets={"x": 0})
    loss = lambda fn: lambda w: fn(X, w).sum()  # noqa: E731
    got, want = jax.grad(loss(g))(W), jax.grad(loss(jax.jit(f)))(W)
    assert np.isfinite(np.asarray(got)).all()
    same(got, want)
    same(jax.grad(lambda x: g(x, W).sum())(X), jax.grad(lambda x: f(x, W).sum())(X))


def test_pad_rows_are_copies_of_the_last_row_for_every_dtype():
    """Every bucketed leaf pads with its last real row (floats, ints, bools, typed keys; on the
    host and on the device), as the padded batch the program sees shows."""
    from staticfield._buckets import _pad

    keys = jax.random.split(jax.random.key(0), 3)
    for leaf in (np.arange(3, dtype=np.int32), np.array([True, False, True]), X, keys):
        if not _pad.is_key(leaf):
            np.testing.assert_array_equal(_pad.host_pad(leaf, 0, 4)[3], leaf[2])
        device = _pad.pad([jnp.asarray(leaf) if not _pad.is_key(leaf) else leaf], [0], 4)[0]
        if _pad.is_key(leaf):
            device, leaf = jax.random.key_data(device), jax.random.key_data(leaf)
        np.testing.assert_array_equal(np.asarray(device)[3], np.asarray(leaf)[2])
    seen = []

    def f(x):
        seen.append(x)
        return x * 2

    sf.jit(f, buckets={"x": 0})(jnp.asarray(X))
    assert (4, 4) in [tuple(t.shape) for t in seen]  # the bucket's program (and a symbolic trace)


# ----- 2. custom derivative rules are analysed -------------------------------------------
@jax.custom_vjp
def scale_by_batch_mean(x, w):
    return x * w


scale_by_batch_mean.defvjp(lambda x, w: (x * w, (x, w)),
                           lambda res, ct: (ct * res[1] * res[0].mean(0), (ct * res[0]).sum(0)))


@jax.custom_vjp
def scale(x, w):
    return x * w


scale.defvjp(lambda x, w: (x * w, (x, w)), lambda res, ct: (ct * res[1], (ct * res[0]).sum(0)))


@jax.custom_jvp
def sine_with_mean(x):
    return jnp.sin(x)


sine_with_mean.defjvp(lambda p, t: (jnp.sin(p[0]), t[0] * jnp.cos(p[0]) * p[0].mean(0)))


def test_a_custom_vjp_rule_that_mixes_rows_is_refused_naming_the_rule():
    """A bwd rule that uses the batch mean would include the pad rows: refused, naming the
    rule's functions and the line (it gave a silently wrong gradient row)."""
    f = sf.jit(lambda x, w: scale_by_batch_mean(x, w), buckets={"x": 0})
    with pytest.raises(sf.BucketError, match=r"reduces over axis 0, the rows") as info:
        f(X, W[0])
    assert "jax.custom_vjp rule" in str(info.value) and "test_buckets_sound.py" in str(info.value)


def test_a_custom_jvp_rule_that_mixes_rows_is_refused():
    """The same through jax.jvp of a custom_jvp whose rule uses the batch mean."""
    f = sf.jit(lambda x: sine_with_mean(x), buckets={"x": 0})
    with pytest.raises(sf.BucketError, match=r"jax.custom_jvp rule"):
        f(X)


@jax.custom_jvp
def relu(x):  # a user's own rule under JAX's name: analysed like any other
    return jnp.maximum(x, 0.0)


relu.defjvp(lambda p, t: (relu(p[0]), t[0] * (p[0] > 0) * p[0].mean(0)))


def test_a_users_rule_named_like_jaxs_own_is_analysed():
    """JAX's own elementwise rules (jax.nn.relu's) need no derivative analysis; a user's rule
    under the same name does."""
    with pytest.raises(sf.BucketError, match=r"jax.custom_jvp rule"):
        sf.jit(lambda x: relu(x), buckets={"x": 0})(X)
    same(sf.jit(jax.nn.relu, buckets={"x": 0})(X), jax.nn.relu(X))


def test_row_wise_custom_rules_give_plain_jits_gradients():
    """A row-wise custom_vjp, and a custom_jvp (jax.nn.relu, gelu), through a bucketed call:
    gradients with respect to both arguments equal plain jax.jit's."""
    def f(x, w):
        return scale(x, w) + jax.nn.relu(x) * jax.nn.gelu(x)

    g = sf.jit(f, buckets={"x": 0})
    same(jax.grad(lambda w: g(X, w).sum())(W[0]), jax.grad(lambda w: f(X, w).sum())(W[0]))
    same(jax.grad(lambda x: g(x, W[0]).sum())(X), jax.grad(lambda x: f(x, W[0]).sum())(X))
    act = lambda x: jax.nn.relu(x) * jax.nn.gelu(x)  # noqa: E731 (forward mode: custom_jvp only)
    same(jax.jvp(sf.jit(act, buckets={"x": 0}), (X,), (X,)), jax.jvp(act, (X,), (X,)))


# ----- 3. callbacks see the real rows only -------------------------------------------------
def test_a_debug_callback_receives_the_real_rows_once(monkeypatch):
    """jax.debug.callback of a row-carrying value receives (3, 4) for a (3, 4) call (it received
    the padded (4, 4)); with the checking mode on it still runs once per call."""
    seen = []

    def f(x):
        jax.debug.callback(lambda a: seen.append(np.shape(a)), x)
        return x * 2

    g = sf.jit(f, buckets={"x": 0})
    same(g(X), X * 2)
    jax.effects_barrier()
    assert seen == [(3, 4)]
    same(g(X[:2].copy() + 1), (X[:2] + 1) * 2)  # bucket 2: exact
    same(g(np.ones((5, 4), np.float32)), np.ones((5, 4)) * 2)  # a new bucket, 5 of 8 rows
    jax.effects_barrier()
    assert seen == [(3, 4), (2, 4), (5, 4)]
    monkeypatch.setenv("STATICFIELD_CHECK_BUCKETS", "1")
    seen.clear()
    h = sf.jit(f, buckets={"x": 0})
    h(X)
    jax.effects_barrier()
    assert seen == [(3, 4)]


def test_a_bucketed_debug_print_shows_the_real_rows(capfd):
    """jax.debug.print inside a bucketed function prints the real rows, not the padding."""
    def f(x):
        jax.debug.print("rows={}", x[:, 0])
        return x + 1

    sf.jit(f, buckets={"x": 0})(np.array([[1.0], [2.0], [3.0]], np.float32))
    jax.effects_barrier()
    assert capfd.readouterr().out.strip() == "rows=[1. 2. 3.]"


def test_a_pure_callback_computes_on_the_real_rows():
    """A pure_callback of the rows gets the real rows; its per-row result is padded back."""
    got = []

    def host(a):
        got.append(a.shape)
        return np.asarray(a) * 2 + a.shape[0]

    def f(x):
        return jax.pure_callback(host, jax.ShapeDtypeStruct(x.shape, x.dtype), x) + 1

    same(sf.jit(f, buckets={"x": 0})(X), X * 2 + 3 + 1)
    assert got == [(3, 4)]


def test_a_callback_of_rows_inside_a_loop_is_refused():
    """A callback that takes the rows inside a loop cannot be given the real rows: refused."""
    def f(x):
        def body(i, a):
            jax.debug.callback(lambda v: None, a)
            return a * 2

        return lax.fori_loop(0, 2, body, x)

    with pytest.raises(sf.BucketError, match=r"debug_callback.*inside a `(while|scan)`"):
        sf.jit(f, buckets={"x": 0})(X)


# ----- 4. the row count used as a number, or decided on in Python -------------------------
COUNT = {
    "divide by the count": (lambda x: x / x.shape[0], "uses the row count as a number"),
    "a loop bound": (lambda x: lax.fori_loop(0, x.shape[0], lambda i, a: a + 1.0, x), "row count"),
    "a traced comparison": (lambda x: lax.cond(x.shape[0] > 3, lambda: x, lambda: -x), "concrete row count"),
    "a Python comparison": (lambda x: x if x.shape[0] > 3 else -x, "concrete row count"),
    "a last-row mask": (lambda x: jnp.where((jnp.arange(x.shape[0]) == x.shape[0] - 1)[:, None], x, 0.0),
                        "uses the row count as a number"),
    "len": (lambda x: x * len(x), "concrete row count"),
    "range": (lambda x: jnp.stack([x[i] for i in range(x.shape[0])]), "concrete row count"),
    "int": (lambda x: x * int(x.shape[0]), "concrete row count"),
    "a NumPy shape": (lambda x: x + np.zeros(x.shape, np.float32), "concrete row count"),
    "split": (lambda x: jnp.split(x, 3)[0], "concrete row count"),
    "a set of sizes": (lambda x: x * 2 if x.shape[0] in {3, 5} else x, "by hash"),
}


@pytest.mark.parametrize("name", sorted(COUNT))
def test_every_use_of_the_row_count_as_a_value_is_refused_naming_the_line(name):
    """The row count as a number, a loop bound, a comparison (traced or in Python), a last-row
    mask, or anything needing a concrete count is a BucketError naming this file's line (it
    silently used the bucket's count)."""
    fn, words = COUNT[name]

    def user(x):
        return fn(x)

    with pytest.raises(sf.BucketError, match=re.escape(words)) as info:
        sf.jit(user, buckets={"x": 0})(X)
    assert re.search(r"test_buckets_sound.py:\d+", str(info.value)), str(info.value)
    assert "mask=\"valid\"" in str(info.value) or "by hash" in words


def test_an_equality_on_the_count_is_a_guard_checked_for_every_real_count():
    """`x * 2 if x.shape[0] == 64 else x` (JAX answers False for a symbol): each real count
    gets what plain jax.jit gives it, in a bucket of 64 and at 64 itself."""
    fn = lambda x: x * 2 if x.shape[0] == 64 else x  # noqa: E731
    f = sf.jit(fn, buckets={"x": 0}, bucket_sizes=[64, 128])
    for n in (40, 64, 50, 100, 64):
        x = np.ones((n, 2), np.float32)
        same(f(x), jax.jit(fn)(x))


def test_a_decision_on_the_type_of_the_count_runs_exactly():
    """A decision no comparison records (`isinstance(x.shape[0], int)`) makes the padded program
    another program: the call runs at its exact size, as plain jax.jit."""
    fn = lambda x: x * 2 if isinstance(x.shape[0], int) else x  # noqa: E731
    f = sf.jit(fn, buckets={"x": 0})
    x = np.ones((5, 2), np.float32)
    same(f(x), jax.jit(fn)(x))
    assert 5 in f.buckets()


# ----- 5, 11. outputs of the count's size --------------------------------------------------
def test_mask_valid_slices_outputs_of_the_row_count_size():
    """With mask="valid", jnp.arange(x.shape[0]) and jnp.zeros(x.shape[0]) come back with the
    real length (they came back with the bucket's)."""
    f = sf.jit(lambda x, valid: (jnp.arange(x.shape[0]), jnp.zeros(x.shape[0]), x * 2),
               buckets={"x": 0}, mask="valid")
    a, z, y = f(X)
    np.testing.assert_array_equal(a, [0, 1, 2])
    assert z.shape == (3,) and y.shape == (3, 4)


def test_an_output_with_the_count_on_another_axis_is_refused():
    """`x[:, :1] * jnp.eye(n)` has the count on a second axis: refused (it came back (3, 4))."""
    with pytest.raises(sf.BucketError, match="row count"):
        sf.jit(lambda x: x[:, :1] * jnp.eye(x.shape[0]), buckets={"x": 0})(X)
    with pytest.raises(sf.BucketError, match=r"row count.*the function returns it"):
        sf.jit(lambda x, valid: jnp.ones((x.shape[0], x.shape[0])), buckets={"x": 0}, mask="valid")(X)


# ----- 6. output row axes per program ------------------------------------------------------
def test_two_programs_of_one_function_slice_their_own_outputs():
    """A static choosing x or x.T (both (4, 4) at bucket 4): every call slices its own axis
    (after one t=True call, every call raised)."""
    f = sf.jit(lambda x, t: x.T if t else x, buckets={"x": 0}, static_argnames="t")
    for t in (True, False, True, False):
        same(f(X, t=t), X.T if t else X)


# ----- 7, 8, 14. accepted: typed keys, per-row random numbers, stack, tile -----------------
def test_typed_prng_keys_pad_and_per_row_random_numbers_are_accepted():
    """A typed key per row pads (numpy refused its dtype); fold_in of a row index, raw uint32
    keys split per row, jnp.stack and jnp.tile are row-wise."""
    keys = jax.random.split(jax.random.key(1), 3)
    per_key = lambda k: jax.vmap(lambda kk: jax.random.normal(kk, (4,)))(k)  # noqa: E731
    same(sf.jit(per_key, buckets={"k": 0})(keys), per_key(keys))
    raw = jax.random.split(jax.random.PRNGKey(1), 3)
    same(sf.jit(per_key, buckets={"k": 0})(raw), per_key(raw))
    split = lambda k: jax.vmap(lambda kk: jax.random.uniform(jax.random.split(kk)[1]))(k)  # noqa: E731
    same(sf.jit(split, buckets={"k": 0})(raw), split(raw))
    key = jax.random.key(0)
    folded = lambda x: x + jax.vmap(lambda i: jax.random.normal(jax.random.fold_in(key, i), (4,)))(  # noqa: E731
        jnp.arange(x.shape[0]))
    same(sf.jit(folded, buckets={"x": 0})(X), folded(X))
    for fn in (lambda x: jnp.stack([x, 2 * x], axis=1), lambda x: jnp.tile(x, (1, 2))):
        same(sf.jit(fn, buckets={"x": 0})(X), fn(X))


# ----- 9, 10. values of the count's size that are not row by row ---------------------------
def test_a_countdown_joined_with_the_rows_is_refused():
    """A cond whose branches join the rows with n-1 ... 0, and a multi-operand sort whose payload
    is such a countdown: refused (they were accepted with wrong values)."""
    countdown = lambda x: (x.shape[0] - 1 - jnp.arange(x.shape[0])).astype(x.dtype)  # noqa: E731
    joined = lambda x, p: lax.cond(p > 0, lambda: x[:, 0], lambda: countdown(x))  # noqa: E731
    with pytest.raises(sf.BucketError, match="row count"):
        sf.jit(joined, buckets={"x": 0})(X, jnp.float32(1))
    payload = lambda x: lax.sort((x, jnp.broadcast_to(countdown(x)[:, None], x.shape)), dimension=1,  # noqa: E731
                                 num_keys=1)[1]
    with pytest.raises(sf.BucketError, match="row count"):
        sf.jit(payload, buckets={"x": 0})(X)


# ----- 12. zero rows, and the checking mode's reference call -------------------------------
def test_zero_rows_run_an_exact_program_refused_where_one_row_would_be():
    """0 rows run an exact, unpadded program, shown under 0 in f.buckets() and explained as
    `exact 0`; a function a 1-row call refuses is refused at 0 rows too."""
    f = sf.jit(lambda x, w: jnp.tanh(x @ w), buckets={"x": 0})
    f(X, W)
    assert f(np.zeros((0, 4), np.float32), W).shape == (0, 4)
    assert f.buckets()[0] == {"calls": 1, "rows": 0, "padded": 0}
    assert "x.shape[0]: 0 → exact 0" in str(f.recompiles[-1])
    with pytest.raises(sf.BucketError):
        sf.jit(lambda x: x - x.mean(0), buckets={"x": 0})(np.zeros((0, 4), np.float32))


def test_the_checking_mode_runs_the_reference_as_plain_jit_would(monkeypatch):
    """STATICFIELD_CHECK_BUCKETS=1 runs the unpadded reference on jax arrays, so .at[] works
    (it ran on NumPy arrays and raised AttributeError), at an exact size too."""
    monkeypatch.setenv("STATICFIELD_CHECK_BUCKETS", "1")
    f = sf.jit(lambda x: x.at[:, 0].set(1.0), buckets={"x": 0})
    same(f(X), np.concatenate([np.ones((3, 1), np.float32), X[:, 1:]], axis=1))
    same(f(np.ones((4, 4), np.float32)), np.ones((4, 4)))


def test_the_checking_mode_compares_gradients(monkeypatch):
    """The checking mode compares gradients too: a function whose forward rows are right but
    whose parameter gradient the padding would change is caught (simulated by padding with
    zeros, as buckets did before)."""
    from staticfield._buckets import _pad

    monkeypatch.setenv("STATICFIELD_CHECK_BUCKETS", "1")

    def zeros_pad(leaf, axis, bucket):
        widths = [(0, 0)] * leaf.ndim
        widths[axis] = (0, bucket - leaf.shape[axis])
        return np.pad(leaf, widths)

    monkeypatch.setattr(_pad, "host_pad", zeros_pad)
    monkeypatch.setattr("staticfield._buckets._report.host_pad", zeros_pad, raising=False)
    f = sf.jit(lambda x, w: jnp.log(x @ w), buckets={"x": 0})
    with pytest.raises(sf.BucketCheckError, match="gradient"):
        f(X, W)


# ----- 13. the docs' masked form -------------------------------------------------------------
def test_a_masked_log_likelihood_has_finite_gradients():
    """`jnp.where(valid, log(h), 0).sum()` under mask="valid": its gradient is finite and equals
    plain jax.jit's on the real rows (it was all NaN with zero padding)."""
    def loss(x, w, valid):
        h = x @ w
        return jnp.where(valid[:, None], jnp.log(h), 0.0).sum()

    f = sf.jit(loss, buckets={"x": 0}, mask="valid")
    got = jax.grad(lambda w: f(X, w))(W)
    want = jax.grad(lambda w: jnp.log(X @ w).sum())(W)
    assert np.isfinite(np.asarray(got)).all()
    same(got, want)


def test_a_masked_batch_norm_with_a_custom_jvp_activation_is_accepted_with_exact_gradients():
    """Under mask="valid" rows may mix (the mask keeps the pad rows out); a custom_jvp rule
    beside the mixing (jax.nn.relu) is analysed with the same leniency, not refused because
    the cotangents, mixed by the batch mean's transpose, cannot be shown zero on the pad rows
    (it was refused as soon as a relu followed a masked mean). Check mode compares outputs and
    gradients with plain jax.jit's on the real rows."""
    def norm(x, w, valid):
        m = valid[:, None].astype(x.dtype)
        h = x @ w
        mean = (h * m).sum(0) / m.sum()
        return jax.nn.relu(jnp.cumsum(h - mean, axis=0))

    f = sf.jit(norm, buckets={"x": 0}, mask="valid")
    got = f(X, W)
    same(got, jax.nn.relu(jnp.cumsum(X @ W - (X @ W).mean(0), axis=0)))
    grad = jax.grad(lambda w: f(X, w).sum())(W)
    want = jax.grad(lambda w: jax.nn.relu(jnp.cumsum(X @ w - (X @ w).mean(0), axis=0)).sum())(W)
    same(grad, want)


# ----- warn_compiles: a bucket size's program is no recompile ------------------------------
def test_new_bucket_sizes_do_not_count_toward_the_compile_warning(recwarn):
    """A bucketed function compiling its pow2 sizes for 1..1000 warns nothing (it warned
    "compiled 10 times"); a static changing every call still warns, giving both numbers."""
    f = sf.jit(lambda x: jnp.tanh(x), buckets={"x": 0})
    for n in range(1, 1001, 3):
        f(np.ones((n, 2), np.float32))
    assert f.compile_count == 10  # 1, 4, 16, ..., 1024
    assert not [w for w in recwarn if issubclass(w.category, sf.StaticFieldWarning)]
    g = sf.jit(lambda x, s: jnp.tanh(x) * s, buckets={"x": 0}, static_argnames="s", warn_compiles=3)
    with pytest.warns(sf.StaticFieldWarning, match=r"has compiled 3 times \(5 with new buckets\)"):
        for s in range(3):
            g(np.ones((3, 2), np.float32), s=float(s))
            g(np.ones((5, 2), np.float32), s=float(s))


def test_an_exact_program_is_explained_as_exact():
    """`"auto"`'s exact program reads `exact 37` (it read `bucket 37`), here and as what a
    later bucket's compile was compared with."""
    f = sf.jit(lambda x: x * 2, buckets={"x": 0}, bucket_sizes="auto")
    f(np.ones((37, 2), np.float32))
    f(np.ones((40, 2), np.float32))
    assert str(f.recompiles[-1].changes[0]) == "x.shape[0]: 40 → bucket 64 (was exact 37)"
    f(np.zeros((0, 2), np.float32))
    assert str(f.recompiles[-1].changes[0]) == "x.shape[0]: 0 → exact 0 (was bucket 64)"


def test_explanations_of_bucketed_arguments_use_the_shapes_the_user_passed():
    """A change on another axis of a bucketed argument reads in the shapes passed (`rows` for
    the row axis, not the padded f32[8,4]) with a hint that fits; a second wrapper of the
    same function with other bucket sizes has its own first compile in sf.watch (never
    "cleared caches", never explained against the other wrapper's bucket)."""
    def layer(x):
        return jnp.tanh(x)

    f = sf.jit(layer, buckets={"x": 0})
    f(np.ones((5, 4), np.float32))
    f(np.ones((5, 8), np.float32))
    change = f.recompiles[-1].changes[0]
    assert (change.old, change.new) == ("f32[rows,4]", "f32[rows,8]")
    assert "pad or bucket" not in change.hint and "pads axis 0 of `x` only" in change.hint
    a = sf.jit(layer, buckets={"x": 0}, bucket_sizes=[8, 32])
    b = sf.jit(layer, buckets={"x": 0}, bucket_sizes=[16])
    with sf.watch() as w:
        a(np.ones((5, 2), np.float32))
        b(np.ones((5, 2), np.float32))
    report = w.report()
    assert "no argument differs" not in report
    assert "first compile of another wrapper of this function" in report
    assert "(was bucket 8)" not in report
