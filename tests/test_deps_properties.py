"""Hypothesis: over random classes and methods, deps="read" gives deps="all"'s results, compiling no more."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import staticfield as sf

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


def _steps(depth):
    leaf = st.one_of(
        st.tuples(st.just("read"), st.sampled_from(STATICS)),
        st.tuples(st.just("inner"), st.sampled_from(("n", "m"))),
        st.tuples(st.just("whole"), st.sampled_from(("hash", "replace", "tree", "getattr"))),
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
            else:
                x = x + len(sf.static_fields(self))
        elif kind == "if":
            _, name, t, yes, no = step
            x = run(yes if num(getattr(self, name)) > t else no, self, x)
        else:
            _, t, yes, no = step
            x = run(yes if x.shape[0] > t else no, self, x)
    return x


def fresh(steps, deps):
    @sf.dataclass
    class P:
        w: jax.Array
        s0: sf.Static[object] = 0
        s1: sf.Static[object] = 0
        s2: sf.Static[object] = 0
        inner: sf.Static[Inner] = Inner()

        @sf.jit_method(deps=deps, warn_compiles=None)
        def f(self, x):
            return run(steps, self, x * self.w[0])

    return P


calls = st.lists(
    st.tuples(st.tuples(*[st.sampled_from(VALUES)] * 3), st.tuples(*[st.sampled_from(VALUES)] * 2),
              st.sampled_from((2, 3))),
    min_size=1, max_size=8,
)


@SETTINGS
@given(steps=_steps(2), calls=calls)
def test_read_deps_match_all_deps(steps, calls):
    """Bit-identical results to deps="all", and compile_count never higher, after every call."""
    Read, All = fresh(steps, "read"), fresh(steps, "all")
    for statics, inner, size in calls:
        x = jnp.arange(size, dtype=jnp.float32)
        got = Read(jnp.ones(2), *statics, Inner(*inner)).f(x)
        want = All(jnp.ones(2), *statics, Inner(*inner)).f(x)
        assert np.asarray(got).tobytes() == np.asarray(want).tobytes()
        assert Read.f.compile_count <= All.f.compile_count


@SETTINGS
@given(values=st.lists(st.sampled_from(VALUES), min_size=1, max_size=10))
def test_unread_statics_never_compile_again(values):
    """Any number of instances differing only in statics the method never reads: one compile."""
    P = fresh([("read", "s0")], "read")
    for v in values:
        P(jnp.ones(2), 1, v, v, Inner(v, v)).f(jnp.ones(2))
    assert P.f.compile_count == 1 == P.f.cache_size()
