"""The row rules of indexing: slices, dynamic slices and updates, gathers and scatters.

Row-wise only where the rows are kept whole (``x[:, j]``, ``x.at[:, j].set(v)``, a table
lookup per row, a per-row ``take_along_axis``); picking or writing rows by position
(``x[1:]``, ``x[i]``, ``x.at[0]``) mixes them. Part of ``_rules.RULES``.
"""

from __future__ import annotations

from typing import Any

from ._lattice import Mixing, Row, first_row, is_zero, merge, shape
from ._symbolic import is_n


def _one_axis(eqn: Any, states: list) -> int:
    axes = {s.axis for s in states if isinstance(s, Row)}
    if len(axes) > 1:
        raise Mixing(eqn, f"combines operands with rows on different axes ({sorted(axes)})", first_row(eqn, states))
    return next(s for s in states if isinstance(s, Row)).axis


def _rows(states: list) -> list[Row]:
    return [s for s in states if isinstance(s, Row)]


def slice_(a: Any, eqn: Any, states: list) -> list:
    row = states[0]
    k = row.axis
    strides = eqn.params.get("strides") or (1,) * len(shape(eqn.invars[0]))
    if eqn.params["start_indices"][k] != 0 or not is_n(eqn.params["limit_indices"][k]) or strides[k] != 1:
        raise Mixing(eqn, "slices along the rows (x[:n] or x[1:] picks rows by position)", row)
    return [row]


def dynamic_slice(a: Any, eqn: Any, states: list) -> list:
    row = states[0]
    if not isinstance(row, Row) or any(isinstance(s, Row) for s in states[1:]):
        raise Mixing(eqn, "slices at a position computed from the rows", first_row(eqn, states))
    if not is_n(eqn.params["slice_sizes"][row.axis]):
        raise Mixing(eqn, "slices along the rows (picks rows by position)", row)
    return [row]


def dynamic_update_slice(a: Any, eqn: Any, states: list) -> list:
    if any(isinstance(s, Row) for s in states[2:]):
        raise Mixing(eqn, "updates at a position computed from the rows", first_row(eqn, states))
    axis = _one_axis(eqn, states[:2])
    if not (isinstance(states[0], Row) and isinstance(states[1], Row)) or \
            not is_n(shape(eqn.invars[1])[axis]):
        raise Mixing(eqn, "updates some rows by position", first_row(eqn, states))
    return [merge(_rows(states[:2]), axis, states[0].zero and states[1].zero)]


def gather(a: Any, eqn: Any, states: list) -> list:
    op, idx = states
    dn = eqn.params["dimension_numbers"]
    out_rank = len(shape(eqn.outvars[0]))
    batch_out = [d for d in range(out_rank) if d not in dn.offset_dims]
    if isinstance(op, Row) and not isinstance(idx, Row):
        k = op.axis
        kept = [d for d in range(len(shape(eqn.invars[0])))
                if d not in dn.collapsed_slice_dims and d not in getattr(dn, "operand_batching_dims", ())]
        if k in kept and k not in dn.start_index_map and is_n(eqn.params["slice_sizes"][k]):
            return [op._replace(axis=dn.offset_dims[kept.index(k)])]
        raise Mixing(eqn, "gathers rows by index (x[i] picks rows by position)", op)
    if isinstance(idx, Row):
        ivd = len(shape(eqn.invars[1])) - 1  # jnp's gathers put the index vector last
        k = idx.axis
        if k == ivd:
            raise Mixing(eqn, "gathers with indices along the rows' axis", idx)
        pos = [d for d in range(len(shape(eqn.invars[1]))) if d != ivd].index(k)
        if isinstance(op, Row):  # per-row lookup: both batched on the rows
            obd = list(getattr(dn, "operand_batching_dims", ()))
            ibd = list(getattr(dn, "start_indices_batching_dims", ()))
            if op.axis in obd and k in ibd and obd.index(op.axis) == ibd.index(k):
                return [merge([op, idx], batch_out[pos], op.zero)]
            if _by_row_index(a, eqn.invars[1], op.axis, dn.start_index_map, dn.collapsed_slice_dims) and \
                    eqn.params["slice_sizes"][op.axis] == 1:  # x[jnp.arange(n), labels]: row i reads row i
                return [merge([op, idx], batch_out[pos], op.zero)]
            raise Mixing(eqn, "gathers rows by index (x[i] picks rows by position)", op)
        return [idx._replace(axis=batch_out[pos], zero=False)]  # a table lookup per row
    raise Mixing(eqn, "gathers", first_row(eqn, states))


