"""The row rules of calls, branches and loops: followed by recursion into their jaxprs.

``call`` covers ``jit``/``pjit``, ``checkpoint`` (``remat2``), ``custom_jvp_call`` and
``custom_vjp_call`` (their primal; their rules are analysed on the program's derivative,
``_verdict``) and the like, and a ``shard_map`` (its body row by row on the whole batch,
or on a device's shard where it splits the rows); ``cond`` joins its
branches; ``scan`` and ``while`` run their body to a fixpoint over the loop carry. A scan
over the rows, a branch condition computed from the rows, or a loop condition computed
from the row count or from all rows, mixes them (a condition per row, ``vmap``'s, does not).

Each rule takes the analysis (``_analysis.Analysis``, duck-typed: ``inside`` runs a jaxpr
held by an equation), the equation and its inputs' states; nothing here imports the walk.
"""

from __future__ import annotations

import os
from typing import Any

import jax

from ._lattice import Counted, CountUsed, Mixing, Row, first_row, join, rows_of
from ._shards import shard_map

CUSTOM = frozenset(("custom_jvp_call", "custom_vjp_call", "custom_vjp_call_jaxpr"))
CALLS = ("jit", "pjit", "closed_call", "core_call", "remat", "remat2", "checkpoint", "custom_jvp_call",
         "custom_vjp_call", "custom_vjp_call_jaxpr")


def _some_row(eqn: Any, states: list) -> Row:
    return first_row(eqn, states) if rows_of(eqn, states) else Row(0, "")


def _rule_names(params: dict) -> list[str]:
    """The user's functions behind a custom derivative (``jvp``, ``fwd``, ``bwd``), by name."""
    names = []
    for key in ("jvp_jaxpr_fun", "jvp_jaxpr_thunk", "fwd_jaxpr_thunk", "bwd"):
        rule = params.get(key)
        info = getattr(rule, "debug_info", None)
        name = getattr(info, "func_name", None) or getattr(rule, "__name__", None)
        if name and not name.startswith("<"):
            names.append(name.split(" ")[0])
    return names


_JAX = os.path.dirname(os.path.abspath(jax.__file__))
# JAX's own custom_jvp functions that are elementwise, with elementwise rules: their
# derivatives follow the rows as any primitive's do, so they need no analysis of their own
# (the first call of a deep relu network no longer traces its JVP and VJP symbolically).
_ELEMENTWISE = frozenset((("relu", os.path.join(_JAX, "_src", "nn", "functions.py")),
                          ("relu6", os.path.join(_JAX, "_src", "nn", "functions.py")),
                          ("logaddexp", os.path.join(_JAX, "_src", "lax", "other.py"))))


def _jaxs_own(eqn: Any) -> bool:
    """A ``custom_jvp_call`` of one of JAX's own elementwise functions (by its primal's
    name and defining file, inside the installed ``jax``)."""
    if eqn.primitive.name != "custom_jvp_call":
        return False
    inner = eqn.params.get("call_jaxpr")
    src = getattr(getattr(getattr(inner, "jaxpr", inner), "debug_info", None), "func_src_info", None) or ""
    name, _, place = src.partition(" at ")
    return (name, os.path.abspath(place.rsplit(":", 1)[0])) in _ELEMENTWISE if place else False


def call(a: Any, eqn: Any, states: list) -> list:
    p = eqn.params
    inner = p.get("jaxpr", p.get("call_jaxpr", p.get("fun_jaxpr")))
    if inner is None:
        raise Mixing(eqn, "is a call staticfield cannot look into", _some_row(eqn, states))
    if eqn.primitive.name in CUSTOM and not _jaxs_own(eqn):
        a.custom.setdefault(eqn.primitive.name, set()).update(_rule_names(p))
    jaxpr = getattr(inner, "jaxpr", inner)
    consts = [None] * len(jaxpr.constvars)
    return a.inside(eqn, jaxpr, consts, states[-len(jaxpr.invars):] if jaxpr.invars else [])


def cond(a: Any, eqn: Any, states: list) -> list:
    if isinstance(states[0], Row):
        raise Mixing(eqn, "branches on a value computed from the rows", states[0])
    outs = None
    for branch in eqn.params["branches"]:
        got = a.inside(eqn, branch.jaxpr, [None] * len(branch.jaxpr.constvars), states[1:])
        outs = got if outs is None else [join(x, y, eqn) for x, y in zip(outs, got)]
    return outs or []


