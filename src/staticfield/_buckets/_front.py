"""A bucketed function's call: pad, run the bucket's program, slice, count.

``BucketSpec`` is made once per function from ``buckets=``, ``bucket_sizes=`` and
``mask=``. ``spec.front(call)`` wraps the engine's call (an explicit input: this room
never imports ``_jit``): it finds the bucketed arguments' rows, picks the bucket
(``_sizes``), pads (``_pad``), calls, slices the outputs that carry the row axis and counts
``buckets()``. A call whose one bucketed argument is a plain array passed by position
takes a short path. What JAX traces (``spec.body(fn)``) is ``_trace``'s; the checking
mode is ``_report``'s, the explanations ``_explanations``'; what a program store record
keeps of a bucket, ``_recorded``'s; the arguments and results ahead of time (``lower``,
``eval_shape``, ``precompile``), ``_ahead``'s.
"""

from __future__ import annotations

import functools
import inspect
import threading
import warnings
from typing import Any, Callable

import jax
import numpy as np

from .._core import _compat
from .._core._errors import StaticFieldWarning
from . import _pad
from ._ahead import Ahead
from ._args import Arguments
from ._recorded import Recorded
from ._explanations import Explanations
from ._inside import check_inside, checking, transformed
from ._keys import Keys
from ._report import Reports
from ._symbolic import available
from ._trace import ROWS_KW, Retry, Rows, Traced
from ._sizes import Sizes

_BUCKETS = (
    "{function}: buckets= maps parameter names to the row axis of each, e.g. "
    "buckets={{\"x\": 0}}; got {got!r}."
)
_NO_PARAM = (
    "{function}: buckets= names {name!r}, which is not one of its parameters ({params}). "
    "Fix the name, or add the parameter."
)
_STATIC = (
    "{function}: buckets= names {name!r}, which is a static argument; only traced arguments "
    "have rows to pad. Drop it from buckets= or from static_argnames."
)
_MASK = (
    "{function}: mask= must be \"valid\" (the function then takes a keyword argument `valid`, "
    "the row mask) or None, got {got!r}."
)
_MASK_PARAM = (
    "{function}: mask=\"valid\" passes the row mask as a keyword argument `valid`, but the "
    "function takes no parameter `valid` (nor **kwargs). Add a parameter `valid` (a bool "
    "array, True for real rows)."
)
_ARRAY = _compat.get("array_impl") or np.ndarray  # jax.Array's concrete class


class _Call:
    """The call in progress on this thread (read by the trace and by ``annotate``)."""

    __slots__ = ("rows", "bucket", "traced", "check", "program", "exact_why")

    def __init__(self, rows: int, bucket: int) -> None:
        self.rows, self.bucket, self.traced, self.check, self.program = rows, bucket, False, False, None
        self.exact_why: str | None = None  # set by the trace: this call's key's buckets are exact


