"""Following the row axis through a jaxpr: which outputs carry it, and whether rows mix.

Each variable of the program has a state:

==================  ===================================================================
``None``            free: computed without the rows (its content may still depend on the
                    bucket size, e.g. random numbers drawn for ``x.shape``)
``Pure(axes)``      free, and along each axis in ``axes`` the value at index ``i`` does not
                    depend on the axis's length (zeros, ``iota``, a broadcast of a scalar)
``Row(axis, ...)``  carries the rows on ``axis``: its row ``i`` is computed from row ``i``
                    of the bucketed inputs only
``Mixed(...)``      (``mask=`` only) computed from the rows, the row axis lost
==================  ===================================================================

A free value that meets a row value along the row axis must be ``Pure`` there (in the
unpadded call it would have had the real row count, so it was made from the shape).
``_rules`` holds one rule per primitive; an equation without a rule that touches a row
value counts as mixing rows (``Mixing``). With ``lenient=True`` (``mask=``) nothing is
refused: a mixing equation's outputs keep the row axis where their shape still has the
row count there, and are otherwise ``Mixed``; ``_front`` slices a ``Mixed`` output that
still has the bucket's size on the declared row axis.
"""

from __future__ import annotations

from typing import Any, NamedTuple


class Row(NamedTuple):
    axis: int
    origin: str  # the bucketed argument's leaf path, for messages


class Pure(NamedTuple):
    axes: frozenset


class Mixed(NamedTuple):
    """``mask=`` only: computed from the rows, the row axis lost (a reduction, a roll)."""

    origin: str


class Mixing(Exception):
    """Internal: an equation mixes rows (turned into ``BucketError`` by ``_front``)."""

    def __init__(self, eqn: Any, why: str, row: Row) -> None:
        super().__init__(why)
        self.eqn, self.why, self.row = eqn, why, row
        self.outer: list = []  # the enclosing call equations, innermost first (for the line)


SCALAR = Pure(frozenset(range(64)))


def shape(v: Any) -> tuple:
    return tuple(getattr(getattr(v, "aval", None), "shape", ()))


def is_literal(v: Any) -> bool:
    return not hasattr(v, "count") and hasattr(v, "val")


class Analysis:
    """One walk over a jaxpr and the jaxprs inside it (see the module docstring)."""

    def __init__(self, lenient: bool) -> None:
        self.lenient = lenient

    def run(self, jaxpr: Any, consts: list, ins: list) -> list:
        """The states of ``jaxpr``'s outputs, given those of its inputs."""
        from ._rules import RULES, free_rule

        env: dict = {}
        for v, s in zip(jaxpr.constvars, consts):
            env[v] = s
        for v, s in zip(jaxpr.invars, ins):
            env[v] = s

        def read(v: Any) -> Any:
            if is_literal(v):
                return SCALAR if not shape(v) else None
            return env.get(v)

        for eqn in jaxpr.eqns:
            states = [read(v) for v in eqn.invars]
            rows = [s for s in states if isinstance(s, Row)]
            mixed = [s for s in states if isinstance(s, (Row, Mixed))]
            if not eqn.outvars:
                outs: list = []
            elif not rows:
                outs = free_rule(self, eqn, states)
            else:
                rule = RULES.get(eqn.primitive.name)
                try:
                    if rule is None:
                        raise Mixing(eqn, "has no row rule (staticfield cannot prove it row-wise)", rows[0])
                    outs = rule(self, eqn, states)
                except Mixing as exc:
                    if not self.lenient:
                        if exc.eqn is not eqn:
                            exc.outer.append(eqn)
                        raise
                    outs = lenient_outs(eqn, states)
            if mixed and self.lenient:
                origin = mixed[0].origin
                outs = [s if isinstance(s, Row) else Mixed(origin) for s in outs]
            for v, s in zip(eqn.outvars, outs):
                env[v] = s
        return [read(v) for v in jaxpr.outvars]


def lenient_outs(eqn: Any, states: list) -> list:
    """``mask=``: the outputs of a row-mixing equation keep the row axis where their shape
    still has the row count there (a scan over features, a masked sort), else are free."""
    rows = [(v, s) for v, s in zip(eqn.invars, states) if isinstance(s, Row)]
    v, row = rows[0]
    size = shape(v)[row.axis]
    return [
        row if len(shape(o)) > row.axis and shape(o)[row.axis] == size else None
        for o in eqn.outvars
    ]


def join(a: Any, b: Any, eqn: Any) -> Any:
    """The state of a loop carry or a branch output that may be ``a`` or ``b``."""
    if a == b:
        return a
    if isinstance(a, Row) and isinstance(b, Row):
        raise Mixing(eqn, f"moves the rows from axis {a.axis} to axis {b.axis} of a loop carry "
                          "or branch output", a)
    if isinstance(a, Row) or isinstance(b, Row):
        return a if isinstance(a, Row) else b
    if isinstance(a, Pure) and isinstance(b, Pure):
        return Pure(a.axes & b.axes)
    return None


def rows_of(eqn: Any, states: list) -> list[tuple[Any, Row]]:
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
