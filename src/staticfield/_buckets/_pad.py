"""Padding inputs up to a bucket and slicing outputs back, without a compile per size of the
user's function.

NumPy arrays are padded on the host (no program at all). Device arrays go through one
small program of staticfield's own, ``pad_rows``, that pads every leaf of a call at once
(one compile per new input size and structure); outputs go through ``slice_rows``
(likewise). On the CPU, a size seen for the first time is padded or sliced on the host
instead, so sizes that come once (most of them, in a serving loop) compile nothing. Plain
``jnp.pad`` or ``x[:n]`` would compile an eager program per leaf and size. Under a
transformation (``vmap``, ``grad``, an outer ``jit``) the leaves are tracers and are
padded and sliced inline, in the caller's program. Inside ``sf.no_compiles()`` a program
of these that would compile is refused (``RecompileError``) before compiling, and the
leaves are padded or sliced on the host instead. Both programs carry
``__staticfield_padding__``, by which ``sf.watch`` lists them apart from the user's
functions.

Every pad row is a copy of the last real row (for every dtype: floats, ints, bools, typed
PRNG keys), never zeros: a pad row then computes what a real row computes, so a ``log``,
``sqrt`` or ``1/x`` of a pad row is finite wherever the real rows' are, and a gradient
through the call (whose pad rows' cotangents are zero, and are summed into the last real
row when the padding is transposed) equals the unpadded call's. A call with no rows is
never padded (its exact 0-row program runs).
"""

from __future__ import annotations

import functools
from typing import Any, Sequence

import jax
import numpy as np
import jax.numpy as jnp
from jax import lax

from .._core import _compat
from .._core._errors import RecompileError


def _pad_one(leaf: Any, axis: int, bucket: int) -> Any:
    n = leaf.shape[axis]
    shape = list(leaf.shape)
    shape[axis] = bucket - n
    last = lax.slice_in_dim(leaf, n - 1, n, axis=axis)
    return lax.concatenate([leaf, jnp.broadcast_to(last, tuple(shape))], axis)


def is_key(x: Any) -> bool:
    """A typed PRNG key array (``jax.random.key``), which NumPy cannot hold."""
    dtype = getattr(x, "dtype", None)
    try:
        return dtype is not None and jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key)
    except TypeError:
        return False


@functools.lru_cache(maxsize=4096)
def count_array(n: int) -> Any:
    """The real row count as a device scalar, for programs whose callbacks need it."""
    return jax.device_put(np.int32(n))


def _pad_all(leaves: Sequence[Any], spec: tuple) -> list:
    return [_pad_one(leaf, axis, bucket) for leaf, (axis, bucket) in zip(leaves, spec)]


def _slice_all(leaves: Sequence[Any], spec: tuple) -> list:
    return [leaf if axis is None else lax.slice_in_dim(leaf, 0, n, axis=axis)
            for leaf, (axis, n) in zip(leaves, spec)]


def _own(fn: Any, name: str) -> Any:
    fn.__name__ = fn.__qualname__ = name
    fn.__staticfield_padding__ = True  # sf.watch: a padding program, not the user's
    return fn


def _pad_rows(leaves: list, spec: tuple) -> list:
    return _pad_all(leaves, spec)


def _slice_rows(leaves: list, spec: tuple) -> list:
    return _slice_all(leaves, spec)


pad_rows = jax.jit(_own(_pad_rows, "staticfield_pad_rows"), static_argnums=1)
slice_rows = jax.jit(_own(_slice_rows, "staticfield_slice_rows"), static_argnums=1)


@functools.lru_cache(maxsize=64)
def _sharded_pad(shardings: tuple) -> Any:
    """``pad_rows`` that keeps each padded leaf's sharding (the row axis sharded on a mesh)."""
    return jax.jit(_own(_pad_rows, "staticfield_pad_rows"), static_argnums=1, out_shardings=list(shardings))


def _is_tracer(x: Any) -> bool:
    return isinstance(x, _compat.Tracer)


def host_pad(leaf: np.ndarray, axis: int, bucket: int) -> np.ndarray:
    """A NumPy array padded on ``axis`` to ``bucket`` rows with copies of its last row
    (faster than ``numpy.pad``)."""
    n = leaf.shape[axis]
    shape = list(leaf.shape)
    shape[axis] = bucket
    out = np.empty(shape, leaf.dtype)
    head = (slice(None),) * axis
    out[head + (slice(0, n),)] = leaf
    out[head + (slice(n, bucket),)] = leaf[head + (slice(n - 1, n),)]
    return out


# On the CPU, a size seen for the first time is padded and sliced on the host (a copy, and
# no compile); a size seen again gets its program (no host round trip, async dispatch).
# Many sizes come once only (a serving loop): those never compile anything.
_SEEN: set = set()
_SEEN_MAX = 65536


def _first_on_cpu(key: Any, leaves: Sequence[Any]) -> bool:
    """Whether this is the first sight of ``key`` and every leaf is a one-device CPU array
    that is not weakly typed (NumPy would drop the weak type, which the programs keep)."""
    if key in _SEEN:
        return False
    for x in leaves:
        if getattr(x, "weak_type", True) or is_key(x):
            return False
        sharding = getattr(x, "sharding", None)
        if sharding is None or sharding.num_devices != 1 or next(iter(sharding.device_set)).platform != "cpu":
            return False
    if len(_SEEN) >= _SEEN_MAX:
        _SEEN.clear()
    _SEEN.add(key)
    return True


