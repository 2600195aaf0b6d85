"""The checking mode (``STATICFIELD_CHECK_BUCKETS=1``) of a call under a transformation:
the comparison travels inside the caller's program.

Under ``jax.grad`` (a training step), ``jax.vmap`` or an outer ``jax.jit`` nothing is
concrete when the call returns, so ``check_inside`` adds to the caller's program, next to
the bucketed call: the reference (the function as plain ``jax.jit`` runs it on the
unpadded arguments, ``debug`` callbacks left out) and, where JAX can take the VJP, the
bucket program's and the reference's VJPs of the fixed pseudo-random cotangent the
concrete check uses (``_report``), all of the arguments' values only (their derivatives
stop there: the check adds nothing to a gradient); a ``jax.debug.callback`` compares them
when the program runs (under ``vmap``, per example) and raises ``BucketCheckError``.
Under an outer ``jit`` JAX reports that error as its own runtime error, carrying the
message. The setting is read when the caller's program is traced. A bucketed call inside
another bucketed function's program adds nothing: the enclosing function's check covers it.
"""

from __future__ import annotations

import functools
import os
from typing import Any

import jax
import numpy as np
from jax import lax

from .._core import _compat, _own
from ._errors import CHECK_FAILED, BucketCheckError, output_name
from ._pad import _pad_one, valid_mask
from ._report import _NO_IO, _differ, _fold, _once, _prims, _silenced, pullbacks, reference
from ._trace import CHECK_ENV, ROWS_KW, TRACING, Retry


def checking() -> bool:
    return os.environ.get(CHECK_ENV, "") not in ("", "0")


def transformed(result: Any) -> bool:
    return any(isinstance(x, _compat.Tracer) for x in jax.tree_util.tree_leaves(result))


def _dtype(x: Any) -> Any:
    return getattr(x, "dtype", None) or np.asarray(x).dtype


def check_inside(spec: Any, given: tuple, result: Any, rows: int, bucket: int) -> None:
    """Add the comparison of ``result`` (the bucketed call's, sliced) with the reference to
    the caller's program (see the module docstring). Staticfield's own work (``_own``): what
    it compiles (under an eager ``jax.grad``, at each step) is not the user's program, and
    ``sf.no_compiles()`` lets it compile."""
    if getattr(TRACING, "depth", 0):  # inside another bucketed function's program: its check covers it
        return
    with _own.own():
        _check_inside(spec, given, result, rows, bucket)


def _check_inside(spec: Any, given: tuple, result: Any, rows: int, bucket: int) -> None:
    args, kwargs = given
    if spec.mask:
        kwargs = dict(kwargs, valid=np.ones(rows, bool))
    xs, axes, names, rebuild = spec._inputs(args, kwargs)
    xs = [lax.stop_gradient(x) if isinstance(x, _compat.Tracer) else x for x in xs]
    fn = spec.fn

    def call(*values: Any) -> Any:
        a, k = rebuild(values)
        return jax.tree_util.tree_leaves(fn(*a, **k))

    ref = reference(spec.function, call, xs, rows)
    if ref is None:
        return
    prims = _prims(ref.jaxpr)
    if "io_callback" in prims:
        _once(_NO_IO.format(function=spec.function))
        return
    call_ref = _silenced(ref)
    want = jax.jit(call_ref)(*xs)
    paths = [output_name(p) for p, _ in jax.tree_util.tree_flatten_with_path(result)[0]]
    got = [lax.stop_gradient(x) for x in jax.tree_util.tree_leaves(result)]
    grads: tuple = ((), (), ())
    if rows != bucket and not prims & {"debug_callback", "debug_print", "pure_callback"}:
        grads = _gradients(spec, call_ref, xs, axes, names, rows, bucket, rebuild)
    got_g, want_g, which = grads
    compare = functools.partial(_compare, spec.function, rows, bucket, paths, which)
    jax.debug.callback(compare, got, list(want), list(got_g), list(want_g))


def _gradients(spec: Any, call_ref: Any, xs: list, axes: list, names: list, rows: int, bucket: int,
               rebuild: Any) -> tuple:
    """The bucket program's and the reference's VJPs of the fixed cotangent, in the caller's
    program, and for each float argument its name and row axis."""
    floats = [i for i, x in enumerate(xs) if np.issubdtype(_dtype(x), np.inexact)]
    padded = [valid_mask(rows, bucket) if name == "valid" else
              x if axis is None or np.shape(x)[axis] == bucket else _pad_one(x, axis, bucket)
              for x, axis, name in zip(xs, axes, names)]
    body = spec.body(spec.fn)  # the bucket's own program, as it runs (row indices clamped, ...)
    count = np.int32(rows)

    def bucket_program(*values: Any) -> Any:
        a, k = rebuild(values)
        out = body(*a, **k, **{ROWS_KW: count})
        return jax.tree_util.tree_leaves(out.value if hasattr(out, "axes") else out)

    local = spec._local
    outer = getattr(local, "call", None)
    local.call = None
    try:
        closed = jax.make_jaxpr(bucket_program)(*padded)
        verdict = (getattr(local, "last_verdict", None) or (None,))[0]
    except (Retry, Exception):  # the bucket's program does not serve this count: nothing to compare
        return (), (), ()
    finally:
        local.call, local.new_bucket, local.last_verdict = outer, False, None
    if verdict is None:
        return (), (), ()
    try:
        pulled = pullbacks(spec.function, closed, verdict, rows, floats, bucket_program, padded, call_ref, list(xs))
    finally:
        local.new_bucket, local.last_verdict = False, None
    if pulled is None:
        return (), (), ()
    return (*pulled, tuple((names[i], axes[i]) for i in floats))


def _compare(function: str, rows: int, bucket: int, paths: list, which: tuple, got: list, want: list,
             got_g: list, want_g: list) -> None:
    """On the host, when the program runs: raise ``BucketCheckError`` at the first difference."""
    for path, g, w in zip(paths, got, want):
        detail = _differ(g, w)
        if detail is not None:
            raise BucketCheckError(CHECK_FAILED.format(function=function, output=path, rows=rows, bucket=bucket,
                                                       detail=detail))
    for (name, axis), g, w in zip(which, got_g, want_g):
        g = _fold(g, axis, rows) if axis is not None else np.asarray(g)
        detail = _differ(g, w, scaled=True)
        if detail is not None:
            raise BucketCheckError(CHECK_FAILED.format(
                function=function, output=f"the gradient with respect to `{name}`", rows=rows, bucket=bucket,
                detail=detail))
