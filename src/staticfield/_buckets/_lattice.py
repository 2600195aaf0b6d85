"""What the row analysis knows of each value of a program traced with a symbolic row count.

Each variable of the jaxpr has a state:

=======================  =====================================================================
``None``                 free: computed without the rows and without the row count (its
                         shape has no ``n``)
``Row(axis, ...)``       carries the rows on ``axis`` (where its shape has ``n``, and nowhere
                         else): row ``i`` is computed from row ``i`` only. ``data``: from the
                         bucketed inputs (else from the row index alone: ``arange(n)``,
                         ``zeros((n, d))``); ``zero``: zero on every pad row (a cotangent of a
                         sliced output, the row mask ``valid``, and what they scale)
``Counted(eqn, why)``    depends on the row count other than row by row (``x.shape[0]`` as a
                         number, random numbers drawn for ``(n, d)``, a reversed
                         ``arange(n)``): in the unpadded call it would differ. It may flow
                         through free operations, and is refused (``CountUsed``) where it
                         meets the rows, an output, a branch, a loop or a callback
``Mixed(origin)``        (``mask=`` only) computed from several rows (a reduction, a sort)
=======================  =====================================================================

A rule that cannot prove an equation row-wise raises ``Mixing``; on rows made from the
index alone that is no refusal, the outputs are ``Counted`` instead.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from ._symbolic import is_n, is_symbolic


class Row(NamedTuple):
    axis: int
    origin: str  # the bucketed leaf's path, for messages ("" for the row index alone)
    data: bool = True
    zero: bool = False


class Known(NamedTuple):
    """Free, and a scalar of known value (a literal, converted or passed into a call):
    enough to tell that ``max(g, -1.0)`` of a value zero on the pad rows stays zero."""

    value: float


class Counted(NamedTuple):
    eqn: Any  # where the count became a value (for the line in the message)
    why: str
    outer: tuple = ()  # the equations whose jaxprs hold ``eqn``, innermost first


class Mixed(NamedTuple):
    """``mask=`` only: computed from the rows, the row axis lost (a reduction, a roll)."""

    origin: str


class Mixing(Exception):
    """Internal: an equation mixes rows (turned into ``BucketError`` by ``_trace``)."""

    def __init__(self, eqn: Any, why: str, row: Row) -> None:
        super().__init__(why)
        self.eqn, self.why, self.row = eqn, why, row
        self.outer: list = []  # the enclosing call equations, innermost first (for the line)


class CountUsed(Exception):
    """Internal: a value computed from the row count reaches the rows, an output, a branch,
    a loop or a callback (turned into ``BucketError`` by ``_trace``)."""

    def __init__(self, counted: Counted, eqn: Any, what: str) -> None:
        super().__init__(counted.why)
        self.counted, self.eqn, self.what = counted, eqn, what
        self.outer: list = []


def shape(v: Any) -> tuple:
    return tuple(getattr(getattr(v, "aval", None), "shape", ()))


def is_literal(v: Any) -> bool:
    return not hasattr(v, "count") and hasattr(v, "val")


def n_axes(v: Any) -> list[int]:
    """The axes of ``v`` whose size is the row count itself."""
    return [k for k, d in enumerate(shape(v)) if is_n(d)]


def symbolic(v: Any) -> bool:
    """Whether ``v``'s shape depends on the row count at all (``n``, ``2n``, ``n + 1``)."""
    return any(is_symbolic(d) for d in shape(v))


def literal(v: Any) -> Known | None:
    """A scalar literal as ``Known`` (``None`` for anything else)."""
    if not is_literal(v):
        return None
    try:
        value = np.asarray(v.val)
        return Known(float(value)) if value.shape == () and value.dtype.kind in "biuf" else None
    except (TypeError, ValueError):
        return None


def is_zero(v: Any, state: Any) -> bool:
    """Whether ``v`` is zero on every pad row: a zero ``Row``, or a known 0."""
    if isinstance(state, Row):
        return state.zero
    if isinstance(state, Known):
        return state.value == 0
    if is_literal(v):
        try:
            return bool(np.all(np.asarray(v.val) == 0))
        except Exception:
            return False
    return False


def rows_of(eqn: Any, states: list) -> list[tuple[Any, Row]]:
    return [(v, s) for v, s in zip(eqn.invars, states) if isinstance(s, Row)]


def first_row(eqn: Any, states: list) -> Row:
    """The operand row that decides what a refusal says: a data row first."""
    rows = [s for _, s in rows_of(eqn, states)]
    return next((r for r in rows if r.data), rows[0])


def merge(rows: list[Row], axis: int, zero: bool) -> Row:
    """The row of an output computed from ``rows`` (row-wise), on ``axis``."""
    data = [r for r in rows if r.data]
    origin = data[0].origin if data else rows[0].origin
    return Row(axis, origin, bool(data), zero)


def join(a: Any, b: Any, eqn: Any) -> Any:
    """The state of a loop carry or a branch output that may be ``a`` or ``b``."""
    if a == b:
        return a
    if isinstance(a, Known) or isinstance(b, Known):
        a, b = (None if isinstance(a, Known) else a), (None if isinstance(b, Known) else b)
        if a == b:
            return a
    if isinstance(a, Counted) or isinstance(b, Counted):
        return a if isinstance(a, Counted) else b
    if isinstance(a, Row) and isinstance(b, Row):
        if a.axis != b.axis:
            raise Mixing(eqn, f"moves the rows from axis {a.axis} to axis {b.axis} of a loop carry "
                              "or branch output", a if a.data else b)
        return merge([a, b], a.axis, a.zero and b.zero)
    if isinstance(a, Mixed) or isinstance(b, Mixed):
        return a if isinstance(a, Mixed) else b
    if isinstance(a, Row) or isinstance(b, Row):  # a free value never has the row count's size
        row = a if isinstance(a, Row) else b
        raise Mixing(eqn, "joins the rows with a value that does not carry them", row)
    return None
