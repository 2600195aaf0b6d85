"""The verdict on a bucketed function for one non-row key: traced with a symbolic row
count, analysed, and, where it holds custom derivative rules, its derivatives analysed too.

``judge(...)`` returns a ``Verdict`` (the symbolic program, each flat output's row axis,
the guards the user's code put on the count, its callbacks) or raises ``BucketError``
naming the argument, the operation and its line. It is computed once per function,
static key and non-row shapes (``Traced`` caches it) and holds for every bucket size:
each bucket's own program is compared with ``jaxpr`` (``_compare``) before it runs.

Gradients are taken around a bucketed call, so the rules of ``custom_jvp``/``custom_vjp``
(which JAX traces only when it differentiates) are analysed like the primal: the
function's JVP (tangents row by row, as the primal's rows) and VJP (cotangents zero on the
pad rows, since the padded outputs are sliced away) are traced symbolically with the
rules inside, and every input's cotangent must stay zero on the pad rows (the pad rows'
cotangents are summed into the last real row when the padding is transposed). With
``mask="valid"`` the rules are analysed as leniently as the primal: rows may mix (the mask
keeps the pad rows out, of the cotangents too), and only the row count as a value is
refused. A rule that cannot be traced with a symbolic count where JAX could differentiate
the concrete program is a refusal.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import numpy as np
from jax.extend.core import ClosedJaxpr, jaxpr_as_fun

from .._core import _compat
from ._analysis import Analysis
from ._control import RULES as CONTROL_RULES
from ._errors import (COUNT_USED, HASHED, MIXES_ROWS, NEEDS_COUNT, NO_ROW_OUTPUT, OUTPUT_PAIRS, RULE_GRADIENT,
                      RULE_UNTRACEABLE, BucketError, output_name)
from ._lattice import Counted, CountUsed, Known, Mixed, Mixing, Row, n_axes, shape, symbolic
from ._rules import RULES as ROW_RULES
from ._shards import split_counts
from ._rules import elementwise_in_jax
from ._compare import where
from ._frames import user_line
from ._symbolic import NAME, Guard, symbol, trace

RULES = {**ROW_RULES, **CONTROL_RULES}
CONTROL = frozenset(CONTROL_RULES)


class Verdict(NamedTuple):
    jaxpr: Any  # the symbolic closed jaxpr: the program, run at each bucket's size (``_run``)
    out_tree: Any  # the outputs' tree
    outputs: tuple  # per flat output: the axis to slice (None: not sliced)
    guards: tuple  # Guard: comparisons of the count the user's code made
    callbacks: tuple  # Callback: in walk order, with their operands' and results' row axes
    drops: Any = None  # id of a scatter writing rows by the row index -> its indices' row axis (_run)
    caught: str | None = None  # why no program holds for another count (a caught conversion of the count)
    multiple: int = 1  # a shard_map splits the rows over this many devices: buckets are multiples of it


class Leaf(NamedTuple):
    """One traced input of the program: its aval, and its row axis and path (bucketed)."""

    aval: Any
    axis: int | None
    origin: str


def _inexact(dtype: Any) -> bool:
    try:
        return bool(np.issubdtype(dtype, np.inexact))
    except TypeError:  # a typed key
        return False


def judge(fn: Callable[..., Any], leaves: list[Leaf], lenient: bool, function: str, names: str,
          concrete: Any = None, declared: dict | None = None) -> Verdict:
    """The verdict (see the module docstring); ``fn`` takes the flat leaves; ``concrete``
    is a bucket's own program, where there is one."""
    n = symbol()
    avals = [_symbolic_aval(leaf, n) for leaf in leaves]
    try:
        closed, out_shape, rec = trace(fn, avals, n)
    except BucketError:
        raise
    except Exception as exc:  # the concrete trace worked: what failed needed the count
        got = _split_trace(fn, leaves, concrete)  # (or a shard_map splits the rows: n a multiple)
        if not isinstance(got, tuple):  # (where that trace got further, its own failure)
            exc = got or exc
            raise BucketError(NEEDS_COUNT.format(function=function, names=names, where=user_line(
                exc.__traceback__) or "a line of the function", detail=_detail(exc))) from exc
        closed, out_shape, rec, n = got
    if rec.hashed:
        raise BucketError(HASHED.format(function=function, names=names, where=rec.hashed[0]))
    states = [Row(leaf.axis, leaf.origin, zero=leaf.origin == "valid") if leaf.axis is not None else None
              for leaf in leaves]
    analysis = Analysis(RULES, CONTROL, lenient, elementwise_in_jax)
    outs = _run(analysis, closed, states, function, names, declared=declared)
    paths = [p for p, _ in jax.tree_util.tree_flatten_with_path(out_shape)[0]]
    axes = _outputs(outs, closed.jaxpr.outvars, paths, lenient, function, names)
    guards = list(rec.guards)
    if analysis.custom:
        guards += _derivatives(closed, concrete, leaves, outs, lenient, function, names, n, analysis.custom)
    return Verdict(_kept(closed), jax.tree_util.tree_structure(out_shape), tuple(axes), tuple(guards),
                   tuple(analysis.callbacks), dict(analysis.drops), _caught(rec),
                   analysis.multiple())