def scatter(a: Any, eqn: Any, states: list) -> list:
    """``x.at[:, j].set(v)``: an update of whole rows' windows, at positions not on the rows."""
    op, idx, upd = states[:3]
    dn = eqn.params["dimension_numbers"]
    ivd = len(shape(eqn.invars[1])) - 1
    scatter_dims = [d for d in range(len(shape(eqn.invars[2]))) if d not in dn.update_window_dims]
    pos = -1
    if isinstance(idx, Row) and idx.axis != ivd:
        pos = [d for d in range(len(shape(eqn.invars[1]))) if d != ivd].index(idx.axis)
    if isinstance(idx, Row) and len(states) == 3:  # a per-row scatter: every side batched on the rows
        obd = list(getattr(dn, "operand_batching_dims", ()))
        ibd = list(getattr(dn, "scatter_indices_batching_dims", ()))
        if isinstance(op, Row) and op.axis in obd and idx.axis in ibd and \
                obd.index(op.axis) == ibd.index(idx.axis) and isinstance(upd, Row) and 0 <= pos < len(scatter_dims) \
                and upd.axis == scatter_dims[pos]:
            return [merge([op, upd], op.axis, is_zero(eqn.invars[0], op) and is_zero(eqn.invars[2], upd))]
    if isinstance(idx, Row) and len(states) == 3 and isinstance(op, Row) and idx.axis != ivd and \
            _by_row_index(a, eqn.invars[1], op.axis, dn.scatter_dims_to_operand_dims, dn.inserted_window_dims) and \
            (not isinstance(upd, Row) or upd.axis == scatter_dims[pos]):
        a.drops[id(eqn)] = idx.axis  # x.at[jnp.arange(n), j]: row i writes row i; a pad row nowhere (_run)
        return [merge(_rows([op, upd]), op.axis, is_zero(eqn.invars[0], op) and is_zero(eqn.invars[2], upd))]
    if isinstance(idx, Row) or len(states) != 3:
        raise Mixing(eqn, "scatters to positions computed from the rows", first_row(eqn, states))
    rank = len(shape(eqn.invars[0]))
    batching = getattr(dn, "operand_batching_dims", ())
    kept = [d for d in range(rank) if d not in dn.inserted_window_dims and d not in batching]
    k = op.axis if isinstance(op, Row) else None
    if k is None:  # rows only in the updates: find the operand axis their row axis fills
        k = next((d for j, d in enumerate(kept) if dn.update_window_dims[j] == upd.axis), None)
    if k is None or k not in kept or k in dn.scatter_dims_to_operand_dims:
        raise Mixing(eqn, "scatters into rows by position (x.at[i] writes chosen rows)", first_row(eqn, states))
    window = dn.update_window_dims[kept.index(k)]
    if not is_n(shape(eqn.invars[2])[window]) or not is_n(shape(eqn.invars[0])[k]):
        raise Mixing(eqn, "scatters into some rows by position", first_row(eqn, states))
    if isinstance(upd, Row) and upd.axis != window:
        raise Mixing(eqn, "scatters rows into other rows", upd)
    zero = is_zero(eqn.invars[0], op) and is_zero(eqn.invars[2], upd)
    return [merge(_rows([op, upd]), k, zero)]



def _by_row_index(a: Any, indices: Any, axis: int, index_map: tuple, collapsed: tuple) -> bool:
    """Whether the indices pick, for the operand's row ``axis``, each row's own index
    (``jnp.arange(n)``): the entry of the index vector that ``index_map`` sends to ``axis``."""
    if axis not in index_map or axis not in collapsed or getattr(a, "row_index", None) is None:
        return False
    entry = a.component(indices, list(index_map).index(axis))
    return entry is not None and a.row_index(entry)


RULES = {
    "slice": slice_, "dynamic_slice": dynamic_slice, "dynamic_update_slice": dynamic_update_slice,
    "gather": gather, "scatter": scatter, "scatter-add": scatter, "scatter_add": scatter,
    "scatter-mul": scatter, "scatter_mul": scatter, "scatter-min": scatter, "scatter_min": scatter,
    "scatter-max": scatter, "scatter_max": scatter,
}
