"""Cases 1 and 2: what one cache-hit call costs.

Every contender computes ``a * x + b * n`` from a parameter object holding two
``f32[4]`` arrays ``a``, ``b`` and a static int ``n``, given an input ``x:
f32[4]``. Only the way the parameters reach ``jax.jit`` differs.

Case 1 (``dispatch``) calls a jitted method. Case 2 (``method_pytree``) passes a
bound method, as a pytree, into a jitted function that calls it.
"""

# No `from __future__ import annotations` here: jax_dataclasses reads its
# `jdc.Static[int]` annotation as an object, and `jdc` is a local name.

import dataclasses
import functools
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

import staticfield as sf

from ._harness import Config, Contender, Results, kinds, measure, optional, traced

DISPATCH = "dispatch"
FRESH = "fresh_instance"
METHOD_PYTREE = "method_pytree"

RAW = "jax.jit, arrays + static_argnums"
RAW_CLOSED = "jax.jit, arrays only (n closed over)"
RAW_ARRAYS = "jax.jit, plain arrays"
# What any Python layer in front of jax.jit costs on this machine (the floor of sf.jit's hit):
RAW_IN_FUNCTION = "jax.jit, plain arrays, called from a Python function"
RAW_IN_PARTIAL = "jax.jit, plain arrays, called through a functools.partial subclass"
JIT_METHOD = "sf.jit_method"
SF_JIT = "sf.jit (free function)"
SF_JIT_ARGS = "sf.jit (function behind a *args wrapper)"
SF_JIT_ARRAYS = "sf.jit, plain arrays"
NATIVE = "jax.jit + register_dataclass"
FLAX = "jax.jit + flax.struct"
JDC = "jax.jit + jax_dataclasses"
EQX_JIT_METHOD = "jax.jit + equinox (method)"
EQX_JIT_ARG = "jax.jit + equinox (self as arg)"
EQX_FILTER = "eqx.filter_jit"

PARTIAL = "jax.jit + jax.tree_util.Partial"
SF_BOUND = "jax.jit + sf.jit_method bound method"
EQX_BOUND = "jax.jit + equinox bound method"
EQX_FILTER_BOUND = "eqx.filter_jit + equinox bound method"


def _inputs() -> tuple[jax.Array, jax.Array, jax.Array, int]:
    a = jnp.arange(4, dtype=jnp.float32)
    b = jnp.ones(4, dtype=jnp.float32)
    x = jnp.full(4, 2.0, dtype=jnp.float32)
    return a, b, x, 3


def has_jit() -> bool:
    """Whether the installed staticfield has ``jit_method`` and ``jit`` yet."""
    return hasattr(sf, "jit_method") and hasattr(sf, "jit")


# ---------------------------------------------------------------- contenders


def _on(p: Any, call: Callable[[Any], Any], fresh: bool) -> Callable[[], Any]:
    """A thunk calling ``call(p)``; with ``fresh``, on a new instance each call, rebuilt
    by ``tree_unflatten`` from ``p``'s leaves (what a training loop's update hands back)."""
    if not fresh:
        return lambda: call(p)
    leaves, treedef = jax.tree_util.tree_flatten(p)
    unflatten = jax.tree_util.tree_unflatten
    return lambda: call(unflatten(treedef, leaves))


def _raw() -> list[Contender]:
    a, b, x, n = _inputs()
    step, count = traced(lambda ab, x, n: ab[0] * x + ab[1] * n)
    f = jax.jit(step, static_argnums=2)
    closed, count2 = traced(lambda ab, x: ab[0] * x + ab[1] * 3)
    g = jax.jit(closed)
    arrays, count3 = traced(_plain_step)
    h = jax.jit(arrays)

    def in_function(a: jax.Array, b: jax.Array, x: jax.Array) -> jax.Array:
        return h(a, b, x)

    in_partial = _PartialSubclass(h)
    return [
        Contender(RAW, lambda: f((a, b), x, n), "baseline", traces=count),
        Contender(RAW_CLOSED, lambda: g((a, b), x), "baseline", traces=count2),
        Contender(RAW_ARRAYS, lambda: h(a, b, x), "baseline", traces=count3),
        Contender(RAW_IN_FUNCTION, lambda: in_function(a, b, x), "baseline", traces=count3),
        Contender(RAW_IN_PARTIAL, lambda: in_partial(a, b, x), "baseline", traces=count3),
    ]


