"""The row rules: for each primitive, where the row axis goes, or why the rows mix.

A rule takes the analysis, the equation and its inputs' states (at least one is a
``Row``) and returns its outputs' states, or raises ``Mixing`` saying why in a few words
("reduces over the rows"). Families: elementwise operations (the row axis stays put);
shape operations (``broadcast_in_dim``, ``reshape``, ``transpose``, ``squeeze``,
``rev``, ``slice``, ``pad``, ``concatenate``...); contractions (``dot_general`` with
the row axis free or a batch dimension of both sides, ``conv_general_dilated`` with
the rows as its batch); reductions and cumulative operations over other axes;
``gather`` (a row-wise lookup); and calls, loops and branches, followed by recursion.
``free_rule`` keeps track of ``Pure`` values among equations without rows.
"""

from __future__ import annotations

from typing import Any, Callable

from ._rows import SCALAR, Analysis, Mixing, Pure, Row, join, shape

Rule = Callable[[Analysis, Any, list], list]

ELEMENTWISE = frozenset("""
abs acos acosh add and asin asinh atan atan2 atanh bessel_i0e bessel_i1e cbrt ceil clamp
clz complex conj convert_element_type copy copy_p cos cosh digamma div eq erf erf_inv erfc
exp exp2 expm1 floor ge gt igamma igamma_grad_a igammac imag integer_pow is_finite le lgamma
log log1p logistic lt max min mul ne neg nextafter not or polygamma population_count pow
random_gamma_grad real reduce_precision regularized_incomplete_beta rem round rsqrt select_n
shift_left shift_right_arithmetic shift_right_logical sign sin sinh sqrt square stop_gradient
sub tan tanh xor zeta sharding_constraint mesh_cast reshard pvary random_fold_in
threefry2x32 square cumsum_p
""".split())
REDUCTIONS = frozenset("reduce_sum reduce_max reduce_min reduce_prod reduce_and reduce_or "
                       "reduce_xor argmax argmin reduce".split())
CUMULATIVE = frozenset("cumsum cumprod cummax cummin cumlogsumexp".split())
CALLS = ("jit", "pjit", "closed_call", "core_call", "remat", "remat2", "checkpoint", "custom_jvp_call",
         "custom_vjp_call", "custom_vjp_call_jaxpr", "custom_lin")


def _rows(eqn: Any, states: list) -> list[tuple[Any, Row]]:
    return [(v, s) for v, s in zip(eqn.invars, states) if isinstance(s, Row)]


def free_ok(eqn: Any, v: Any, state: Any, row: Row) -> None:
    """A free operand ``v`` meets rows on ``row.axis``: fine unless it has the row count
    there and its content along that axis may depend on that count."""
    dims = shape(v)
    if len(dims) <= row.axis or isinstance(state, Row):
        return
    if isinstance(state, Pure) and row.axis in state.axes:
        return
    raise Mixing(eqn, "combines the rows with a value of the bucket's size that is not made "
                      "from the rows (such as random numbers drawn for x.shape, or an array "
                      "built from the row count), whose rows would differ in the unpadded call",
                 row)


def _one_axis(eqn: Any, states: list) -> Row:
    rows = _rows(eqn, states)
    axes = {s.axis for _, s in rows}
    if len(axes) > 1:
        raise Mixing(eqn, f"combines operands with rows on different axes ({sorted(axes)})", rows[0][1])
    return rows[0][1]


def elementwise(a: Analysis, eqn: Any, states: list) -> list:
    row = _one_axis(eqn, states)
    size = next(shape(v)[row.axis] for v, s in zip(eqn.invars, states) if isinstance(s, Row))
    for v, s in zip(eqn.invars, states):
        if not isinstance(s, Row) and shape(v):
            free_ok(eqn, v, s, row)
    for o in eqn.outvars:
        if len(shape(o)) <= row.axis or shape(o)[row.axis] != size:
            raise Mixing(eqn, "changes the size of the row axis", row)
    return [row] * len(eqn.outvars)


def broadcast_in_dim(a: Analysis, eqn: Any, states: list) -> list:
    row = states[0]
    if not isinstance(row, Row):  # only the (dynamic) shape operands carry rows
        raise Mixing(eqn, "broadcasts to a shape computed from the rows", _rows(eqn, states)[0][1])
    dims = eqn.params["broadcast_dimensions"]
    new = dims[row.axis]
    if eqn.params["shape"][new] != shape(eqn.invars[0])[row.axis]:
        raise Mixing(eqn, "broadcasts the row axis (copies a row into others)", row)
    return [Row(new, row.origin)]


