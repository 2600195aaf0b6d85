"""A bucketed call's arguments: which are bucketed, their leaves and row axes, the rows
they agree on, the bucket they go to, and the arguments padded to it. ``Arguments`` is a
base of ``_front.BucketSpec``, kept apart so that ``_front`` holds the call path only.
"""

from __future__ import annotations

from typing import Any, Callable

import jax
import numpy as np

from .._core import _compat
from . import _pad
from ._errors import DISAGREE as _DISAGREE
from ._sizes import Sizes

_LEAF_AXIS = (
    "{function}: the bucketed argument {path} is {what}, which has no axis {axis} to pad. "
    "Give it a row axis, or pass it in an argument that is not in buckets=."
)

_SHARDED = (
    "{function}: the bucketed argument {path} is sharded over {m} devices along its row "
    "axis, and no size of bucket_sizes={sizes!r} at or above {rows} rows is a multiple of "
    "{m}. Add one (e.g. {suggest})."
)


def is_array(x: Any) -> bool:
    """An array leaf (a ``ShapeDtypeStruct`` too: ``lower``, ``eval_shape``, ``precompile``)."""
    return isinstance(x, (np.ndarray, jax.Array, jax.ShapeDtypeStruct)) and not isinstance(x, np.generic)


def _keystr(path: tuple) -> str:
    return jax.tree_util.keystr(path)


class Arguments:
    """The arguments of a bucketed call (see the module docstring)."""

    # Set by BucketSpec: what these methods read.
    function: str
    axes: dict
    positions: dict
    sizes: Sizes
    fits: Callable
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
            if not (is_array(leaf) or isinstance(leaf, _compat.Tracer)):
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

    def _axis(self, name: str, value: Any) -> int:
        """The row axis of a bucketed argument that is one array."""
        axis, ndim = self.axes[name], value.ndim
        if not -ndim <= axis < ndim:
            what = f"a {ndim}-d array of shape {tuple(value.shape)}"
            raise ValueError(_LEAF_AXIS.format(function=self.function, path=name, what=what, axis=axis))
        return axis % ndim

    def _path(self, name: str, value: Any, i: int) -> str:
        if is_array(value) or isinstance(value, _compat.Tracer):
            return f"`{name}`"
        return f"`{name}{_keystr(jax.tree_util.tree_flatten_with_path(value)[0][i][0])}`"

    def _bucket(self, rows: int, parts: list, call: tuple | None = None) -> int:
        """The bucket for ``rows`` (0 rows: the exact 0-row program); with the row axis
        sharded over ``m`` devices, a multiple of ``m`` (pow2: rounded up; a list: the
        smallest listed size that is one); ``rows`` itself where the bucket's program may
        not serve that count (``fits``)."""
        if rows == 0:
            return 0
        names = lambda: ", ".join(f"`{part[0]}`" for part in parts)  # noqa: E731 (for an error only)
        bucket = self.sizes.choose(rows, names)
        m = int(np.lcm(self._mesh_multiple(parts), self.sizes.multiple))  # (and a shard_map's split)
        if m > 1 and bucket % m:
            if self.sizes.pow2:
                bucket = -(-bucket // m) * m
            else:
                fits = [s for s in self.sizes.listed if s >= rows and s % m == 0]
                if not fits:
                    raise ValueError(_SHARDED.format(function=self.function, path=names(), m=m,
                                                     sizes=self.sizes.spec, rows=rows, suggest=-(-rows // m) * m))
                bucket = fits[0]
        return bucket if bucket == rows or self.fits(rows, bucket, call) else rows

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

