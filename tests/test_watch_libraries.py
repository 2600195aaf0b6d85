"""sf.watch on the shapes of real libraries' programs, each a small stand-in for what was
seen on optimistix 0.1.0 and lineax 0.1.1 (issue 39): a solver reached through
``eqx.filter_jit`` with three or more positional arguments, and a primitive whose
abstract-evaluation rule traces its implementation with ``eval_shape``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest
from jax.extend.core import Primitive
from jax.interpreters import mlir

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


# --------------------------------------------- a primitive's rule that traces its impl
def _impl(x):
    return jnp.sin(x) * 2


def _abstract(x):
    out = jax.eval_shape(_impl, jax.ShapeDtypeStruct(x.shape, x.dtype))
    return jax.core.ShapedArray(out.shape, out.dtype)


solve_p = Primitive("h39_solve")
solve_p.def_impl(_impl)
solve_p.def_abstract_eval(_abstract)
mlir.register_lowering(solve_p, mlir.lower_fun(_impl, multiple_results=False))


@jax.jit
def solver(x):
    return solve_p.bind(x) + 1


def test_a_primitive_rule_traced_inside_another_trace_is_one_line_not_trace_calls():
    """lineax's linear_solve: its abstract-eval rule runs eval_shape of the implementation
    while the jitted solver is traced (JAX takes the current trace away while a primitive is
    bound, so the trace context looks clean). Nothing called `.trace`: the report says, in one
    line, that the implementation was traced inside the solver's trace, and counts no compile."""

    with sf.watch() as w:
        for n in (3, 4, 5):
            solver(jnp.ones(n))
    counts = {f.name: f.count for f in jitted(w)}
    assert counts.get("solver") == 3 and counts.get("_impl", 0) == 0, w.report()
    text = w.report()
    assert "traced by .trace" not in text and ".lower/.trace/.eval_shape" not in text, text
    block = text.split("\n\n_impl (")[1].split("\n\n")[0]
    *head, seconds = block.splitlines()  # one line (wrapped to fit), then its seconds
    assert "0 compiles; traced 3 times inside the trace of solver (inlined" in " ".join(" ".join(head).split()), text
    assert len(head) <= 2 and seconds.strip().startswith("[trace") and "#" not in block, text
    (impl,) = [f for f in w.functions if f.name == "_impl"]
    assert [c.inside for c in impl.compiles] == ["solver"] * 3
    assert all(ev["inside"] for ev in
               next(f for f in w.as_dict()["functions"] if f["name"] == "_impl")["events"])


def test_eval_shape_called_by_the_user_is_still_a_trace_by_eval_shape():
    """jax.eval_shape called at top level (not inside another trace) is still reported as
    a trace that compiled nothing, with its call."""
    with sf.watch() as w:
        jax.eval_shape(_impl, jnp.ones(3))
    (impl,) = [f for f in w.functions if f.name == "_impl"]
    assert impl.count == 0 and impl.compiles[0].inside == ""
    assert "traced by .trace, not compiled" in w.report()


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