class _PartialSubclass(functools.partial):
    """What sf.jit returns is such a subclass (picklable, a method on a class); on
    CPython 3.11 a subclass of partial is called without vectorcall."""

    __slots__ = ()


def _plain_step(a: jax.Array, b: jax.Array, x: jax.Array) -> jax.Array:
    """A step function of plain arrays, as users moving from jax.jit or jdc.jit write them."""
    return a * x + b * 3


def _ours(fresh: bool = False) -> list[Contender]:
    a, b, x, n = _inputs()
    count = [0]

    @sf.dataclass
    class Params:
        a: jax.Array
        b: jax.Array
        n: int = sf.static()

        @sf.jit_method
        def step(self, x):
            count[0] += 1
            return self.a * x + self.b * self.n

    p = Params(a, b, n)
    free, count2 = traced(lambda p, x: p.a * x + p.b * p.n)
    f = sf.jit(free)
    count3 = [0]

    def hidden(*args):  # a decorator that hides the signature: sf.jit's generic path
        count3[0] += 1
        return args[0].a * args[1] + args[0].b * args[0].n

    h = sf.jit(hidden)
    arrays, count4 = traced(_plain_step)
    k = sf.jit(arrays)
    if fresh:
        return [Contender(JIT_METHOD, _on(p, lambda q: q.step(x), True), "ours", traces=count)]
    return [
        Contender(JIT_METHOD, lambda: p.step(x), "ours", traces=count),
        Contender(SF_JIT, lambda: f(p, x), "ours", traces=count2),
        Contender(SF_JIT_ARGS, lambda: h(p, x), "ours", traces=count3),
        Contender(SF_JIT_ARRAYS, lambda: k(a, b, x), "ours", traces=count4),
    ]


def _native(fresh: bool = False) -> list[Contender]:
    a, b, x, n = _inputs()

    @dataclasses.dataclass(frozen=True)
    class Params:
        a: jax.Array
        b: jax.Array
        n: int

    jax.tree_util.register_dataclass(Params, data_fields=["a", "b"], meta_fields=["n"])
    step, count = traced(lambda p, x: p.a * x + p.b * p.n)
    f = jax.jit(step)
    p = Params(a, b, n)
    return [Contender(NATIVE, _on(p, lambda q: f(q, x), fresh), "anchor", traces=count)]


def _flax(fresh: bool = False) -> list[Contender]:
    import flax.struct

    a, b, x, n = _inputs()
    count = [0]

    @flax.struct.dataclass
    class Params:
        a: jax.Array
        b: jax.Array
        n: int = flax.struct.field(pytree_node=False)

        @jax.jit
        def step(self, x):
            count[0] += 1
            return self.a * x + self.b * self.n

    p = Params(a, b, n)
    return [Contender(FLAX, _on(p, lambda q: q.step(x), fresh), "anchor", traces=count)]


def _jdc() -> list[Contender]:
    import jax_dataclasses as jdc

    a, b, x, n = _inputs()
    count = [0]

    @jdc.pytree_dataclass
    class Params:
        a: jax.Array
        b: jax.Array
        n: jdc.Static[int]

        @jax.jit
        def step(self, x):
            count[0] += 1
            return self.a * x + self.b * self.n

    p = Params(a, b, n)
    return [Contender(JDC, lambda: p.step(x), "anchor", traces=count)]


