"""Fields that hold leaves other than arrays: ``sf.field(leaves="any")``, ``check=False``
inherited and respected in nested instances, and hints that speak of the field."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.tree_util import Partial

import staticfield as sf


def _scale(a, x):
    return a * x


def _shift(a, x):
    return a + x


class Solver(sf.Struct):
    fn: Partial = sf.field(leaves="any")
    w: jax.Array = 1.0

    @sf.jit_method
    def run(self, x):
        return self.fn(x) * self.w


def test_partial_with_arrays_in_a_field():
    """A Partial's arrays are traced and its function is static: new values reuse the program,
    a new function compiles again, and the field reads back the Partial."""
    traces = 0

    class S(sf.Struct):
        fn: Partial = sf.field(leaves="any")

        @sf.jit_method
        def run(self, x):
            nonlocal traces
            traces += 1
            return self.fn(x)

    np.testing.assert_allclose(S(Partial(_scale, jnp.ones(2))).run(2.0), np.full(2, 2.0))
    np.testing.assert_allclose(S(Partial(_scale, jnp.ones(2) * 3)).run(2.0), np.full(2, 6.0))
    assert S.run.compile_count == traces == 1
    np.testing.assert_allclose(S(Partial(_shift, jnp.ones(2))).run(2.0), np.full(2, 3.0))
    assert S.run.compile_count == traces == 2
    s = S(Partial(_scale, jnp.ones(2)))
    assert isinstance(s.fn, Partial) and s.fn.func is _scale
    assert len(jax.tree_util.tree_leaves(s)) == 1  # only the array is a leaf


_SENTINEL, _OTHER = object(), object()


def test_solver_state_with_a_sentinel():
    """A sentinel in a state tuple is static, keyed by identity: the same sentinel shares the
    program, another one compiles again; plain jax.jit of a function taking it works too."""

    class State(sf.Struct):
        state: tuple = sf.field(leaves="any")

        @sf.jit_method
        def step(self, x):
            y, marker = self.state
            return y + x if marker is _SENTINEL else y - x

    np.testing.assert_allclose(State((jnp.ones(2), _SENTINEL)).step(1.0), np.full(2, 2.0))
    np.testing.assert_allclose(State((jnp.zeros(2), _SENTINEL)).step(1.0), np.full(2, 1.0))
    assert State.step.compile_count == 1
    np.testing.assert_allclose(State((jnp.ones(2), _OTHER)).step(1.0), np.full(2, 0.0))
    assert State.step.compile_count == 2
    out = jax.jit(lambda s: s.state[0] * 2)(State((jnp.ones(2), _SENTINEL)))
    np.testing.assert_allclose(out, np.full(2, 2.0))


def test_unhashable_leaf_is_keyed_by_identity():
    """An unhashable non-array leaf is static by identity: the same object shares the program."""

    class Table:
        __hash__ = None  # type: ignore[assignment]

        def __init__(self, k):
            self.k = k

    class S(sf.Struct):
        parts: tuple = sf.field(leaves="any")

        @sf.jit_method
        def run(self, x):
            return self.parts[0] * self.parts[1].k + x

    t = Table(2.0)
    with pytest.warns(sf.StaticFieldWarning, match="S.parts: .*Table, which is keyed by identity"):
        S((jnp.ones(2), t)).run(1.0)
    S((jnp.zeros(2), t)).run(1.0)
    assert S.run.compile_count == 1
    np.testing.assert_allclose(S((jnp.ones(2), Table(3.0))).run(1.0), np.full(2, 4.0))
    assert S.run.compile_count == 2


def test_python_scalars_in_an_any_field_are_static():
    """A Python number among the leaves is static (as eqx.filter_jit treats it), type-strictly."""

    class S(sf.Struct):
        cfg: dict = sf.field(leaves="any")

        @sf.jit_method
        def run(self, x):
            return x * self.cfg["w"] + self.cfg["k"]

    S({"w": jnp.ones(2), "k": 1}).run(1.0)
    S({"w": jnp.zeros(2), "k": 1}).run(1.0)
    assert S.run.compile_count == 1
    S({"w": jnp.ones(2), "k": 1.0}).run(1.0)
    assert S.run.compile_count == 2


def test_any_field_under_vmap_tree_map_and_replace():
    """vmap, tree_map and sf.replace see the arrays only and keep the other leaves."""
    s = Solver(Partial(_scale, jnp.ones((3, 2))), jnp.ones(3))
    out = jax.vmap(lambda m: m.fn(2.0) * m.w)(s)
    np.testing.assert_allclose(out, np.full((3, 2), 2.0))
    doubled = jax.tree_util.tree_map(lambda a: a * 2, s)
    assert doubled.fn.func is _scale
    np.testing.assert_allclose(doubled.fn.args[0], np.full((3, 2), 2.0))
    r = sf.replace(s, w=jnp.zeros(3))
    assert r.fn is s.fn
    assert s == Solver(Partial(_scale, jnp.ones((3, 2))), jnp.ones(3))
    assert s != Solver(Partial(_shift, jnp.ones((3, 2))), jnp.ones(3))


def test_closure_converted_function_in_a_field():
    """equinox's closure-converted function (a Module holding a Jaxpr leaf and arrays) is
    accepted in a leaves="any" field and runs under jit_method without retracing."""
    eqx = pytest.importorskip("equinox")

    class Holder(sf.Struct):
        fn: object = sf.field(leaves="any")

        @sf.jit_method
        def run(self, x):
            return self.fn(x)

    conv = eqx.filter_closure_convert(lambda x: x * 2.0, jnp.ones(2))
    assert any(not isinstance(leaf, jax.Array) for leaf in jax.tree_util.tree_leaves(conv))  # the Jaxpr
    np.testing.assert_allclose(Holder(conv).run(jnp.ones(2)), np.full(2, 2.0))
    halved = jax.tree_util.tree_map(lambda a: a / 2 if eqx.is_array(a) else a, conv)
    Holder(halved).run(jnp.ones(2))
    assert Holder.run.compile_count == 1  # the same Jaxpr, new constants: no new trace


def test_leaves_option_is_checked():
    """A leaves= value other than "arrays"/"any", or leaves="any" on a static field, is
    refused naming the class and field."""
    with pytest.raises(ValueError, match=r"Bad\.f: leaves='all' is not one of"):

        class Bad(sf.Struct):
            f: object = sf.field(leaves="all")

    with pytest.raises(TypeError, match=r"Bad2\.f: a static field has no leaves"):

        class Bad2(sf.Struct):
            f: object = sf.field(static=True, leaves="any")


# ---------------------------------------------------------------- check=False


class Loose(sf.Struct, check=False):
    fn: object


class LooseChild(Loose):
    more: object = None


class StrictChild(Loose, check=True):
    more: object = None


def test_check_false_is_inherited():
    """check=False on a base holds for its subclasses, unless a subclass gives its own."""
    LooseChild(len, "text")
    with pytest.raises(TypeError, match=r"StrictChild\.fn"):
        StrictChild(len)


def test_outer_class_does_not_recheck_a_nested_instance():
    """An outer class that checks accepts a nested instance built under its own class's rules
    (check=False, or a leaves="any" field), in a field or inside a tuple."""

    class Outer(sf.Struct):
        inner: object
        several: tuple = ()

    Outer(Loose(len))
    Outer(Solver(Partial(_scale, jnp.ones(2))), (Loose("a"), jnp.ones(1)))
    with pytest.raises(TypeError, match=r"Outer\.several"):
        Outer(Loose(len), (len,))


# ---------------------------------------------------------------- hints about the field


def test_hint_for_a_pytree_with_a_function_leaf_names_the_field():
    """A pytree holding arrays and a function in a plain dynamic field: the hint names the
    field with its own annotation and offers sf.field(leaves="any"), never the inner leaf's
    type as the field's."""

    class P(sf.Struct):
        parts: tuple

    with pytest.raises(TypeError) as info:
        P((jnp.ones(2), _scale))
    text = str(info.value)
    assert text.startswith(f"{P.__qualname__}.parts: the value holds a function at [1]")
    assert 'parts: tuple = sf.field(leaves="any")' in text
    assert "Callable" not in text


