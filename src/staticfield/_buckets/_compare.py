"""Is the program that runs the program analysed? A bucket's concrete trace (what JAX
compiles, plain ``jax.jit``'s program at the bucket's size) against the symbolic trace
(what ``_analysis`` judged), with the row count set to the bucket's size.

The two are traces of the same Python code; they may differ in two ways. JAX's own code
takes other paths for a symbolic dimension than for a number (``x[:, :2]`` is a ``slice``
at a number, a ``gather`` at a symbol), paths JAX's shape polymorphism promises compute
the same. The user's code may also decide on the count without comparing it
(``isinstance(x.shape[0], int)``), which no guard records: then the programs compute
different things, and the analysis says nothing of the concrete one.

``differs(concrete, symbolic, count)`` tells them apart by where each equation came from:
the user's source line and the JAX function that line called (the first frame of each
equation's traceback inside JAX, below the innermost frame of the user's). Both traces
must call the same JAX functions from the same lines in the same order; where a call
made the same primitives, their operands, literals, parameters and types must agree once
``n`` is set to ``count`` (nested jaxprs compared the same way, functions by their code).
Where one call made other primitives in the two traces, that is JAX's own choice, and
allowed. It returns ``None`` when they agree, else a few words on the first difference.
"""

from __future__ import annotations

import itertools
from typing import Any

import jax
import numpy as np

from ._symbolic import at, is_symbolic, outside_jax

_DEPTH = 6  # how deep objects in parameters are compared field by field
_CALLS = frozenset(("pjit", "jit", "closed_call", "core_call"))  # looked through: their equations are the user's


def differs(concrete: Any, symbolic: Any, count: int) -> str | None:
    """``None`` when the two closed jaxprs are one program at ``count`` rows, else why not."""
    try:
        return _program(concrete.jaxpr, symbolic.jaxpr, count)
    except Exception as exc:  # a parameter that cannot be compared: not the same program
        return f"a parameter could not be compared ({type(exc).__name__})"


def _program(cj: Any, sj: Any, count: int) -> str | None:
    if len(cj.invars) != len(sj.invars) or len(cj.outvars) != len(sj.outvars) or \
            len(cj.constvars) != len(sj.constvars):
        return "another signature"
    env: dict = {}
    for cv, sv in zip([*cj.constvars, *cj.invars], [*sj.constvars, *sj.invars]):
        if not _aval(cv, sv, count):
            return "inputs of other types"
        env[sv] = cv
    c_alias: dict = {}
    s_alias: dict = {}
    why = _blocks(_steps(cj, c_alias), _steps(sj, s_alias), count, env)
    if why is not None:
        return why
    for cv, sv in zip(cj.outvars, sj.outvars):
        if not _operand(_resolve(cv, c_alias), _resolve(sv, s_alias), env, count):
            return "other outputs"
    return None


def _entry(eqn: Any) -> Any:
    """(the user's file and line, the JAX function it called) where ``eqn`` was made."""
    tb = getattr(eqn.source_info, "traceback", None)
    frames = list(getattr(tb, "frames", ()) or ())
    for i, frame in enumerate(frames):
        if outside_jax(frame.file_name) and not frame.file_name.startswith("<"):
            api = frames[i - 1].function_name if i else ""
            return frame.file_name, frame.line_num, api
    return None


def _resolve(v: Any, alias: dict) -> Any:
    while not _is_literal(v) and v in alias:
        v = alias[v]
    return v


def _steps(jaxpr: Any, alias: dict) -> list[tuple[Any, Any, list]]:
    """``(entry, eqn, operands)`` for each equation, through the calls that JAX's functions
    make (a call's inner variables aliased to the outer ones they stand for)."""
    out = []
    for eqn in jaxpr.eqns:
        inner = eqn.params.get("jaxpr") if eqn.primitive.name in _CALLS else None
        if inner is not None:
            ij = getattr(inner, "jaxpr", inner)
            if getattr(inner, "consts", ()) or ij.constvars:
                out.append((_entry(eqn), eqn, [_resolve(v, alias) for v in eqn.invars]))
                continue
            for iv, ov in zip(ij.invars, eqn.invars):
                alias[iv] = _resolve(ov, alias)
            out.extend(_steps(ij, alias))
            for ov, iv in zip(eqn.outvars, ij.outvars):
                alias[ov] = _resolve(iv, alias)
        else:
            out.append((_entry(eqn), eqn, [_resolve(v, alias) for v in eqn.invars]))
    return out


