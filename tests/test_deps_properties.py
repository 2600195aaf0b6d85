"""Hypothesis: over random classes and methods, deps="read" gives deps="all"'s results, compiling no more."""

from __future__ import annotations

import functools
import pickle

import jax
import pytest
import jax.numpy as jnp
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import staticfield as sf
from staticfield._core._state import DEEP_ATTR

# Every program shared with a new key is checked against a trace for that key (DESIGN).
pytestmark = pytest.mark.usefixtures("check_deps")

SETTINGS = settings(max_examples=40, deadline=None)
STATICS = ("s0", "s1", "s2")
VALUES = (0, 1, 2, 1.0, True, "a")  # equal values of different types are different statics


def num(v):
    """A number standing for a static value; its type shows, as it can in a real trace."""
    if isinstance(v, str):
        return 7.0
    return float(v) + {int: 0.0, float: 0.25, bool: 0.5}[type(v)]


@sf.dataclass
class Inner:
    n: sf.Static[object] = 0
    m: sf.Static[object] = 0

    @functools.cached_property
    def cached(self):
        return num(self.n) * 3.0

    @sf.jit_method(warn_compiles=None)
    def scale(self, x):
        return x * num(self.m)


DEFAULT_INNER = Inner()


@sf.dataclass
class Lay:
    """A layer held in the model's dynamic ``layers`` tuple (keyed by path under deps="read")."""

    w: jax.Array
    a: sf.Static[object] = 0
    b: sf.Static[object] = 0
SUBCLASSES: list = []  # every class that reached P's __init_subclass__


def _steps(depth):
    leaf = st.one_of(
        st.tuples(st.just("read"), st.sampled_from(STATICS)),
        st.tuples(st.just("inner"), st.sampled_from(("n", "m"))),
        st.tuples(st.just("whole"), st.sampled_from(("hash", "replace", "tree", "getattr", "rebuild"))),
        st.tuples(st.just("cached"), st.sampled_from(("inner_property", "inner_jit"))),
        st.tuples(st.just("type"), st.sampled_from(("is_default", "exact", "inner_exact"))),
        st.tuples(st.just("layer"), st.sampled_from((0, 1)), st.sampled_from(("a", "b", "whole"))),
    )
    if depth == 0:
        return st.lists(leaf, max_size=3)
    branch = st.one_of(
        st.tuples(st.just("if"), st.sampled_from(STATICS), st.sampled_from((0.5, 1.2)),
                  _steps(depth - 1), _steps(depth - 1)),
        st.tuples(st.just("shape"), st.just(2), _steps(depth - 1), _steps(depth - 1)),
    )
    return st.lists(st.one_of(leaf, branch), max_size=3)


def run(steps, self, x):
    """Interpret a random method body: reads, branches on statics and shapes, whole uses."""
    for step in steps:
        kind = step[0]
        if kind == "read":
            x = x * 1.5 + num(getattr(self, step[1]))
        elif kind == "inner":
            x = x + num(getattr(self.inner, step[1]))
        elif kind == "whole":
            use = step[1]
            if use == "hash":
                x = x + float(hash(self) == hash(self))
            elif use == "replace":
                x = x + num(sf.replace(self, w=self.w).s0)
            elif use == "tree":
                x = x + jax.tree.map(lambda a: a, self).w[0]
            elif use == "rebuild":
                x = x + type(self)(self.w * 2, self.s0, self.s1, self.s2, self.inner, self.layers).w[0]
            else:
                x = x + len(sf.static_fields(self))
        elif kind == "cached":  # entries cached on the nested instance before the call
            x = x + self.inner.cached if step[1] == "inner_property" else self.inner.scale(x)
        elif kind == "layer":
            layer = self.layers[step[1]]
            if step[2] == "whole":
                x = x + float(hash(layer) == hash(layer)) + layer.w[0]
            else:
                x = x * layer.w[0] + num(getattr(layer, step[2]))
        elif kind == "type":
            if step[1] == "is_default":
                x = x + float(self.inner is DEFAULT_INNER)
            elif step[1] == "exact":
                x = x + float(type(self).__name__ == "P") + 2.0 * float(type(self).__name__ == "Sub")
            else:
                x = x + float(type(self.inner) is Inner)
        elif kind == "if":
            _, name, t, yes, no = step
            x = run(yes if num(getattr(self, name)) > t else no, self, x)
        else:
            _, t, yes, no = step
            x = run(yes if x.shape[0] > t else no, self, x)
    return x


