"""The program that runs is the program analysed, by an exact rule: a bucket's concrete
program is compared with the symbolic one equation by equation (constants and literals
included), decisions on the count are seen wherever the user's code runs (a file, a
notebook cell, ``exec``), and a verdict holds for one full non-row key (an instance's
statics included). Outputs and gradients equal plain ``jax.jit``'s on the unpadded call.
(The checking mode is off here: these are the calls as they run in production.)"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import staticfield as sf
from staticfield._buckets._compare import differs
from staticfield._buckets._forms import NORMALISATIONS
from staticfield._buckets._symbolic import symbol

pytestmark = pytest.mark.usefixtures("no_check_buckets")

W = np.linspace(-1, 1, 16, dtype=np.float32).reshape(4, 4)


def rows(n, d=4):
    return (np.arange(n * d, dtype=np.float32).reshape(n, d) + 1) / (n * d)


def same(got, want):
    for g, w in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)):
        assert np.shape(g) == np.shape(w), (np.shape(g), np.shape(w))
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-5, atol=1e-6)


def as_plain_jit(fn, counts, **kw):
    """Every count: the bucketed call's outputs, and the gradients of their sum with respect
    to the rows and to W, equal plain jax.jit's."""
    f = sf.jit(fn, buckets={"x": 0}, **kw)
    for n in counts:
        x = rows(n)
        same(f(x, W), jax.jit(fn)(x, W))
        loss = lambda g: lambda x, w: jnp.sum(g(x, w) ** 2)  # noqa: E731
        same(jax.grad(loss(f), argnums=(0, 1))(x, W), jax.grad(loss(jax.jit(fn)), argnums=(0, 1))(x, W))
    return f


# ----- 1. a fork of the user's through one JAX entry point ---------------------------
def test_a_one_line_fork_with_two_jax_branches():
    as_plain_jit(lambda x, w: (x @ w) * 2 if x.shape[0] == 64 else (x @ w) - 1, (40, 64, 40))


def test_a_type_check_choosing_an_argument_of_one_jax_call():
    def fn(x, w):
        order = 2 if isinstance(x.shape[0], int) else 1
        return x * jnp.linalg.norm(x @ w, ord=order, axis=1, keepdims=True)

    as_plain_jit(fn, (5, 3))


def test_a_dict_and_a_getattr_dispatch_on_the_count():
    table = {True: jnp.tanh, False: jnp.sin}
    as_plain_jit(lambda x, w: table[x.shape[0] == 8](x @ w), (5, 8, 3))
    as_plain_jit(lambda x, w: getattr(jnp, "cos" if x.shape[0] == 8 else "sin")(x @ w), (5, 8, 6))


# ----- 2. constants chosen by a fork ---------------------------------------------------
def test_a_constant_chosen_by_a_fork():
    as_plain_jit(lambda x, w: (x @ w) * (2.0 if x.shape[0] == 64 else 1.0), (40, 64, 40))
    as_plain_jit(lambda x, w: (x @ w) + (3 if x.shape[0] == 8 else 0), (5, 8))


def test_a_cond_on_the_count():
    def fn(x, w):
        return lax.cond(x.shape[0] == 64, lambda h: h * 2, lambda h: h - 1, x @ w)

    as_plain_jit(fn, (40, 64))


def test_a_literal_compares_by_type_and_value():
    """`differs` tells literals apart by value and by type, and constants by value."""
    n = symbol()
    sym = jax.make_jaxpr(lambda x: x * 0.0)(jax.ShapeDtypeStruct((n, 4), jnp.float32))
    for other, equal in ((lambda x: x * 0.0, True), (lambda x: x * 3.0, False), (lambda x: x * -0.0, False),
                         (lambda x: x * 0, True), (lambda x: x.astype(jnp.float16) * 0.0, False)):
        conc = jax.make_jaxpr(other)(jax.ShapeDtypeStruct((8, 4), jnp.float32))
        assert (differs(conc, sym, 8) is None) == equal, other
    table = np.arange(4.0, dtype=np.float32)
    sym = jax.make_jaxpr(lambda x: x + jnp.asarray(table))(jax.ShapeDtypeStruct((n, 4), jnp.float32))
    conc = jax.make_jaxpr(lambda x: x + jnp.asarray(table[::-1].copy()))(jax.ShapeDtypeStruct((8, 4), jnp.float32))
    assert differs(conc, sym, 8) is not None