def _loop(a: Any, eqn: Any, body: Any, fixed: list, carry: list, rest: list) -> list:
    """Run ``body`` (inputs ``fixed + carry + rest``) to a fixpoint over the carry."""
    for _ in range(len(carry) + 2):
        outs = a.inside(eqn, body.jaxpr, [None] * len(body.jaxpr.constvars), [*fixed, *carry, *rest])
        new = [join(c, o, eqn) for c, o in zip(carry, outs[:len(carry)])]
        counted = next((s for s in new if isinstance(s, Counted)), None)
        if counted is not None:
            raise CountUsed(counted, eqn, "carries it through a loop")
        if new == carry:
            return outs
        carry = new
    raise Mixing(eqn, "has a loop carry whose rows never settle", _some_row(eqn, [*fixed, *carry, *rest]))


def _groups(ft: Any, n: int) -> list[list[int]]:
    """jax 0.12's scan: the positions in each group of a flat tree (consts, carry, xs)."""
    return [list(g) for g in ft.update(list(range(n))).unpack()]


def scan(a: Any, eqn: Any, states: list) -> list:
    p = eqn.params
    if "num_consts" in p:  # up to jax 0.11
        nc, nk = p["num_consts"], p["num_carry"]
    else:  # jax 0.12: flat trees say which inputs are consts, carry and xs
        consts_i, carry_i, _ = _groups(p["ft_in"], len(eqn.invars))
        nc, nk = len(consts_i), len(carry_i)
        if consts_i + carry_i != list(range(nc + nk)):
            raise Mixing(eqn, "is a scan staticfield cannot read", _some_row(eqn, states))
    consts, carry, xs = states[:nc], states[nc:nc + nk], states[nc + nk:]
    inner_xs = []
    for s in xs:
        if isinstance(s, Row) and s.axis == 0:
            raise Mixing(eqn, "scans over the rows (each step sees the steps before it)", s)
        inner_xs.append(s._replace(axis=s.axis - 1) if isinstance(s, Row) else s)
    outs = _loop(a, eqn, p["jaxpr"], consts, carry, inner_xs)
    if len(outs) != len(eqn.outvars):
        raise Mixing(eqn, "is a scan staticfield cannot read", _some_row(eqn, states))
    ys = [s._replace(axis=s.axis + 1) if isinstance(s, Row) else s for s in outs[nk:]]
    return [*outs[:nk], *ys]


def while_(a: Any, eqn: Any, states: list) -> list:
    p = eqn.params
    cn, bn = p["cond_nconsts"], p["body_nconsts"]
    cconsts, bconsts, carry = states[:cn], states[cn:cn + bn], states[cn + bn:]
    outs = _loop(a, eqn, p["body_jaxpr"], bconsts, carry, [])
    cjaxpr = p["cond_jaxpr"]
    [pred] = a.inside(eqn, cjaxpr.jaxpr, [None] * len(cjaxpr.jaxpr.constvars), [*cconsts, *outs])
    if isinstance(pred, Counted):
        raise CountUsed(pred, eqn, "loops a number of times that depends on it")
    if isinstance(pred, Row):
        return _per_row(eqn, pred, outs)
    return outs


def _per_row(eqn: Any, pred: Row, outs: list) -> list:
    """A loop whose condition is one per row (``vmap`` of a ``while_loop``: JAX runs it until
    every row's condition fails, each row's carry frozen at its own end, the condition's
    axes leading every carry's). Each row's carry is its own loop's; the pad rows, copies
    of the last real row computing what it computes, end with it, so the number of steps is
    the real rows' and no real row sees them. A condition with the rows elsewhere, or a
    carry with them on another axis, mixes rows."""
    cond = eqn.params["cond_jaxpr"]
    ndim = len(getattr(cond, "out_avals", [getattr(v, "aval", None) for v in cond.jaxpr.outvars])[0].shape)
    if not pred.axis < ndim or any(isinstance(s, Row) and s.axis != pred.axis for s in outs):
        raise Mixing(eqn, "loops while a condition on the rows holds", pred)
    per_row = pred._replace(zero=False)
    return [s if isinstance(s, Row) else per_row for s in outs]


RULES = {name: call for name in CALLS}
RULES.update({"cond": cond, "scan": scan, "while": while_, "shard_map": shard_map})
