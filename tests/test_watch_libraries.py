"""sf.watch on the shapes of real libraries' programs, each a small stand-in for what was
seen on optimistix 0.1.0 and lineax 0.1.1 (issue 39): a solver reached through
``eqx.filter_jit`` with three or more positional arguments, and a primitive whose
abstract-evaluation rule traces its implementation with ``eval_shape``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

import staticfield as sf


def jitted(w: sf.watch) -> list:
    return [f for f in w.functions if not f.eager]


def test_filter_jit_third_argument_is_traced_not_a_static_argument():
    """equinox jits its own wrapper with static_argnums=2; the user's third argument (y0 of
    optimistix's root_find) is traced, so its growth is a shape change, never static_arg."""
    eqx = pytest.importorskip("equinox")

    @eqx.filter_jit
    def root_find(fn, solver, y0, args, *, max_steps=256):
        return fn(y0, args) * solver

    def fn(y, args):
        return y**2 - args

    with sf.watch() as w:
        root_find(fn, 2.0, jnp.ones(3), jnp.ones(3))
        root_find(fn, 2.0, jnp.ones(4), jnp.ones(4))
    (entry,) = jitted(w)
    assert entry.count == 2
    got = [(c.path, c.kind, c.old, c.new) for c in entry.compiles[1].changes]
    assert got == [("y0", "shape", "f32[3]", "f32[4]"), ("args", "shape", "f32[3]", "f32[4]")], w.report()
    assert "static_argnums" not in w.report()


def test_jax_jit_static_argnums_still_name_the_static_argument():
    """A plain jax.jit's own static_argnums still mark the user's argument static."""

    def solve(x, y, k):
        return x * y + k

    f = jax.jit(solve, static_argnums=2)
    with sf.watch() as w:
        f(jnp.ones(2), jnp.ones(2), 1)
        f(jnp.ones(2), jnp.ones(2), 2)
    (entry,) = jitted(w)
    assert [(c.path, c.kind) for c in entry.compiles[1].changes] == [("k", "static_arg")]


def test_no_compiles_explains_filter_jit_third_argument_as_a_shape():
    """sf.no_compiles() refusing a filter_jit call explains it the same way: y0's shape."""
    eqx = pytest.importorskip("equinox")

    @eqx.filter_jit
    def root_find(fn, solver, y0, args):
        return fn(y0, args) * solver

    def fn(y, args):
        return y - args

    root_find(fn, 2.0, jnp.ones(3), jnp.ones(3))
    y0 = args = jnp.ones(4)
    with sf.no_compiles(), pytest.raises(sf.RecompileError) as info:
        root_find(fn, 2.0, y0, args)
    text = str(info.value)
    assert "\n  y0: f32[3] → f32[4] (shape)" in text and "static_arg" not in text, text