def _on_host(leaf: Any, index: tuple, pad_to: tuple | None = None) -> Any:
    """``leaf`` padded or sliced on the host, put back where it was (uncommitted: on the
    default device, uncommitted; rows its sharding cannot split, as the real rows of a
    bucket split over devices: replicated on the same devices, as the slicing program
    puts them)."""
    host = np.asarray(leaf)
    sharding = leaf.sharding if getattr(leaf, "committed", False) else None
    value = host_pad(host, *pad_to) if pad_to is not None else np.ascontiguousarray(host[index])
    try:
        return jax.device_put(value, sharding)
    except ValueError:
        if sharding is None:
            raise
        return jax.device_put(value, _replicated(sharding))


def _replicated(sharding: Any) -> Any:
    """A sharding that replicates over ``sharding``'s devices (its mesh's, where it has one)."""
    spec = jax.sharding.PartitionSpec()
    mesh = getattr(sharding, "mesh", None)
    if mesh is None:
        devices = np.array(sorted(sharding.device_set, key=lambda d: d.id))
        mesh = jax.sharding.Mesh(devices, ("devices",))
    return jax.sharding.NamedSharding(mesh, spec)


def pad(leaves: list, axes: list, bucket: int) -> list:
    """Each leaf padded on its axis to ``bucket`` rows (see the module docstring)."""
    out = list(leaves)
    device, dspec = [], []
    for i, (leaf, axis) in enumerate(zip(leaves, axes)):
        if isinstance(leaf, np.ndarray):
            out[i] = host_pad(leaf, axis, bucket)
        elif _is_tracer(leaf):
            out[i] = _pad_one(leaf, axis, bucket)
        else:
            device.append(i)
            dspec.append((axis, bucket))
    if device:
        given = [leaves[i] for i in device]
        shardings = tuple(getattr(x, "sharding", None) for x in given)
        key = ("pad", tuple(dspec), tuple((x.shape, x.dtype) for x in given))
        if _first_on_cpu(key, given):
            padded = [_on_host(x, (), (axis, bucket)) for x, (axis, _) in zip(given, dspec)]
        else:
            program = (_sharded_pad(shardings) if any(s is not None and len(s.device_set) > 1 for s in shardings)
                       else pad_rows)
            try:
                padded = program(given, tuple(dspec))
            except RecompileError:  # inside sf.no_compiles(): pad on the host, compile nothing
                padded = [_on_host(x, (), (axis, bucket)) for x, (axis, _) in zip(given, dspec)]
        for i, p in zip(device, padded):
            out[i] = p
    return out


def pad_single(x: Any, axis: int, bucket: int) -> Any:
    """``pad([x], [axis], bucket)[0]`` for one concrete array on one device (the common
    bucketed call): the same programs and host copies, with less to look at."""
    spec = ((axis, bucket),)
    key = ("pad", spec, ((x.shape, x.dtype),))
    if key not in _SEEN and _first_on_cpu(key, (x,)):
        return _on_host(x, (), (axis, bucket))
    try:
        return pad_rows([x], spec)[0]
    except RecompileError:  # inside sf.no_compiles(): pad on the host, compile nothing
        return _on_host(x, (), (axis, bucket))


def cut_single(x: Any, axis: int, n: int) -> Any:
    """``cut([x], (axis,), n)[0]`` for one concrete output array."""
    spec = ((axis, n),)
    key = ("slice", spec, ((x.shape, x.dtype),))
    if key not in _SEEN and _first_on_cpu(key, (x,)):
        return _host_cut([x], (axis,), n)[0]
    try:
        return slice_rows([x], spec)[0]
    except RecompileError:  # inside sf.no_compiles(): slice on the host, compile nothing
        return _host_cut([x], (axis,), n)[0]


def cut(leaves: list, axes: Sequence[int | None], n: int) -> list:
    """Each output leaf with a row axis sliced back to its first ``n`` rows."""
    spec = tuple((axis, n) for axis in axes)
    if any(_is_tracer(x) for x in leaves):
        return _slice_all(leaves, spec)
    if _first_on_cpu(("slice", spec, tuple((x.shape, x.dtype) for x in leaves)), leaves):
        return _host_cut(leaves, axes, n)
    try:
        return slice_rows(leaves, spec)
    except RecompileError:  # inside sf.no_compiles(): slice on the host, compile nothing
        return _host_cut(leaves, axes, n)


def _host_cut(leaves: list, axes: Sequence[int | None], n: int) -> list:
    return [x if axis is None else _on_host(x, (slice(None),) * axis + (slice(0, n),))
            for x, axis in zip(leaves, axes)]


@functools.lru_cache(maxsize=256)
def valid_mask(n: int, bucket: int) -> Any:
    """The ``valid`` row mask of ``mask="valid"``: True for the ``n`` real rows."""
    mask = np.zeros(bucket, bool)
    mask[:n] = True
    return jax.device_put(mask)
