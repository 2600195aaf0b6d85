"""Each compile is explained by its true cause, in the user's words (round 4 of the ports)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import staticfield as sf


def jitted(w: sf.watch) -> list:
    return [f for f in w.functions if not f.eager and not f.padding]


def test_a_change_of_committed_device_is_kind_committed():
    """The same array, placed with jax.device_put (committed) then made by jnp (not): JAX
    compiles again; the watch names `x` and kind "committed", not "no argument differs"."""
    f = jax.jit(lambda x: x + 1)
    g = sf.jit(lambda x: x * 2)
    made, placed = jnp.ones(3), jax.device_put(jnp.ones(3), jax.devices()[0])
    device = jax.devices()[0]
    with sf.watch() as w:
        f(placed)
        f(made)
        g(made)
        g(placed)
    (fn, sf_fn) = jitted(w)
    (change,) = fn.compiles[1].changes
    assert [str(c).splitlines()[0] for c in sf_fn.compiles[1].changes] == [
        f"x: uncommitted → committed to {device.platform}:{device.id} (committed)"]
    assert (change.path, change.kind) == ("x", "committed")
    assert (change.old, change.new) == (f"committed to {device.platform}:{device.id}", "uncommitted")
    assert "device_put" in change.hint
    assert "no argument differs" not in w.report()


def test_a_positional_static_argument_is_named_by_its_parameter():
    """static_argnums into `*rest`: `rest[0]`, never `args[1]`; a named one by its name."""

    def scale(x, k):
        return x * k

    def spread(x, *rest):
        return x * rest[0]

    named, starred = sf.jit(scale, static_argnums=1), sf.jit(spread, static_argnums=1)
    for k in (2, 3):
        named(jnp.ones(2), k)
        starred(jnp.ones(2), k)
    assert [c.path for c in named.recompiles[0].changes] == ["k"]
    assert [c.path for c in starred.recompiles[0].changes] == ["rest[0]"]
    with pytest.raises(TypeError, match="`rest\\[0\\]` is an unhashable list"):
        starred(jnp.ones(2), [1])


def test_a_python_if_on_a_dynamic_array_field_is_not_advised_into_a_static():
    """`if self.w.sum() > 0` on a jax.Array field: the hint says to branch with jnp.where or
    jax.lax.cond, never to mark the array sf.Static[...] (which staticfield refuses)."""

    class Gate(sf.Struct):
        w: jax.Array

        @sf.jit_method
        def f(self, x):
            if self.w.sum() > 0:
                return x
            return -x

    with pytest.raises(jax.errors.TracerBoolConversionError) as info:
        Gate(jnp.ones(2)).f(1.0)
    text = str(info.value)
    assert "`self.w`" in text and "Gate" in text
    assert "sf.Static[" not in text.replace("sf.Static[bool]", "")
    assert "jax.lax.cond" in text and "jnp.where" in text


class _Env:
    def __init__(self, scale):
        self.scale = scale


def make_rollout(env, horizon=3):
    def rollout(x):
        return x * env.scale * horizon

    return rollout


def test_closures_of_a_factory_are_explained_as_closures():
    """make_rollout(env) per environment: `another closure of make_rollout (captures env)`,
    with advice to build each once per value and keep it, never "at module level"."""
    run = sf.jit(lambda x, step: step(x), static_argnames="step", warn_compiles=None)
    x = jnp.ones(2)
    with sf.watch() as w:
        run(x, step=make_rollout(_Env(1.0)))
        run(x, step=make_rollout(_Env(2.0)))
        jax.jit(make_rollout(_Env(3.0)))(x)
        jax.jit(make_rollout(_Env(4.0)))(x)
    (change,) = run.recompiles[-1].changes
    assert (change.path, change.kind) == ("step", "static_arg")
    assert (change.old, change.new) == ("an earlier closure of make_rollout",
                                        "another closure of make_rollout (captures env)")
    assert "module level" not in change.hint and "once per" in change.hint
    watched = [c for f in jitted(w) for c in f.compiles[1:]]
    assert [(c.old, c.new) for c in watched[0].changes] == [(change.old, change.new)]
    (new_fn,) = watched[1].changes  # (the earlier closure is gone: every captured name)
    assert new_fn.new.startswith("another closure of make_rollout (captures env")
    assert "module level" not in w.report()


def test_a_float_static_that_reaches_a_shape_names_the_field_and_its_type():
    """jnp.pad widths from a float static: the error keeps JAX's words and names the class,
    the field and its type, and how to fix it."""

    class View(sf.Struct):
        x: jax.Array
        view_size: sf.Static[float]

        @sf.jit_method
        def padded(self):
            return jnp.pad(self.x, self.view_size)

    with pytest.raises(TypeError) as info:
        View(jnp.ones(3), 2.0).padded()
    notes = "\n".join(getattr(info.value, "__notes__", []))
    assert "View.view_size" in notes and "a Python float" in notes and "sf.Static[int]" in notes

    def grid(x, size):
        return x * jnp.zeros((size,))

    g = sf.jit(grid, static_argnums=1)
    with pytest.raises(TypeError) as info:
        g(jnp.ones(1), 3.0)
    assert "`size`" in "\n".join(getattr(info.value, "__notes__", [])), info.value


def test_a_masked_bucketed_function_never_lists_valid_among_the_changes():
    """mask="valid": `valid` is staticfield's own argument, never a change of the user's, in
    .recompiles and in sf.watch."""

    @sf.jit(buckets={"x": 0}, mask="valid", warn_compiles=None)
    def mean(x, valid):
        v = valid[:, None]
        return jnp.sum(jnp.where(v, x, 0.0), axis=0) / jnp.sum(v)

    with sf.watch() as w:
        for n in (3, 5, 9):
            mean(np.ones((n, 2), np.float32))
    said = [c.path for r in mean.recompiles for c in r.changes]
    assert said == ["x.shape[0]", "x.shape[0]"]
    (fn,) = jitted(w)
    assert [c.path for c in fn.compiles[1].changes] == ["x.shape[0]"]
    assert "valid:" not in w.report() and "bool[" not in w.report()


def test_static_auto_float_to_array_is_named_alike_in_the_watch_and_recompiles():
    """static="auto": a Python float argument that becomes an array (t1, then rtol) is named
    by its own parameter in sf.watch, exactly as the function's .recompiles name it."""

    def solve(fn, t0, t1, y0, rtol=1e-3, atol=1e-6):
        return fn(y0) * (t1 - t0) * rtol + atol

    f = sf.jit(solve, static="auto", warn_compiles=None)
    y = jnp.ones(3)
    with sf.watch() as w:
        f(jnp.sin, 0.0, 1.0, y)
        f(jnp.sin, 0.0, jnp.asarray(1.0), y)
        f(jnp.sin, 0.0, jnp.asarray(1.0), y, rtol=jnp.asarray(1e-3))
    said = [[(c.path, c.kind, c.old, c.new) for c in r.changes] for r in f.recompiles]
    assert [[c[0] for c in s] for s in said] == [["t1"], ["rtol"]]
    (fn,) = jitted(w)
    assert [[(c.path, c.kind, c.old, c.new) for c in c_.changes] for c_ in fn.compiles[1:]] == said
    assert "jnp.asarray" in fn.compiles[1].changes[0].hint


