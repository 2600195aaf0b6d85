"""Acceptance: libraries ported by the migration guides alone, with no workaround (issue 37).

Two small stand-ins, written here (nothing is vendored): an equinox-style solver library
(abstract bases, a ``Newton`` solver with a nested equinox linear solver holding a Python
bool, a user subclass, a ``Solution`` carrying a ``Jaxpr`` and a Python int, an implicit
adjoint through ``eqx.filter_custom_jvp``, ``eqx.tree_at`` on a function field), ported as
``docs/migration/equinox.md`` says and called through ``sf.jit(static="auto")``; and a
chex-style environment (``mappable=True`` states read through ``vars``, ``**state`` and
dm-tree, NamedTuple observations), ported as ``docs/migration/chex.md`` says.
"""

from __future__ import annotations

import abc
import collections.abc
import functools
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import staticfield as sf

eqx = pytest.importorskip("equinox")


# ----- the solver library, as ported ---------------------------------------------------------
def max_norm(x):
    return jnp.max(jnp.abs(x))


class AutoLinearSolver(eqx.Module):
    """lineax stays equinox: a Module with a Python bool it checks itself."""

    well_posed: Any = False

    def solve(self, a, b):
        if self.well_posed not in (None, True, False):
            raise ValueError(f"Invalid value well_posed={self.well_posed}")
        return jnp.linalg.solve(a, b)


class AbstractRootFinder(sf.Struct, check=False):
    """The guide: a solver base is a check=False Struct, so plain fields may hold
    functions and Python numbers (static under sf.jit(static="auto"), reachable by
    eqx.tree_at), and abstract fields stay abstract."""

    rtol: sf.AbstractVar[float]
    atol: sf.AbstractVar[float]
    norm: sf.AbstractVar[Callable]

    @abc.abstractmethod
    def update(self, fn, y, args): ...


class Newton(AbstractRootFinder):
    rtol: float
    atol: float
    norm: Callable = max_norm
    # a nested equinox Module keeps its Python bool static only with leaves="any"
    linear_solver: AutoLinearSolver = sf.field(default=AutoLinearSolver(well_posed=False), leaves="any")
    cauchy_termination: bool = True

    def update(self, fn, y, args):
        jac = jax.jacfwd(fn)(y, args)
        return y - self.linear_solver.solve(jac, fn(y, args))


class FnState(sf.Struct, check=False):
    """A closure-converted function: its Jaxpr in a plain field of a check=False class."""

    jaxpr: Any


class Solution(sf.Struct, check=False):
    value: jax.Array
    fn: FnState
    stats: dict


def _evaluate(state: FnState, y, args):
    return jax.core.eval_jaxpr(state.jaxpr.jaxpr, state.jaxpr.consts, y, *jax.tree.leaves(args))[0]


@eqx.filter_custom_jvp
def _implicit(state, solver, y0, args, *, max_steps):
    def cond(c):
        i, y, diff = c
        return (i < max_steps) & (diff > solver.atol + solver.rtol * solver.norm(y))

    def body(c):
        i, y, _ = c
        new = solver.update(lambda z, a: _evaluate(state, z, a), y, args)
        return i + 1, new, solver.norm(new - y)

    _, root, _ = jax.lax.while_loop(cond, body, (0, y0, jnp.asarray(jnp.inf, y0.dtype)))
    return root


@_implicit.def_jvp
def _implicit_jvp(primals, tangents, *, max_steps):
    """The implicit function theorem: dy = -J_y^-1 (J_args . dargs)."""
    state, solver, y0, args = primals
    t_args = tangents[3]
    root = _implicit(state, solver, y0, args, max_steps=max_steps)
    jy = jax.jacfwd(lambda y: _evaluate(state, y, args))(root)
    t_args = jax.tree.map(lambda t, a: jnp.zeros_like(a) if t is None else t, t_args, args,
                          is_leaf=lambda t: t is None)
    _, f_dot = jax.jvp(lambda a: _evaluate(state, root, a), (args,), (t_args,))
    return root, -jnp.linalg.solve(jy, f_dot)


def root_find(fn, solver, y0, args=None, *, max_steps=256, throw=True):
    """An optimistix-like entry point: the Solution holds a Jaxpr and the int max_steps."""
    state = FnState(jax.make_jaxpr(fn)(y0, args))
    root = _implicit(state, solver, y0, args, max_steps=max_steps)
    return Solution(root, state, {"max_steps": max_steps, "throw": throw})


def cubic(y, args):
    a, b = args
    return a * y ** 3 + b * y - 1.0


Y0 = jnp.ones(3)
ARGS = (jnp.full(3, 0.5), jnp.full(3, 2.0))


