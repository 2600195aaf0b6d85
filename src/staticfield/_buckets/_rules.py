"""The row rules: for each primitive, where the row axis goes, or why the rows mix.

A rule takes the analysis, the equation and its inputs' states (at least one a ``Row``)
and returns its outputs' states, or raises ``Mixing`` saying why in a few words ("reduces
over the rows"). Shapes are symbolic: the row axis is where a shape has the row count
``n`` itself. Families: elementwise operations (the row axis stays put; ``zero_of`` says
whether a value zero on the pad rows stays so); shape operations (``broadcast_in_dim``,
``reshape``, ``transpose``, ``squeeze``, ``rev``, ``pad``, ``concatenate``, ``stack``...);
contractions (``dot_general`` with the row axis free or a batch dimension of both sides,
``conv_general_dilated`` with the rows as its batch; a contraction over the rows of a
value zero on the pad rows, as in a gradient, sums the real rows only); reductions and
cumulative operations over other axes; random numbers per row. Slices, gathers and
scatters are ``_indexing``'s; calls, loops and branches ``_control``'s.
"""

from __future__ import annotations

from typing import Any, Callable

from ._lattice import Known, Mixing, Row, first_row, is_zero, merge, rows_of, shape
from .._core import _compat
from ._indexing import RULES as INDEXING
from ._symbolic import is_n, is_symbolic

Rule = Callable[[Any, Any, list], list]

ELEMENTWISE = frozenset("""
abs acos acosh add add_any and asin asinh atan atan2 atanh bessel_i0e bessel_i1e cbrt ceil clamp
clz complex conj convert_element_type copy copy_p cos cosh digamma div eq erf erf_inv erfc
exp exp2 expm1 floor ge gt igamma igamma_grad_a igammac imag integer_pow is_finite le lgamma
log log1p logistic lt max min mul ne neg nextafter not or polygamma population_count pow
random_gamma_grad real reduce_precision regularized_incomplete_beta rem round rsqrt select_n
shift_left shift_right_arithmetic shift_right_logical sign sin sinh sqrt square stop_gradient
sub tan tanh xor zeta sharding_constraint mesh_cast reshard pvary random_fold_in
threefry2x32 bitcast_convert_type
""".split())
# f(0) == 0: a value zero on the pad rows stays zero through these.
ZERO_UNARY = frozenset("""
neg convert_element_type copy copy_p real imag conj sin sinh tan tanh asin asinh atan atanh
sqrt cbrt sign abs expm1 log1p reduce_precision square erf erf_inv round floor ceil
stop_gradient sharding_constraint mesh_cast reshard pvary
""".split())
REDUCTIONS = frozenset("reduce_sum reduce_max reduce_min reduce_prod reduce_and reduce_or "
                       "reduce_xor argmax argmin reduce".split())
CUMULATIVE = frozenset("cumsum cumprod cummax cummin cumlogsumexp".split())
LINALG = frozenset("cholesky triangular_solve lu qr householder_product eigh svd "
                   "lu_pivots_to_permutation".split())


def _one_axis(eqn: Any, states: list) -> int:
    rows = rows_of(eqn, states)
    axes = {s.axis for _, s in rows}
    if len(axes) > 1:
        raise Mixing(eqn, f"combines operands with rows on different axes ({sorted(axes)})", first_row(eqn, states))
    return rows[0][1].axis


def _rows(states: list) -> list[Row]:
    return [s for s in states if isinstance(s, Row)]