def reshape(a: Analysis, eqn: Any, states: list) -> list:
    row = states[0]
    old, new = shape(eqn.invars[0]), tuple(eqn.params["new_sizes"])
    if not isinstance(row, Row) or eqn.params.get("dimensions") is not None:
        raise Mixing(eqn, "reshapes with a permutation", _rows(eqn, states)[0][1])
    before = _prod(old[:row.axis])
    acc = 1
    for j, size in enumerate(new):
        if acc == before and size == old[row.axis]:
            return [Row(j, row.origin)]
        acc *= size
    raise Mixing(eqn, "reshapes the row axis together with another axis", row)


def _prod(dims: tuple) -> int:
    out = 1
    for d in dims:
        out *= d
    return out


def transpose(a: Analysis, eqn: Any, states: list) -> list:
    row = states[0]
    return [Row(list(eqn.params["permutation"]).index(row.axis), row.origin)]


def squeeze(a: Analysis, eqn: Any, states: list) -> list:
    row = states[0]
    dims = [d % len(shape(eqn.invars[0])) for d in eqn.params["dimensions"]]
    if row.axis in dims:
        raise Mixing(eqn, "squeezes the row axis away", row)
    return [Row(row.axis - sum(d < row.axis for d in dims), row.origin)]


def reduction(a: Analysis, eqn: Any, states: list) -> list:
    row = _one_axis(eqn, states)
    axes = eqn.params.get("axes", eqn.params.get("dimensions", ()))
    if row.axis in axes:
        raise Mixing(eqn, f"reduces over axis {row.axis}, the rows", row)
    return [Row(row.axis - sum(d < row.axis for d in axes), row.origin)] * len(eqn.outvars)


def along(param: str, what: str) -> Rule:
    """Operations along one axis (``param``): row-wise unless that axis is the rows'."""

    def rule(a: Analysis, eqn: Any, states: list) -> list:
        row = _one_axis(eqn, states)
        if eqn.params[param] == row.axis:
            raise Mixing(eqn, f"{what} along axis {row.axis}, the rows", row)
        if eqn.primitive.name == "concatenate" or eqn.primitive.name == "split":
            for v, s in zip(eqn.invars, states):
                if not isinstance(s, Row):
                    free_ok(eqn, v, s, row)
        return [row] * len(eqn.outvars)

    return rule


def rev(a: Analysis, eqn: Any, states: list) -> list:
    row = states[0]
    if row.axis in eqn.params["dimensions"]:
        raise Mixing(eqn, "reverses the order of the rows", row)
    return [row]


def top_k(a: Analysis, eqn: Any, states: list) -> list:
    row = states[0]
    axis = eqn.params.get("axis", len(shape(eqn.invars[0])) - 1)
    if row.axis == axis % len(shape(eqn.invars[0])):
        raise Mixing(eqn, "picks the top rows", row)
    return [row] * len(eqn.outvars)


def slice_(a: Analysis, eqn: Any, states: list) -> list:
    row = states[0]
    k = row.axis
    strides = eqn.params.get("strides") or (1,) * len(shape(eqn.invars[0]))
    if eqn.params["start_indices"][k] != 0 or eqn.params["limit_indices"][k] != shape(eqn.invars[0])[k] \
            or strides[k] != 1:
        raise Mixing(eqn, "slices along the rows (x[:n] or x[1:] picks rows by position)", row)
    return [row]


def dynamic_slice(a: Analysis, eqn: Any, states: list) -> list:
    row = states[0]
    if not isinstance(row, Row) or any(isinstance(s, Row) for s in states[1:]):
        raise Mixing(eqn, "slices at a position computed from the rows", _rows(eqn, states)[0][1])
    if eqn.params["slice_sizes"][row.axis] != shape(eqn.invars[0])[row.axis]:
        raise Mixing(eqn, "slices along the rows (picks rows by position)", row)
    return [row]


def dynamic_update_slice(a: Analysis, eqn: Any, states: list) -> list:
    (op, upd), idx = states[:2], states[2:]
    row = _one_axis(eqn, states[:2])
    if any(isinstance(s, Row) for s in idx):
        raise Mixing(eqn, "updates at a position computed from the rows", row)
    if shape(eqn.invars[1])[row.axis] != shape(eqn.invars[0])[row.axis]:
        raise Mixing(eqn, "updates some rows by position", row)
    for v, s in zip(eqn.invars[:2], (op, upd)):
        if not isinstance(s, Row):
            free_ok(eqn, v, s, row)
    return [row]


