"""Peers' rules that their users rely on: ``sf.Static[T]`` parameters (jax_dataclasses'
``jdc.jit``), ``sf.jit(obj.method)`` passing ``obj`` as a pytree (equinox), and wrappers
that carry ``__annotations__`` (``functools.wraps``)."""

from __future__ import annotations  # every annotation below is a string

import functools
import inspect

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import staticfield as sf

X = jnp.ones(2)


# ---------------------------------------------------------------- sf.Static[T] parameters


def test_static_annotated_parameter_is_a_static_argument():
    """A parameter annotated ``sf.Static[int]`` (a string annotation here) is static:
    usable as a Python int, one trace per value, as if named in static_argnames."""
    traces = [0]

    @sf.jit
    def repeat(x, n: sf.Static[int]):
        traces[0] += 1
        for _ in range(n):  # a Python int: would fail if n were traced
            x = x * 2
        return x

    assert jnp.array_equal(repeat(X, 3), 8 * X)
    assert jnp.array_equal(repeat(X * 2, 3), 16 * X)
    assert traces[0] == 1 and repeat.compile_count == 1
    assert jnp.array_equal(repeat(X, 2), 4 * X)
    assert traces[0] == 2 and repeat.compile_count == 2
    assert [c.kind for c in repeat.recompiles[0].changes] == ["static_arg"]


def test_static_annotation_as_an_object_and_by_keyword():
    """An annotation object (not a string) works too, and so does passing it by keyword."""

    def power(x, n):
        return x**n

    power.__annotations__ = {"n": sf.Static[int]}
    f = sf.jit(power)
    assert jnp.array_equal(f(X * 2, n=3), X * 8)
    assert jnp.array_equal(f(X * 2, 2), X * 4)
    assert f.compile_count == 2


def test_static_annotation_adds_to_static_argnames():
    """Annotated parameters and static_argnames both count; jit_method parameters too."""

    @functools.partial(sf.jit, static_argnames="m")
    def f(x, n: sf.Static[int], m):
        return x * n * m

    assert jnp.array_equal(f(X, 2, 3), 6 * X)
    with pytest.raises(TypeError, match="unhashable"):  # m is static: a list cannot be
        f(X, 2, [3])

    class Poly(sf.Struct):
        c: jax.Array

        @sf.jit_method
        def power(self, x, n: sf.Static[int]):
            out = x
            for _ in range(n - 1):
                out = out * x
            return self.c * out

    p = Poly(jnp.ones(2))
    assert jnp.array_equal(p.power(X * 2, 3), X * 8)
    assert Poly.power.compile_count == 1


def test_plain_annotations_stay_traced():
    """Other annotations (int, jax.Array) do not make a parameter static."""

    @sf.jit
    def f(x: jax.Array, k: int):
        return x * k

    f(X, 2)
    f(X, 3)
    assert f.compile_count == 1


# ---------------------------------------------------------------- sf.jit(obj.method)


class Model(sf.Struct):
    w: jax.Array
    scale: sf.Static[float] = 1.0

    def apply(self, x: jax.Array) -> jax.Array:
        """Scale x by w."""
        return self.w * x * self.scale


def test_jit_of_a_bound_method_passes_the_instance_as_a_pytree():
    """sf.jit(m.apply) for a new m with new values (same statics) does not trace again;
    a changed static does."""
    traces = [0]

    class Counted(sf.Struct):
        w: jax.Array
        n: sf.Static[int] = 1

        def apply(self, x):
            traces[0] += 1
            return self.w * x * self.n

    for value in (1.0, 2.0, 3.0):
        m = Counted(jnp.ones(2) * value)
        assert jnp.array_equal(sf.jit(m.apply)(X), X * value)  # right values, never stale
    assert traces[0] == 1
    assert jnp.array_equal(sf.jit(Counted(jnp.ones(2), n=2).apply)(X), 2 * X)
    assert traces[0] == 2
    assert sf.jit(Counted(jnp.ones(2)).apply).compile_count == 2  # the counters are shared


def test_jit_of_a_bound_method_is_the_users_method():
    """It carries the method's name, doc, annotations and signature without self, and
    AOT methods take the call's arguments."""
    f = sf.jit(Model(jnp.ones(2)).apply)
    assert (f.__name__, f.__qualname__, f.__doc__) == ("apply", "Model.apply", "Scale x by w.")
    assert f.__annotations__ == Model.apply.__annotations__
    assert list(inspect.signature(f).parameters) == ["x"]
    assert f.eval_shape(X).shape == (2,)
    assert "stablehlo" in f.lower(X).as_text() or "mhlo" in f.lower(X).as_text()


def test_jit_of_a_bound_method_shifts_argnums():
    """static_argnums counts from the first argument after self, as in jax.jit(obj.method)."""

    class Rep(sf.Struct):
        w: jax.Array

        def apply(self, x, n):
            for _ in range(n):
                x = x * self.w
            return x

    r = Rep(jnp.full(2, 2.0, jnp.float32))
    assert jnp.array_equal(sf.jit(r.apply, static_argnums=1)(X, 3), X * 8)
    assert jnp.array_equal(jax.jit(r.apply, static_argnums=1)(X, 3), X * 8)


def test_jit_of_a_callable_instance_is_jit_of_its_call():
    """sf.jit(m)(x) for an instance with __call__ (eqx.filter_jit(model)(x)) passes m as a
    pytree: new instances with new values reuse the program, a changed static compiles."""
    traces = [0]

    class Mlp(sf.Struct):
        w: jax.Array
        depth: sf.Static[int] = 1

        def __call__(self, x):
            """Apply the model."""
            traces[0] += 1
            for _ in range(self.depth):
                x = x * self.w
            return x

    for value in (1.0, 2.0, 3.0):
        m = Mlp(jnp.ones(2) * value)
        assert jnp.array_equal(sf.jit(m)(X), X * value)  # right values, never stale
    assert traces[0] == 1
    f = sf.jit(Mlp(jnp.ones(2) * 2, depth=2))
    assert jnp.array_equal(f(X), X * 4)
    assert traces[0] == f.compile_count == 2
    assert (f.__name__, f.__doc__) == ("__call__", "Apply the model.")
    assert list(inspect.signature(f).parameters) == ["x"]


def test_jit_of_an_instance_whose_call_is_a_jit_method():
    """sf.jit(m) where __call__ is already an @sf.jit_method is m's bound method: one program
    for new instances with new values, counted on the class attribute."""

    class Mlp(sf.Struct):
        w: jax.Array

        @sf.jit_method
        def __call__(self, x):
            return x * self.w

    for value in (1.0, 2.0):
        assert jnp.array_equal(sf.jit(Mlp(jnp.ones_like(X) * value))(X), X * value)
    assert Mlp.__call__.compile_count == 1
    assert sf.jit(Mlp(jnp.ones_like(X))).compile_count == 1  # the class's counters, not a new jit's


# ---------------------------------------------------------------- functools.wraps' attributes


def test_sf_jit_carries_annotations():
    """What sf.jit returns has the function's __annotations__, like functools.wraps."""

    def f(x: jax.Array, n: int = 1) -> jax.Array:
        return x * n

    g = sf.jit(f)
    assert g.__annotations__ == f.__annotations__
    assert np.asarray(g(X)).tolist() == [1.0, 1.0]