def _solve():
    traces = [0]

    @functools.wraps(root_find)
    def counted(*args, **kwargs):
        traces[0] += 1
        return root_find(*args, **kwargs)

    return sf.jit(counted, static="auto", warn_compiles=None), traces


def test_the_solver_hierarchy_ports_and_solves():
    """Abstract bases stay abstract; Newton solves through sf.jit(static="auto"); the
    Solution's Jaxpr and int come back as they are (not traced values); new values reuse
    the program and a keyword equal to its default compiles nothing."""
    with pytest.raises(TypeError, match=r"AbstractRootFinder"):
        AbstractRootFinder()
    solve, traces = _solve()
    sol = solve(cubic, Newton(rtol=1e-6, atol=1e-6), Y0, ARGS)
    assert type(sol) is Solution and type(sol.stats["max_steps"]) is int and sol.stats["max_steps"] == 256
    assert isinstance(sol.fn.jaxpr, jax.extend.core.ClosedJaxpr)
    np.testing.assert_allclose(cubic(sol.value, ARGS), 0.0, atol=1e-5)
    solve(cubic, Newton(rtol=1e-6, atol=1e-6), Y0 * 2, ARGS, max_steps=256)
    assert traces[0] == 1
    solve(cubic, Newton(rtol=1e-4, atol=1e-6), Y0, ARGS)  # a tolerance is a Python float: static
    assert traces[0] == 2
    assert [c.path for c in solve.recompiles[-1].changes] == ["solver.rtol"]


def test_matches_eqx_filter_jit_bit_for_bit():
    """The same call through eqx.filter_jit gives the same root, bit for bit."""
    solver = Newton(rtol=1e-6, atol=1e-6)
    ours = sf.jit(root_find, static="auto")(cubic, solver, Y0, ARGS)
    theirs = eqx.filter_jit(root_find)(cubic, solver, Y0, ARGS)
    assert np.asarray(ours.value).tobytes() == np.asarray(theirs.value).tobytes()
    assert ours.stats == theirs.stats


def test_the_implicit_adjoint_differentiates_through_sf_jit():
    """jax.grad through sf.jit(static="auto") and the implicit adjoint (eqx.filter_custom_jvp,
    which partitions the Jaxpr-holding state as the library does) gives the implicit-function
    gradient, for two programs (two traces of the solve)."""
    solve, _ = _solve()
    solver = Newton(rtol=1e-7, atol=1e-7)

    def loss(a, max_steps):
        return jnp.sum(solve(cubic, solver, Y0, (a, ARGS[1]), max_steps=max_steps).value)

    for max_steps in (256, 128):
        g = jax.grad(loss)(ARGS[0], max_steps)
        root = solve(cubic, solver, Y0, ARGS, max_steps=max_steps).value
        want = -(root ** 3) / (3 * ARGS[0] * root ** 2 + ARGS[1])  # dy/da of a y^3 + b y - 1 = 0
        np.testing.assert_allclose(g, want, rtol=1e-4)


def test_a_user_subclass_and_tree_at_on_the_norm():
    """A user's subclass ports with its own static flag; eqx.tree_at replaces the solver's
    norm (as diffrax does at import) and the new norm runs."""

    class MyNewton(Newton):
        use_inverse: sf.Static[bool] = False

        def update(self, fn, y, args):
            jac = jax.jacfwd(fn)(y, args)
            if self.use_inverse:
                return y - jnp.linalg.inv(jac) @ fn(y, args)
            return super().update(fn, y, args)

    solve, traces = _solve()
    sol = solve(cubic, MyNewton(rtol=1e-6, atol=1e-6, use_inverse=True), Y0, ARGS)
    np.testing.assert_allclose(cubic(sol.value, ARGS), 0.0, atol=1e-5)
    newton = Newton(rtol=1e-6, atol=1e-6)
    solve(cubic, newton, Y0, ARGS)
    rms = eqx.tree_at(lambda s: s.norm, newton, lambda x: jnp.sqrt(jnp.mean(x ** 2)))
    assert isinstance(rms, Newton) and rms.norm is not max_norm
    sol = solve(cubic, rms, Y0, ARGS)
    np.testing.assert_allclose(cubic(sol.value, ARGS), 0.0, atol=1e-5)
    assert [(c.path, c.kind) for c in solve.recompiles[-1].changes] == [("solver.norm", "static")]