class BucketSpec(Arguments, Traced, Keys, Reports, Explanations, Recorded, Ahead):
    """The buckets of one function (see the module docstring)."""

    method = False  # a jit_method's (set by it): its calls pass `valid` by keyword
    reads_statics = False  # a deps="read" jit_method's: verdicts keyed by self's type

    def __init__(self, fn: Callable, function: str, buckets: Any, sizes: Any, mask: Any,
                 static_names: frozenset) -> None:
        if not isinstance(buckets, dict) or not buckets or any(
                not isinstance(k, str) or not isinstance(v, int) or isinstance(v, bool) for k, v in buckets.items()):
            raise TypeError(_BUCKETS.format(function=function, got=buckets))
        sig = inspect.signature(fn)
        params = list(sig.parameters)
        var_kw = any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values())
        for name in buckets:
            if name not in sig.parameters:
                raise TypeError(_NO_PARAM.format(function=function, name=name, params=", ".join(params)))
            if name in static_names:
                raise TypeError(_STATIC.format(function=function, name=name))
        if mask not in (None, "valid"):
            raise TypeError(_MASK.format(function=function, got=mask))
        if mask and "valid" not in sig.parameters and not var_kw:
            raise TypeError(_MASK_PARAM.format(function=function))
        kinds = inspect.Parameter
        self.fn = fn
        self.params = params
        self.static_names = static_names
        self.function = function
        self.axes = dict(buckets)
        self.positions = {
            name: params.index(name) for name in buckets
            if sig.parameters[name].kind in (kinds.POSITIONAL_ONLY, kinds.POSITIONAL_OR_KEYWORD)
        }
        self.sizes = Sizes(function, sizes)
        self.mask = mask
        self.options = {"buckets": dict(buckets), "bucket_sizes": sizes, "mask": mask}
        self.stats: dict[int, dict[str, int]] = {}
        self._local = threading.local()
        self._lock = threading.Lock()
        self._init_traced()
        if not available():
            warnings.warn(_compat.unavailable("buckets"), StaticFieldWarning, stacklevel=4)

    # ----- the call -----------------------------------------------------------------------
    def front(self, call: Callable[..., Any], kw_call: Callable[..., Any] | None = None) -> Callable[..., Any]:
        """The bucketed call around ``call`` (the engine's, or ``sf.jit``'s hit path);
        ``kw_call`` takes the same arguments and extra keywords (the real row count, for
        programs whose callbacks need it), where ``call`` takes the user's signature only."""
        spec = self
        kw_call = kw_call or call
        plain = (np.ndarray, _ARRAY)
        [(only, only_axis)] = list(self.axes.items()) if len(self.axes) == 1 else [(None, 0)]
        only_pos = self.positions.get(only, -1) if only is not None and not self.mask else -1
        choose, pad_device, host_pad, cut = self.sizes.choose, _pad.pad_single, _pad.host_pad, _pad.cut_single
        local = self._local
        names = lambda: f"`{only}`"  # noqa: E731 (for an error only)

        def single(x: Any, args: tuple, kwargs: dict) -> Any:
            """One bucketed argument, a plain array passed by position (the common call): the
            steps of ``_attempt`` and ``_done``, with nothing to look at on a hit."""
            axis = spec._axis(only, x) if not 0 <= only_axis < x.ndim else only_axis
            rows = x.shape[axis]
            bucket = choose(rows, names) if rows else 0
            if bucket != rows and (spec.exact or spec.exact_calls or spec.guards or not spec._sound) and \
                    not spec.fits(rows, bucket, (args, kwargs)):
                bucket = rows
            padded = args
            if bucket != rows:
                x = host_pad(x, axis, bucket) if x.__class__ is np.ndarray else pad_device(x, axis, bucket)
                padded = (*args[:only_pos], x, *args[only_pos + 1:])
            if spec.needs_count:
                return spec._attempt(call, kw_call, padded, kwargs, rows, bucket, (args, kwargs))
            state = _Call(rows, bucket)
            if bucket == rows and spec.exact_calls:  # (its recompile explanation says why)
                state.exact_why = spec.exact_reason((args, kwargs))
            outer = getattr(local, "call", None)
            local.call = state
            try:
                out = call(*padded, **kwargs)
            except Retry as exc:
                local.call = outer
                if exc.again:  # the rule of bucket sizes changed: pick the bucket anew
                    return spec._again(call, kw_call, (args, kwargs))
                if state.exact_why is not None:
                    spec.keep_exact((args, kwargs), state.exact_why)
                if spec.needs_count and bucket != rows and spec.fits(rows, bucket, (args, kwargs)):  # with the count
                    return spec._attempt(call, kw_call, padded, kwargs, rows, bucket, (args, kwargs))
                return spec._attempt(call, kw_call, args, kwargs, rows, rows, (args, kwargs))
            finally:
                local.call = outer
            if state.traced or out.value.__class__ is not _ARRAY:  # a miss, a tree or a transformation:
                return spec._done(out, state, (args, kwargs))  # the checking mode may compare
            spec._count(rows, bucket)
            axes = out.axes
            if bucket == rows or axes[0] is None:
                return out.value
            return cut(out.value, axes[0], rows)

        @functools.wraps(call)
        def bucketed(*args: Any, **kwargs: Any) -> Any:
            if len(args) > only_pos >= 0:
                x = args[only_pos]
                if (x.__class__ is np.ndarray and x.dtype.kind != "V") or (
                        x.__class__ is _ARRAY and x.sharding.num_devices == 1):
                    return single(x, args, kwargs)
            parts, rows = spec._parts(args, kwargs, plain)
            if rows is None:
                return spec._unwrap(call(*args, **kwargs))
            if not isinstance(rows, int):  # inside another bucketed function's analysis: its rows
                if spec.mask:
                    kwargs = dict(kwargs, valid=jax.numpy.ones((rows,), bool))
                return spec._unwrap(call(*args, **kwargs))
            return spec._pick(call, kw_call, args, kwargs, parts, rows)

        bucketed.__wrapped__ = call  # type: ignore[attr-defined]
        return bucketed

    def _attempt(self, call: Callable, kw_call: Callable, args: tuple, kwargs: dict, rows: int, bucket: int,
                 given: tuple) -> Any:
        """Run the bucket's program (``bucket == rows``: the exact program); a program that
        may not serve ``rows`` (``Retry``, from its trace or load) sends the call to its
        exact size."""
        counted = self.needs_count
        if counted:
            call, kwargs = kw_call, dict(kwargs, **{ROWS_KW: _pad.count_array(rows)})
        state = _Call(rows, bucket)
        if bucket == rows and self.exact_calls:  # (its recompile explanation says why)
            state.exact_why = self.exact_reason(given)
        local = self._local
        outer = getattr(local, "call", None)
        local.call = state
        try:
            out = call(*args, **kwargs)
        except Retry as exc:
            local.call = outer
            if exc.again:  # the rule of bucket sizes changed: pick the bucket anew
                return self._again(call, kw_call, given)
            if bucket == rows:  # pragma: no cover - an exact program never retries
                raise
            if state.exact_why is not None:
                self.keep_exact(given, state.exact_why)
            if not counted and self.needs_count and self.fits(rows, bucket, given):  # again, with the count
                return self._attempt(kw_call, kw_call, args, kwargs, rows, bucket, given)
            args, kwargs = given
            if self.mask:
                kwargs = dict(kwargs, valid=_pad.valid_mask(rows, rows))
            return self._attempt(call if not self.needs_count else kw_call, kw_call, args, kwargs, rows, rows, given)
        finally:
            local.call = outer
        return self._done(out, state, given)

    def _again(self, call: Callable, kw_call: Callable, given: tuple) -> Any:
        """The call once more from its own arguments, its bucket picked by the new rule."""
        args, kwargs = given
        parts, rows = self._parts(args, kwargs, (np.ndarray, _ARRAY))
        return self._pick(call, kw_call, args, kwargs, parts, rows)

    def _pick(self, call: Callable, kw_call: Callable, args: tuple, kwargs: dict, parts: Any, rows: int) -> Any:
        """The call with its bucket picked for ``rows``: padded (``parts``: the bucketed
        arguments), the mask added, run by ``_attempt``."""
        given = (args, kwargs)
        bucket = self._bucket(rows, parts, given)
        if bucket != rows:
            args, kwargs = self._padded(args, kwargs, parts, bucket)
        if self.mask:
            kwargs = dict(kwargs, valid=_pad.valid_mask(rows, bucket))
        return self._attempt(call, kw_call, args, kwargs, rows, bucket, given)

    @staticmethod
    def _unwrap(out: Any) -> Any:
        return out.value if isinstance(out, Rows) else out

    def _done(self, out: Any, state: _Call, given: tuple) -> Any:
        """After the call: slice, count, and (checking mode) compare with the unpadded call."""
        rows, bucket = state.rows, state.bucket
        if state.traced and state.exact_why is not None:  # (a trace said so: its key's buckets are exact)
            self.keep_exact(given, state.exact_why)
        result = self._slice(out, rows, bucket)
        self._count(rows, bucket)
        if state.check if state.traced else checking():  # (under a transformation: a program traced before)
            if transformed(result):  # under grad, vmap or an outer jit: the comparison in the program
                check_inside(self, given, result, rows, bucket)
            elif state.traced:
                self._check(given, result, state)
        return result

    def _slice(self, out: Any, rows: int, bucket: int) -> Any:
        """The outputs the user sees: each that carries rows cut back to the real ``rows``."""
        if out.__class__ is not Rows:
            return out
        value, axes = out.value, out.axes
        if bucket == rows or not any(a is not None for a in axes):
            return value
        if value.__class__ is _ARRAY:  # one array out: no tree to flatten
            return _pad.cut_single(value, axes[0], rows)
        leaves, treedef = jax.tree_util.tree_flatten(value)
        return treedef.unflatten(_pad.cut(leaves, axes, rows))

    def _count(self, rows: int, bucket: int) -> None:
        with self._lock:
            entry = self.stats.get(bucket)
            if entry is None:
                entry = self.stats[bucket] = {"calls": 0, "rows": 0, "padded": 0}
            entry["calls"] += 1
            entry["rows"] += rows
            entry["padded"] += bucket - rows

    def buckets(self) -> dict[int, dict[str, int]]:
        """``{bucket: {"calls": n, "rows": real rows, "padded": rows added}}``."""
        with self._lock:
            return {b: dict(v) for b, v in sorted(self.stats.items())}


def bucket_spec(fn: Callable, function: str, options: dict[str, Any], static_names: frozenset) -> BucketSpec | None:
    """The ``BucketSpec`` of ``sf.jit``/``jit_method`` options (``None`` without ``buckets=``);
    pops ``buckets``, ``bucket_sizes`` and ``mask`` from ``options``."""
    buckets = options.pop("buckets", None)
    sizes = options.pop("bucket_sizes", "pow2")
    mask = options.pop("mask", None)
    if buckets is None:
        if sizes != "pow2" or mask is not None:
            raise TypeError(f"{function}: bucket_sizes= and mask= apply to buckets=; pass buckets= "
                            "(e.g. buckets={\"x\": 0}) or drop them.")
        return None
    return BucketSpec(fn, function, buckets, sizes, mask, static_names)