def pad(a: Analysis, eqn: Any, states: list) -> list:
    row = states[0]
    if not isinstance(row, Row):
        raise Mixing(eqn, "pads with a value computed from the rows", states[1])
    if tuple(eqn.params["padding_config"][row.axis]) != (0, 0, 0):
        raise Mixing(eqn, "pads along the rows", row)
    return [row]


def dot_general(a: Analysis, eqn: Any, states: list) -> list:
    (lc, rc), (lb, rb) = eqn.params["dimension_numbers"]
    left, right = states
    lhs, rhs = shape(eqn.invars[0]), shape(eqn.invars[1])
    lfree = [d for d in range(len(lhs)) if d not in lc and d not in lb]
    rfree = [d for d in range(len(rhs)) if d not in rc and d not in rb]
    if isinstance(left, Row) and isinstance(right, Row):
        if left.axis in lb and right.axis in rb and list(lb).index(left.axis) == list(rb).index(right.axis):
            return [Row(list(lb).index(left.axis), left.origin)]
        raise Mixing(eqn, "multiplies rows with each other (x @ y.T over the batch)", left)
    row = left if isinstance(left, Row) else right
    side_c, side_b, free = (lc, lb, lfree) if row is left else (rc, rb, rfree)
    if row.axis in side_c:
        raise Mixing(eqn, "contracts over the rows (sums across the batch)", row)
    if row.axis in side_b:  # batched with a free operand: that operand must not depend on the count
        other = 1 if row is left else 0
        free_ok(eqn, eqn.invars[other], states[other], Row(list(rb if row is left else lb)[
            list(side_b).index(row.axis)], row.origin))
        return [Row(list(side_b).index(row.axis), row.origin)]
    offset = len(lb) + (0 if row is left else len(lfree))
    return [Row(offset + free.index(row.axis), row.origin)]


def conv(a: Analysis, eqn: Any, states: list) -> list:
    lhs, rhs = states
    dn = eqn.params["dimension_numbers"]
    if not isinstance(lhs, Row) or isinstance(rhs, Row) or eqn.params.get("batch_group_count", 1) != 1 \
            or dn is None or lhs.axis != dn.lhs_spec[0]:
        raise Mixing(eqn, "convolves across the rows", _rows(eqn, states)[0][1])
    return [Row(dn.out_spec[0], lhs.origin)]


def gather(a: Analysis, eqn: Any, states: list) -> list:
    op, idx = states
    dn = eqn.params["dimension_numbers"]
    out_rank = len(shape(eqn.outvars[0]))
    batch_out = [d for d in range(out_rank) if d not in dn.offset_dims]
    if isinstance(op, Row) and not isinstance(idx, Row):
        k = op.axis
        kept = [d for d in range(len(shape(eqn.invars[0])))
                if d not in dn.collapsed_slice_dims and d not in dn.operand_batching_dims]
        if k in kept and k not in dn.start_index_map and \
                eqn.params["slice_sizes"][k] == shape(eqn.invars[0])[k]:
            return [Row(dn.offset_dims[kept.index(k)], op.origin)]
        raise Mixing(eqn, "gathers rows by index (x[i] picks rows by position)", op)
    if isinstance(idx, Row):
        ivd = len(shape(eqn.invars[1])) - 1  # jnp's gathers put the index vector last
        k = idx.axis
        if k == ivd:
            raise Mixing(eqn, "gathers with indices along the rows' axis", idx)
        pos = [d for d in range(len(shape(eqn.invars[1]))) if d != ivd].index(k)
        if isinstance(op, Row):  # per-row lookup: both batched on the rows
            if op.axis in dn.operand_batching_dims and k in dn.start_indices_batching_dims and \
                    list(dn.operand_batching_dims).index(op.axis) == \
                    list(dn.start_indices_batching_dims).index(k):
                return [Row(batch_out[pos], idx.origin)]
            raise Mixing(eqn, "gathers rows by index (x[i] picks rows by position)", op)
        return [Row(batch_out[pos], idx.origin)]  # a table lookup per row
    raise Mixing(eqn, "gathers", _rows(eqn, states)[0][1])


