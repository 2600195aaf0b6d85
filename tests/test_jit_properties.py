"""Hypothesis properties of compile counts under value and static changes."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import staticfield as sf

SETTINGS = settings(max_examples=25, deadline=None)


def fresh_class():
    traces = []

    @sf.dataclass
    class Model:
        w: jax.Array
        b: jax.Array
        depth: sf.Static[int] = 1
        act: sf.Static[str] = "tanh"

        @sf.jit_method
        def __call__(self, x):
            traces.append(1)
            for _ in range(self.depth):
                x = jnp.tanh(self.w * x + self.b) if self.act == "tanh" else self.w * x + self.b
            return x

    return Model, traces


floats = st.floats(-10, 10, allow_nan=False, width=32)


@SETTINGS
@given(values=st.lists(st.tuples(floats, floats), min_size=1, max_size=6))
def test_dynamic_changes_never_add_compiles(values):
    """Changing only array values never increases compile_count beyond one."""
    Model, traces = fresh_class()
    x = jnp.ones(3)
    for w, b in values:
        Model(jnp.full(3, w), jnp.full(3, b))(x)
    assert Model.__call__.compile_count == 1 == len(traces)
    assert Model.__call__.recompiles == []


@SETTINGS
@given(
    depth=st.integers(2, 5),
    act=st.sampled_from(["relu", "linear"]),
    which=st.sampled_from(["depth", "act"]),
    repeats=st.integers(1, 4),
)
def test_one_static_change_adds_exactly_one_compile(depth, act, which, repeats):
    """Changing one static value adds exactly one compile the first time, none after."""
    Model, traces = fresh_class()
    base = Model(jnp.ones(3), jnp.zeros(3))
    x = jnp.ones(3)
    base(x)
    changed = base.replace(**({"depth": depth} if which == "depth" else {"act": act}))
    for _ in range(repeats):
        changed(x)
        base(x)
    assert Model.__call__.compile_count == 2 == len(traces)
    (event,) = Model.__call__.recompiles
    assert [(c.path, c.kind) for c in event.changes] == [(f"self.{which}", "static")]


@SETTINGS
@given(statics=st.lists(st.integers(0, 5), min_size=1, max_size=12))
def test_compile_count_equals_distinct_static_values(statics):
    """compile_count is the number of distinct static values seen, in any order."""
    Model, traces = fresh_class()
    x = jnp.ones(2)
    for s in statics:
        Model(jnp.ones(2), jnp.zeros(2), depth=s)(x)
    assert Model.__call__.compile_count == len(set(statics)) == len(traces)
    assert len(Model.__call__.recompiles) == len(set(statics)) - 1


@SETTINGS
@given(shapes=st.lists(st.integers(1, 4), min_size=1, max_size=8))
def test_shapes_cached_per_shape(shapes):
    """Each distinct input shape traces once; returning to a shape is a hit."""
    f_traces = []

    @sf.jit
    def f(x):
        f_traces.append(x.shape)
        return x * 2

    for n in shapes:
        np.testing.assert_allclose(f(jnp.ones(n)), np.full(n, 2.0))
    assert f.compile_count == len(set(shapes)) == len(f_traces)


@SETTINGS
@given(statics=st.lists(st.integers(0, 5), min_size=1, max_size=12), budget=st.integers(1, 4))
def test_budget_admits_exactly_max_compiles(statics, budget):
    """With max_compiles=k set on the class attribute, the first k distinct statics compile,
    later new ones raise, known ones keep running; counters and JAX's cache agree."""
    Model, traces = fresh_class()
    Model.__call__.max_compiles = budget
    x = jnp.ones(2)
    admitted: list[int] = []
    for s in statics:
        try:
            Model(jnp.ones(2), jnp.zeros(2), depth=s)(x)
            ran = True
        except sf.RecompileError:
            ran = False
        assert ran == (s in admitted or len(admitted) < budget)
        if ran and s not in admitted:
            admitted.append(s)
    assert Model.__call__.compile_count == len(admitted) == len(traces) == Model.__call__.cache_size()
    assert len(Model.__call__.recompiles) == len(admitted) - 1
