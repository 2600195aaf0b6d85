"""Memory: what a jitted function keeps alive, and for how long."""

from __future__ import annotations

import gc
import weakref

import jax
import jax.numpy as jnp

import staticfield as sf


def _compiled_once():
    def g(x):
        return x * 2

    f = sf.jit(g)
    f(jnp.ones(3))
    (jitted, _), = f.__sf_jit__.variants.values()
    return weakref.ref(f), weakref.ref(jitted)


def test_deleting_an_sf_jit_function_frees_its_programs():
    """Once the function and its sf.jit wrapper are gone, the per-variant jax.jit is freed."""
    f_ref, jitted_ref = _compiled_once()
    gc.collect()
    assert f_ref() is None and jitted_ref() is None


def test_explanation_history_is_bounded():
    """After many compiles of one structure, explanations still work and the history stays bounded."""
    from staticfield._explain._describe import SETTINGS
    from staticfield._jit import _tracker

    f = sf.jit(lambda x: x + 1, warn_compiles=None)
    for n in range(1, _tracker.PER_STRUCTURE + 10):
        f(jnp.ones(n))
    tracker = f.__sf_jit__.tracker
    assert len(tracker._by_structure[(*SETTINGS, "x")]) == _tracker.PER_STRUCTURE
    last = f.recompiles[-1]
    assert [(c.path, c.kind) for c in last.changes] == [("x", "shape")]


def test_bound_method_holds_no_reference_to_its_instance():
    """Caching obj.method on obj makes no cycle: the instance is freed by refcount alone."""
    @sf.dataclass
    class M:
        x: jax.Array

        @sf.jit_method
        def f(self, y):
            return self.x + y

    m = M(jnp.ones(2))
    m.f(1.0)
    r = weakref.ref(m)
    gc.disable()
    try:
        del m
        assert r() is None
    finally:
        gc.enable()