def _caught(rec: Any) -> str | None:
    """Why no program holds for a count other than the bucket's, where the code decided on
    the count in a way no guard states (``None``: it did not)."""
    if rec.caught:
        return f"the code at {rec.caught[0]} caught a failed conversion of the row count"
    if rec.decided:
        return (f"the code at {rec.decided[0]} computed with the row count a value that holds only for "
                f"multiples of {rec.multiple} (the devices a shard_map splits the rows over)")
    return None


def _split_trace(fn: Callable, leaves: list[Leaf], concrete: Any) -> tuple | Exception | None:
    """The symbolic trace again with ``n`` a multiple of the device count the program's
    ``shard_map``s split an axis over (JAX refuses to split ``n`` rows over ``k`` devices
    otherwise, and decides ``n % k`` only from that very constraint); ``None`` where it holds
    none, and where this trace fails too, its error. Without a concrete program (its
    bucket's size was not a multiple), each count up to the number of devices in turn."""
    if concrete is not None:
        counts = [split_counts(getattr(concrete, "jaxpr", concrete))]
    else:
        counts = list(range(jax.device_count(), 1, -1))
    error = None
    for k in counts:
        if k <= 1:
            continue
        n = symbol(k)
        try:
            closed, out_shape, rec = trace(fn, [_symbolic_aval(leaf, n) for leaf in leaves], n)
        except Exception as exc:
            error = exc if concrete is not None else error
            continue
        return closed, out_shape, rec, n
    return error


def _kept(closed: Any) -> Any:
    """``closed`` as a verdict keeps it past its trace: a constant that is a value of that
    trace (an argument the function closes over) stands as its type alone, so a cached
    verdict holds no trace alive."""
    consts = [jax.ShapeDtypeStruct(c.aval.shape, c.aval.dtype, weak_type=getattr(c.aval, "weak_type", False))
              if isinstance(c, _compat.Tracer) else c for c in closed.consts]
    return ClosedJaxpr(closed.jaxpr, consts)


def _symbolic_aval(leaf: Leaf, n: Any) -> Any:
    dims = list(leaf.aval.shape)
    if leaf.axis is not None:
        dims[leaf.axis] = n
    return jax.ShapeDtypeStruct(tuple(dims), leaf.aval.dtype, weak_type=getattr(leaf.aval, "weak_type", False))


def _run(analysis: Analysis, closed: Any, states: list, function: str, names: str, rule: str = "",
         declared: dict | None = None) -> list:
    try:
        return analysis.run(closed.jaxpr, [None] * len(closed.jaxpr.constvars), states)
    except Mixing as exc:
        raise BucketError(mixing_message(exc, function, rule, declared or {})) from None
    except CountUsed as exc:
        raise BucketError(count_message(exc, function, names)) from None


def _outputs(outs: list, outvars: list, paths: list, lenient: bool, function: str, names: str) -> list:
    """Each flat output's row axis (the axis sliced), or a refusal naming the output."""
    axes = []
    for state, v, path in zip(outs, outvars, paths):
        output = output_name(path)
        aval = f"{getattr(v.aval, 'dtype', '')}{list(shape(v))}"
        if isinstance(state, Counted):
            raise BucketError(count_message(CountUsed(state, None, "returns it"), function, names))
        found = n_axes(v)
        if len(found) > 1 or (symbolic(v) and len(found) != sum(1 for d in shape(v) if not isinstance(d, int))):
            raise BucketError(OUTPUT_PAIRS.format(function=function, output=output, aval=aval.replace(NAME, "rows")))
        if isinstance(state, Row):
            axes.append(state.axis)
        elif (state is None or isinstance(state, Known)) and not symbolic(v):  # free of the rows: as it is
            axes.append(None)
        elif lenient:
            axes.append(found[0] if found else None)
        else:
            raise BucketError(NO_ROW_OUTPUT.format(function=function, output=output, names=names,
                                                   aval=aval.replace(NAME, "rows")))
    return axes


