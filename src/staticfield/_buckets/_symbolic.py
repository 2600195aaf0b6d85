"""The row count as a symbol: a trace in which it cannot hide in a literal, and every
decision the user's code takes on it, seen.

``trace(fn, avals)`` traces with the row axis of every bucketed leaf the symbolic
dimension ``n`` (``jax.export.symbolic_shape``), so the count reaches the jaxpr as an
equation (``dim_as_value``) or in a shape, never as a literal. While it traces, every
comparison of ``n`` made by code outside JAX is recorded:

==========================  ========================================================
``x.shape[0] == 64``         JAX answers ``False`` for any symbol: a ``Guard`` (the
                             program holds for a count only where ``n - 64 != 0``)
``x.shape[0] in {64}``,      a hash of ``n``: a decision no guard can state, so a
``cache[x.shape]``           refusal (``Trace.hashed`` names the line)
``x.shape[0] > 3``,          JAX raises ``InconclusiveDimensionOperation`` (or a
``int(n)``, ``range(n)``     ``TypeError``): the trace fails, and ``needs_count``
                             names the line and what needed a concrete count; where
                             the user's code catches it, ``Trace.caught`` says where
==========================  ========================================================

JAX's own comparisons (broadcasting checks, shape rules) are JAX's to keep sound for
every ``n`` (the promise of its shape polymorphism) and are not recorded; a decision
that leaves no trace at all (``isinstance(n, int)``) is caught by comparing the
concrete program with this trace (``_compare``). Where a ``shard_map`` splits the
rows over ``k`` devices, ``n`` is a multiple of ``k`` (``symbol(k)``), and an answer that
constraint decides (``x.shape[0] % k == 0``, ``n % k`` itself) is a guard that holds only
where it is true. The recording wraps a few methods of JAX's ``_DimExpr`` (named in
``_core._compat``), installed once, inert outside a trace.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from typing import Any, Callable, Iterator, NamedTuple

import jax

from .._core import _compat
from ._frames import users as _users
from ._frames import where

NAME = "n"  # the symbol's name (JAX's messages about it say 'n')
_LOCAL = threading.local()
_ROWS = threading.local()  # .dim: the text of the row count where the analysis is now (``rows_as``)
_INSTALL = threading.Lock()
_installed = False


def available() -> bool:
    """Whether this JAX lets staticfield see the uses of the row count (else buckets run exact)."""
    return all(_compat.get(k) is not None for k in ("dim_expr", "dim_expr_evaluate"))


_OPS = {"==": lambda v: v == 0, ">=": lambda v: v >= 0, ">": lambda v: v > 0, "<=": lambda v: v <= 0,
        "<": lambda v: v < 0}
_SPLIT_SCOPES: dict = {}  # id of the scope of a ``symbol(k)``'s symbol -> (that scope, k)


class Guard(NamedTuple):
    """A comparison the user's code made, answered False for the symbol: the program holds
    for a count ``c`` only where ``expr`` (a ``_DimExpr`` in ``n``, or its text) is not 0
    at ``c``. Where the symbol's constraint (the count a multiple of the devices a
    ``shard_map`` splits the rows over) may have answered, ``expr`` is the text of both
    sides (``lhs|rhs``), ``op`` compared them and gave ``answer``, and the program holds
    only where ``op`` gives that answer at ``c`` (its text is ``op|answer|lhs|rhs``)."""

    expr: Any
    line: str
    op: str = "=="
    answer: bool = False

    def holds(self, count: int) -> bool:
        expr, op, answer = self.expr, self.op, self.answer
        if not isinstance(expr, str):
            value = int(expr._evaluate({NAME: count})) if not isinstance(expr, int) else expr
        else:  # from a program store, or a constrained trace: parse it again, with no constraint
            parts = expr.split("|")
            if len(parts) == 4:
                op, answer, parts = parts[0], parts[1] == "1", parts[2:]
            lhs, rhs = parts if len(parts) == 2 else (parts[0], "0")
            value = _at_count(lhs, count) - _at_count(rhs, count)
        return bool(_OPS[op](value)) == answer

    def text(self) -> str:
        if self.op == "==" and not self.answer and not (isinstance(self.expr, str) and "|" in self.expr):
            return str(self.expr)
        return f"{self.op}|{int(self.answer)}|{self.expr}"


def _at_count(text: str, count: int) -> int:
    d = jax.export.symbolic_shape(text)[0]
    return d if isinstance(d, int) else int(d._evaluate({NAME: count}))


def _decided(op: str, self: Any, other: Any, answer: bool, frame: Any) -> Guard:
    """The guard of a comparison a constrained symbol answered: its two sides as text, to be
    evaluated at each count with no constraint."""
    return Guard(f"{self}|{other}", where(frame), op, bool(answer))


class Recorder:
    """What one symbolic trace recorded (see the module docstring)."""

    def __init__(self, scope: Any) -> None:
        self.scope = scope
        kept = _SPLIT_SCOPES.get(id(scope))
        self.multiple = kept[1] if kept is not None and kept[0] is scope else 1  # > 1: the constraint may answer
        self.constrained = self.multiple > 1
        self.decided: list[str] = []  # arithmetic on the count that the constraint changed, where
        self.guards: list[Guard] = []
        self.hashed: list[str] = []
        self.caught: list[str] = []  # a conversion or ordering of the count that raised, where


def _install() -> None:
    global _installed
    with _INSTALL:
        if _installed:
            return
        cls = _compat.get("dim_expr")
        eq, hash_ = cls.__eq__, cls.__hash__

        def record(self: Any, other: Any, answer: bool, frame: Any) -> None:
            rec = getattr(_LOCAL, "recorder", None)
            if rec is None or getattr(self, "scope", None) is not rec.scope:
                return
            if not _users(frame):
                return
            if not (isinstance(other, int) or getattr(other, "scope", None) is rec.scope):
                return
            if rec.constrained:  # (the constraint may have answered, either way)
                rec.guards.append(_decided("==", self, other, answer, frame))
                return
            if answer:
                return
            diff = self - other
            if not isinstance(diff, int):  # undecided: the guard is `diff != 0`
                rec.guards.append(Guard(diff, where(frame)))

        def __eq__(self: Any, other: Any) -> bool:  # noqa: N807
            answer = eq(self, other)
            if getattr(_LOCAL, "recorder", None) is not None:
                record(self, other, answer, sys._getframe(1))
            return answer

        def __ne__(self: Any, other: Any) -> bool:  # noqa: N807
            answer = eq(self, other)
            if getattr(_LOCAL, "recorder", None) is not None:
                record(self, other, answer, sys._getframe(1))
            return not answer

        def __hash__(self: Any) -> int:  # noqa: N807
            rec = getattr(_LOCAL, "recorder", None)
            if rec is not None and getattr(self, "scope", None) is rec.scope:
                frame = sys._getframe(1)
                if _users(frame):
                    rec.hashed.append(where(frame))
            return hash_(self)

        cls.__eq__, cls.__ne__, cls.__hash__ = __eq__, __ne__, __hash__
        if "__mod__" in vars(cls):
            cls.__mod__ = _decided_mod(vars(cls)["__mod__"])
        for name, op in _ARITH.items():
            if name in vars(cls):
                setattr(cls, name, _faithful(vars(cls)[name], op))
        for name in ("__int__", "__ge__", "__le__", "__gt__", "__lt__"):
            if name in vars(cls):
                setattr(cls, name, _noting(vars(cls)[name]))
        _installed = True


def _decided_mod(method: Any) -> Any:
    """``n % k`` of the symbol, noting where the user's code got a number for it: decided by
    the symbol's constraint (``symbol(k)``), a guard that holds only for counts with that
    remainder."""

    def __mod__(self: Any, other: Any) -> Any:  # noqa: N807
        out = method(self, other)
        rec = getattr(_LOCAL, "recorder", None)
        if rec is not None and isinstance(out, int) and isinstance(other, int) and \
                getattr(self, "scope", None) is rec.scope:
            frame = sys._getframe(1)
            if _users(frame):
                rec.guards.append(Guard(f"mod({self}, {other})|{out}", where(frame), "==", True))
        return out

    return __mod__


_ORDER = {"__ge__": ">=", "__gt__": ">", "__le__": "<=", "__lt__": "<"}
_ARITH = {"__add__": lambda a, b: a + b, "__radd__": lambda a, b: b + a, "__sub__": lambda a, b: a - b,
          "__rsub__": lambda a, b: b - a, "__mul__": lambda a, b: a * b, "__rmul__": lambda a, b: b * a,
          "__floordiv__": lambda a, b: a // b, "__rfloordiv__": lambda a, b: b // a}


def _value(d: Any, count: int) -> int:
    return d if isinstance(d, int) else int(d._evaluate({NAME: count}))


def _faithful(method: Any, op: Callable) -> Any:
    """Arithmetic on a constrained symbol (``symbol(k)``) in the user's code, checked at the
    counts up to ``2k``: where the constraint changed the result (``n // 4 * 4`` is ``n``
    for a multiple of 4, not for 5), the code decided on the count in a way no guard
    states (``Recorder.decided``: that key's buckets run exact)."""

    def checked(self: Any, *args: Any) -> Any:
        out = method(self, *args)
        rec = getattr(_LOCAL, "recorder", None)
        if rec is None or not rec.constrained or len(args) != 1 or getattr(self, "scope", None) is not rec.scope:
            return out
        other = args[0]
        if not (isinstance(other, int) or getattr(other, "scope", None) is rec.scope) or \
                not (isinstance(out, int) or getattr(out, "scope", None) is rec.scope):
            return out
        frame = sys._getframe(1)
        if not _users(frame):
            return out
        for count in range(1, 2 * rec.multiple + 1):
            try:
                want = op(_value(self, count), _value(other, count))
            except ZeroDivisionError:
                continue
            try:
                same = _value(out, count) == want
            except Exception:
                same = False
            if not same:
                rec.decided.append(where(frame))
                break
        return out

    checked.__name__ = getattr(method, "__name__", "checked")
    return checked


def _noting(method: Any) -> Any:
    """``method`` of the symbol, noting where the user's code asked it for a concrete count
    (``int(n)``, ``n > 3``) and JAX could not answer: caught, that is a decision no guard
    states (``Recorder.caught``). Where a constrained symbol's answer may be the
    constraint's (``n >= 4`` for a multiple of 4), the answer is a guard."""
    op = _ORDER.get(getattr(method, "__name__", ""))

    def noted(self: Any, *args: Any) -> Any:
        try:
            out = method(self, *args)
        except Exception:
            rec = getattr(_LOCAL, "recorder", None)
            if rec is not None and getattr(self, "scope", None) is rec.scope:
                frame = sys._getframe(1)
                if _users(frame):
                    rec.caught.append(where(frame))
            raise
        if op is not None and isinstance(out, bool) and len(args) == 1:
            rec = getattr(_LOCAL, "recorder", None)
            if rec is not None and rec.constrained and getattr(self, "scope", None) is rec.scope and \
                    (isinstance(args[0], int) or getattr(args[0], "scope", None) is rec.scope):
                frame = sys._getframe(1)
                if _users(frame):
                    rec.guards.append(_decided(op, self, args[0], out, frame))
        return out

    noted.__name__ = getattr(method, "__name__", "noted")
    return noted


def symbol(multiple: int = 1) -> Any:
    """A fresh ``n`` (each in a scope of its own: ``n >= 1``, as JAX assumes); with
    ``multiple``, constrained to multiples of it (so that a ``shard_map`` may split the
    rows over that many devices: its body's rows are then ``floordiv(n, k)``)."""
    if multiple <= 1:
        return jax.export.symbolic_shape(NAME)[0]
    n = jax.export.symbolic_shape(NAME, constraints=(f"mod({NAME}, {multiple}) == 0",))[0]
    with _INSTALL:
        if len(_SPLIT_SCOPES) > 4096:  # (scopes of traces long done: none is looked up again)
            _SPLIT_SCOPES.clear()
        _SPLIT_SCOPES[id(n.scope)] = (n.scope, multiple)
    return n


def is_n(d: Any) -> bool:
    """Whether the dimension ``d`` is the row count itself (inside a ``shard_map`` body that
    splits the rows: the rows of a device's shard, ``rows_as``)."""
    return not isinstance(d, int) and str(d) == getattr(_ROWS, "dim", NAME)


@contextlib.contextmanager
def rows_as(dim: Any) -> Iterator[None]:
    """The analysis of a ``shard_map`` body that splits the rows: its row count is ``dim``
    (a device's shard of them)."""
    outer = getattr(_ROWS, "dim", NAME)
    _ROWS.dim = str(dim)
    try:
        yield
    finally:
        _ROWS.dim = outer


def is_symbolic(d: Any) -> bool:
    return not isinstance(d, int)


def at(d: Any, count: int) -> Any:
    """``d`` with ``n`` set to ``count`` (an ``int`` stays itself)."""
    if isinstance(d, int):
        return d
    try:
        return int(d._evaluate({NAME: count}))
    except Exception:
        return d


def trace(fn: Callable[..., Any], avals: list, n: Any) -> tuple[Any, Any, Recorder]:
    """``jax.make_jaxpr(fn)(*avals)`` with the decisions on ``n`` recorded; raises what the
    trace raises (the caller tells a need for a concrete count from the user's own error)."""
    _install()
    rec = Recorder(n.scope)
    outer = getattr(_LOCAL, "recorder", None)
    _LOCAL.recorder = rec
    try:
        closed, out_shape = jax.make_jaxpr(fn, return_shape=True)(*avals)
    finally:
        _LOCAL.recorder = outer
    return closed, out_shape, rec