# ----- 3. decisions in a notebook cell, exec'd code, python -c --------------------------
@pytest.mark.parametrize("filename", ["<ipython-input-3-0123>", "<string>", "<stdin>"])
def test_a_decision_in_code_without_a_file(filename):
    source = ("def fn(x, w):\n"
              "    if x.shape[0] == 5:\n"
              "        return (x @ w) - (x @ w).mean(0)\n"
              "    return (x @ w) * 2\n")
    scope = {}
    exec(compile(source, filename, "exec"), scope)
    as_plain_jit(scope["fn"], (5, 8, 3, 6))  # 5 rows: bucket 8's program is the analysed one


def test_a_caught_conversion_of_the_count_is_a_decision():
    """`int(n)` fails for the symbol; code that catches it and picks 8 is right at 8 rows
    only: bucket 8's program is the symbolic one, but 5 rows must get `x * 5`."""
    def fn(x, w):
        try:
            k = int(x.shape[0])
        except Exception:  # noqa: BLE001 - the code under test catches it
            k = 8
        return (x @ w) * k

    f = as_plain_jit(fn, (5, 3, 8))
    assert 8 not in f.buckets() or f.buckets()[8]["padded"] == 0


# ----- 4. the verdict is keyed by the full non-row key --------------------------------
@sf.dataclass
class Scale:
    w: jax.Array
    limit: int = sf.static(default=-1)

    @sf.jit_method(buckets={"x": 0})
    def __call__(self, x):
        h = x @ self.w
        return h * 2 if x.shape[0] == self.limit else h - 1


def test_an_instance_static_that_changes_the_program_gets_its_own_verdict():
    """Scale(limit=-1) has no decision on the count; Scale(limit=5) has one. The second's
    bucket-8 program is the first's at 8, but 5 rows must get the `== 5` branch."""
    x = rows(5)
    for s in (Scale(jnp.asarray(W)), Scale(jnp.asarray(W), limit=5)):
        want = (x @ W) * 2 if s.limit == 5 else (x @ W) - 1
        same(s(x), want)
        same(jax.grad(lambda w: jnp.sum(Scale(w, limit=s.limit)(x) ** 2))(jnp.asarray(W)),
             jax.grad(lambda w: jnp.sum(((x @ w) * 2 if s.limit == 5 else (x @ w) - 1) ** 2))(jnp.asarray(W)))


def forked(x, w, mode):
    h = x @ w
    if mode == "fork":  # a fork the bucket's trace takes at 8 rows: this key's buckets are exact
        return h * 2 if x.shape[0] == 8 else h - 1
    return h - 1


def test_a_key_whose_program_differs_is_exact_and_another_key_keeps_its_buckets():
    """Exactness is per key: the "fork" static value runs at exact sizes, "plain" (the same
    function, another static value) still shares its buckets."""
    f = sf.jit(forked, buckets={"x": 0}, static_argnames="mode")
    plain = jax.jit(forked, static_argnames="mode")
    for n in (8, 5, 6, 7, 3, 5):  # (8 rows first: the fork's bucket-8 program serves 8 rows only)
        for mode in ("fork", "plain"):
            same(f(rows(n), W, mode), plain(rows(n), W, mode))
    assert f.compile_count == 5 + 2  # "fork": 3, 5, 6, 7, 8 exact; "plain": buckets 4 and 8
    assert f.buckets() == {3: {"calls": 1, "rows": 3, "padded": 0}, 4: {"calls": 1, "rows": 3, "padded": 1},
                           5: {"calls": 2, "rows": 10, "padded": 0}, 6: {"calls": 1, "rows": 6, "padded": 0},
                           7: {"calls": 1, "rows": 7, "padded": 0}, 8: {"calls": 6, "rows": 39, "padded": 9}}
    assert "other shapes run at exact sizes" in f.recompiles[-2].changes[0].hint  # the first differing line
    for n in (5, 3):
        for mode in ("fork", "plain"):
            loss = lambda g: lambda w: jnp.sum(g(rows(n), w, mode) ** 2)  # noqa: E731
            same(jax.grad(loss(f))(W), jax.grad(loss(plain))(W))


