"""Running a bucket's program in the caller's trace, with its callbacks handed the real
rows only, its row indices on pad rows the last real row's, and its pad rows' scatter
writes by the row index dropped.

``run(closed, args, callbacks, count_operand)`` evaluates the bucket's concrete program
(the one ``_compare`` showed to be the program analysed). Without callbacks that take rows
it is ``jaxpr_as_fun``. With them, each such callback gets the real row count as an extra
operand (``count_operand``: a traced int, so a hit with another count runs the same
program) and a host wrapper that slices its row operands to the real rows before the
user's callback sees them; a result that carries rows (a ``pure_callback``'s) is padded
back with copies of its last row, as the inputs were. Calls that hold such a callback are
evaluated inline so that the count reaches it. Callbacks are met in the order the
analysis noted them (``_analysis.Callback``). The same evaluation clamps each ``iota``
along the row axis (``iotas``, named by ``_compare``) to ``count - 1``, and sends a pad
row's index of each scatter by the row index (``drops``, named by ``_indexing``) out of
bounds, with out-of-bounds writes dropped.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import sys
from typing import Any, Callable, Iterator

import jax
import numpy as np
import jax.numpy as jnp
from jax import lax
from jax.extend.core import jaxpr_as_fun

from .._core import _compat
from ._analysis import CALLBACKS, Callback, inlined


def takes_rows(callbacks: tuple) -> bool:
    return any(any(a is not None for a in (*c.operands, *c.results)) for c in callbacks)


def run(closed: Any, args: list, callbacks: tuple = (), count_operand: Any = None, bucket: int = 0,
        iotas: frozenset = frozenset(), drops: dict | None = None) -> list:
    """The program's outputs in the caller's trace (see the module docstring)."""
    if count_operand is None or not (takes_rows(callbacks) or iotas or drops):
        return jaxpr_as_fun(closed)(*args)
    return _eval(closed.jaxpr, list(closed.consts), list(args), iter(callbacks), count_operand, bucket, iotas,
                 drops or {})


def _context(eqn: Any) -> Any:
    user = _compat.get("user_context")
    if user is None:
        return eqn.ctx.manager
    stack = contextlib.ExitStack()
    stack.enter_context(user(eqn.source_info.traceback, name_stack=eqn.source_info.name_stack))
    stack.enter_context(eqn.ctx.manager)
    return stack


def _eval(jaxpr: Any, consts: list, args: list, noted: Iterator[Callback], operand: Any, bucket: int,
          iotas: frozenset = frozenset(), drops: dict | None = None) -> list:
    env: dict = {}

    def read(v: Any) -> Any:
        return v.val if hasattr(v, "val") and not hasattr(v, "count") else env[v]

    for v, x in zip(jaxpr.constvars, consts):
        env[v] = x
    for v, x in zip(jaxpr.invars, args):
        env[v] = x
    for eqn in jaxpr.eqns:
        name = eqn.primitive.name
        invals = [read(v) for v in eqn.invars]
        with _context(eqn):
            if name in CALLBACKS:
                outs = _callback(eqn, invals, next(noted), operand, bucket)
            elif inlined(eqn):  # (not a shard_map that splits an axis: its body sees a shard)
                inner = eqn.params.get("jaxpr", eqn.params.get("call_jaxpr"))
                outs = _eval(getattr(inner, "jaxpr", inner), list(getattr(inner, "consts", ())), invals, noted,
                             operand, bucket, iotas, drops)
            else:
                params = eqn.params
                if drops and id(eqn) in drops:  # a pad row's write lands nowhere: out of bounds, dropped
                    invals, params = _dropped(invals, params, drops[id(eqn)], operand)
                outs = eqn.primitive.bind(*invals, **eqn.primitive.get_bind_params(params))
                if not eqn.primitive.multiple_results:
                    outs = [outs]
                if id(eqn) in iotas:  # a row index: on a pad row, the last real row's
                    outs = [lax.min(outs[0], lax.full_like(outs[0], 0) + (operand - 1).astype(outs[0].dtype))]
        for v, x in zip(eqn.outvars, outs):
            env[v] = x
    return [read(v) for v in jaxpr.outvars]


def _dropped(invals: list, params: dict, axis: int, operand: Any) -> tuple[list, dict]:
    """A scatter's operands and parameters with each pad row's index out of bounds (the
    operand's size on every entry) and out-of-bounds writes dropped."""
    indices = invals[1]
    rows = lax.broadcasted_iota(jnp.int32, indices.shape, axis) < operand
    far = jnp.full_like(indices, max(invals[0].shape) if invals[0].ndim else 0)
    params = dict(params, mode=lax.GatherScatterMode.FILL_OR_DROP)
    return [invals[0], jnp.where(rows, indices, far), *invals[2:]], params


def _callback(eqn: Any, invals: list, noted: Callback, operand: Any, bucket: int) -> list:
    params = dict(eqn.params)
    if not any(a is not None for a in (*noted.operands, *noted.results)):
        outs = eqn.primitive.bind(*invals, **params)
        return list(outs) if eqn.primitive.multiple_results else [outs]
    if eqn.primitive.name == "debug_print":  # JAX formats on the host: format the real rows
        jax.debug.callback(_real_rows(_printer(params), noted, bucket), operand, *invals,
                           ordered=params["ordered"])
        return []
    params["callback"] = _real_rows(params["callback"], noted, bucket)
    outs = eqn.primitive.bind(operand, *invals, **params)
    return list(outs) if eqn.primitive.multiple_results else [outs]


def _printer(params: dict) -> Callable:
    """What ``jax.debug.print`` does on the host with its operands: format, then print (or
    log, for ``logging_record``)."""
    fmt, options = params["fmt"], dict(params["np_printoptions"])
    static = dict(params["static_args"])
    in_tree, record = params["in_tree"], params.get("logging_record")

    def show(*dyn: Any) -> None:
        values = iter(dyn)
        flat = [static[i] if i in static else next(values) for i in range(len(static) + len(dyn))]
        args, kwargs = in_tree.unflatten(flat)
        if params.get("has_placeholders", True):
            with np.printoptions(**options):
                text = fmt.format(*args, **kwargs)
        else:
            text = " ".join((fmt, *(str(a) for a in args)))
        if record:
            record_ = copy.copy(record)
            record_.msg = text
            logging.getLogger(record_.name).handle(record_)
        else:
            sys.stdout.write(text + "\n")

    return show


def _cut(x: Any, axis: int, n: int) -> Any:
    index = (slice(None),) * axis + (slice(0, n),)
    if isinstance(x, jax.Array):
        return jax.device_put(np.asarray(x)[index], next(iter(x.devices())))
    return np.asarray(x)[index]


def _fill(x: Any, axis: int, bucket: int) -> Any:
    """A callback's result with ``n`` rows padded back to ``bucket`` with copies of its last."""
    x = np.asarray(x)
    n = x.shape[axis]
    if n == bucket or n == 0:
        return x
    last = np.take(x, [n - 1], axis=axis)
    return np.concatenate([x, np.repeat(last, bucket - n, axis=axis)], axis=axis)


def _real_rows(callback: Callable, noted: Callback, bucket: int) -> Callable:
    """The callback as JAX calls it with the real count first: rows cut, results padded."""

    def wrapped(count: Any, *args: Any) -> Any:
        n = int(np.asarray(count))
        cut = [x if axis is None else _cut(x, axis, n) for x, axis in zip(args, noted.operands)]
        out = callback(*cut)
        if not noted.results or out is None:
            return out
        flat = list(out) if isinstance(out, (tuple, list)) else [out]
        filled = [x if axis is None else _fill(x, axis, bucket) for x, axis in zip(flat, noted.results)]
        return type(out)(filled) if isinstance(out, (tuple, list)) else filled[0]

    for name in ("__name__", "__qualname__", "__doc__"):
        try:
            setattr(wrapped, name, getattr(callback, name))
        except (AttributeError, TypeError):
            pass
    return wrapped