def zero_of(eqn: Any, states: list) -> bool:
    """Whether an elementwise equation's output is zero on the pad rows."""
    name = eqn.primitive.name
    z = [is_zero(v, s) for v, s in zip(eqn.invars, states)]
    if name in ("mul", "and"):
        return any(z)
    if name == "div":
        return z[0]
    if name in ("max", "min", "clamp"):  # with constants: 0 stays 0 where it lies in range
        bounds = [s.value if isinstance(s, Known) else None for s, zero in zip(states, z) if not zero]
        if any(b is None for b in bounds):
            return False
        if name == "clamp":
            return z[1] and bounds[0] <= 0 <= bounds[-1] if len(bounds) == 2 else all(z)
        return all((b <= 0) if name == "max" else (b >= 0) for b in bounds)
    if name in ("add", "sub", "add_any", "or", "complex", "atan2"):
        return all(z)
    if name == "select_n":
        pred = states[0]
        if isinstance(pred, Row) and pred.zero:  # the row mask: a pad row takes case 0
            return z[1]
        return all(z[1:])
    if name == "integer_pow":
        return z[0] and eqn.params.get("y", 0) > 0
    return name in ZERO_UNARY and z[0]


def elementwise(a: Any, eqn: Any, states: list) -> list:
    axis = _one_axis(eqn, states)
    return [merge(_rows(states), axis, zero_of(eqn, states))] * len(eqn.outvars)


def broadcast_in_dim(a: Any, eqn: Any, states: list) -> list:
    row = states[0]
    if not isinstance(row, Row):  # only the (dynamic) shape operands carry rows
        raise Mixing(eqn, "broadcasts to a shape computed from the rows", first_row(eqn, states))
    return [row._replace(axis=eqn.params["broadcast_dimensions"][row.axis])]


def reshape(a: Any, eqn: Any, states: list) -> list:
    row = states[0]
    old, new = shape(eqn.invars[0]), tuple(eqn.params["new_sizes"])
    if not isinstance(row, Row) or eqn.params.get("dimensions") is not None:
        raise Mixing(eqn, "reshapes with a permutation", first_row(eqn, states))
    before = _prod(old[:row.axis])
    acc = 1
    for j, size in enumerate(new):
        if is_n(size) and acc == before:
            return [row._replace(axis=j)]
        if is_symbolic(size) or acc is None:
            break
        acc *= size
    raise Mixing(eqn, "reshapes the row axis together with another axis", row)


def _prod(dims: tuple) -> int | None:
    out = 1
    for d in dims:
        if is_symbolic(d):
            return None
        out *= d
    return out


def transpose(a: Any, eqn: Any, states: list) -> list:
    row = states[0]
    return [row._replace(axis=list(eqn.params["permutation"]).index(row.axis))]


def squeeze(a: Any, eqn: Any, states: list) -> list:
    row = states[0]
    dims = [d % len(shape(eqn.invars[0])) for d in eqn.params["dimensions"]]
    if row.axis in dims:
        raise Mixing(eqn, "squeezes the row axis away", row)
    return [row._replace(axis=row.axis - sum(d < row.axis for d in dims))]


def reduction(a: Any, eqn: Any, states: list) -> list:
    axis = _one_axis(eqn, states)
    rows = _rows(states)
    axes = eqn.params.get("axes", eqn.params.get("dimensions", ()))
    name = eqn.primitive.name
    if axis in axes:
        if name == "reduce_sum" and rows[0].zero:  # a sum over the real rows only (a gradient)
            return [None]
        raise Mixing(eqn, f"reduces over axis {axis}, the rows", first_row(eqn, states))
    zero = all(r.zero for r in rows) and name in ("reduce_sum", "reduce_max", "reduce_min", "reduce_prod")
    return [merge(rows, axis - sum(d < axis for d in axes), zero)] * len(eqn.outvars)


def along(param: str, what: str) -> Rule:
    """Operations along one axis (``param``): row-wise unless that axis is the rows'."""

    def rule(a: Any, eqn: Any, states: list) -> list:
        axis = _one_axis(eqn, states)
        if eqn.params[param] == axis:
            raise Mixing(eqn, f"{what} along axis {axis}, the rows", first_row(eqn, states))
        rows = _rows(states)
        name = eqn.primitive.name
        if name == "sort":  # each output is its operand, permuted within each row
            return [s if isinstance(s, Row) else merge(rows, axis, False) for s in states][:len(eqn.outvars)]
        zero = all(r.zero for r in rows) and len(rows) == len(states) and name not in ("cumlogsumexp",)
        return [merge(rows, axis, zero)] * len(eqn.outvars)

    return rule


