"""A bucketed function ahead of time: ``lower``, ``trace``, ``eval_shape`` and
``precompile`` take the arguments a call would, and see the program a call with them runs.

``ahead(args, kwargs)`` gives the arguments the bucket's program takes, abstractly: each
bucketed leaf with its row axis at the bucket's size (a NumPy array as NumPy zeros, as a
call pads it on the host; a ``jax.Array`` or ``jax.ShapeDtypeStruct`` as a
``ShapeDtypeStruct`` with its weak type, and its sharding when committed), and
``mask="valid"``'s ``valid`` as a ``ShapeDtypeStruct``; the bucket is chosen as a call
chooses it. ``shapes(out, rows, bucket)`` gives ``eval_shape``'s answer as a call returns
it: the outputs that carry the row axis back at ``rows``. (``lower`` and ``trace`` give
JAX's objects for the bucket's program itself: its outputs are a ``Rows`` of the padded
outputs and their row axes.) ``Ahead`` is a base of
``_front.BucketSpec``, kept apart so that ``_front`` holds the call path only.
"""

from __future__ import annotations

import contextlib
import types
from typing import Any, Callable, Iterator

import jax
import numpy as np

from ._trace import Retry, Rows


def _abstract(leaf: Any, axis: int, bucket: int) -> Any:
    shape = list(np.shape(leaf))
    shape[axis] = bucket
    if isinstance(leaf, np.ndarray):
        return np.zeros(shape, leaf.dtype)
    sharding = getattr(leaf, "sharding", None)
    if isinstance(leaf, jax.Array) and not leaf.committed:
        sharding = None
    return jax.ShapeDtypeStruct(tuple(shape), leaf.dtype, weak_type=bool(getattr(leaf, "weak_type", False)),
                                sharding=sharding)


class Ahead:
    """A bucketed function's arguments and results ahead of time (see the module docstring)."""

    # Set by BucketSpec: what these methods read.
    function: str
    mask: Any
    positions: dict
    params: list
    method: bool
    _parts: Callable
    _bucket: Callable
    _local: Any

    def ahead(self, args: tuple, kwargs: dict) -> tuple[tuple, dict, int, int]:
        """The bucket program's arguments (abstract, see the module docstring), the rows
        and the bucket (equal when there is nothing to pad)."""
        parts, rows = self._parts(args, kwargs)
        if rows is None:
            return args, kwargs, 0, 0
        bucket = self._bucket(rows, parts, (args, kwargs))
        args, kwargs = list(args), dict(kwargs)
        for name, positional, leaves, treedef, axes in parts:
            new = [leaf if axis is None else _abstract(leaf, axis, bucket) for leaf, axis in zip(leaves, axes)]
            value = treedef.unflatten(new)
            if positional:
                args[self.positions[name]] = value
            else:
                kwargs[name] = value
        if self.mask:  # where a call's path puts it (sf.jit's binds its parameters by position)
            valid = jax.ShapeDtypeStruct((bucket,), np.dtype(bool))
            if not self.method and "valid" in self.params and self.params.index("valid") == len(args):
                args.append(valid)
            else:
                kwargs["valid"] = valid
        return tuple(args), kwargs, rows, bucket

    def run_ahead(self, what: str, args: tuple, kwargs: dict, run: Callable[[tuple, dict], Any]) -> Any:
        """``run`` (the engine's ``lower``/``trace``/``eval_shape``/``precompile``) on the
        bucket program's arguments, as a call runs: where the trace says the bucket may
        not serve (``Retry``: its size fails, a guard, a shard_map's device count the rule
        of sizes learned), once more with the bucket a call would pick now."""
        tried: set = set()
        while True:
            padded, padded_kwargs, rows, bucket = self.ahead(args, kwargs)
            tried.add(bucket)
            try:
                with self.as_call(rows, bucket):
                    out = run(padded, padded_kwargs)
            except Retry:
                if self.ahead(args, kwargs)[3] in tried:
                    raise
                continue
            return self.shapes(out, rows, bucket, padded, padded_kwargs) if what == "eval_shape" else out

    @contextlib.contextmanager
    def as_call(self, rows: int, bucket: int) -> Iterator[None]:
        """Ahead of time as in a call of ``rows`` rows run in ``bucket``: a program made now
        is recorded with its bucket (``_recorded``), as a call's would be."""
        if not bucket:  # no rows: nothing to record
            yield
            return
        outer = getattr(self._local, "call", None)
        self._local.call = types.SimpleNamespace(rows=rows, bucket=bucket, traced=False, check=False, program=None)
        try:
            yield
        finally:
            self._local.call = outer

    def shapes(self, out: Any, rows: int, bucket: int, args: tuple, kwargs: dict) -> Any:
        """``eval_shape``'s answer for the bucket's program, as a call returns it: the outputs
        that carry the rows (as the program's ``Rows`` says) back at ``rows``."""
        if not isinstance(out, Rows):
            return out
        if bucket == rows:
            return out.value
        leaves, treedef = jax.tree_util.tree_flatten(out.value)
        return treedef.unflatten([x if axis is None else jax.ShapeDtypeStruct(
            tuple(rows if d == axis else s for d, s in enumerate(x.shape)), x.dtype,
            weak_type=x.weak_type, sharding=getattr(x, "sharding", None)) for x, axis in zip(leaves, out.axes)])