def _opened(closed: Any) -> tuple[Callable, list]:
    """A closed jaxpr as a function of its constants and then its inputs (so that a
    derivative is taken with respect to both: a parameter the function closes over, a
    method's ``self.w``, is differentiated too), and the avals it takes."""
    jaxpr = closed.jaxpr
    opened = jaxpr.replace(constvars=[], invars=[*jaxpr.constvars, *jaxpr.invars])
    fun = jaxpr_as_fun(ClosedJaxpr(opened, []))
    avals = [jax.ShapeDtypeStruct(tuple(v.aval.shape), v.aval.dtype, weak_type=getattr(v.aval, "weak_type", False))
             for v in opened.invars]
    return fun, avals


def _programs(fun: Callable, nargs: int, floats: list, float_outs: list) -> tuple[Callable, Callable]:
    """The JVP and the VJP of ``fun`` with respect to its float inputs, as functions of its
    inputs and then the tangents or the output cotangents."""

    def of_floats(xs: tuple) -> Callable:
        return lambda *fl: [o for j, o in enumerate(fun(*_put(xs, floats, fl))) if j in float_outs]

    def jvp(*args: Any) -> Any:
        xs, ts = args[:nargs], args[nargs:]
        return jax.jvp(of_floats(xs), [xs[i] for i in floats], list(ts))

    def vjp(*args: Any) -> Any:
        xs, cts = args[:nargs], args[nargs:]
        return jax.vjp(of_floats(xs), *[xs[i] for i in floats])[1](list(cts))

    return jvp, vjp


def _derivatives(closed: Any, concrete: Any, leaves: list[Leaf], outs: list, lenient: bool, function: str,
                 names: str, n: Any, custom: dict) -> list[Guard]:
    """Analyse the program's JVP and VJP (see the module docstring); their guards."""
    fun, avals = _opened(closed)
    nconst = len(closed.jaxpr.constvars)
    floats = [i for i, a in enumerate(avals) if _inexact(a.dtype)]
    outvars = closed.jaxpr.outvars
    float_outs = [j for j, v in enumerate(outvars) if _inexact(v.aval.dtype)]
    if not floats or not float_outs:
        return []
    rule = " and ".join(f"jax.{name.replace('_call', '')} rule" + (f" ({', '.join(f'`{r}`' for r in sorted(rules))})"
                                                                  if rules else "")
                        for name, rules in sorted(custom.items()))
    states = [None] * nconst + [Row(leaf.axis, leaf.origin, zero=leaf.origin == "valid") if leaf.axis is not None
                                else None for leaf in leaves]
    jvp, vjp = _programs(fun, len(avals), floats, float_outs)
    concrete_jvp = concrete_vjp = None
    if concrete is not None:  # the same derivatives of a bucket's own program (what JAX would run)
        cfun, cavals = _opened(concrete)
        cjvp, cvjp = _programs(cfun, len(cavals), floats, float_outs)
        couts = [v.aval for v in concrete.jaxpr.outvars]
        concrete_jvp = (cjvp, [*cavals, *(cavals[i] for i in floats)])
        concrete_vjp = (cvjp, [*cavals, *(jax.ShapeDtypeStruct(tuple(couts[j].shape), couts[j].dtype)
                                          for j in float_outs)])
    guards: list[Guard] = []
    if "custom_jvp_call" in custom and not custom.keys() & {"custom_vjp_call", "custom_vjp_call_jaxpr"}:
        # (a custom_vjp has no forward mode: JAX differentiates it in reverse only, below)
        got = _ad_trace(jvp, [*avals, *(avals[i] for i in floats)], n, concrete_jvp, function, names, rule)
        if got is not None:
            ad, rec = got
            tangents = [states[i]._replace(zero=False) if isinstance(states[i], Row) else None for i in floats]
            _run(Analysis(RULES, CONTROL, lenient, elementwise_in_jax), ad, [*states, *tangents], function, names, rule)
            guards += rec.guards
    cts = [jax.ShapeDtypeStruct(tuple(outvars[j].aval.shape), outvars[j].aval.dtype) for j in float_outs]
    got = _ad_trace(vjp, [*avals, *cts], n, concrete_vjp, function, names, rule)
    if got is None:
        return guards
    ad, rec = got
    ct_states = [outs[j]._replace(origin=f"the cotangent of output {j}", zero=True) if isinstance(outs[j], Row)
                 else None for j in float_outs]
    analysis = Analysis(RULES, CONTROL, lenient, elementwise_in_jax)
    got_cts = _run(analysis, ad, [*states, *ct_states], function, names, rule)
    for i, state in zip(floats, got_cts):
        leaf = leaves[i - nconst] if i >= nconst else None
        bucketed = leaf is not None and leaf.axis is not None
        if isinstance(state, Counted) or (not lenient and (  # with a mask, rows mix as in the primal
                isinstance(state, Mixed) or (isinstance(state, Row) and not state.zero) or
                (bucketed and not isinstance(state, Row)))):
            arg = leaf.origin if bucketed else "an argument it does not bucket"
            raise BucketError(RULE_GRADIENT.format(function=function, rule=rule, arg=arg))
    return guards + rec.guards


