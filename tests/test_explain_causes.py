"""Every explanation names the true cause, in the user's words (sf.watch and sf.Recompile)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

import staticfield as sf


def jitted(w: sf.watch) -> list:
    return [f for f in w.functions if not f.eager]


def changes(compile_) -> list[tuple[str, str, str, str]]:
    return [(c.path, c.kind, c.old, c.new) for c in compile_.changes]


def test_an_int_to_float_static_gets_the_precise_hint_in_the_watch():
    """self.n: 1 → 1.0 in sf.watch has the hint sf.Recompile gives (convert before the call)."""

    class Q(sf.Struct):
        w: jax.Array
        n: sf.Static[object] = 1

        @sf.jit_method(warn_compiles=None)
        def f(self, x):
            return self.w * x * self.n

    with sf.watch() as w:
        Q(jnp.ones(2), 1).f(1.0)
        Q(jnp.ones(2), 1.0).f(1.0)
    (change,) = jitted(w)[0].compiles[1].changes
    assert change.hint == Q.f.recompiles[-1].changes[0].hint
    assert "equal values of different types (int → float)" in change.hint
    assert "float(n)" in w.report()


def test_a_weakly_typed_array_is_not_called_a_python_scalar():
    """A weak array (jnp.asarray(2.0)) reads `weak f32[]`; a Python float reads as one."""

    def scale(x, y):
        return x * y

    f, g = jax.jit(scale), jax.jit(lambda y: y * 2)
    with sf.watch() as w:
        f(jnp.ones(2), jnp.float32(2.0))
        f(jnp.ones(2), jnp.asarray(2.0))
        g(2.0)
        g(jnp.float32(2.0))
    first, second = jitted(w)
    assert changes(first.compiles[1]) == [("y", "weak_type", "f32[]", "weak f32[]")]
    assert "Python" not in first.compiles[1].changes[0].new
    assert changes(second.compiles[1]) == [("y", "weak_type", "weak f32[] (a Python float)", "f32[]")]


def test_jax_enable_x64_is_named_not_the_arguments_dtype():
    """A Python float passed before and after jax_enable_x64: the setting is the change (no
    dtype change, no cast as the fix)."""

    def scale(x, y):
        return x * y

    f = jax.jit(scale)
    with sf.watch() as w:
        f(jnp.ones(2), 2.0)
        with jax.enable_x64(True):
            f(jnp.ones(2), 2.0)
    (entry,) = jitted(w)
    assert changes(entry.compiles[1]) == [("jax_enable_x64", "context", "False", "True")]
    assert "astype" not in w.report()
