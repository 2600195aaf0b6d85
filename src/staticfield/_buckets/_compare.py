"""Is the program that runs the program analysed? A bucket's concrete trace (what JAX
compiles, plain ``jax.jit``'s program at the bucket's size) against the symbolic trace
(what ``_analysis`` judged), with the row count set to the bucket's size, by an exact rule.

``differs(concrete, symbolic, count)`` compares the two equation by equation, in order:
primitive, parameters (nested jaxprs compared the same way, functions by their code),
operands, the types of the results, and every literal and constant by type and value,
once ``n`` is set to ``count``. Any difference, for any reason (a fork of the user's on
the count that no guard saw, a constant chosen by a fork, a path JAX's own code takes
for a number), is a difference: nothing is skipped. It returns ``None`` when the two are
one program, else a few words on the first difference with its user line.

Two traces of one computation may still differ in form where JAX itself writes it
otherwise for a symbol than for a number; those forms, and only those, are normalised
(``_forms``, where each is listed).
"""

from __future__ import annotations

import os
import threading
from typing import Any

import jax
import numpy as np

from .._core import _compat
from ._analysis import INLINED
from ._forms import Count, Side, array_same, aval_of, fold, is_int, is_literal, match_slice, same_aval
from ._frames import user_frame
from ._symbolic import at, is_n, is_symbolic

_LOCAL = threading.local()
_DEPTH = 6  # how deep objects in parameters are compared field by field


class Differs(Exception):
    """Internal: the first difference (``why``), at ``eqn``."""

    def __init__(self, why: str, eqn: Any = None) -> None:
        super().__init__(why)
        self.why, self.eqn = why, eqn


def differs(concrete: Any, symbolic: Any, count: int, iotas: list | None = None,
            drops: dict | None = None) -> str | None:
    """``None`` when the two closed jaxprs are one program at ``count`` rows, else why not;
    ``iotas`` receives the ids of the concrete ``iota`` equations along the row axis (the
    row indices that ``_run`` clamps to the last real row), and ``drops`` (the symbolic
    scatters whose pad-row writes ``_run`` drops, by id) the concrete ids of those too."""
    outer = getattr(_LOCAL, "iotas", None), getattr(_LOCAL, "drops", None)
    _LOCAL.iotas, _LOCAL.drops = iotas, drops
    try:
        _closed(concrete, symbolic, count)
    except Differs as exc:
        line = where(exc.eqn)
        return f"{exc.why}" + (f" at {line}" if line else "")
    except Exception as exc:  # a parameter that cannot be compared: not the same program
        return f"a parameter could not be compared ({type(exc).__name__})"
    finally:
        _LOCAL.iotas, _LOCAL.drops = outer
    return None


def where(eqn: Any) -> str | None:
    """The user's line that made ``eqn`` (the innermost frame outside JAX and staticfield)."""
    if eqn is None:
        return None
    tb = getattr(eqn.source_info, "traceback", None)
    for frame in list(getattr(tb, "frames", ()) or ()):
        if user_frame(frame.file_name):
            return f"{frame.file_name}:{frame.line_num}"
    return None


def _reachable(eqn: Any) -> None:
    """A row index (or a scatter by it) that ``_run`` must give the last real row's value on
    pad rows: only where it evaluates the program itself (calls it inlines), not inside a
    branch or a loop body, whose pad rows would read their own index."""
    inside = [name for name in getattr(_LOCAL, "within", ()) if name not in INLINED]
    if inside:
        raise Differs(f"reads a row index inside a `{inside[0]}`, where the pad rows cannot be given the last "
                      "real row's", eqn)


def _closed(c: Any, s: Any, count: int) -> None:
    c_consts, s_consts = list(getattr(c, "consts", ())), list(getattr(s, "consts", ()))
    if len(c_consts) != len(s_consts):
        raise Differs("closes over other constants")
    for cv, sv in zip(c_consts, s_consts):
        if not _constant(cv, sv, count):
            raise Differs("closes over another constant value")
    _program(getattr(c, "jaxpr", c), getattr(s, "jaxpr", s), count)


