"""``object.__setattr__`` on a built instance (the frozen-dataclass escape hatch): whatever
the instance was used for before, everything after it sees the new value, or the change
is refused and the instance is left as it was."""

from __future__ import annotations

import dataclasses
import inspect

import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings

import staticfield as sf

MODES = ["all", "read"]


def _cls(deps):
    class P(sf.Struct):
        w: jax.Array
        n: sf.Static[int] = 2
        tag: sf.Static[str] = "t"

        @sf.jit_method(deps=deps)
        def f(self, x):
            return self.w * x * self.n

        @sf.jit_method(static_argnames="k")
        def g(self, x, k=1):
            return self.w * x * self.n * k

    return P


@pytest.mark.parametrize("deps", MODES)
def test_static_set_after_use_is_what_every_path_sees(deps):
    """A static changed with object.__setattr__ after the method ran: obj.method, Cls.method,
    sf.jit, jax.jit, hash and == all see the new value (before: the old program ran)."""
    P = _cls(deps)
    p = P(jnp.ones(2))
    assert p.f(1.0).tolist() == [2.0, 2.0] and p.g(1.0, k=1).tolist() == [2.0, 2.0]
    h = hash(p)
    object.__setattr__(p, "n", 5)
    assert p.n == 5
    assert p.f(1.0).tolist() == [5.0, 5.0]
    assert P.f(p, 1.0).tolist() == [5.0, 5.0]
    assert p.g(1.0, k=2).tolist() == [10.0, 10.0]
    assert sf.jit(lambda o, x: o.f(x))(p, 1.0).tolist() == [5.0, 5.0]
    assert jax.jit(lambda o, x: o.w * o.n * x)(p, 1.0).tolist() == [5.0, 5.0]
    assert p == P(jnp.ones(2), n=5) and hash(p) == hash(P(jnp.ones(2), n=5)) != h


@pytest.mark.parametrize("deps", MODES)
def test_dynamic_set_after_use_is_what_every_path_sees(deps):
    """A dynamic field changed after use: the method, tree_leaves and jax.jit see the new array."""
    P = _cls(deps)
    p = P(jnp.ones(2))
    p.f(1.0)
    jax.tree.leaves(p)
    object.__setattr__(p, "w", jnp.full(2, 3.0))
    assert p.f(1.0).tolist() == [6.0, 6.0]
    assert np.asarray(jax.tree.leaves(p)[0]).tolist() == [3.0, 3.0]
    assert jax.jit(lambda o: o.w)(p).tolist() == [3.0, 3.0]


@pytest.mark.parametrize("deps", MODES)
def test_a_bound_method_held_across_the_change_follows_the_instance(deps):
    """``m = p.f`` taken before the change computes with the new values, as a plain
    bound method would."""
    P = _cls(deps)
    p = P(jnp.ones(2))
    m, mg = p.f, p.g
    m(1.0), mg(1.0)
    object.__setattr__(p, "n", 4)
    object.__setattr__(p, "w", jnp.full(2, 2.0))
    assert m(1.0).tolist() == [8.0, 8.0]
    assert mg(1.0, k=1).tolist() == [8.0, 8.0]
    assert m.__self__ is p
    assert jax.jit(lambda b, x: b(x))(m, 1.0).tolist() == [8.0, 8.0]


def test_a_bad_value_is_refused_and_the_instance_is_unchanged():
    """object.__setattr__ still type-checks: an array into a static field, or a value a
    __check_init__ refuses, raises naming the class and field; nothing changed."""

    class Q(sf.Struct):
        w: jax.Array
        n: sf.Static[int] = 2

        def __check_init__(self):
            if self.n < 0:
                raise ValueError("Q.n must be >= 0")

        @sf.jit_method
        def f(self, x):
            return self.w * x * self.n

    q = Q(jnp.ones(2))
    q.f(1.0)
    with pytest.raises(TypeError, match=r"Q\.n"):
        object.__setattr__(q, "n", jnp.ones(2))
    with pytest.raises(ValueError, match=r"Q\.n must be"):
        object.__setattr__(q, "n", -1)
    assert q.n == 2 and q.f(1.0).tolist() == [2.0, 2.0] and q == Q(jnp.ones(2))