def rev(a: Any, eqn: Any, states: list) -> list:
    row = states[0]
    if row.axis in eqn.params["dimensions"]:
        raise Mixing(eqn, "reverses the order of the rows", row)
    return [row]


def top_k(a: Any, eqn: Any, states: list) -> list:
    row = states[0]
    rank = len(shape(eqn.invars[0]))
    axis = eqn.params.get("axis", rank - 1)
    if row.axis == axis % rank:
        raise Mixing(eqn, "picks the top rows", row)
    return [row._replace(zero=False)] * len(eqn.outvars)


def pad(a: Any, eqn: Any, states: list) -> list:
    row = states[0]
    if not isinstance(row, Row):
        raise Mixing(eqn, "pads with a value computed from the rows", first_row(eqn, states))
    if tuple(eqn.params["padding_config"][row.axis]) != (0, 0, 0):
        raise Mixing(eqn, "pads along the rows", row)
    return [row._replace(zero=row.zero and is_zero(eqn.invars[1], states[1]))]


def dot_general(a: Any, eqn: Any, states: list) -> list:
    (lc, rc), (lb, rb) = eqn.params["dimension_numbers"]
    left, right = states
    lhs, rhs = shape(eqn.invars[0]), shape(eqn.invars[1])
    lfree = [d for d in range(len(lhs)) if d not in lc and d not in lb]
    rfree = [d for d in range(len(rhs)) if d not in rc and d not in rb]
    zero = is_zero(eqn.invars[0], left) or is_zero(eqn.invars[1], right)
    if isinstance(left, Row) and isinstance(right, Row):
        if left.axis in lb and right.axis in rb and list(lb).index(left.axis) == list(rb).index(right.axis):
            return [merge([left, right], list(lb).index(left.axis), zero)]
        if left.axis in lc and right.axis in rc and list(lc).index(left.axis) == list(rc).index(right.axis) \
                and zero:  # a sum over the real rows only (a gradient: zero on the pad rows)
            return [None]
        raise Mixing(eqn, "multiplies rows with each other (x @ y.T over the batch)", left if left.data else right)
    row = left if isinstance(left, Row) else right
    side_c, side_b, free = (lc, lb, lfree) if row is left else (rc, rb, rfree)
    if row.axis in side_c or row.axis in side_b:
        raise Mixing(eqn, "contracts over the rows (sums across the batch)", row)
    offset = len(lb) + (0 if row is left else len(lfree))
    return [row._replace(axis=offset + free.index(row.axis), zero=zero)]


def conv(a: Any, eqn: Any, states: list) -> list:
    lhs, rhs = states
    dn = eqn.params["dimension_numbers"]
    if isinstance(lhs, Row) and isinstance(rhs, Row) and dn is not None and lhs.axis == dn.lhs_spec[1] and \
            rhs.axis == dn.rhs_spec[1] and eqn.params.get("feature_group_count", 1) == 1 and \
            eqn.params.get("batch_group_count", 1) == 1 and \
            (is_zero(eqn.invars[0], lhs) or is_zero(eqn.invars[1], rhs)):
        return [None]  # a kernel's gradient: a sum over the real rows only (zero on the pad rows)
    if not isinstance(lhs, Row) or isinstance(rhs, Row) or eqn.params.get("batch_group_count", 1) != 1 \
            or dn is None or lhs.axis != dn.lhs_spec[0]:
        raise Mixing(eqn, "convolves across the rows", first_row(eqn, states))
    return [lhs._replace(axis=dn.out_spec[0])]


def stack(a: Any, eqn: Any, states: list) -> list:
    """``jnp.stack`` along ``axis``: the rows move one axis on where the new axis is before them."""
    axis = _one_axis(eqn, states)
    new = eqn.params["axis"] % (len(shape(eqn.invars[0])) + 1)
    rows = _rows(states)
    zero = all(r.zero for r in rows) and len(rows) == len(states)
    return [merge(rows, axis + 1 if new <= axis else axis, zero)]


