"""Case 15: ``sf.jit(static="auto")`` on a solver-sized call, against ``eqx.filter_jit`` and
plain ``jax.jit`` with the non-array arguments closed over.

The call is an optimistix-like Newton root find: ``root_find(fn, solver, y0, args,
options, max_steps=..., throw=..., tags=...)`` where ``solver`` is an equinox Module with
Python floats, a function and a nested linear solver holding a Python bool; it returns a
``Solution`` Module holding arrays, a ``Jaxpr`` and a ``stats`` dict with the Python int
``max_steps``. ``sf.jit(static="auto")`` and ``eqx.filter_jit`` take the call as it is and
return the ``Solution`` whole; plain ``jax.jit`` closes over every non-array argument and
returns the array part of the ``Solution`` (``eqx.partition``), which is the least a
call can cost. DESIGN.md's targets: a hit costs ≤0.6x ``eqx.filter_jit`` and ≤1.3x plain.

Where a hit's time goes beyond plain's (2 CPU cores, jax 0.10.2 / Python 3.11, best of 15
repeats of 3,000 calls, each measured in place: plain 13.2 µs, ours 15.1-15.5 µs, 1.15-1.17x;
1.27-1.33x before the generated hit, 1.59-1.65x before the bare lookup): no library's
Python flatten runs (the solver, a frozen Module passed again and proven immutable, is
keyed by its identity) and no Python rebuilds the ``Solution`` (JAX's C++ unflatten puts
the returned objects back). What remains: the variant's C++ front 0.25 µs over plain's
(its output's ``Jaxpr`` and two Python statics come back through node unflattens that call
Python-callable C functions, where plain's output has ``None``); the code generated for
the call shape 1.3 µs (it reads the call's tuples and dict in place, checks each
container's class and length and each leaf's class, builds the key from the function and
the int by ``==`` and the solver by ``id``, and looks it up once); the call through the
object with ``*args``/``**kwargs`` 0.5 µs. None of these is per leaf of an array.
"""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp

import staticfield as sf

from ._harness import Config, Contender, Results, kinds, measure, optional, traced

AUTO = "auto"
OURS = 'sf.jit(static="auto")'
EQX = "eqx.filter_jit"
PLAIN = "jax.jit, non-arrays closed over"


def newton_library() -> dict[str, Any]:
    """A small optimistix-like library: an abstract root finder, ``Newton`` with a nested
    linear solver, a ``Solution`` and ``root_find``."""
    import equinox as eqx

    def max_norm(x):
        return jnp.max(jnp.abs(x))

    class AutoLinearSolver(eqx.Module):
        well_posed: Any = None

        def solve(self, a, b):
            if self.well_posed not in (None, True, False):
                raise ValueError(f"Invalid value well_posed={self.well_posed}")
            return jnp.linalg.solve(a, b)

    class AbstractRootFinder(eqx.Module):
        rtol: eqx.AbstractVar[float]
        atol: eqx.AbstractVar[float]
        norm: eqx.AbstractVar[Callable]

    class Newton(AbstractRootFinder):
        rtol: float
        atol: float
        norm: Callable = max_norm
        kappa: float = 1e-2
        linear_solver: AutoLinearSolver = AutoLinearSolver(well_posed=None)
        cauchy_termination: bool = True

    class Solution(eqx.Module):
        value: Any
        num_steps: Any
        jaxpr: Any
        stats: dict

    def root_find(fn, solver, y0, args=None, options=None, *, max_steps=256, throw=True, tags=frozenset()):
        jaxpr = jax.make_jaxpr(fn)(y0, args)

        def cond(c):
            step, _, diff = c
            return (step < max_steps) & (diff > solver.atol + solver.rtol)

        def body(c):
            step, y, _ = c
            jac = jax.jacfwd(fn)(y, args)
            dy = solver.linear_solver.solve(jac, fn(y, args))
            return step + 1, y - dy, solver.norm(dy)

        step, y, _ = jax.lax.while_loop(cond, body, (0, y0, jnp.asarray(jnp.inf, y0.dtype)))
        return Solution(y, step, jaxpr, {"max_steps": max_steps, "throw": throw})

    def fn(y, args):
        a, b = args
        return a * y ** 3 + b * y - 1.0

    return {"eqx": eqx, "Newton": Newton, "root_find": root_find, "fn": fn, "Solution": Solution}


def _contenders() -> list[Contender]:
    lib = newton_library()
    eqx, root_find, fn = lib["eqx"], lib["root_find"], lib["fn"]
    solver = lib["Newton"](rtol=1e-6, atol=1e-6)
    y0, args = jnp.ones(4), (jnp.full(4, 0.5), jnp.full(4, 2.0))
    ours_fn, ours_count = traced(root_find)
    eqx_fn, eqx_count = traced(root_find)
    ours = sf.jit(ours_fn, static="auto", warn_compiles=None)
    theirs = eqx.filter_jit(eqx_fn)

    def closed(y0, args):
        return eqx.partition(root_find(fn, solver, y0, args, None, max_steps=64), eqx.is_array)[0]

    plain_fn, plain_count = traced(closed)
    plain = jax.jit(plain_fn)
    return [
        Contender(OURS, lambda: ours(fn, solver, y0, args, None, max_steps=64), "ours", traces=ours_count),
        Contender(EQX, lambda: theirs(fn, solver, y0, args, None, max_steps=64), "anchor", traces=eqx_count),
        Contender(PLAIN, lambda: plain(y0, args), "baseline", traces=plain_count),
    ]


def run(cfg: Config, results: Results) -> None:
    print('case 15: a hit of sf.jit(static="auto") on an optimistix-like Newton solve', flush=True)
    contenders = optional(results, "equinox", _contenders)
    if contenders is None:
        return
    results.add(AUTO, "", measure(contenders, cfg, results), kinds(contenders))
