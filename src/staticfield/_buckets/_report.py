"""The checking mode of a bucketed function (``STATICFIELD_CHECK_BUCKETS=1``). ``Reports``
is a base of ``_front.BucketSpec``; its explanations are ``_explanations``'.

The checking mode runs, at each trace, the reference call as plain ``jax.jit`` would (jax
arrays, the function traced at the real row count, ``debug``/``io`` callbacks left out so
that no side effect runs twice) and compares its outputs with the bucketed call's. Where
JAX can take the function's VJP it compares gradients too: a fixed pseudo-random
cotangent on every float output (zero on the pad rows of the bucket's program), the
bucket program's own input cotangents (its row indices clamped, its pad-row scatter writes
dropped, as it runs) with each pad row's folded into the last real row (as
the padding's transpose does), against the reference's, for every float argument. Floats compare with rtol and atol
scaled to the dtype; a NaN or infinity where the reference has another value is said as
such. Under a transformation (``grad``, ``vmap``, an outer ``jit``) the comparison travels
inside the caller's program (``_inside``).
"""

from __future__ import annotations

import threading
import warnings
from typing import Any, Callable

import jax
import numpy as np
from jax.extend.core import jaxpr_as_fun

from .._core import _compat, _own
from .._core._errors import StaticFieldWarning
from ._errors import CHECK_FAILED, BucketCheckError, output_name
from ._pad import valid_mask
from ._trace import ROWS_KW

_SKIPPED = (
    "{function}: STATICFIELD_CHECK_BUCKETS=1 compares outputs only for this function ({why}); "
    "its gradients are not checked."
)
_NO_IO = ("{function}: STATICFIELD_CHECK_BUCKETS=1 does not check this function: it holds an "
          "io_callback, which the reference call would run a second time.")
_NO_REFERENCE = ("{function}: STATICFIELD_CHECK_BUCKETS=1 does not check a call with {rows} row(s): plain "
                 "jax.jit cannot run the function on the unpadded rows ({detail}), so there is no "
                 "reference to compare with.")
_DONATED = ("{function}: STATICFIELD_CHECK_BUCKETS=1 does not check a call whose bucketed argument "
            "was donated (the unpadded reference call would need it).")
_SAID: set = set()
_SAID_LOCK = threading.Lock()


def _once(text: str) -> None:
    with _SAID_LOCK:
        if text in _SAID:
            return
        _SAID.add(text)
    warnings.warn(text, StaticFieldWarning, stacklevel=5)


def _prims(jaxpr: Any) -> set:
    """Every primitive name in a jaxpr, nested ones included."""
    names = set()
    for eqn in jaxpr.eqns:
        names.add(eqn.primitive.name)
        for p in eqn.params.values():
            for sub in p if isinstance(p, (tuple, list)) else (p,):
                inner = getattr(sub, "jaxpr", sub)
                if hasattr(inner, "eqns"):
                    names |= _prims(inner)
    return names


def _silenced(closed: Any) -> Any:
    """``closed`` without its ``debug_callback`` equations (at the top level), as a function."""
    jaxpr = closed.jaxpr
    kept = [e for e in jaxpr.eqns if e.primitive.name != "debug_callback"]
    if len(kept) != len(jaxpr.eqns):
        jaxpr = jaxpr.replace(eqns=kept, effects=frozenset())
        closed = closed.replace(jaxpr=jaxpr)
    return jaxpr_as_fun(closed)


def _fold(ct: Any, axis: int, rows: int) -> np.ndarray:
    """A padded input's cotangent as the padding's transpose gives it: pad rows summed into
    the last real row, then cut to the real rows."""
    ct = np.asarray(ct)
    head = (slice(None),) * axis
    out = np.array(ct[head + (slice(0, rows),)])
    if ct.shape[axis] > rows and rows:
        out[head + (slice(rows - 1, rows),)] += ct[head + (slice(rows, None),)].sum(axis=axis, keepdims=True)
    return out