def _ad_trace(prog: Callable, avals: list, n: Any, concrete: tuple | None, function: str, names: str,
              rule: str) -> tuple[Any, Any] | None:
    """The derivative program traced symbolically, or ``None`` where JAX cannot differentiate
    the function at all (then no gradient is ever taken through the rule); ``concrete``:
    the same derivative of the bucket's own program, and its avals."""
    try:
        closed, _, rec = trace(prog, avals, n)
        return closed, rec
    except Exception as exc:
        error = exc
    if concrete is not None:
        try:  # does the concrete program differentiate? then the failure is the symbolic count's
            jax.make_jaxpr(concrete[0])(*concrete[1])
        except Exception:
            return None
    raise BucketError(RULE_UNTRACEABLE.format(function=function, rule=rule, names=names,
                                              where=user_line(error.__traceback__) or "a line of the rule",
                                              detail=_detail(error))) from error


def _put(xs: tuple, where: list, values: tuple) -> list:
    out = list(xs)
    for i, v in zip(where, values):
        out[i] = v
    return out


def _detail(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return f"{type(exc).__name__}: {text}"[:200]


def _line(eqns: list) -> str:
    summarize = _compat.get("source_summary")  # the user's line of an equation
    for eqn in eqns if summarize is not None else ():  # in a library's jit: its call
        if eqn is None:
            continue
        try:
            text = summarize(eqn.source_info)
        except Exception:
            continue
        if text and not text.startswith("unknown") and ":" in text:
            return text
    for eqn in eqns:  # JAX could not say: the innermost frame of the user's own code
        line = where(eqn) if eqn is not None else None
        if line is not None:
            return line
    return "an unknown line"


def mixing_message(exc: Mixing, function: str, rule: str = "", declared: dict | None = None) -> str:
    name = exc.eqn.primitive.name
    params = {k: v for k, v in exc.eqn.params.items() if k in ("axes", "dimension", "axis", "dimensions")
              and v is not None}
    operation = f"`{name}`" + (f" ({', '.join(f'{k}={v}' for k, v in params.items())})" if params else "")
    root = exc.row.origin.split(".", 1)[0].split("[", 1)[0]
    axis = (declared or {}).get(root, exc.row.axis)
    if axis != exc.row.axis:
        operation += f" (where the rows are on axis {exc.row.axis})"
    if rule:
        operation += f", in the derivative through its {rule},"
    return MIXES_ROWS.format(function=function, origin=exc.row.origin, axis=axis, operation=operation,
                             where=_line([exc.eqn, *exc.outer]), why=exc.why)


def count_message(exc: CountUsed, function: str, names: str) -> str:
    then = (f"`{exc.eqn.primitive.name}` at {_line([exc.eqn, *exc.outer])} {exc.what}" if exc.eqn is not None
            else "the function returns it")
    return COUNT_USED.format(function=function, names=names, source=_line([exc.counted.eqn, *exc.counted.outer]),
                             why=exc.counted.why, then=then)
