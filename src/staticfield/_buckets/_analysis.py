"""Following the row axis through a jaxpr traced with a symbolic row count: which outputs
carry it, and whether rows, or the count, mix into a result.

``Analysis.run`` walks the equations with the states of ``_lattice``; ``_rules`` holds one
rule per primitive and ``_control`` the calls, branches, loops and custom derivatives,
followed by recursion. An equation without a rule that touches the rows counts as mixing
them (``Mixing``); a value computed from the count that meets the rows, an output, a
branch, a loop or a callback is ``CountUsed``. With ``lenient=True`` (``mask=``) rows
may mix: a mixing equation's outputs are ``Mixed``, or keep the row axis where their
shape still has the row count there; the count is refused all the same.

Callbacks (``debug_callback``, ``pure_callback``, ``io_callback``) are noted in the order
the walk meets them (``callbacks``: the row axis of each operand and result), so that the
program that runs can hand them the real rows only (``_run``).
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import numpy as np

from ._shards import across, mesh_axes, splits
from ._symbolic import is_n as is_n_dim
from ._lattice import (Counted, CountUsed, Known, Mixed, Mixing, Row, first_row, is_literal, literal, n_axes, shape,
                       symbolic)

CALLBACKS = frozenset(("debug_callback", "debug_print", "pure_callback", "io_callback"))
# Calls whose jaxpr the program that runs evaluates inline when it must hand a callback
# inside them the real rows (``_run``); a value of the count passes into any call.
INLINED = frozenset(("pjit", "jit", "closed_call", "core_call", "remat", "remat2", "checkpoint",
                     "shard_map"))  # (a shard_map only when replicated: its body is the whole program)
CALLS = INLINED | frozenset(("custom_jvp_call", "custom_vjp_call", "custom_vjp_call_jaxpr"))


def inlined(eqn: Any) -> bool:
    """A call the program that runs may evaluate inline: not a ``shard_map`` that splits an
    axis over devices (its body sees a device's shard only)."""
    return eqn.primitive.name in INLINED and not splits(eqn)


class Callback(NamedTuple):
    """A callback of the program, in walk order: each operand's and result's row axis."""

    name: str
    operands: tuple
    results: tuple


class Analysis:
    """One walk over a jaxpr and the jaxprs inside it (see the module docstring)."""

    def __init__(self, rules: dict, control: frozenset, lenient: bool,
                 elementwise: Callable[[Any], bool] = lambda primitive: False) -> None:
        self.rules, self.control, self.lenient, self.elementwise = rules, control, lenient, elementwise
        self.callbacks: list[Callback] = []
        self.enclosing: list[Any] = []  # the equations whose jaxprs the walk is inside
        self.custom: dict[str, set] = {}  # custom derivative primitives met: their rules' names
        self.producer: dict = {}  # variable -> the equation that made it (every jaxpr walked)
        self.states: dict = {}  # variable -> its state
        self.drops: dict = {}  # id of a scatter writing rows by the row index -> its indices' row axis
        self.shards: list[frozenset] = []  # the mesh axes splitting the rows, per shard_map the walk is in
        self.splits: set[int] = {1}  # the device counts shard_maps split the rows over

    def multiple(self) -> int:
        """What every bucket size must be a multiple of: each device count the rows are split over."""
        return int(np.lcm.reduce(sorted(self.splits)))

    def run(self, jaxpr: Any, consts: list, ins: list) -> list:
        """The states of ``jaxpr``'s outputs, given those of its inputs."""
        env: dict = {}
        for v, s in zip(jaxpr.constvars, consts):
            env[v] = s
        for v, s in zip(jaxpr.invars, ins):
            env[v] = s

        def read(v: Any) -> Any:
            return literal(v) if is_literal(v) else env.get(v)

        for eqn in jaxpr.eqns:
            outs = self.equation(eqn, [read(v) for v in eqn.invars])
            for v, s in zip(eqn.outvars, outs):
                env[v] = s
                self.producer[v] = eqn
                self.states[v] = s
        return [read(v) for v in jaxpr.outvars]

    # ----- the row index (``jnp.arange(n)``) as an index: row by row ---------------------
    def nonneg(self, v: Any, depth: int = 0) -> bool:
        """Whether ``v`` is never negative: the row index, sizes, and sums and products of them."""
        if is_literal(v):
            return np.all(np.asarray(v.val) >= 0)
        eqn = self.producer.get(v)
        if eqn is None or depth > 12:
            return False
        name = eqn.primitive.name
        if name in ("iota", "dim_as_value"):
            return True
        if name in ("broadcast_in_dim", "convert_element_type", "reshape", "squeeze", "add", "mul", "max",
                    "concatenate"):
            ops = eqn.invars if name != "broadcast_in_dim" else eqn.invars[:1]
            return all(self.nonneg(o, depth + 1) for o in ops)
        if name == "select_n":
            return all(self.nonneg(o, depth + 1) for o in eqn.invars[1:])
        return False

    def row_index(self, v: Any, depth: int = 0) -> bool:
        """Whether ``v`` holds, on its row axis, each row's own index (``jnp.arange(n)``, JAX's
        negative-index fix-up of it included), and nothing else."""
        eqn = None if is_literal(v) else self.producer.get(v)
        if eqn is None or depth > 12:
            return False
        name, p = eqn.primitive.name, eqn.params
        if name == "iota":
            return is_n_dim(p["shape"][p["dimension"]])
        if name in ("broadcast_in_dim", "convert_element_type", "reshape", "squeeze"):
            return self.row_index(eqn.invars[0], depth + 1)
        if name in ("mul", "add") and len(eqn.invars) == 2:
            unit = 1 if name == "mul" else 0
            for k in (0, 1):
                lit = eqn.invars[k]
                if is_literal(lit) and np.shape(lit.val) == () and lit.val == unit:
                    return self.row_index(eqn.invars[1 - k], depth + 1)
            return False
        if name == "select_n":
            pred = self.states.get(eqn.invars[0]) if not is_literal(eqn.invars[0]) else literal(eqn.invars[0])
            if isinstance(pred, Known) and len(eqn.invars) == 3:
                return self.row_index(eqn.invars[1 + int(bool(pred.value))], depth + 1)
        return False

    def component(self, v: Any, j: int) -> Any:
        """The ``j``-th entry of an index vector (JAX's gathers and scatters keep it last), as
        the variable it was concatenated from (``None`` where that cannot be told)."""
        last = len(shape(v)) - 1
        if shape(v)[last] == 1 and j == 0:
            return v
        eqn = None if is_literal(v) else self.producer.get(v)
        if eqn is None or eqn.primitive.name != "concatenate" or eqn.params["dimension"] != last:
            return None
        at_ = 0
        for piece in eqn.invars:
            size = shape(piece)[last]
            if not isinstance(size, int):
                return None
            if at_ <= j < at_ + size:
                return self.component(piece, j - at_)
            at_ += size
        return None

    def inside(self, eqn: Any, jaxpr: Any, consts: list, ins: list) -> list:
        """``run`` on a jaxpr held by ``eqn`` (a call, a branch, a loop body)."""
        self.enclosing.append(eqn)
        try:
            return self.run(jaxpr, consts, ins)
        finally:
            self.enclosing.pop()

    def equation(self, eqn: Any, states: list) -> list:
        name = eqn.primitive.name
        if name == "lt" and len(eqn.invars) == 2 and is_literal(eqn.invars[1]) and \
                np.all(np.asarray(eqn.invars[1].val) == 0) and self.nonneg(eqn.invars[0]):
            return [Known(0.0)] * len(eqn.outvars)  # `i < 0` of a row index: never (JAX's fix-up)
        if self.shards and self.shards[-1] and mesh_axes(eqn) & self.shards[-1]:
            split = across(self, eqn, states)
            if split is not None:
                return split
        counted = next((s for s in states if isinstance(s, Counted)), None)
        mixed = [s for s in states if isinstance(s, (Row, Mixed)) and (not isinstance(s, Row) or s.data)]
        try:
            if name in CALLBACKS:
                outs = self.callback(eqn, states)
            elif counted is not None and name not in CALLS:
                outs = self.counted(eqn, states, counted)
            elif name in self.control:
                outs = self.rules[name](self, eqn, states)
            elif not any(isinstance(s, (Row, Mixed)) for s in states):
                outs = self.free(eqn, states)
            elif not any(isinstance(s, Row) for s in states):  # mask=: computed from mixed rows only
                outs = [Mixed(mixed[0].origin)] * len(eqn.outvars)
            else:
                rule = self.rules.get(name)
                if rule is None and self.elementwise(eqn.primitive):
                    rule = self.rules["add"]  # JAX's own classification: elementwise
                if rule is None:
                    raise Mixing(eqn, "has no row rule (staticfield cannot prove it row-wise)",
                                 first_row(eqn, states))
                outs = [self.settle(eqn, o, s) for o, s in zip(eqn.outvars, rule(self, eqn, states))]
        except Mixing as exc:
            if not exc.row.data:  # rows made from the index alone: a value of the count
                outs = [Counted(eqn, exc.why, self.outer())] * len(eqn.outvars)
            elif self.lenient:
                outs = lenient_outs(eqn, states)
            else:
                if exc.eqn is not eqn:
                    exc.outer.append(eqn)
                raise
        except CountUsed as exc:
            if exc.eqn is not eqn:
                exc.outer.append(eqn)
            raise
        if mixed and self.lenient:
            origin = getattr(mixed[0], "origin", "")
            outs = [s if isinstance(s, (Row, Counted)) else Mixed(origin) for s in outs]
        return outs

    def outer(self) -> tuple:
        """The equations the walk is inside, innermost first (a line for a message)."""
        return tuple(reversed(self.enclosing))

    def settle(self, eqn: Any, v: Any, state: Any) -> Any:
        """A rule's output state, checked against the output's shape: a row value has the
        count on its row axis only (else pairs of rows), a free one nowhere."""
        if isinstance(state, Row):
            if n_axes(v) != [state.axis] or sum(1 for d in shape(v) if not isinstance(d, int)) != 1:
                raise Mixing(eqn, "puts the row count on a second axis (pairs of rows, or a "
                                  "value of the bucket's size per row)", state)
            return state
        if state is None and symbolic(v):
            return Counted(eqn, "builds a value of the row count's size that is not row by row", self.outer())
        return state

    def free(self, eqn: Any, states: list) -> list:
        """Outputs of an equation whose inputs carry neither rows nor the count."""
        name = eqn.primitive.name
        if name == "dim_as_value":
            return [Counted(eqn, "uses the row count as a number", self.outer())]
        folded = fold(name, states)
        if folded is not None:
            return [folded]
        outs = []
        for o in eqn.outvars:
            axes = n_axes(o)
            if not symbolic(o):
                outs.append(None)
            elif name == "iota" and self.shards and self.shards[-1]:
                outs.append(Counted(eqn, "`iota` (an arange) of a shard_map's shard of the rows is a row's "
                                         "index within its device's shard, which depends on the row count",
                                    self.outer()))
            elif name in ("iota", "broadcast_in_dim") and len(axes) == 1 and \
                    sum(1 for d in shape(o) if not isinstance(d, int)) == 1 and \
                    (name == "iota" or axes[0] not in _kept_dims(eqn)):
                zero = name == "broadcast_in_dim" and _zero_operand(eqn)
                outs.append(Row(axes[0], "", data=False, zero=zero))
            elif name == "iota":
                outs.append(Counted(eqn, "builds an index array with the row count on two axes", self.outer()))
            else:
                outs.append(Counted(eqn, f"builds a value of the row count's size with `{name}` "
                                         "that is not row by row (such as random numbers drawn for "
                                         "x.shape)", self.outer()))
        return outs

    def counted(self, eqn: Any, states: list, counted: Counted) -> list:
        """An equation that takes a value of the row count: refused where the value would
        reach the rows or steer a branch or loop; else its outputs are values of the count.
        (A choice by a known predicate picks its case: ``x[0]``'s index normalization.)"""
        name = eqn.primitive.name
        if name == "select_n" and isinstance(states[0], Known) and len(states) > 2:
            return [states[1 + int(bool(states[0].value))]]
        rule = self.rules.get(name)
        if rule is not None and name not in self.control and any(isinstance(s, Row) and s.data for s in states):
            rule(self, eqn, [None if isinstance(s, Counted) else s for s in states])  # a mixing of rows says so
        if any(isinstance(s, Row) and s.data or isinstance(s, Mixed) for s in states):
            raise CountUsed(counted, eqn, "combines it with the rows")
        if name in self.control:
            raise CountUsed(counted, eqn, "branches or loops on it")
        if not eqn.outvars:
            raise CountUsed(counted, eqn, "hands it to a side effect")
        return [counted] * len(eqn.outvars)

    def callback(self, eqn: Any, states: list) -> list:
        """A callback: it will be handed the real rows only (``_run``); refused where it
        takes the row count as a value, or the rows inside a loop, branch or custom rule."""
        name = eqn.primitive.name
        if name == "lt" and len(eqn.invars) == 2 and is_literal(eqn.invars[1]) and \
                np.all(np.asarray(eqn.invars[1].val) == 0) and self.nonneg(eqn.invars[0]):
            return [Known(0.0)] * len(eqn.outvars)  # `i < 0` of a row index: never (JAX's fix-up)
        counted = next((s for s in states if isinstance(s, Counted)), None)
        if counted is not None:
            raise CountUsed(counted, eqn, "hands it to a callback")
        operands = tuple(s.axis if isinstance(s, Row) else None for s in states)
        results = []
        for o in eqn.outvars:
            axes = n_axes(o)
            if symbolic(o) and (len(axes) != 1 or sum(1 for d in shape(o) if not isinstance(d, int)) != 1):
                raise Mixing(eqn, f"(a {name}) returns a value with the row count on several axes",
                             first_row(eqn, states) if any(isinstance(s, Row) for s in states)
                             else Row(0, "a callback's result"))
            results.append(axes[0] if axes else None)
        rows = any(a is not None for a in operands) or any(a is not None for a in results)
        nested = any(not inlined(e) for e in self.enclosing)
        if rows and nested:
            where = self.enclosing[-1].primitive.name
            raise Mixing(eqn, f"(a {name}) takes the rows inside a `{where}`, where staticfield "
                              "cannot hand it the real rows only; move the callback out of the loop, "
                              "branch or custom rule", first_row(eqn, states) if any(
                                  isinstance(s, Row) for s in states) else Row(0, "a callback's result"))
        if any(a is not None for a in results) and not any(a is not None for a in operands):
            raise Mixing(eqn, f"(a {name}) returns rows without taking any: it cannot know the real "
                              "row count", Row(0, "a callback's result"))
        if not nested:  # the program that runs meets it, in this order (``_run``)
            self.callbacks.append(Callback(name, operands, tuple(results)))
        return [Row(a, "a callback's result") if a is not None else None for a in results]


_FOLD = {
    "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
    "lt": lambda a, b: a < b, "le": lambda a, b: a <= b, "gt": lambda a, b: a > b, "ge": lambda a, b: a >= b,
    "eq": lambda a, b: a == b, "ne": lambda a, b: a != b, "max": max, "min": min,
    "neg": lambda a: -a, "convert_element_type": lambda a: a, "copy": lambda a: a, "copy_p": lambda a: a,
}


def fold(name: str, states: list) -> Known | None:
    """A scalar operation on known values, computed (``None`` where it cannot be)."""
    op = _FOLD.get(name)
    if op is None or not states or not all(isinstance(s, Known) for s in states):
        return None
    if name == "select_n" or len(states) != op.__code__.co_argcount if hasattr(op, "__code__") else False:
        return None
    try:
        return Known(float(op(*(s.value for s in states))))
    except Exception:
        return None


def lenient_outs(eqn: Any, states: list) -> list:
    """``mask=``: the outputs of a row-mixing equation keep the row axis where their shape
    still has the row count there (a scan over features, a masked sort), else are mixed."""
    origin = next((s.origin for s in states if isinstance(s, (Row, Mixed))), "")
    outs: list = []
    for o in eqn.outvars:
        axes = n_axes(o)
        outs.append(Row(axes[0], origin) if len(axes) == 1 and sum(
            1 for d in shape(o) if not isinstance(d, int)) == 1 else Mixed(origin))
    return outs


def _kept_dims(eqn: Any) -> set:
    """``broadcast_in_dim``: the output axes that come from operand axes of size other than 1."""
    dims = eqn.params.get("broadcast_dimensions", ())
    src = shape(eqn.invars[0])
    return {dims[d] for d in range(len(dims)) if not (isinstance(src[d], int) and src[d] == 1)}


def _zero_operand(eqn: Any) -> bool:
    from ._lattice import is_zero

    return is_zero(eqn.invars[0], None)