def unstack(a: Any, eqn: Any, states: list) -> list:
    """The transpose of ``stack`` (its derivative): along another axis than the rows, each
    output keeps the rows, one axis down where the axis was before them."""
    row = states[0]
    axis = eqn.params["axis"] % len(shape(eqn.invars[0]))
    if axis == row.axis:
        raise Mixing(eqn, "unstacks along the rows (picks rows by position)", row)
    return [row._replace(axis=row.axis - (axis < row.axis))] * len(eqn.outvars)


def fft(a: Any, eqn: Any, states: list) -> list:
    """``jnp.fft`` over the trailing axes: row-wise where the rows are not among them."""
    row = states[0]
    rank = len(shape(eqn.invars[0]))
    if row.axis >= rank - len(eqn.params["fft_lengths"]):
        raise Mixing(eqn, "transforms along the rows", row)
    return [row._replace(zero=False)]


def tile(a: Any, eqn: Any, states: list) -> list:
    row = states[0]
    reps = tuple(eqn.params["reps"])
    offset = len(reps) - len(shape(eqn.invars[0]))  # jnp.tile may add leading axes
    if reps[offset + row.axis] != 1:
        raise Mixing(eqn, "repeats the rows", row)
    return [row._replace(axis=row.axis + max(offset, 0))]


def identity(a: Any, eqn: Any, states: list) -> list:
    return list(states[:len(eqn.outvars)])


def random_leading(a: Any, eqn: Any, states: list) -> list:
    """``random_bits``/``random_split``/``random_wrap``/``random_unwrap``/``random_seed``:
    the keys' leading dimensions stay in place (one key per row gives one draw per row)."""
    row = states[0]
    if not isinstance(row, Row):
        raise Mixing(eqn, "draws random numbers across the rows", first_row(eqn, states))
    return [row._replace(zero=False)] * len(eqn.outvars)


def linalg(a: Any, eqn: Any, states: list) -> list:
    """Linear algebra batched over leading axes: row-wise when the rows are one of them."""
    axis = _one_axis(eqn, states)
    rank = min(len(shape(v)) for v, s in zip(eqn.invars, states) if isinstance(s, Row))
    core = 1 if eqn.primitive.name == "lu_pivots_to_permutation" else 2
    if axis >= rank - core:
        raise Mixing(eqn, "solves or factors a matrix whose rows are the batch's rows", first_row(eqn, states))
    return [merge(_rows(states), axis, False)] * len(eqn.outvars)


def elementwise_in_jax(primitive: Any) -> bool:
    """Whether JAX batches ``primitive`` as an elementwise operation (its own vectorized or
    broadcasting batcher): the rule for a primitive with no rule here (a new one)."""
    batchers = _compat.get("primitive_batchers")
    if batchers is None:
        return False
    rule = batchers.get(primitive)
    kinds = (_compat.get("broadcast_batcher"), _compat.get("vectorized_batcher"))
    return getattr(rule, "func", None) in kinds and getattr(rule, "args", ())[:1] == (primitive,)


RULES: dict[str, Rule] = {name: elementwise for name in ELEMENTWISE}
RULES.update({name: reduction for name in REDUCTIONS})
RULES.update({name: along("axis", "accumulates") for name in CUMULATIVE})
RULES.update({name: linalg for name in LINALG})
RULES.update({
    "broadcast_in_dim": broadcast_in_dim, "reshape": reshape, "transpose": transpose,
    "squeeze": squeeze, "rev": rev, "top_k": top_k, "pad": pad,
    "dot_general": dot_general, "conv_general_dilated": conv,
    "sort": along("dimension", "sorts"), "concatenate": along("dimension", "concatenates"),
    "split": along("axis", "splits"), "optimization_barrier": identity, "random_bits": random_leading,
    "random_split": random_leading, "random_wrap": random_leading, "random_unwrap": random_leading,
    "random_seed": random_leading, "stack": stack, "unstack": unstack, "tile": tile, "fft": fft,
})
RULES.update(INDEXING)
