"""What a bucketed function reports: the checking mode (``STATICFIELD_CHECK_BUCKETS=1``:
the unpadded call, compared) and its explanations (a shape change on the row axis as a
``"bucket"`` change). ``Reports`` is a base of ``_front.BucketSpec``.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import jax
import numpy as np

from .._core import _compat
from .._explain._diff import Change, Recompile
from ._errors import CHECK_FAILED, BucketCheckError, output_name


class Reports:
    """The checking mode and the explanations of a bucketed function."""

    # Set by BucketSpec: what these methods read.
    fn: Callable
    function: str
    axes: dict
    positions: dict
    mask: Any
    _local: Any

    def _check(self, given: tuple, result: Any, rows: int, bucket: int) -> None:
        """``STATICFIELD_CHECK_BUCKETS=1``: run the unpadded call (op by op) and compare."""
        if any(isinstance(x, _compat.Tracer) for x in jax.tree_util.tree_leaves(result)):
            return  # under a transformation: nothing concrete to compare
        args, kwargs = given
        if self.mask:
            kwargs = dict(kwargs, valid=np.ones(rows, bool))
        expected = self.fn(*args, **kwargs)
        got_leaves = jax.tree_util.tree_flatten_with_path(result)[0]
        want_leaves = jax.tree_util.tree_leaves(expected)
        for (path, got), want in zip(got_leaves, want_leaves):
            got, want = np.asarray(got), np.asarray(want)
            if got.shape != want.shape:
                detail = f"shape {got.shape} against {want.shape}"
            elif np.issubdtype(got.dtype, np.inexact):
                if np.allclose(got, want, rtol=1e-5, atol=1e-6, equal_nan=True):
                    continue
                detail = f"largest difference {np.nanmax(np.abs(got - want)):.3g}"
            elif np.array_equal(got, want):
                continue
            else:
                detail = "values differ"
            raise BucketCheckError(CHECK_FAILED.format(function=self.function, output=output_name(path),
                                                       rows=rows, bucket=bucket, detail=detail))

    def explain(self, changes: list[Change]) -> list[Change]:
        """Shape changes of the bucketed arguments on their row axis, as ``"bucket"`` changes."""
        state = getattr(self._local, "call", None)
        out: list[Change] = []
        done: set[str] = set()
        for change in changes:
            root = change.path.split(".", 1)[0].split("[", 1)[0]
            if change.kind == "shape" and root in self.axes and state is not None:
                old, new = _dims(change.old), _dims(change.new)
                axis = self.axes[root]
                if old is not None and new is not None and len(old) == len(new) and -len(old) <= axis < len(old):
                    k = axis % len(old)
                    if [d for i, d in enumerate(old) if i != k] == [d for i, d in enumerate(new) if i != k]:
                        if root not in done:
                            done.add(root)
                            path = f"{change.path}.shape[{k}]" if change.path == root else f"{root}.*.shape[{k}]"
                            out.append(Change(path, "bucket", str(old[k]), str(new[k]),
                                              rows=str(state.rows)))
                        continue
            out.append(change)
        return out

    def annotate(self, event: Recompile) -> Recompile:
        changes = self.explain(event.changes)
        return event if changes == event.changes else dataclasses.replace(event, changes=changes)


    def _unpad(self, args: tuple, kwargs: dict, rows: int) -> tuple:
        """The single-array fast path's arguments with the bucketed one cut back to ``rows``."""
        name = next(iter(self.axes))
        pos = self.positions[name]
        x = np.asarray(args[pos])
        axis = self.axes[name] % x.ndim
        return (*args[:pos], x[(slice(None),) * axis + (slice(0, rows),)], *args[pos + 1:]), kwargs



def _dims(text: str) -> list[int] | None:
    """The dimensions in an aval's text (``f32[32,4]`` → ``[32, 4]``)."""
    if not text.endswith("]") or "[" not in text:
        return None
    inner = text.rsplit("[", 1)[1][:-1]
    try:
        return [int(d) for d in inner.split(",")] if inner else []
    except ValueError:
        return None