def fresh(steps, deps, sub=False):
    """The class under test; with ``sub``, a decorated subclass whose property overrides s2."""

    @sf.dataclass
    class P:
        w: jax.Array
        s0: sf.Static[object] = 0
        s1: sf.Static[object] = 0
        s2: sf.Static[object] = 0
        inner: sf.Static[Inner] = DEFAULT_INNER
        layers: tuple = (Lay(jnp.ones(1)), Lay(jnp.ones(1)))

        def __init_subclass__(cls, **kwargs):
            super().__init_subclass__(**kwargs)
            SUBCLASSES.append(cls.__name__)

        @sf.jit_method(deps=deps, warn_compiles=None)
        def f(self, x):
            return run(steps, self, x * self.w[0])

    if not sub:
        return P

    @sf.dataclass
    class Sub(P):
        @property
        def s2(self):
            return num(self.s1) + 0.125

    return Sub


def inner_of(values):
    """Inner(*values), or the shared default when values are its own (identity matters)."""
    inner = Inner(*values)
    if inner == DEFAULT_INNER:
        return DEFAULT_INNER
    inner.cached, inner.scale(1.0)  # entries cached on it before any trace
    return inner


calls = st.lists(
    st.tuples(st.tuples(*[st.sampled_from(VALUES)] * 3), st.tuples(*[st.sampled_from(VALUES)] * 2),
              st.sampled_from((2, 3)), st.tuples(*[st.sampled_from(VALUES[:3])] * 4)),
    min_size=1, max_size=8,
)


def layers_of(values):
    a0, b0, a1, b1 = values
    return (Lay(jnp.ones(1), a0, b0), Lay(jnp.full(1, 2.0), a1, b1))


@SETTINGS
@given(steps=_steps(2), calls=calls, sub=st.booleans())
def test_read_deps_match_all_deps(steps, calls, sub):
    """Bit-identical results to deps="all", and compile_count never higher, after every call;
    no class but the user's own subclass ever reaches __init_subclass__."""
    del SUBCLASSES[:]
    Read, All = fresh(steps, "read", sub), fresh(steps, "all", sub)
    for statics, inner, size, layers in calls:
        x = jnp.arange(size, dtype=jnp.float32)
        got = Read(jnp.ones(2), *statics, inner_of(inner), layers_of(layers)).f(x)
        want = All(jnp.ones(2), *statics, inner_of(inner), layers_of(layers)).f(x)
        assert np.asarray(got).tobytes() == np.asarray(want).tobytes()
        assert Read.f.compile_count <= All.f.compile_count
    assert SUBCLASSES == (["Sub", "Sub"] if sub else [])


@SETTINGS
@given(values=st.lists(st.sampled_from(VALUES), min_size=1, max_size=10))
def test_unread_statics_never_compile_again(values):
    """Any number of instances differing only in statics the method never reads: one compile."""
    P = fresh([("read", "s0")], "read")
    for v in values:
        P(jnp.ones(2), 1, v, v, Inner(v, v)).f(jnp.ones(2))
    assert P.f.compile_count == 1 == P.f.cache_size()


@sf.dataclass
class _Holder:
    """A model whose layers (sf instances in a dynamic tuple) give it a deep key."""

    layers: tuple


@SETTINGS
@given(first=st.lists(st.tuples(st.sampled_from(VALUES), st.sampled_from(VALUES)), min_size=1, max_size=3),
       second=st.lists(st.tuples(st.sampled_from(VALUES), st.sampled_from(VALUES)), min_size=1, max_size=3))
def test_deep_keys_are_equal_exactly_when_the_nested_statics_are(first, second):
    """The key a deps="read" hit looks up: equal (and equally hashed) exactly when every
    nested static is equal with the same type, as the per-layer keys are; a pickled copy
    is the same key."""
    def deep_key(statics):
        model = _Holder(tuple(Lay(jnp.ones(2), a, b) for a, b in statics))
        return sf_deep(model)[1]

    def typed(statics):
        return [tuple((type(v), v) for v in pair) for pair in statics]

    k1, k2 = deep_key(first), deep_key(second)
    assert (k1 == k2) is (typed(first) == typed(second))
    assert (k1 != k2) is not (k1 == k2)
    if k1 == k2:
        assert hash(k1) == hash(k2)
    for key in (k1, k2):
        back = pickle.loads(pickle.dumps(key))
        assert back == key and hash(back) == hash(key) and {key: 1}[back] == 1


def sf_deep(obj):
    """``obj``'s deps="read" flatten: (hollow children, key)."""
    return getattr(obj, DEEP_ATTR)


def test_deep_keys_with_colliding_hashes_stay_apart():
    """Two different deep keys whose hashes collide are still two keys (two programs)."""
    k1 = sf_deep(_Holder((Lay(jnp.ones(2), 1, 0),)))[1]
    k2 = sf_deep(_Holder((Lay(jnp.ones(2), 2, 0),)))[1]
    collided = int.__new__(type(k2), int(k1))  # k2's contents under k1's hash
    collided.__dict__.update(k2.__dict__)
    assert hash(collided) == hash(k1)
    assert collided != k1 and k1 != collided and not (collided == k1)
    assert {k1: "k1", collided: "k2"}[collided] == "k2"