@sf.dataclass
class Gate:
    w: jax.Array
    limit: int = sf.static(default=-1)
    name: str = sf.static(default="a")  # never read

    @sf.jit_method(buckets={"x": 0}, deps="read", warn_compiles=None)
    def __call__(self, x):
        h = x @ self.w
        return h * 2 if x.shape[0] == self.limit else h - 1


def test_a_read_static_that_adds_a_fork_gets_its_own_verdict():
    """deps="read": the verdict is keyed by the statics the method read, not by the type, so
    Gate(limit=5) never reuses Gate(limit=-1)'s verdict (whose bucket-8 program is the same
    at 8 rows) and 5 rows take the `== 5` branch; a static never read still shares."""
    w = jnp.asarray(W)
    for n, name in ((5, "a"), (6, "b"), (7, "c")):
        same(Gate(w, name=name)(rows(n)), (rows(n) @ W) - 1)
    assert Gate.__call__.compile_count == 1  # `name` is never read: one program, bucket 8
    for limit in (-1, 5, 6):
        for n in (5, 6, 3):
            want = (rows(n) @ W) * 2 if n == limit else (rows(n) @ W) - 1
            same(Gate(w, limit=limit)(rows(n)), want)
            same(Gate(w, limit=limit, name="b")(rows(n)), want)
            grad = jax.grad(lambda v: jnp.sum(Gate(v, limit=limit)(rows(n)) ** 2))(w)
            same(grad, jax.grad(lambda v: jnp.sum(((rows(n) @ v) * 2 if n == limit else (rows(n) @ v) - 1) ** 2))(w))


# ----- the listed normalisations: both forms compute the same ------------------------
FORMS = {
    "dim_as_value": lambda x: jax.nn.log_softmax(x)[jnp.arange(x.shape[0]), 1],
    "identity (integers)": lambda x: x * jnp.arange(x.shape[0])[:, None],
    "identity (a float iota)": lambda x: x + jnp.arange(x.shape[0], dtype=x.dtype)[:, None],
    "gather as static slice": lambda x: x[:, 1],
    "gather as static slice (a window)": lambda x: x[:, None, 1:3],
    "gather as static slice (strided)": lambda x: x[:, ::2],
    "gather as static slice (a whole axis)": lambda x: x[:, :1][:, 0],
    "constant index": lambda x: x[:, ::-2][:, 0],
}


@pytest.mark.parametrize("name", sorted(FORMS))
def test_each_normalisation_matches_and_computes_the_same(name):
    """The symbolic and concrete forms are one program by the exact rule, and the symbolic
    program evaluated at the count computes what the concrete one computes."""
    fn = FORMS[name]
    n = symbol()
    sym = jax.make_jaxpr(fn)(jax.ShapeDtypeStruct((n, 4), jnp.float32))
    for count in (1, 5, 8):
        conc = jax.make_jaxpr(fn)(jax.ShapeDtypeStruct((count, 4), jnp.float32))
        assert differs(conc, sym, count) is None
        x = rows(count)
        exported = jax.export.export(jax.jit(fn))(jax.ShapeDtypeStruct((n, 4), jnp.float32))
        np.testing.assert_array_equal(np.asarray(exported.call(x)), np.asarray(jax.jit(fn)(x)))


def test_every_listed_normalisation_has_a_form_here():
    assert set(NORMALISATIONS) == {name.split(" (")[0] for name in FORMS}