def test_hint_for_a_whole_non_array_value_suggests_static():
    """A str as a dynamic field's whole value: the hint says to make the field static."""

    class P(sf.Struct):
        name: str

    with pytest.raises(TypeError, match=re.escape("name: str = sf.static()")):
        P("a")


def test_static_hint_for_arrays_among_other_leaves_offers_leaves_any():
    """A static value holding a jax array (inside a Partial): the hint offers a dynamic field
    with leaves="any", not only a plain dynamic field that would refuse the function."""

    class P(sf.Struct):
        fn: sf.Static[Partial]

    with pytest.raises(TypeError, match=r'P\.fn.*leaves="any"'):
        P(Partial(_scale, jnp.ones(2)))


def test_a_changed_non_array_leaf_is_explained_as_static():
    """A recompile caused by a leaves="any" field's non-array leaf names its path, kind static."""

    class S(sf.Struct):
        state: tuple = sf.field(leaves="any")

        @sf.jit_method
        def step(self, x):
            return self.state[0] + x

    S((jnp.ones(2), _SENTINEL, 1)).step(1.0)
    S((jnp.ones(2), _SENTINEL, 2)).step(1.0)
    (event,) = S.step.recompiles
    assert [(c.path, c.kind, c.old, c.new) for c in event.changes] == [("self.state[2]", "static", "1", "2")]


def test_static_hint_for_an_unhashable_pytree_with_arrays_offers_leaves_any():
    """An unhashable pytree holding arrays (a closure-converted function) in a static field:
    the hint offers leaves="any", not only a plain dynamic field that would refuse it."""
    eqx = pytest.importorskip("equinox")
    c = jnp.ones(2)
    conv = eqx.filter_closure_convert(lambda x: x * c, jnp.ones(2))

    class P(sf.Struct):
        fn: object = sf.static()

    with pytest.raises(TypeError, match=r'P\.fn: a static value of type .* is unhashable.*leaves="any"'):
        P(conv)