def test_deleting_a_field_of_a_built_instance_is_refused():
    """object.__delattr__ on a built instance raises FrozenInstanceError naming the field."""
    P = _cls("all")
    p = P(jnp.ones(2))
    with pytest.raises(dataclasses.FrozenInstanceError, match=r"P\.n: cannot delete"):
        object.__delattr__(p, "n")
    assert p.n == 2 and p.f(1.0).tolist() == [2.0, 2.0]


def test_cached_properties_are_derived_again():
    """A functools.cached_property computed from the old value is computed again."""
    import functools

    class C(sf.Struct):
        n: sf.Static[int] = 2

        @functools.cached_property
        def double(self):
            return 2 * self.n

    c = C()
    assert c.double == 4
    object.__setattr__(c, "n", 5)
    assert c.double == 10


def test_setattr_in_post_init_and_custom_init_still_builds():
    """The escape hatch inside construction is unchanged: __post_init__ and a custom
    __init__ may use object.__setattr__ (no converter), and the result is sealed."""

    @sf.dataclass
    class A:
        w: jax.Array
        n: int = sf.static(default=1)

        def __post_init__(self):
            object.__setattr__(self, "n", self.n + 1)

    class B(sf.Struct):
        w: jax.Array
        n: sf.Static[int]

        def __init__(self, w):
            object.__setattr__(self, "w", w)
            object.__setattr__(self, "n", 7)

    assert A(jnp.ones(1)).n == 2 and B(jnp.ones(1)).n == 7
    assert hash(B(jnp.ones(1))) == hash(B(jnp.ones(1)))


@pytest.mark.parametrize("deps", MODES)
def test_getattr_static_in_a_trace_is_the_same_in_both_modes(deps):
    """inspect.getattr_static(self, "n") answers the same with deps="read" as with
    deps="all" (the field's class attribute, which holds no instance's value)."""
    seen = []

    class P(sf.Struct):
        w: jax.Array
        n: sf.Static[int] = 2

        @sf.jit_method(deps=deps)
        def f(self, x):
            seen.append(type(inspect.getattr_static(self, "n")))
            return self.w * x

    P(jnp.ones(2)).f(1.0)
    plain = type(inspect.getattr_static(P(jnp.ones(2)), "n"))
    assert seen and all(t is plain for t in seen), seen  # every trace (checking modes trace more)


@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["n", "w"]), st.integers(-3, 3)), min_size=1, max_size=6),
       st.sampled_from(MODES))
def test_any_sequence_of_changes_matches_a_fresh_instance(changes, deps):
    """Property: after any sequence of object.__setattr__ and calls, obj.method gives what
    a freshly built instance with the same fields gives (the slow, obviously right path)."""
    P = _cls(deps)
    p = P(jnp.ones(2))
    held = p.f
    for name, v in changes:
        value = v if name == "n" else jnp.full(2, float(v))
        object.__setattr__(p, name, value)
        fresh = P(p.w, n=p.n)
        assert p.f(1.5).tolist() == fresh.f(1.5).tolist() == held(1.5).tolist()
        assert p == fresh and hash(p) == hash(fresh)


@pytest.mark.parametrize("deps", MODES)
def test_a_nested_instance_changed_after_its_holder_was_used(deps):
    """A layer changed with object.__setattr__ after the model's method ran: the model's
    method (deps="read" caches the layers' statics and leaves on the model) sees it."""

    class L(sf.Struct):
        w: jax.Array
        n: sf.Static[int] = 2

    class M(sf.Struct):
        layers: tuple

        @sf.jit_method(deps=deps)
        def f(self, x):
            return sum(layer.w * layer.n for layer in self.layers) * x

    layer = L(jnp.ones(2))
    m = M((layer, L(jnp.ones(2), n=1)))
    held = m.f
    assert m.f(1.0).tolist() == [3.0, 3.0]
    object.__setattr__(layer, "n", 5)
    assert m.f(1.0).tolist() == M.f(m, 1.0).tolist() == held(1.0).tolist() == [6.0, 6.0]
    object.__setattr__(layer, "w", jnp.full(2, 2.0))
    assert m.f(1.0).tolist() == held(1.0).tolist() == [11.0, 11.0]
