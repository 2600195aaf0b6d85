"""A bucketed function's call: pad, run the bucket's program, slice, count.

``BucketSpec`` is made once per function from ``buckets=``, ``bucket_sizes=`` and
``mask=``. ``spec.front(call)`` wraps the engine's call (an explicit input: this room
never imports ``_jit``): it finds the bucketed arguments' rows, picks the bucket
(``_sizes``), pads (``_pad``), calls, slices the outputs that carry the row axis and counts
``buckets()``. A call whose one bucketed argument is a plain array passed by position
takes a short path. What JAX traces (``spec.body(fn)``) is ``_trace``'s; the checking
mode and the explanations are ``_report``'s; what a program store record keeps of a
bucket, ``_recorded``'s; the arguments and results ahead of time (``lower``,
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
from ._errors import DISAGREE as _DISAGREE
from ._ahead import Ahead
from ._recorded import Recorded
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
_LEAF_AXIS = (
    "{function}: the bucketed argument {path} is {what}, which has no axis {axis} to pad. "
    "Give it a row axis, or pass it in an argument that is not in buckets=."
)
_SHARDED = (
    "{function}: the bucketed argument {path} is sharded over {m} devices along its row "
    "axis, and no size of bucket_sizes={sizes!r} at or above {rows} rows is a multiple of "
    "{m}. Add one (e.g. {suggest})."
)
_ARRAY = _compat.get("array_impl") or np.ndarray  # jax.Array's concrete class


class _Call:
    """The call in progress on this thread (read by the trace and by ``annotate``)."""

    __slots__ = ("rows", "bucket", "traced", "check", "program")

    def __init__(self, rows: int, bucket: int) -> None:
        self.rows, self.bucket, self.traced, self.check, self.program = rows, bucket, False, False, None


def _is_array(x: Any) -> bool:
    """An array leaf (a ``ShapeDtypeStruct`` too: ``lower``, ``eval_shape``, ``precompile``)."""
    return isinstance(x, (np.ndarray, jax.Array, jax.ShapeDtypeStruct)) and not isinstance(x, np.generic)


def _keystr(path: tuple) -> str:
    return jax.tree_util.keystr(path)


class BucketSpec(Traced, Reports, Recorded, Ahead):
    """The buckets of one function (see the module docstring)."""

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
    def _found(self, args: tuple, kwargs: dict) -> list[tuple[str, Any, bool]]:
        """(name, value, positional) of each bucketed argument given in this call."""
        found = []
        for name in self.axes:
            p = self.positions.get(name)
            if p is not None and p < len(args):
                found.append((name, args[p], True))
            elif name in kwargs:
                found.append((name, kwargs[name], False))
        return found

    def _leaves(self, name: str, value: Any, strict: bool = True) -> tuple[list, Any, list[int | None], list[str]]:
        leaves, treedef = jax.tree_util.tree_flatten(value)
        axis = self.axes[name]
        axes: list[int | None] = []
        for i, leaf in enumerate(leaves):
            if not (_is_array(leaf) or isinstance(leaf, _compat.Tracer)):
                axes.append(None)  # a Python scalar, a string...: passes through
                continue
            ndim = np.ndim(leaf)
            if not strict and not -ndim <= axis < ndim:  # a Python scalar that JAX made a tracer
                axes.append(None)
                continue
            if not -ndim <= axis < ndim:
                path = name + _keystr(jax.tree_util.tree_flatten_with_path(value)[0][i][0])
                what = f"a {ndim}-d array of shape {tuple(np.shape(leaf))}"
                raise ValueError(_LEAF_AXIS.format(function=self.function, path=path, what=what, axis=axis))
            axes.append(axis % ndim)
        return leaves, treedef, axes, []

    def front(self, call: Callable[..., Any], kw_call: Callable[..., Any] | None = None) -> Callable[..., Any]:
        """The bucketed call around ``call`` (the engine's, or ``sf.jit``'s hit path);
        ``kw_call`` takes the same arguments and extra keywords (the real row count, for
        programs whose callbacks need it), where ``call`` takes the user's signature only."""
        spec = self
        kw_call = kw_call or call
        plain = (np.ndarray, _ARRAY)
        [(only, only_axis)] = list(self.axes.items()) if len(self.axes) == 1 else [(None, 0)]
        only_pos = self.positions.get(only, -1) if only is not None and not self.mask else -1
        choose, pad_device, host_pad = self.sizes.choose, _pad.pad_single, _pad.host_pad
        names = lambda: f"`{only}`"  # noqa: E731 (for an error only)

        def single(x: Any, args: tuple, kwargs: dict) -> Any:
            """One bucketed argument, a plain array passed by position (the common call)."""
            axis = spec._axis(only, x) if not 0 <= only_axis < x.ndim else only_axis
            rows = x.shape[axis]
            bucket = choose(rows, names) if rows else 0
            if bucket != rows and not spec.fits(rows, bucket):
                bucket = rows
            padded = args
            if bucket != rows:
                x = host_pad(x, axis, bucket) if x.__class__ is np.ndarray else pad_device(x, axis, bucket)
                padded = (*args[:only_pos], x, *args[only_pos + 1:])
            return spec._attempt(call, kw_call, padded, kwargs, rows, bucket, (args, kwargs))

        @functools.wraps(call)
        def bucketed(*args: Any, **kwargs: Any) -> Any:
            if len(args) > only_pos >= 0:
                x = args[only_pos]
                if (x.__class__ is np.ndarray and x.dtype.kind != "V") or (
                        x.__class__ is _ARRAY and x.sharding.num_devices == 1 and not _pad.is_key(x)):
                    return single(x, args, kwargs)
            parts, rows = spec._parts(args, kwargs, plain)
            if rows is None:
                return spec._unwrap(call(*args, **kwargs))
            bucket = spec._bucket(rows, parts)
            given = (args, kwargs)
            if bucket != rows:
                args, kwargs = spec._padded(args, kwargs, parts, bucket)
            if spec.mask:
                kwargs = dict(kwargs, valid=_pad.valid_mask(rows, bucket))
            return spec._attempt(call, kw_call, args, kwargs, rows, bucket, given)

        bucketed.__wrapped__ = call  # type: ignore[attr-defined]
        return bucketed

    def _padded(self, args: tuple, kwargs: dict, parts: list, bucket: int) -> tuple[tuple, dict]:
        """The call's arguments with every bucketed leaf padded to ``bucket`` rows."""
        args, kwargs = list(args), dict(kwargs)
        flat, where = [], []
        for p, (name, positional, leaves, treedef, axes) in enumerate(parts):
            for i, axis in enumerate(axes):
                if axis is not None:
                    flat.append(leaves[i])
                    where.append((p, i, axis))
        padded = _pad.pad(flat, [w[2] for w in where], bucket)
        new = [list(part[2]) for part in parts]
        for (p, i, _), leaf in zip(where, padded):
            new[p][i] = leaf
        for (name, positional, _, treedef, _), leaves in zip(parts, new):
            value = leaves[0] if treedef is None else treedef.unflatten(leaves)
            if positional:
                args[self.positions[name]] = value
            else:
                kwargs[name] = value
        return tuple(args), kwargs

    def _attempt(self, call: Callable, kw_call: Callable, args: tuple, kwargs: dict, rows: int, bucket: int,
                 given: tuple) -> Any:
        """Run the bucket's program (``bucket == rows``: the exact program); a program that
        may not serve ``rows`` (``Retry``, from its trace or load) sends the call to its
        exact size."""
        if self.needs_count:
            call, kwargs = kw_call, dict(kwargs, **{ROWS_KW: _pad.count_array(rows)})
        state = _Call(rows, bucket)
        local = self._local
        outer = getattr(local, "call", None)
        local.call = state
        try:
            out = call(*args, **kwargs)
        except Retry:
            if bucket == rows:  # pragma: no cover - an exact program never retries
                raise
            local.call = outer
            args, kwargs = given
            if self.mask:
                kwargs = dict(kwargs, valid=_pad.valid_mask(rows, rows))
            return self._attempt(call if not self.needs_count else kw_call, kw_call, args, kwargs, rows, rows, given)
        finally:
            local.call = outer
        return self._done(out, state, given)

    @staticmethod
    def _unwrap(out: Any) -> Any:
        return out.value if isinstance(out, Rows) else out

    def _parts(self, args: tuple, kwargs: dict, plain: tuple = ()) -> tuple[list, int | None]:
        """Each bucketed argument given as (name, positional, leaves, treedef, row axes), and
        the rows they agree on (``None``: no leaf has rows). A value of a class in ``plain``
        is one array (no tree to flatten: its treedef is ``None``)."""
        parts = []
        rows: int | None = None
        for name, value, positional in self._found(args, kwargs):
            if value.__class__ in plain:
                leaves, treedef, axes = [value], None, [self._axis(name, value)]
            else:
                leaves, treedef, axes, _ = self._leaves(name, value)
            for i, (leaf, axis) in enumerate(zip(leaves, axes)):
                if axis is None:
                    continue
                n = leaf.shape[axis]
                if rows is None:
                    rows, first = n, (name, value, i)
                elif n != rows:
                    raise ValueError(_DISAGREE.format(function=self.function, a=self._path(*first), na=rows,
                                                      b=self._path(name, value, i), nb=n))
            parts.append((name, positional, leaves, treedef, axes))
        return parts, rows

    def _done(self, out: Any, state: _Call, given: tuple) -> Any:
        """After the call: slice, count, and (checking mode) compare with the unpadded call."""
        rows, bucket = state.rows, state.bucket
        result = self._slice(out, rows, bucket)
        self._count(rows, bucket)
        if state.traced and state.check:
            self._check(given, result, state)
        return result

    def _axis(self, name: str, value: Any) -> int:
        """The row axis of a bucketed argument that is one array."""
        axis, ndim = self.axes[name], value.ndim
        if not -ndim <= axis < ndim:
            what = f"a {ndim}-d array of shape {tuple(value.shape)}"
            raise ValueError(_LEAF_AXIS.format(function=self.function, path=name, what=what, axis=axis))
        return axis % ndim

    def _path(self, name: str, value: Any, i: int) -> str:
        if _is_array(value) or isinstance(value, _compat.Tracer):
            return f"`{name}`"
        return f"`{name}{_keystr(jax.tree_util.tree_flatten_with_path(value)[0][i][0])}`"

    def _bucket(self, rows: int, parts: list) -> int:
        """The bucket for ``rows`` (0 rows: the exact 0-row program); with the row axis
        sharded over ``m`` devices, a multiple of ``m`` (pow2: rounded up; a list: the
        smallest listed size that is one); ``rows`` itself where the bucket's program may
        not serve that count (``fits``)."""
        if rows == 0:
            return 0
        names = lambda: ", ".join(f"`{part[0]}`" for part in parts)  # noqa: E731 (for an error only)
        bucket = self.sizes.choose(rows, names)
        m = self._mesh_multiple(parts)
        if m > 1 and bucket % m:
            if self.sizes.pow2:
                bucket = -(-bucket // m) * m
            else:
                fits = [s for s in self.sizes.listed if s >= rows and s % m == 0]
                if not fits:
                    raise ValueError(_SHARDED.format(function=self.function, path=names(), m=m,
                                                     sizes=self.sizes.spec, rows=rows, suggest=-(-rows // m) * m))
                bucket = fits[0]
        return bucket if bucket == rows or self.fits(rows, bucket) else rows

    @staticmethod
    def _mesh_multiple(parts: list) -> int:
        """The number of devices the row axis is split over (1 when not sharded)."""
        m = 1
        for _, _, leaves, _, axes in parts:
            for leaf, axis in zip(leaves, axes):
                sharding = getattr(leaf, "sharding", None) if axis is not None else None
                if sharding is None or getattr(sharding, "num_devices", 2) == 1 or not hasattr(sharding, "shard_shape"):
                    continue
                try:
                    shard = sharding.shard_shape(np.shape(leaf))
                except Exception:
                    continue
                if shard[axis]:
                    m = max(m, np.shape(leaf)[axis] // shard[axis])
        return m

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