def call(a: Analysis, eqn: Any, states: list) -> list:
    p = eqn.params
    inner = p.get("jaxpr", p.get("call_jaxpr", p.get("fun_jaxpr")))
    if inner is None:
        raise Mixing(eqn, "is a call staticfield cannot look into", _rows(eqn, states)[0][1])
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
    raise Mixing(eqn, "has a loop carry whose rows never settle", _rows(eqn, [*fixed, *carry, *rest])[0][1])


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
            raise Mixing(eqn, "is a scan staticfield cannot read", _rows(eqn, states)[0][1])
    consts, carry, xs = states[:nc], states[nc:nc + nk], states[nc + nk:]
    inner_xs = []
    for v, s in zip(eqn.invars[nc + nk:], xs):
        if isinstance(s, Row) and s.axis == 0:
            raise Mixing(eqn, "scans over the rows (each step sees the steps before it)", s)
        inner_xs.append(Row(s.axis - 1, s.origin) if isinstance(s, Row) else None)
    outs = _loop(a, eqn, p["jaxpr"], consts, carry, inner_xs)
    if len(outs) != len(eqn.outvars):
        raise Mixing(eqn, "is a scan staticfield cannot read", _rows(eqn, states)[0][1])
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


def identity(a: Analysis, eqn: Any, states: list) -> list:
    return list(states[:len(eqn.outvars)])


def random_leading(a: Analysis, eqn: Any, states: list) -> list:
    """``random_bits``/``random_split``/``random_wrap``/``random_unwrap``/``random_seed``:
    the keys' leading dimensions stay in place (one key per row gives one draw per row)."""
    row = states[0]
    if not isinstance(row, Row) or len(shape(eqn.outvars[0])) <= row.axis \
            or shape(eqn.outvars[0])[row.axis] != shape(eqn.invars[0])[row.axis]:
        raise Mixing(eqn, "draws random numbers across the rows", _rows(eqn, states)[0][1])
    return [row] * len(eqn.outvars)


RULES: dict[str, Rule] = {name: elementwise for name in ELEMENTWISE}
RULES.update({name: reduction for name in REDUCTIONS})
RULES.update({name: along("axis", "accumulates") for name in CUMULATIVE})
RULES.update({name: call for name in CALLS})
RULES.update({
    "broadcast_in_dim": broadcast_in_dim, "reshape": reshape, "transpose": transpose,
    "squeeze": squeeze, "rev": rev, "top_k": top_k, "slice": slice_, "pad": pad,
    "dynamic_slice": dynamic_slice, "dynamic_update_slice": dynamic_update_slice,
    "dot_general": dot_general, "conv_general_dilated": conv, "gather": gather,
    "sort": along("dimension", "sorts"), "concatenate": along("dimension", "concatenates"),
    "split": along("axis", "splits"), "cond": cond, "scan": scan, "while": while_,
    "optimization_barrier": identity, "random_bits": random_leading, "random_split": random_leading,
    "random_wrap": random_leading, "random_unwrap": random_leading, "random_seed": random_leading,
})


# ----- equations without rows: keep track of Pure values -----------------------------------
def free_rule(a: Analysis, eqn: Any, states: list) -> list:
    """Outputs of an equation whose inputs carry no rows: free, and ``Pure`` where known."""
    name = eqn.primitive.name
    n = len(eqn.outvars)
    if name == "iota":
        return [Pure(frozenset(range(len(shape(eqn.outvars[0])))))]
    if name == "broadcast_in_dim":
        src = states[0]
        dims = eqn.params["broadcast_dimensions"]
        out_rank = len(shape(eqn.outvars[0]))
        kept = {dims[d] for d in (src.axes if isinstance(src, Pure) else ()) if d < len(dims)}
        kept |= {d for d in range(out_rank) if d not in dims}
        kept |= {dims[d] for d in range(len(dims)) if shape(eqn.invars[0])[d] == 1}
        return [Pure(frozenset(kept))]
    if name in ELEMENTWISE:
        axes = None
        for v, s in zip(eqn.invars, states):
            if not shape(v):
                continue
            own = s.axes if isinstance(s, Pure) else frozenset()
            axes = own if axes is None else axes & own
        return [SCALAR if axes is None else Pure(axes)] * n
    if name == "transpose" and isinstance(states[0], Pure):
        perm = list(eqn.params["permutation"])
        return [Pure(frozenset(perm.index(d) for d in states[0].axes if d in perm))]
    if name in CALLS and any(isinstance(s, Pure) for s in states):
        return call(a, eqn, states)
    return [None] * n