def test_static_auto_user_error_has_no_lookup_in_its_context():
    """A user exception raised while tracing under static="auto" carries no KeyError of
    staticfield's cache lookup as its context."""

    def bad(fn, t0, y0):
        raise ValueError("the user's own error")

    g = sf.jit(bad, static="auto")
    with pytest.raises(ValueError, match="the user's own error") as info:
        g(jnp.sin, 0.0, jnp.ones(3))
    assert not isinstance(info.value.__context__, KeyError)


def test_a_structure_change_reads_the_same_in_the_watch_and_recompiles():
    """None becoming an array reads `None → f32[3]`, a dict key added `d['b']: absent →
    f32[3]`, in .recompiles and in sf.watch alike."""

    class S(sf.Struct):
        w: jax.Array
        mask: jax.Array | None = None

        @sf.jit_method(warn_compiles=None)
        def f(self, x):
            return x * self.w if self.mask is None else x * self.w * self.mask

    total = sf.jit(lambda d: sum(jax.tree.leaves(d)), warn_compiles=None)
    with sf.watch() as w:
        S(jnp.ones(3)).f(1.0)
        S(jnp.ones(3), jnp.ones(3)).f(1.0)
        total({"a": jnp.ones(3)})
        total({"a": jnp.ones(3), "b": jnp.ones(3)})
    said = lambda changes: [(c.path, c.kind, c.old, c.new) for c in changes]  # noqa: E731
    assert said(S.f.recompiles[0].changes) == [("self.mask", "structure", "None", "f32[3]")]
    assert said(total.recompiles[0].changes) == [("d['b']", "structure", "absent", "f32[3]")]
    method, function = jitted(w)
    assert said(method.compiles[1].changes) == said(S.f.recompiles[0].changes)
    assert said(function.compiles[1].changes) == said(total.recompiles[0].changes)