_TOLERANCE = {2: (1e-2, 1e-3), 4: (1e-5, 1e-6), 8: (1e-5, 1e-6)}  # rtol, atol by float size in bytes


def _differ(got: Any, want: Any, scaled: bool = False) -> str | None:
    """How ``got`` differs from ``want`` (``None``: it does not, to float rounding: rtol and
    atol scaled to the dtype, 1e-5/1e-6 for 32- and 64-bit floats, 1e-2/1e-3 for 16-bit);
    ``scaled``: a gradient, summed over rows in another order, whose absolute tolerance
    grows with its largest value. A NaN or infinity where the reference has another value
    is a difference, said as such."""
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape:
        return f"shape {got.shape} against {want.shape}"
    if np.issubdtype(got.dtype, np.inexact):
        rtol, atol = _TOLERANCE.get(np.dtype(got.dtype).itemsize // (2 if np.iscomplexobj(got) else 1), (1e-5, 1e-6))
        g, w = got.astype(np.float64 if not np.iscomplexobj(got) else np.complex128), want.astype(
            np.float64 if not np.iscomplexobj(want) else np.complex128)
        odd = (np.isnan(g) != np.isnan(w)) | (np.isinf(g) & (g != w))
        if odd.any():
            k = tuple(int(i) for i in np.argwhere(odd)[0])
            return f"{g[k]} at {list(k)} where the reference has {w[k]} ({int(odd.sum())} such value(s))"
        finite = np.abs(w[np.isfinite(w)])
        atol = atol + (rtol * float(finite.max()) if scaled and finite.size else 0.0)
        if np.allclose(g, w, rtol=rtol, atol=atol, equal_nan=True):
            return None
        with np.errstate(invalid="ignore"):
            return f"largest difference {np.nanmax(np.abs(g - w)):.3g}"
    return None if np.array_equal(got, want) else "values differ"


class Reports:
    """The checking mode and the explanations of a bucketed function."""

    # Set by BucketSpec: what these methods read.
    fn: Callable
    function: str
    axes: dict
    mask: Any
    sizes: Any
    params: list
    static_names: frozenset
    _local: Any
    _leaves: Callable
    _exact_sizes: set
    body: Callable

    def _check(self, given: tuple, result: Any, state: Any) -> None:
        """``STATICFIELD_CHECK_BUCKETS=1``: the reference call, outputs and gradients compared
        (staticfield's own work, ``_own``: its compiles are not the user's)."""
        with _own.own():
            self._checked(given, result, state)

    def _checked(self, given: tuple, result: Any, state: Any) -> None:
        if any(isinstance(x, _compat.Tracer) for x in jax.tree_util.tree_leaves(result)) or state.program is None:
            return  # under a transformation: compared inside the program (``_inside``)
        rows, bucket = state.rows, state.bucket
        args, kwargs = given
        if any(getattr(leaf, "is_deleted", lambda: False)() for leaf in jax.tree_util.tree_leaves((args, kwargs))):
            _once(_DONATED.format(function=self.function))
            return
        if self.mask:
            kwargs = dict(kwargs, valid=np.ones(rows, bool))
        xs, axes, names, rebuild = self._inputs(args, kwargs)
        fn = self.fn

        def call(*values: Any) -> Any:
            a, k = rebuild(values)
            return jax.tree_util.tree_leaves(fn(*a, **k))

        ref = reference(self.function, call, xs, rows)
        if ref is None:
            return
        if "io_callback" in _prims(ref.jaxpr) or any(
                "debug_callback" in _prims(getattr(p, "jaxpr", p)) or "debug_print" in _prims(getattr(p, "jaxpr", p))
                for e in ref.jaxpr.eqns for p in e.params.values() if hasattr(getattr(p, "jaxpr", p), "eqns")):
            _once(_NO_IO.format(function=self.function))
            return
        call_ref = _silenced(ref)
        want = jax.jit(call_ref)(*xs)
        got_leaves = jax.tree_util.tree_flatten_with_path(result)[0]
        for (path, got), w in zip(got_leaves, want):
            detail = _differ(got, w)
            if detail is not None:
                raise BucketCheckError(CHECK_FAILED.format(function=self.function, output=output_name(path),
                                                           rows=rows, bucket=bucket, detail=detail))
        if rows != bucket and not _prims(ref.jaxpr) & {"debug_callback", "debug_print", "pure_callback"}:
            self._check_gradients(call_ref, xs, axes, names, state, rebuild)

    def _inputs(self, args: tuple, kwargs: dict) -> tuple[list, list, list, Callable]:
        """Every array and number of the call's arguments that are not static, as JAX would
        trace them (NumPy arrays as jax arrays), each with its row axis (``None`` where the
        argument is not bucketed) and its path, and a function putting values back."""
        entries = [(self.params[i] if i < len(self.params) else i, i, a) for i, a in enumerate(args)]
        entries += [(k, k, kwargs[k]) for k in sorted(kwargs)]
        xs, axes, names, places = [], [], [], []
        for name, where, value in entries:
            if name in self.static_names:
                places.append((where, None, None, None))
                continue
            paths, tree = jax.tree_util.tree_flatten_with_path(value)
            flat = [leaf for _, leaf in paths]
            rows = self._leaves(name, value, strict=False)[2] if name in self.axes else \
                [0] * len(flat) if name == "valid" and self.mask else [None] * len(flat)
            slots = []
            for (path, leaf), axis in zip(paths, rows):
                if isinstance(leaf, (jax.Array, np.ndarray, np.generic, bool, int, float, complex)):
                    slots.append(len(xs))
                    xs.append(jax.numpy.asarray(leaf) if isinstance(leaf, np.ndarray) else leaf)
                    axes.append(axis)
                    names.append(f"{name}{jax.tree_util.keystr(path)}")
                else:
                    slots.append(None)
            places.append((where, tree, flat, slots))

        def rebuild(values: tuple) -> tuple[list, dict]:
            a, k = list(args), dict(kwargs)
            for where, tree, flat, slots in places:
                if tree is None:
                    continue
                value = tree.unflatten([values[s] if s is not None else leaf for leaf, s in zip(flat, slots)])
                if isinstance(where, int):
                    a[where] = value
                else:
                    k[where] = value
            return a, k

        return xs, axes, names, rebuild

    def _check_gradients(self, call_ref: Callable, xs: list, axes: list, names: list, state: Any,
                         rebuild: Callable) -> None:
        """The VJP of the padded program (plain ``jax.jit``'s, traced at the bucket's size) against
        the unpadded one's, for every float argument (see the module docstring)."""
        rows, bucket = state.rows, state.bucket
        verdict = state.program
        floats = [i for i, x in enumerate(xs) if np.issubdtype(np.asarray(x).dtype, np.inexact)]
        padded = [_pad_like(x, axis, bucket) if name != "valid" else valid_mask(rows, bucket)
                  for x, axis, name in zip(xs, axes, names)]
        body = self.body(self.fn)  # the bucket's own program, as it runs (row indices clamped, ...)
        count = jax.numpy.asarray(rows, jax.numpy.int32)

        def bucket_program(*values: Any) -> Any:
            a, k = rebuild(values)
            out = body(*a, **k, **{ROWS_KW: count})
            return jax.tree_util.tree_leaves(out.value if hasattr(out, "axes") else out)

        try:
            closed = jax.make_jaxpr(bucket_program)(*padded)
        except Exception:
            return
        finally:
            self._local.new_bucket, self._local.last_verdict = False, None
        pulled = pullbacks(self.function, closed, verdict, rows, floats, bucket_program, padded, call_ref, list(xs))
        if pulled is None:
            return
        got, want = pulled
        for i, g, w in zip(floats, got, want):
            g = _fold(g, axes[i], rows) if axes[i] is not None else np.asarray(g)
            detail = _differ(g, w, scaled=True)
            if detail is not None:
                raise BucketCheckError(CHECK_FAILED.format(
                    function=self.function, output=f"the gradient with respect to `{names[i]}`", rows=rows,
                    bucket=bucket, detail=detail))

def reference(function: str, call: Callable, xs: list, rows: int) -> Any:
    """The unpadded call's program (``None`` where plain ``jax.jit`` cannot trace the function
    on the real rows: said once, nothing to compare with)."""
    try:
        return jax.make_jaxpr(call)(*xs)
    except Exception as exc:
        _once(_NO_REFERENCE.format(function=function, rows=rows, detail=f"{type(exc).__name__}: "
                                   f"{str(exc).strip().splitlines()[0][:120] if str(exc).strip() else ''}"))
        return None


def cotangents(closed: Any, verdict: Any, rows: int) -> tuple[list, list, list]:
    """The checking mode's fixed cotangents, one per float output of the bucket's program
    (``closed``): the positions of those outputs, the bucket's cotangents (zero on the pad
    rows of each output's row axis, ``verdict.outputs``) and the reference's (the real rows
    of the same draw). Both checks (after the call, and inside a transformed program) pull
    back through these, so they compare the same gradients."""
    outs = [v.aval for v in closed.jaxpr.outvars]
    float_outs = [j for j, a in enumerate(outs) if np.issubdtype(a.dtype, np.inexact)]
    rng = np.random.default_rng(0)
    cts_b, cts_r = [], []
    for j in float_outs:
        ct = rng.standard_normal(outs[j].shape).astype(outs[j].dtype)
        axis = verdict.outputs[j]
        if axis is not None:
            ct[(slice(None),) * axis + (slice(rows, None),)] = 0
            cts_r.append(ct[(slice(None),) * axis + (slice(0, rows),)])
        else:
            cts_r.append(ct)
        cts_b.append(ct)
    return float_outs, cts_b, cts_r


def pullbacks(function: str, closed: Any, verdict: Any, rows: int, floats: list, bucket_program: Callable,
              padded: list, call_ref: Callable, xs: list) -> tuple[list, list] | None:
    """The VJPs both checks compare, with ``cotangents``: the bucket's program at the padded
    arguments and the reference at the real ones, pulled back to the float arguments
    (``floats``) from the float outputs; ``None`` where there is nothing to compare (no
    float argument or output) or JAX cannot take a VJP (then said once: outputs only)."""
    float_outs, cts_b, cts_r = cotangents(closed, verdict, rows)
    if not floats or not float_outs:
        return None

    def pick(fun: Callable, values: list) -> Callable:
        return lambda *fl: [o for j, o in enumerate(fun(*_put(values, floats, fl))) if j in float_outs]

    try:
        return (_pullback(pick(bucket_program, padded), [padded[i] for i in floats], cts_b),
                _pullback(pick(call_ref, xs), [xs[i] for i in floats], cts_r))
    except Exception as exc:  # a while_loop, a custom_vjp without a rule: outputs only
        _once(_SKIPPED.format(function=function, why=f"JAX cannot take its VJP: {type(exc).__name__}"))
        return None


def _pullback(fun: Callable, primals: list, cts: list) -> Any:
    """The VJP of ``fun`` at ``primals`` applied to ``cts``, as one jitted program (not op by op)."""
    return jax.jit(lambda p, c: jax.vjp(fun, *p)[1](c))(primals, cts)


def _pad_like(x: Any, axis: int | None, bucket: int) -> Any:
    if axis is None or np.shape(x)[axis] == bucket:
        return x
    from ._pad import host_pad

    return jax.numpy.asarray(host_pad(np.asarray(x), axis, bucket))


def _put(xs: list, where: list, values: tuple) -> list:
    out = list(xs)
    for i, v in zip(where, values):
        out[i] = v
    return out
