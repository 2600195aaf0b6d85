"""The row rules: for each primitive, where the row axis goes, or why the rows mix.

A rule takes the analysis, the equation and its inputs' states (at least one is a
``Row``) and returns its outputs' states, or raises ``Mixing`` saying why in a few words
("reduces over the rows"). Families: elementwise operations (the row axis stays put);
shape operations (``broadcast_in_dim``, ``reshape``, ``transpose``, ``squeeze``,
``rev``, ``slice``, ``pad``, ``concatenate``...); contractions (``dot_general`` with
the row axis free or a batch dimension of both sides, ``conv_general_dilated`` with
the rows as its batch); reductions and cumulative operations over other axes;
``gather`` (a row-wise lookup); and calls, loops and branches (``_control``), followed
by recursion.
``free_rule`` keeps track of ``Pure`` values among equations without rows.
"""

from __future__ import annotations

from typing import Any, Callable

from ._control import call, cond, scan, while_
from ._rows import SCALAR, Analysis, Mixing, Pure, Row, free_ok, rows_of, shape

Rule = Callable[[Analysis, Any, list], list]

ELEMENTWISE = frozenset("""
abs acos acosh add and asin asinh atan atan2 atanh bessel_i0e bessel_i1e cbrt ceil clamp
clz complex conj convert_element_type copy copy_p cos cosh digamma div eq erf erf_inv erfc
exp exp2 expm1 floor ge gt igamma igamma_grad_a igammac imag integer_pow is_finite le lgamma
log log1p logistic lt max min mul ne neg nextafter not or polygamma population_count pow
random_gamma_grad real reduce_precision regularized_incomplete_beta rem round rsqrt select_n
shift_left shift_right_arithmetic shift_right_logical sign sin sinh sqrt square stop_gradient
sub tan tanh xor zeta sharding_constraint mesh_cast reshard pvary random_fold_in
square cumsum_p
""".split())
REDUCTIONS = frozenset("reduce_sum reduce_max reduce_min reduce_prod reduce_and reduce_or "
                       "reduce_xor argmax argmin reduce".split())
CUMULATIVE = frozenset("cumsum cumprod cummax cummin cumlogsumexp".split())
CALLS = ("jit", "pjit", "closed_call", "core_call", "remat", "remat2", "checkpoint", "custom_jvp_call",
         "custom_vjp_call", "custom_vjp_call_jaxpr", "custom_lin")


def _one_axis(eqn: Any, states: list) -> Row:
    rows = rows_of(eqn, states)
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
        raise Mixing(eqn, "broadcasts to a shape computed from the rows", rows_of(eqn, states)[0][1])
    dims = eqn.params["broadcast_dimensions"]
    new = dims[row.axis]
    if eqn.params["shape"][new] != shape(eqn.invars[0])[row.axis]:
        raise Mixing(eqn, "broadcasts the row axis (copies a row into others)", row)
    return [Row(new, row.origin)]


def reshape(a: Analysis, eqn: Any, states: list) -> list:
    row = states[0]
    old, new = shape(eqn.invars[0]), tuple(eqn.params["new_sizes"])
    if not isinstance(row, Row) or eqn.params.get("dimensions") is not None:
        raise Mixing(eqn, "reshapes with a permutation", rows_of(eqn, states)[0][1])
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
        raise Mixing(eqn, "slices at a position computed from the rows", rows_of(eqn, states)[0][1])
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
        raise Mixing(eqn, "convolves across the rows", rows_of(eqn, states)[0][1])
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
    raise Mixing(eqn, "gathers", rows_of(eqn, states)[0][1])


def scatter(a: Analysis, eqn: Any, states: list) -> list:
    """``x.at[:, j].set(v)``: an update of whole rows' windows, at positions not on the rows."""
    op, idx, upd = states[:3]
    dn = eqn.params["dimension_numbers"]
    if isinstance(idx, Row) or len(states) != 3:
        raise Mixing(eqn, "scatters to positions computed from the rows", rows_of(eqn, states)[0][1])
    rank = len(shape(eqn.invars[0]))
    kept = [d for d in range(rank) if d not in dn.inserted_window_dims and d not in dn.operand_batching_dims]
    k = op.axis if isinstance(op, Row) else None
    if k is None:  # rows only in the updates: find the operand axis their row axis fills
        k = next((d for j, d in enumerate(kept) if dn.update_window_dims[j] == upd.axis), None)
    if k is None or k not in kept or k in dn.scatter_dims_to_operand_dims:
        raise Mixing(eqn, "scatters into rows by position (x.at[i] writes chosen rows)", rows_of(eqn, states)[0][1])
    window = dn.update_window_dims[kept.index(k)]
    if shape(eqn.invars[2])[window] != shape(eqn.invars[0])[k]:
        raise Mixing(eqn, "scatters into some rows by position", rows_of(eqn, states)[0][1])
    row = op if isinstance(op, Row) else upd
    if isinstance(upd, Row):
        if upd.axis != window:
            raise Mixing(eqn, "scatters rows into other rows", upd)
    else:
        free_ok(eqn, eqn.invars[2], upd, Row(window, row.origin))
    if not isinstance(op, Row):
        free_ok(eqn, eqn.invars[0], op, Row(k, row.origin))
    return [Row(k, row.origin)]


def identity(a: Analysis, eqn: Any, states: list) -> list:
    return list(states[:len(eqn.outvars)])


def random_leading(a: Analysis, eqn: Any, states: list) -> list:
    """``random_bits``/``random_split``/``random_wrap``/``random_unwrap``/``random_seed``:
    the keys' leading dimensions stay in place (one key per row gives one draw per row)."""
    row = states[0]
    if not isinstance(row, Row) or len(shape(eqn.outvars[0])) <= row.axis \
            or shape(eqn.outvars[0])[row.axis] != shape(eqn.invars[0])[row.axis]:
        raise Mixing(eqn, "draws random numbers across the rows", rows_of(eqn, states)[0][1])
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
    "optimization_barrier": identity, "scatter": scatter, "scatter-add": scatter, "scatter_add": scatter,
    "scatter-mul": scatter, "scatter_mul": scatter, "scatter-min": scatter, "scatter_min": scatter,
    "scatter-max": scatter, "scatter_max": scatter, "random_bits": random_leading, "random_split": random_leading,
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
