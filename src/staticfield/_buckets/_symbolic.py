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
import os
import sys
import threading
from typing import Any, Callable, Iterator, NamedTuple

import jax

from .._core import _compat

NAME = "n"  # the symbol's name (JAX's messages about it say 'n')
_STDLIB = os.path.dirname(os.__file__) + os.sep
_LOCAL = threading.local()
_ROWS = threading.local()  # .dim: the text of the row count where the analysis is now (``rows_as``)
_INSTALL = threading.Lock()
_installed = False
_OWN_DIRS = tuple(
    os.path.dirname(os.path.abspath(m.__file__)) + os.sep
    for m in (jax, sys.modules.get("jaxlib"), sys.modules[__name__.split(".")[0]]) if m is not None
)


def available() -> bool:
    """Whether this JAX lets staticfield see the uses of the row count (else buckets run exact)."""
    return all(_compat.get(k) is not None for k in ("dim_expr", "dim_expr_evaluate"))


def outside_jax(filename: str) -> bool:
    """A file of the user's (or a library's on top of JAX), not JAX's or staticfield's."""
    return not os.path.abspath(filename).startswith(_OWN_DIRS)


def user_frame(filename: str) -> bool:
    """A frame of the user's own code (a file, a notebook cell, ``exec``'d code): outside
    JAX and staticfield, the Python installation and installed distributions."""
    if not outside_jax(filename):
        return False
    if filename.startswith("<"):
        return True
    return not filename.startswith(_STDLIB) and "site-packages" not in filename and "dist-packages" not in filename


_GENERATED = frozenset(("__eq__", "__ne__", "__hash__"))


def _caller(frame: Any) -> Any:
    """The frame that made a comparison: past generated comparison methods (a dataclass's
    ``__eq__`` or ``__hash__``, compiled from ``<string>``), whose caller decides. Any other
    code outside JAX decides, a notebook cell's, ``exec``'d code's or NumPy's included."""
    while frame is not None and frame.f_code.co_filename.startswith("<") and frame.f_code.co_name in _GENERATED:
        frame = frame.f_back
    return frame


def _users(frame: Any) -> bool:
    frame = _caller(frame)
    return frame is not None and outside_jax(frame.f_code.co_filename)


def where(frame: Any) -> str:
    frame = _caller(frame) or frame
    return f"{frame.f_code.co_filename}:{frame.f_lineno}"


class Guard(NamedTuple):
    """A comparison the user's code made, answered False for the symbol: the program holds
    for a count ``c`` only where ``expr`` (a ``_DimExpr`` in ``n``, or its text) is not 0
    at ``c``. ``equal``: answered True by the symbol's constraint (the count a multiple of
    the devices a ``shard_map`` splits the rows over: ``x.shape[0] % 2 == 0``), so the
    program holds only where ``expr`` is 0 (its text starts with ``=``)."""

    expr: Any
    line: str
    equal: bool = False

    def holds(self, count: int) -> bool:
        expr, equal = self.expr, self.equal
        if isinstance(expr, str):  # from a program store: parse it again
            equal = equal or expr.startswith("=")
            expr = jax.export.symbolic_shape(expr.lstrip("="))[0]
        value = expr._evaluate({NAME: count}) if not isinstance(expr, int) else expr
        return (int(value) == 0) if equal else (int(value) != 0)

    def text(self) -> str:
        return ("=" if self.equal else "") + str(self.expr)


class Recorder:
    """What one symbolic trace recorded (see the module docstring)."""

    def __init__(self, scope: Any) -> None:
        self.scope = scope
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
            diff = self - other  # (answered True with a difference that is no number: by the
            if not isinstance(diff, int):  # symbol's constraint, so the guard is `diff == 0`)
                rec.guards.append(Guard(diff, where(frame), bool(answer)))

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
                rec.guards.append(Guard(f"=mod({self}, {other}) - {out}", where(frame)))
        return out

    return __mod__


def _noting(method: Any) -> Any:
    """``method`` of the symbol, noting where the user's code asked it for a concrete count
    (``int(n)``, ``n > 3``) and JAX could not answer: caught, that is a decision no guard
    states (``Recorder.caught``)."""

    def noted(self: Any, *args: Any) -> Any:
        try:
            return method(self, *args)
        except Exception:
            rec = getattr(_LOCAL, "recorder", None)
            if rec is not None and getattr(self, "scope", None) is rec.scope:
                frame = sys._getframe(1)
                if _users(frame):
                    rec.caught.append(where(frame))
            raise

    noted.__name__ = getattr(method, "__name__", "noted")
    return noted


def symbol(multiple: int = 1) -> Any:
    """A fresh ``n`` (each in a scope of its own: ``n >= 1``, as JAX assumes); with
    ``multiple``, constrained to multiples of it (so that a ``shard_map`` may split the
    rows over that many devices: its body's rows are then ``floordiv(n, k)``)."""
    constraints = (f"mod({NAME}, {multiple}) == 0",) if multiple > 1 else ()
    return jax.export.symbolic_shape(NAME, constraints=constraints)[0]


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


def user_line(tb: Any) -> str | None:
    """The innermost frame of ``tb`` in the user's code, as ``path:line``."""
    found = None
    while tb is not None:
        if user_frame(tb.tb_frame.f_code.co_filename):
            found = f"{tb.tb_frame.f_code.co_filename}:{tb.tb_lineno}"
        tb = tb.tb_next
    return found
