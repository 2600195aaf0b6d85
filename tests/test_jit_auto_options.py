"""``sf.jit(fn, static="auto")`` with ``jax.jit``'s options and the trees a solver library
passes: donation by the user's position or name, ``**kwargs`` and ``*args``, outputs JAX
cannot hold (a ``ShapeDtypeStruct``, an object that captured a tracer), and every
non-array leaf below a ``check=False`` field static however deep (DESIGN.md,
``static="auto"``)."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import staticfield as sf

X = jnp.arange(3.0)


def _counted(fn, **options):
    traces = [0]

    @functools.wraps(fn)
    def body(*args, **kwargs):
        traces[0] += 1
        return fn(*args, **kwargs)

    return sf.jit(body, static="auto", **options), traces


def _axpy(n, a, b):
    return a * n + b, a - b  # two outputs: room for both donated buffers


# ----- donation: the argument the user named, never another ---------------------------------
@pytest.mark.parametrize("options, donated", [
    ({"donate_argnums": (1,)}, {"a"}),
    ({"donate_argnums": 1}, {"a"}),
    ({"donate_argnums": (2,)}, {"b"}),
    ({"donate_argnames": ("b",)}, {"b"}),
    ({"donate_argnames": "a"}, {"a"}),
    ({"donate_argnums": (1, 2)}, {"a", "b"}),
    ({"donate_argnums": (0,)}, set()),  # the static n: nothing to donate
])
def test_donation_deletes_the_argument_the_user_named(options, donated):
    """donate_argnums counts the user's parameters (a static n included), donate_argnames
    names them; the other array is never deleted, whether passed by position or keyword."""
    f = sf.jit(_axpy, static="auto", **options)
    for call in ("positional", "keyword"):
        a, b = jnp.ones(3) * 2, jnp.ones(3)
        out = f(3, a, b) if call == "positional" else f(3, b=b, a=a)
        np.testing.assert_array_equal(out[0], jnp.full(3, 7.0))
        assert {name for name, v in (("a", a), ("b", b)) if v.is_deleted()} == donated, call


def test_donation_reaches_star_args_kwargs_and_instance_fields():
    """A donated *args element, a **kwargs entry named in donate_argnames, and an sf
    instance (its dynamic leaves) are donated, and nothing else."""

    class P(sf.Struct):
        w: jax.Array
        k: int = sf.static(default=2)

    def f(p, *rest, **extra):
        return p.w * p.k + sum(rest) + extra["c"], p.w + extra["d"], rest[1] * 1, extra["c"] * 1

    g = sf.jit(f, static="auto", donate_argnums=(0, 2), donate_argnames=("c",))
    p, r1, r2, c, d = P(jnp.ones(3)), jnp.ones(3), jnp.ones(3), jnp.ones(3), jnp.ones(3)
    np.testing.assert_array_equal(g(p, r1, r2, c=c, d=d)[0], jnp.full(3, 5.0))
    assert [v.is_deleted() for v in (p.w, r1, r2, c, d)] == [True, False, True, True, False]


def _three(n, a, b, c):
    return a * n, b * n, c * n  # as many outputs as arrays: every donated buffer is usable


@settings(max_examples=12, deadline=None)
@given(named=st.sets(st.sampled_from("abc")), by_name=st.booleans(),
       keywords=st.lists(st.sampled_from("abc"), unique=True))
def test_donation_property(named, by_name, keywords):
    """Whatever is named (by position or name) and however the call passes the arrays
    (positionally or by keyword), exactly the named arrays are deleted."""
    options = ({"donate_argnames": tuple(sorted(named))} if by_name
               else {"donate_argnums": tuple(1 + "abc".index(x) for x in sorted(named))})
    f = sf.jit(_three, static="auto", **options)
    arrays = {x: jnp.full(3, float(i)) for i, x in enumerate("abc")}
    positional = [arrays[x] for x in "abc"[:min(("abc".index(k) for k in keywords), default=3)]]
    out = f(2, *positional, **{x: arrays[x] for x in "abc"[len(positional):]})
    np.testing.assert_array_equal(out[2], jnp.full(3, 4.0))
    assert {x for x, v in arrays.items() if v.is_deleted()} == named


# ----- **kwargs and *args carry arrays and statics like named parameters --------------------
def test_kwargs_carry_arrays_and_statics():
    def f(x, *args, **kw):
        out = x + sum(args) + kw["y"]
        return out * 2 if kw.get("flag") else out

    g, traces = _counted(f)
    np.testing.assert_array_equal(g(X, y=X), X * 2)
    np.testing.assert_array_equal(g(X + 1, y=X), X * 2 + 1)
    assert traces[0] == 1
    np.testing.assert_array_equal(g(X, X, y=X, flag=True), X * 6)
    np.testing.assert_array_equal(g(X, X, y=X + 1, flag=True), X * 6 + 2)
    assert traces[0] == 2
    g(X, X, y=X, flag=False)
    assert [(c.path, c.kind) for c in g.recompiles[-1].changes] == [("kw['flag']", "static_arg")]


# ----- outputs JAX cannot hold --------------------------------------------------------------
def test_a_shape_dtype_struct_output_comes_back_as_itself():
    """eqx.filter_jit returns a ShapeDtypeStruct output as it is; so does static="auto", on
    the first call and on a hit."""
    spec = jax.ShapeDtypeStruct((2,), jnp.float32)
    g, traces = _counted(lambda x: (x * 2, spec, {"s": jax.eval_shape(jnp.sin, x)}))
    for _ in range(2):
        out, back, inner = g(X)
        np.testing.assert_array_equal(out, X * 2)
        assert back == spec and isinstance(back, jax.ShapeDtypeStruct)
        assert isinstance(inner["s"], jax.ShapeDtypeStruct) and inner["s"].shape == (3,)
    assert traces[0] == 1


@pytest.mark.parametrize("make", ["closure", "object", "partial"])
def test_an_output_holding_a_tracer_is_an_error_naming_its_path(make):
    """A function's output that captured a tracer (a closure, an object's attribute, a
    partial's argument) is a TypeError when the call returns, naming the output path and
    what it captured, never JAX's "created on line ." later."""

    class Box:
        def __init__(self, v):
            self.v = v

    def leak(x):
        y = x * 2
        held = {"closure": lambda: y, "object": Box(y), "partial": functools.partial(jnp.add, y)}[make]
        return x, {"later": held}

    g = sf.jit(leak, static="auto")
    with pytest.raises(TypeError) as info:
        g(X)
    text = str(info.value)
    assert "leak" in text and "['later']" in text and "tracer" in text
    assert {"closure": "y", "object": ".v", "partial": "argument"}[make] in text


