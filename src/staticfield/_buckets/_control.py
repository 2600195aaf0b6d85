"""The row rules of calls, branches and loops: followed by recursion into their jaxprs.

``call`` covers ``jit``/``pjit``, ``custom_jvp_call``/``custom_vjp_call``, ``checkpoint``
(``remat2``) and the like; ``cond`` joins its branches; ``scan`` and ``while`` run their
body to a fixpoint over the loop carry. A scan over the rows, a branch or a loop condition
computed from the rows mix rows.
"""

from __future__ import annotations

from typing import Any

from ._rows import Analysis, Mixing, Row, free_ok, join, rows_of

def call(a: Analysis, eqn: Any, states: list) -> list:
    p = eqn.params
    inner = p.get("jaxpr", p.get("call_jaxpr", p.get("fun_jaxpr")))
    if inner is None:
        raise Mixing(eqn, "is a call staticfield cannot look into", rows_of(eqn, states)[0][1])
    jaxpr = getattr(inner, "jaxpr", inner)
    consts = [None] * len(jaxpr.constvars)
    return a.run(jaxpr, consts, states[-len(jaxpr.invars):] if jaxpr.invars else [])


def cond(a: Analysis, eqn: Any, states: list) -> list:
    if isinstance(states[0], Row):
        raise Mixing(eqn, "branches on a value computed from the rows", states[0])
    outs = None
    for branch in eqn.params["branches"]:
        got = a.run(branch.jaxpr, [None] * len(branch.jaxpr.constvars), states[1:])
        outs = got if outs is None else [join(x, y, eqn) for x, y in zip(outs, got)]
    return outs or []


def _loop(a: Analysis, eqn: Any, body: Any, fixed: list, carry: list, rest: list) -> list:
    """Run ``body`` (inputs ``fixed + carry + rest``) to a fixpoint over the carry."""
    carry_vars = eqn.invars[len(fixed):len(fixed) + len(carry)]
    for _ in range(len(carry) + 2):
        outs = a.run(body.jaxpr, [None] * len(body.jaxpr.constvars), [*fixed, *carry, *rest])
        new = [join(c, o, eqn) for c, o in zip(carry, outs[:len(carry)])]
        for v, c, n in zip(carry_vars, carry, new):
            if isinstance(n, Row) and not isinstance(c, Row):  # a free initial carry meets rows
                free_ok(eqn, v, c, n)
        if new == carry:
            return outs
        carry = new
    raise Mixing(eqn, "has a loop carry whose rows never settle", rows_of(eqn, [*fixed, *carry, *rest])[0][1])


def _groups(ft: Any, n: int) -> list[list[int]]:
    """jax 0.12's scan: the positions in each group of a flat tree (consts, carry, xs)."""
    return [list(g) for g in ft.update(list(range(n))).unpack()]


def scan(a: Analysis, eqn: Any, states: list) -> list:
    p = eqn.params
    if "num_consts" in p:  # up to jax 0.11
        nc, nk = p["num_consts"], p["num_carry"]
    else:  # jax 0.12: flat trees say which inputs are consts, carry and xs
        consts_i, carry_i, _ = _groups(p["ft_in"], len(eqn.invars))
        nc, nk = len(consts_i), len(carry_i)
        if consts_i + carry_i != list(range(nc + nk)):
            raise Mixing(eqn, "is a scan staticfield cannot read", rows_of(eqn, states)[0][1])
    consts, carry, xs = states[:nc], states[nc:nc + nk], states[nc + nk:]
    inner_xs = []
    for v, s in zip(eqn.invars[nc + nk:], xs):
        if isinstance(s, Row) and s.axis == 0:
            raise Mixing(eqn, "scans over the rows (each step sees the steps before it)", s)
        inner_xs.append(Row(s.axis - 1, s.origin) if isinstance(s, Row) else None)
    outs = _loop(a, eqn, p["jaxpr"], consts, carry, inner_xs)
    if len(outs) != len(eqn.outvars):
        raise Mixing(eqn, "is a scan staticfield cannot read", rows_of(eqn, states)[0][1])
    ys = [Row(s.axis + 1, s.origin) if isinstance(s, Row) else None for s in outs[nk:]]
    return [*outs[:nk], *ys]


def while_(a: Analysis, eqn: Any, states: list) -> list:
    p = eqn.params
    cn, bn = p["cond_nconsts"], p["body_nconsts"]
    cconsts, bconsts, carry = states[:cn], states[cn:cn + bn], states[cn + bn:]
    outs = _loop(a, eqn, p["body_jaxpr"], bconsts, carry, [])
    cjaxpr = p["cond_jaxpr"]
    [pred] = a.run(cjaxpr.jaxpr, [None] * len(cjaxpr.jaxpr.constvars), [*cconsts, *outs])
    if isinstance(pred, Row):
        raise Mixing(eqn, "loops while a condition on the rows holds", pred)
    return outs