def _constant(c: Any, s: Any, count: int) -> bool:
    if c is s:
        return True
    if isinstance(s, jax.ShapeDtypeStruct):  # a kept verdict's closed-over trace value
        return hasattr(c, "aval") and not _is_concrete(c) and aval_of(c.aval, s, count)
    if _is_concrete(c) != _is_concrete(s):
        return False
    if not _is_concrete(s):  # values of an outer trace: their types
        return aval_of(c.aval, s.aval, count)
    return array_same(c, s)


def _is_concrete(x: Any) -> bool:
    return not isinstance(x, _compat.Tracer)


def _program(cj: Any, sj: Any, count: int) -> None:
    if len(cj.invars) != len(sj.invars) or len(cj.outvars) != len(sj.outvars) or \
            len(cj.constvars) != len(sj.constvars):
        raise Differs("takes or returns other values")
    env: dict = {}
    for cv, sv in zip([*cj.constvars, *cj.invars], [*sj.constvars, *sj.invars]):
        if not aval_of(cv.aval, sv.aval, count):
            raise Differs("takes inputs of other types")
        env[sv] = cv
    c, s = Side(cj, False, count), Side(sj, True, count)
    while True:
        se, ce = s.peek(), c.peek()
        if se is not None and s.drop(se):
            s.i += 1
            continue
        if ce is not None and c.drop(ce):
            c.i += 1
            continue
        if se is None or ce is None:
            break
        try:
            _eqn(ce, [c.resolve(v) for v in ce.invars], se, [s.resolve(v) for v in se.invars], env, count, c, s)
        except Differs:
            if se.primitive.name == "gather" and ce.primitive.name in ("slice", "squeeze") and \
                    match_slice(ce, se, c, s, env, count):
                continue
            if fold(se, [s.value(v) for v in se.invars]) is not None:
                s.note(se)  # normalisation: an index JAX computes from constants at a symbol only
                s.i += 1
                continue
            raise
        for cv, sv in zip(ce.outvars, se.outvars):
            env[sv] = cv
        if se.primitive.name == "iota" and getattr(_LOCAL, "iotas", None) is not None and \
                is_n(se.params["shape"][se.params["dimension"]]):
            _reachable(ce)
            _LOCAL.iotas.append(id(ce))
        drops = getattr(_LOCAL, "drops", None)
        if drops and id(se) in drops:
            _reachable(ce)
            drops[id(ce)] = drops[id(se)]
        c.note(ce)
        s.note(se)
        c.i, s.i = c.i + 1, s.i + 1
    if s.peek() is not None or c.peek() is not None:
        extra = c.peek() or s.peek()
        raise Differs(f"runs {'more' if c.peek() is not None else 'fewer'} operations for a number "
                      "of rows than for any", extra)
    for cv, sv in zip(cj.outvars, sj.outvars):
        if not _operand(c.resolve(cv), s.resolve(sv), env, count, s):
            raise Differs("returns other values")


def _operand(c: Any, s: Any, env: dict, count: int, sside: Any = None) -> bool:
    if sside is not None and not is_literal(s) and not isinstance(s, Count) and s not in env and \
            s in sside.known and is_literal(c):  # an index known at a symbol, a literal at a number
        return array_same(np.asarray(c.val, c.aval.dtype), sside.known[s].astype(np.dtype(c.aval.dtype)))
    if isinstance(s, Count):  # normalisation: dim_as_value (the literal it stands for)
        return is_literal(c) and np.shape(c.val) == () and is_int(np.asarray(c.val).dtype) and \
            int(c.val) == s.value and np.dtype(c.aval.dtype) == np.dtype(s.dtype)
    if isinstance(c, Count):
        return False
    c_lit, s_lit = is_literal(c), is_literal(s)
    if c_lit or s_lit:
        return c_lit and s_lit and aval_of(c.aval, s.aval, count) and array_same(c.val, s.val)
    return env.get(s) is c