# ----- every non-array leaf below a check=False field is static, however deep ---------------
class Solver(sf.Struct, check=False):
    """A solver-like class: a plain field holding whatever the library puts there."""

    options: object
    w: jax.Array


def _apply(s, x):
    fn, scale = s.options
    return fn(x) * scale * s.w


def test_a_tuple_or_dict_of_functions_and_arrays_in_a_check_false_field():
    g, traces = _counted(_apply)
    s = Solver((jnp.sin, jnp.ones(3) * 2), jnp.ones(3))
    np.testing.assert_array_equal(g(s, X), jnp.sin(X) * 2)
    np.testing.assert_array_equal(g(sf.replace(s, options=(jnp.sin, jnp.ones(3) * 3)), X), jnp.sin(X) * 3)
    assert traces[0] == 1  # the array inside the tuple is traced
    g(sf.replace(s, options=(jnp.cos, jnp.ones(3))), X)
    assert traces[0] == 2
    assert [(c.path, c.kind) for c in g.recompiles[-1].changes] == [("s.options[0]", "static")]
    h = sf.jit(lambda s, x: s.options["f"](x) if s.options["flag"] else x, static="auto")
    np.testing.assert_array_equal(h(Solver({"f": jnp.sin, "flag": True}, X), X), jnp.sin(X))
    # a check=False instance inside another's field (Kvaerno5(root_finder=Chord(...))), in a tuple
    k, k_traces = _counted(lambda s, x: _apply(s.options[0], x) + s.w)
    outer = Solver((Solver((jnp.sin, 2.0), jnp.ones(3)), None), jnp.zeros(3))
    np.testing.assert_array_equal(k(outer, X), jnp.sin(X) * 2.0)
    k(sf.replace(outer, w=jnp.ones(3)), X)
    assert k_traces[0] == 1


class _Operator:
    """A lineax-like operator over a function: a pytree whose leaves are the function and
    its arrays (registered below), nested in a solver state."""

    def __init__(self, fn, scale):
        self.fn, self.scale = fn, scale

    def mv(self, v):
        return self.fn(v) * self.scale


jax.tree_util.register_pytree_node(_Operator, lambda o: ((o.fn, o.scale), None), lambda _, c: _Operator(*c))


def test_a_closure_converted_function_in_nested_state_passed_back_through_options():
    """The implicit Runge-Kutta pattern: an operator over a closure-converted function
    (a Jaxpr-holding pytree) returned in a state, then passed back inside a check=False
    field's options, several levels down: it runs, and a new array value reuses the program."""
    eqx = pytest.importorskip("equinox")

    def init(y):
        fn = eqx.filter_closure_convert(lambda v: v * y + 1.0, y)
        return {"linear_state": (_Operator(fn, jnp.ones(3)), jnp.zeros(3))}

    def step(s, x):
        op, _ = s.options["init_state"]["linear_state"]
        return op.mv(x) * s.w

    g, traces = _counted(step)
    state = init(X)
    out = g(Solver({"init_state": state}, jnp.ones(3)), X)
    np.testing.assert_allclose(out, X * X + 1.0)
    g(Solver({"init_state": state}, jnp.ones(3) * 2), X)
    assert traces[0] == 1


def test_an_equinox_module_holding_an_mlp_as_a_field_value():
    """diffrax's neural ODE: an equinox Module holding an eqx.nn.MLP (its activation
    functions are leaves) as a check=False field's value, with no leaves="any"."""
    eqx = pytest.importorskip("equinox")

    class Func(eqx.Module):
        mlp: eqx.nn.MLP

        def __call__(self, y):
            return self.mlp(y)

    class Term(sf.Struct, check=False):
        vector_field: object

    model = Func(eqx.nn.MLP(3, 3, 4, 2, key=jax.random.PRNGKey(0)))
    g, traces = _counted(lambda term, y: term.vector_field(y))
    np.testing.assert_allclose(g(Term(model), X), model(X), rtol=1e-6)
    bumped = jax.tree.map(lambda a: a + 1 if eqx.is_array(a) else a, model)
    np.testing.assert_allclose(g(Term(bumped), X), bumped(X), rtol=1e-6)
    assert traces[0] == 1
    np.testing.assert_allclose(eqx.filter_grad(lambda m: g(Term(m), X).sum())(model).mlp.layers[0].weight,
                               eqx.filter_grad(lambda m: m(X).sum())(model).mlp.layers[0].weight, rtol=1e-5)