# ----- 5. row indices on pad rows: the last real row's --------------------------------
INDEXED = {
    "sqrt": lambda x, w: (x @ w) * jnp.sqrt(5.5 - jnp.arange(x.shape[0])[:, None]),
    "log": lambda x, w: (x @ w) * jnp.log(4.5 - jnp.arange(x.shape[0], dtype=jnp.float32)[:, None]),
    "reciprocal": lambda x, w: (x @ w) / (5.0 - lax.broadcasted_iota(jnp.float32, (x.shape[0], 1), 0)),
}


@pytest.mark.parametrize("name", sorted(INDEXED))
def test_a_row_index_on_a_pad_row_is_the_last_real_rows(name):
    """With 5 rows in bucket 8, pad rows 6 and 7 would take sqrt/log/1/x of a negative or
    zero: their NaN (times a zero cotangent) made the gradient for W all NaN."""
    f = as_plain_jit(INDEXED[name], (5, 3))
    assert set(f.buckets()) == {4, 8}
    grad = jax.grad(lambda w: jnp.sum(f(rows(5), w)))(W)
    assert np.isfinite(np.asarray(grad)).all()


def test_a_row_index_inside_a_branch_or_loop_never_reaches_a_real_result():
    """A row index read inside a `lax.cond` branch or a loop body, where the bucket's program
    cannot give pad rows the last real row's index: that key runs at exact sizes (its
    gradient for W was all NaN)."""
    def branch(x, w):
        h = x @ w
        return lax.cond(jnp.sum(w) > -1e9, lambda h: h * jnp.sqrt(5.5 - jnp.arange(h.shape[0])[:, None]),
                        lambda h: h, h)

    def loop(x, w):
        return lax.fori_loop(0, 2, lambda i, h: h * jnp.sqrt(5.5 - jnp.arange(h.shape[0])[:, None]), x @ w)

    for fn in (branch, loop):
        f = as_plain_jit(fn, (5, 3))
        assert np.isfinite(np.asarray(jax.grad(lambda w: jnp.sum(f(rows(5), w)))(W))).all()


def test_a_row_index_never_raises_under_debug_nans():
    f = sf.jit(INDEXED["sqrt"], buckets={"x": 0})
    with jax.debug_nans(True):
        grad = jax.grad(lambda w: jnp.sum(f(rows(5), w)))(W)
    same(grad, jax.grad(lambda w: jnp.sum(INDEXED["sqrt"](rows(5), w)))(W))


# ----- the row index as an index: each row reads and writes its own row ----------------
LABELS = np.array([0, 3, 1, 2, 3, 0, 1], np.int32)


def by_rows(fn, counts, buckets):
    """Outputs and gradients (with respect to x and W) equal plain jax.jit's, in buckets."""
    f = sf.jit(fn, buckets=buckets)
    for n in counts:
        args = (rows(n), LABELS[:n])
        same(f(*args, W), jax.jit(fn)(*args, W))
        loss = lambda g: lambda x, w: jnp.sum(jnp.sin(g(x, LABELS[:n], w)))  # noqa: E731
        same(jax.grad(loss(f), argnums=(0, 1))(args[0], W), jax.grad(loss(jax.jit(fn)), argnums=(0, 1))(args[0], W))
    assert all(b & (b - 1) == 0 for b in f.buckets()), f.buckets()  # buckets, not exact sizes
    return f


def test_a_label_gather_is_accepted():
    """`log_softmax(x)[jnp.arange(n), labels]`: JAX's negative-index fix-up of a non-negative
    arange is no use of the count, and row i reads row i."""
    by_rows(lambda x, labels, w: jax.nn.log_softmax(x @ w)[jnp.arange(x.shape[0]), labels], (5, 3, 7),
            {"x": 0, "labels": 0})


def test_a_label_scatter_is_accepted():
    by_rows(lambda x, labels, w: (x @ w).at[jnp.arange(x.shape[0]), labels].set(0.0), (5, 3),
            {"x": 0, "labels": 0})