def _blocks(c_steps: list, s_steps: list, count: int, env: dict) -> str | None:
    c_groups = [(k, [t[1:] for t in g]) for k, g in itertools.groupby(c_steps, key=lambda t: t[0])]
    s_groups = [(k, [t[1:] for t in g]) for k, g in itertools.groupby(s_steps, key=lambda t: t[0])]
    if [k for k, _ in c_groups] != [k for k, _ in s_groups]:
        for (ck, _), (sk, _) in itertools.zip_longest(c_groups, s_groups, fillvalue=(None, None)):
            if ck != sk:
                where = ck or sk
                line = f"{where[0]}:{where[1]}" if where else "a line of the function"
                return f"the code at {line} takes another path for a number of rows than for any"
        return "another sequence of operations"
    for (key, c_eqns), (_, s_eqns) in zip(c_groups, s_groups):
        if [e.primitive for e, _ in c_eqns] != [e.primitive for e, _ in s_eqns]:
            continue  # JAX's own path for a symbol: the same computation (its results unmatched)
        for (ce, c_ops), (se, s_ops) in zip(c_eqns, s_eqns):
            why = _eqn(ce, c_ops, se, s_ops, count, env)
            if why is not None:
                line = f"{key[0]}:{key[1]}" if key else "a line of the function"
                return f"`{se.primitive.name}` at {line} {why}"
            for cv, sv in zip(ce.outvars, se.outvars):
                env[sv] = cv
    return None


def _operand(cv: Any, sv: Any, env: dict, count: int) -> bool:
    c_lit, s_lit = _is_literal(cv), _is_literal(sv)
    if c_lit or s_lit:
        return c_lit and s_lit and _same(cv.val, sv.val, count, 0)
    known = env.get(sv)
    return known is None or known is cv  # a value from JAX's own path is not matched


def _eqn(ce: Any, c_ops: list, se: Any, s_ops: list, count: int, env: dict) -> str | None:
    if len(c_ops) != len(s_ops) or len(ce.outvars) != len(se.outvars):
        return "takes other operands"
    for cv, sv in zip(c_ops, s_ops):
        if not _operand(cv, sv, env, count):
            return "takes other operands"
    if set(ce.params) != set(se.params):
        return "has other parameters"
    for k in se.params:
        if not _same(ce.params[k], se.params[k], count, 0):
            return f"has another {k}"
    for cv, sv in zip(ce.outvars, se.outvars):
        if not _aval(cv, sv, count):
            return "makes values of other types"
    return None


def _is_literal(v: Any) -> bool:
    return hasattr(v, "val") and not hasattr(v, "count")


def _aval(c: Any, s: Any, count: int) -> bool:
    ca, sa = getattr(c, "aval", None), getattr(s, "aval", None)
    if ca is None or sa is None:
        return ca is sa
    cs, ss = tuple(getattr(ca, "shape", ())), tuple(getattr(sa, "shape", ()))
    return (len(cs) == len(ss) and all(x == at(y, count) for x, y in zip(cs, ss))
            and getattr(ca, "dtype", None) == getattr(sa, "dtype", None)
            and getattr(ca, "weak_type", False) == getattr(sa, "weak_type", False))


def _jaxpr(c: Any, s: Any, count: int) -> bool:
    return _program(getattr(c, "jaxpr", c), getattr(s, "jaxpr", s), count) is None


def _same(c: Any, s: Any, count: int, depth: int) -> bool:
    if c is s:
        return True
    if is_symbolic(s) and type(s).__name__ == "_DimExpr":
        return c == at(s, count)
    if hasattr(s, "eqns") or (hasattr(s, "jaxpr") and hasattr(s, "consts")):
        return _jaxpr(c, s, count)
    if isinstance(s, jax.ShapeDtypeStruct) and hasattr(c, "aval"):  # a kept verdict's closed-over value
        return tuple(c.aval.shape) == tuple(s.shape) and c.aval.dtype == s.dtype
    if type(c) is not type(s):
        return False
    if isinstance(s, (tuple, list)):
        return len(c) == len(s) and all(_same(x, y, count, depth) for x, y in zip(c, s))
    if isinstance(s, dict):
        return c.keys() == s.keys() and all(_same(c[k], s[k], count, depth) for k in s)
    if isinstance(s, float) and s != s:
        return c != c  # NaN
    if hasattr(s, "shape") and hasattr(s, "dtype") and not isinstance(s, type):
        if hasattr(s, "aval") and not hasattr(s, "addressable_shards"):  # a tracer: its type only
            return _aval(c, s, count)
        return np.shape(c) == np.shape(s) and np.asarray(c).dtype == np.asarray(s).dtype and \
            bool(np.array_equal(np.asarray(c), np.asarray(s), equal_nan=np.asarray(s).dtype.kind in "fc"))
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