def test_an_unmarked_bool_in_a_user_subclass():
    """A user's subclass with `use_inverse: bool` left unmarked: under sf.jit(static="auto")
    a Python bool held directly by a field of the check=False base is static, so Python
    control flow on it works and each value compiles once; in a class that checks its
    fields (check=True), the same bool is traced and the error names it."""

    class Unmarked(Newton):
        use_inverse: bool = False

        def update(self, fn, y, args):
            if self.use_inverse:
                return y - jnp.linalg.inv(jax.jacfwd(fn)(y, args)) @ fn(y, args)
            return super().update(fn, y, args)

    solve, traces = _solve()
    for flag in (True, False, True):
        sol = solve(cubic, Unmarked(rtol=1e-6, atol=1e-6, use_inverse=flag), Y0, ARGS)
        np.testing.assert_allclose(cubic(sol.value, ARGS), 0.0, atol=1e-5)
    assert traces[0] == 2

    class Checked(sf.Struct):
        scale: jax.Array
        use_inverse: bool = False

        @sf.jit_method
        def apply(self, y):
            return 1 / y if self.use_inverse else y * self.scale

    with pytest.raises(jax.errors.TracerBoolConversionError) as info:
        Checked(jnp.ones(3), use_inverse=True).apply(Y0)
    notes = "\n".join(info.value.__notes__)
    assert "self.use_inverse: a Python bool in a dynamic field" in notes and "sf.Static[bool]" in notes


# ----- the environment library, as ported ----------------------------------------------------
class Observation(NamedTuple):
    grid: jax.Array
    step_count: jax.Array


class State(sf.Struct, mappable=True):
    """chex.dataclass -> sf.Struct with mappable=True (chex's default)."""

    key: jax.Array
    pos: jax.Array
    step_count: jax.Array
    size: sf.Static[int] = 5


def reset(key) -> tuple[State, Observation]:
    state = State(key=key, pos=jnp.zeros(2, jnp.int32), step_count=jnp.asarray(0))
    return state, _observe(state)


def _observe(state: State) -> Observation:
    grid = jnp.zeros((state.size, state.size)).at[state.pos[0], state.pos[1]].set(1.0)
    return Observation(grid, state.step_count)


def step(state: State, action) -> tuple[State, Observation]:
    moves = jnp.array([[0, 1], [1, 0], [0, -1], [-1, 0]])
    pos = jnp.clip(state.pos + moves[action], 0, state.size - 1)
    new = state.replace(pos=pos, step_count=state["step_count"] + 1)
    return new, _observe(new)


def _validate(state) -> None:
    """A spec check written for chex: every entry of __dict__ is a field value."""
    for name, value in vars(state).items():
        assert name in {"key", "pos", "step_count", "size"}, name
        assert isinstance(value, (jax.Array, int)), (name, type(value))


def _gym_observation(state) -> dict[str, np.ndarray]:
    """A gym wrapper written for chex: the state's __dict__ as NumPy."""
    return {k: np.asarray(v) for k, v in state.__dict__.items()}


def test_a_vmapped_rollout_and_the_chex_style_readers():
    """reset/step through sf.jit, vmapped and scanned; the states read through vars,
    __dict__ and **state hold exactly the fields after the jitted calls."""
    keys = jax.random.split(jax.random.PRNGKey(0), 4)  # raw keys, as chex.PRNGKey
    states, _ = jax.vmap(reset)(keys)
    actions = jnp.tile(jnp.arange(4) % 4, (6, 1))

    @sf.jit
    def rollout(states, actions):
        def body(s, a):
            s, obs = jax.vmap(step)(s, a)
            return s, obs

        return jax.lax.scan(body, states, actions)

    final, obs = rollout(states, actions)
    assert isinstance(final, State) and isinstance(obs, Observation)
    assert obs.grid.shape == (6, 4, 5, 5) and final.step_count.tolist() == [6, 6, 6, 6]
    _validate(final)
    assert set(_gym_observation(final)) == {"key", "pos", "step_count", "size"}

    def counted(key, pos, step_count, size):
        return size

    assert counted(**final) == 5
    assert isinstance(final, collections.abc.Mapping) and len(final) == 4


def test_dm_tree_or_mapping_walkers_see_the_fields():
    """dm-tree (when installed) flattens and rebuilds a state as a mapping; without it, a
    walker of collections.abc.Mapping does the same."""
    state, _ = reset(jax.random.PRNGKey(1))
    try:
        import tree
    except ImportError:
        tree = None

    def double(v):
        return v * 2 if isinstance(v, jax.Array) else v

    if tree is not None:
        doubled = tree.map_structure(double, state)
        assert len(tree.flatten(state)) == 4  # key, pos, size, step_count: sorted by name
    else:
        def walk(x):
            if isinstance(x, collections.abc.Mapping):
                return type(x)((k, walk(x[k])) for k in sorted(x))
            return double(x)

        doubled = walk(state)
    assert isinstance(doubled, State) and doubled.size == 5
    assert doubled.key.tolist() == (state.key * 2).tolist() and int(doubled.step_count) == 0