def _equinox() -> list[Contender]:
    import equinox as eqx

    a, b, x, n = _inputs()
    counts = {"method": [0], "arg": [0], "filter": [0]}

    def body(self: Any, x: jax.Array, which: str) -> jax.Array:
        counts[which][0] += 1
        return self.a * x + self.b * self.n

    class Params(eqx.Module):
        a: jax.Array
        b: jax.Array
        n: int = eqx.field(static=True)

        @jax.jit
        def step(self, x):
            return body(self, x, "method")

        def plain(self, x):
            return body(self, x, "arg")

        @eqx.filter_jit
        def filtered(self, x):
            return body(self, x, "filter")

    p = Params(a, b, n)
    as_arg = jax.jit(Params.plain)
    return [
        Contender(EQX_JIT_METHOD, lambda: p.step(x), "anchor", traces=counts["method"]),
        Contender(EQX_JIT_ARG, lambda: as_arg(p, x), "anchor", traces=counts["arg"]),
        Contender(EQX_FILTER, lambda: p.filtered(x), "anchor", traces=counts["filter"]),
    ]


# ------------------------------------------------------------ case 2 contenders


def _apply() -> tuple[Callable[..., Any], list[int]]:
    """A fresh ``jax.jit``-ed ``apply(f, x) = f(x)`` with its own trace counter."""
    body, count = traced(lambda f, x: f(x))
    return jax.jit(body), count


def _partial() -> Contender:
    a, b, x, n = _inputs()
    fn = jax.tree_util.Partial(lambda ab, x: ab[0] * x + ab[1] * 3, (a, b))
    apply, count = _apply()
    return Contender(PARTIAL, lambda: apply(fn, x), "baseline", traces=count)


def _ours_bound() -> Contender:
    a, b, x, n = _inputs()

    @sf.dataclass
    class Params:
        a: jax.Array
        b: jax.Array
        n: int = sf.static()

        @sf.jit_method
        def step(self, x):
            return self.a * x + self.b * self.n

    p = Params(a, b, n)
    apply, count = _apply()
    return Contender(SF_BOUND, lambda: apply(p.step, x), "ours", traces=count)


def _equinox_bound() -> list[Contender]:
    import equinox as eqx

    a, b, x, n = _inputs()

    class Params(eqx.Module):
        a: jax.Array
        b: jax.Array
        n: int = eqx.field(static=True)

        def step(self, x):
            return self.a * x + self.b * self.n

    p = Params(a, b, n)
    apply, count = _apply()
    body, count2 = traced(lambda f, x: f(x))
    filtered = eqx.filter_jit(body)
    return [
        Contender(EQX_BOUND, lambda: apply(p.step, x), "anchor", traces=count),
        Contender(EQX_FILTER_BOUND, lambda: filtered(p.step, x), "anchor", traces=count2),
    ]


# ---------------------------------------------------------------------- run


def _same_answers(contenders: list[Contender]) -> None:
    """Every contender must compute the same thing, or its figure means nothing."""
    expected = np.asarray(contenders[0].fn())
    for c in contenders[1:]:
        np.testing.assert_allclose(np.asarray(c.fn()), expected, err_msg=c.name)


def run(cfg: Config, results: Results) -> None:
    print("case 1: jit hit-path dispatch of a method call", flush=True)
    contenders: list[Contender] = _raw()
    if has_jit():
        contenders += _ours()
    else:
        results.note("sf.jit_method / sf.jit do not exist yet: their dispatch cases are skipped")
    contenders += _native()
    contenders += optional(results, FLAX, _flax) or []
    contenders += optional(results, JDC, _jdc) or []
    contenders += optional(results, "equinox", _equinox) or []
    _same_answers(contenders)
    results.add(DISPATCH, "", measure(contenders, cfg, results), kinds(contenders))

    print("case 1b: a method call on a new instance each time (rebuilt by unflatten)", flush=True)
    contenders = [c for c in _raw() if c.name == RAW]
    if has_jit():
        contenders += _ours(fresh=True)
    contenders += _native(fresh=True)
    contenders += optional(results, FLAX, lambda: _flax(fresh=True)) or []
    _same_answers(contenders)
    results.add(FRESH, "", measure(contenders, cfg, results), kinds(contenders))

    print("case 2: a bound method passed as a pytree into a jitted function", flush=True)
    contenders = [_partial()]
    if has_jit():
        contenders.append(_ours_bound())
    contenders += optional(results, "equinox", _equinox_bound) or []
    _same_answers(contenders)
    results.add(METHOD_PYTREE, "", measure(contenders, cfg, results), kinds(contenders))