def test_an_add_at_the_row_index_adds_each_real_row_once():
    """A pad row's write lands nowhere (its clamped index would add the last row again)."""
    fn = lambda x, labels, w: jnp.zeros((x.shape[0], 4)).at[jnp.arange(x.shape[0])].add(x @ w)  # noqa: E731
    f = by_rows(fn, (5, 3, 6), {"x": 0})
    same(f(rows(5), LABELS[:5], W), rows(5) @ W)


# ----- the checking mode ----------------------------------------------------------------
def test_the_checking_mode_checks_the_program_that_runs(monkeypatch):
    """Its gradient check differentiates the bucket's own program (row indices clamped), not
    a plain trace at the bucket's size: no false alarm."""
    monkeypatch.setenv("STATICFIELD_CHECK_BUCKETS", "1")
    as_plain_jit(INDEXED["sqrt"], (5, 3))
    by_rows(lambda x, labels, w: jnp.zeros((x.shape[0], 4)).at[jnp.arange(x.shape[0])].add(x @ w), (5,), {"x": 0})


def test_the_checking_mode_says_nan_where_the_reference_is_finite():
    from staticfield._buckets._report import _differ

    text = _differ(np.array([1.0, np.nan], np.float32), np.array([1.0, 2.0], np.float32))
    assert text is not None and "nan" in text and "2.0" in text
    assert _differ(np.array([np.inf]), np.array([1.0])) is not None
    assert _differ(np.array([np.nan]), np.array([np.nan])) is None


def test_the_checking_mode_tolerates_half_precision_rounding(monkeypatch):
    """A correct float16 MLP differs from the unpadded call by an ulp or so: no BucketCheckError."""
    monkeypatch.setenv("STATICFIELD_CHECK_BUCKETS", "1")
    w1 = jnp.asarray(np.random.RandomState(0).randn(4, 32), jnp.float16)
    w2 = jnp.asarray(np.random.RandomState(1).randn(32, 4), jnp.float16)
    f = sf.jit(lambda x, w1, w2: jnp.tanh(x @ w1) @ w2, buckets={"x": 0})
    for n in (3, 5, 7, 11, 13):
        x = np.random.RandomState(n).randn(n, 4).astype(np.float16)
        f(x, w1, w2)
    from staticfield._buckets._report import _differ

    assert _differ(np.float16([1.0]), np.float16([1.0009765625])) is None
    assert _differ(np.float32([1.0]), np.float32([1.001])) is not None


# ----- messages name the user's own line ---------------------------------------------
def test_a_count_needed_by_numpy_names_the_users_line():
    def fn(x):
        return x * np.ones(x.shape[0])[:, None]

    with pytest.raises(sf.BucketError) as info:
        sf.jit(fn, buckets={"x": 0})(rows(5))
    line = fn.__code__.co_firstlineno + 1
    assert f"test_buckets_exact.py:{line} needs" in str(info.value) and "site-packages" not in str(info.value)


# ----- the near miss: a side argument kept at the real count --------------------------
def test_a_side_argument_at_the_row_count_is_named_once():
    import warnings

    f = sf.jit(lambda x, lengths: (x * 2, lengths + 1), buckets={"x": 0})
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        for n in (37, 38, 39):
            f(rows(n), np.arange(n, dtype=np.int32))
    said = [str(w.message) for w in seen if "lengths" in str(w.message)]
    assert len(said) == 1 and 'add "lengths": 0 to buckets=' in said[0], said
    assert 'lengths.shape[0]: 38 → 39 is the row count of `x`: add "lengths": 0 to buckets=' in str(f.recompiles[-1])


def test_a_side_argument_combined_with_the_rows_is_named_in_the_refusal():
    f = sf.jit(lambda x, lengths: x * lengths[:, None], buckets={"x": 0})
    with pytest.raises(sf.BucketError, match=r'`lengths` has the real row count \(5\) on axis 0 but is not in '
                                             r'buckets=, so it was not padded: add "lengths": 0 to buckets='):
        f(rows(5), np.ones(5, np.float32))