def _eqn(ce: Any, c_ops: list, se: Any, s_ops: list, env: dict, count: int, c: Any = None, s: Any = None) -> None:
    name = se.primitive.name
    if ce.primitive is not se.primitive:
        raise Differs(f"runs `{ce.primitive.name}` for a number of rows where it runs `{name}` for any", ce)
    if len(c_ops) != len(s_ops) or len(ce.outvars) != len(se.outvars):
        raise Differs(f"`{name}` takes other operands", ce)
    for k, (cv, sv) in enumerate(zip(c_ops, s_ops)):
        if not _operand(cv, sv, env, count, s):
            what = "another constant" if is_literal(cv) or is_literal(sv) else "another operand"
            raise Differs(f"`{name}` takes {what} (operand {k})", ce)
    if set(ce.params) != set(se.params):
        raise Differs(f"`{name}` has other parameters", ce)
    within = getattr(_LOCAL, "within", ())
    _LOCAL.within = (*within, name)  # (a row index inside: where ``_run`` can clamp it, or not)
    try:
        for k in se.params:
            try:
                same = _same(ce.params[k], se.params[k], count, 0)
            except Differs as inner:
                raise Differs(f"`{name}` holds a program that {inner.why}", inner.eqn or ce) from None
            if not same:
                raise Differs(f"`{name}` has another {k}", ce)
    finally:
        _LOCAL.within = within
    for cv, sv in zip(ce.outvars, se.outvars):
        if not aval_of(cv.aval, sv.aval, count):
            raise Differs(f"`{name}` makes values of other types", ce)


def _same(c: Any, s: Any, count: int, depth: int) -> bool:
    if c is s:
        return True
    if is_symbolic(s) and type(s).__name__ == "_DimExpr":
        return c == at(s, count)
    if hasattr(s, "eqns"):
        _program(c, s, count)
        return True
    if hasattr(s, "jaxpr") and hasattr(s, "consts"):
        _closed(c, s, count)
        return True
    if type(c) is not type(s):
        return False
    if isinstance(s, (tuple, list)):
        return len(c) == len(s) and all(_same(x, y, count, depth) for x, y in zip(c, s))
    if isinstance(s, dict):
        return c.keys() == s.keys() and all(_same(c[k], s[k], count, depth) for k in s)
    if isinstance(s, float):
        return array_same(np.float64(c), np.float64(s))
    if isinstance(s, jax.ShapeDtypeStruct) or type(s).__name__ == "ShapedArray":  # a callback's result type
        return same_aval(c, s, count, count)
    if hasattr(s, "shape") and hasattr(s, "dtype") and not isinstance(s, type):
        if hasattr(s, "aval") and not _is_concrete(s):  # a value of an outer trace: its type only
            return aval_of(c.aval, s.aval, count)
        return array_same(c, s)
    code_c, code_s = _code(c), _code(s)
    if code_s is not None or code_c is not None:
        return code_c is code_s
    try:
        if c == s:
            return True
    except Exception:
        pass
    if depth < _DEPTH and hasattr(s, "__dict__") and not isinstance(s, type):
        return _same(vars(c), vars(s), count, depth + 1)
    if depth < _DEPTH and getattr(type(s), "__slots__", None):
        names = [n for klass in type(s).__mro__ for n in getattr(klass, "__slots__", ())]
        return all(_same(getattr(c, n, None), getattr(s, n, None), count, depth + 1) for n in names)
    return False


def _code(f: Any) -> Any:
    """The code object at the bottom of a function, a partial or a JAX-wrapped function."""
    for _ in range(8):
        code = getattr(f, "__code__", None)
        if code is not None:
            return code
        inner = getattr(f, "f", None) or getattr(f, "func", None) or getattr(f, "__wrapped__", None) \
            or getattr(f, "callback_func", None)
        if inner is None:
            return None
        f = inner
    return None


if os.environ.get("STATICFIELD_BUCKETS_LOG_DIFFERS"):  # pragma: no cover - a measurement aid
    _plain = differs

    def differs(concrete: Any, symbolic: Any, count: int, *more: Any) -> str | None:  # type: ignore[no-redef]
        why = _plain(concrete, symbolic, count, *more)
        if why is not None:
            with open(os.environ["STATICFIELD_BUCKETS_LOG_DIFFERS"], "a") as log:
                log.write(f"{count}\t{why}\n")
        return why
