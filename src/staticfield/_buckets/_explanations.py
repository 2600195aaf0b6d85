"""How a bucketed function explains its programs: a shape change on the row axis as a
``"bucket"`` change (``x.shape[0]: 37 → bucket 64 (was bucket 32)``, ``exact 37`` for a
program of one row count), and the near miss (a side argument kept at the real row
count, which compiles once per count). ``Explanations`` is a base of
``_front.BucketSpec``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from .._explain._diff import Change, Recompile
from ._report import _once


class Explanations:
    """The ``"bucket"`` explanations of a bucketed function (see the module docstring)."""

    # Set by BucketSpec: what these methods read.
    function: str
    axes: dict
    sizes: Any
    _local: Any
    _exact_sizes: set

    def explain(self, changes: list[Change]) -> list[Change]:
        """Shape changes of the bucketed arguments on their row axis, as ``"bucket"`` changes;
        a change on another axis, in the shapes the user passed (the row axis as ``rows``)."""
        state = getattr(self._local, "call", None)
        out: list[Change] = []
        done: set[str] = set()
        for change in changes:
            root = change.path.split(".", 1)[0].split("[", 1)[0]
            if change.kind == "shape" and root not in self.axes and state is not None:
                change = self._near_miss(change, root, state)
            if change.kind != "shape" or root not in self.axes or state is None:
                out.append(change)
                continue
            old, new = _dims(change.old), _dims(change.new)
            axis = self.axes[root]
            if old is None or new is None or len(old) != len(new) or not -len(old) <= axis < len(old):
                out.append(change)
                continue
            k = axis % len(old)
            if [d for i, d in enumerate(old) if i != k] != [d for i, d in enumerate(new) if i != k]:
                hint = (f"buckets= pads axis {k} of `{root}` only; every new size of another axis "
                        "compiles once")
                out.append(dataclasses.replace(change, old=_rows_text(change.old, k), new=_rows_text(change.new, k),
                                               hint=hint))
                continue
            if root not in done:
                done.add(root)
                path = f"{change.path}.shape[{k}]" if change.path == root else f"{root}.*.shape[{k}]"
                why = getattr(state, "exact_why", None) or getattr(self, "exact_why", None)
                hint = (f"the program for a number of rows is not the one analysed for any ({why}); "
                        "calls with these static values and other shapes run at exact sizes"
                        if why and state.rows == state.bucket else "")
                out.append(Change(path, "bucket", self._size(old[k], None), self._size(new[k], state),
                                  rows=str(state.rows), **({"hint": hint} if hint else {})))
        return out

    def _near_miss(self, change: Change, root: str, state: Any) -> Change:
        """A side argument left out of ``buckets=`` whose axis has the real row count, now and
        at the call that compiled last (``lengths``, ``logits``): it compiles once per count.
        The explanation says how to add it, and a warning says so once."""
        old, new = _dims(change.old), _dims(change.new)
        last = getattr(self, "_last_rows", None)
        if old is None or new is None or len(old) != len(new) or last is None or last == state.rows:
            return change
        axes = [k for k in range(len(new)) if new[k] == state.rows and old[k] == last]
        if len(axes) != 1:
            return change
        k = axes[0]
        names = ", ".join(f"`{n}`" for n in self.axes)
        hint = (f"{change.path}.shape[{k}]: {old[k]} → {new[k]} is the row count of {names}: add "
                f"\"{root}\": {k} to buckets=")
        _once(f"{self.function}: `{root}` has the row count of {names} on axis {k} but is not in buckets=, so it "
              f"compiles once per row count; add \"{root}\": {k} to buckets=")
        return dataclasses.replace(change, hint=hint)

    def _size(self, size: int, state: Any) -> str:
        """A program's size as the explanation says it: ``64``, or ``exact 37`` for a
        program of one row count (0 rows, ``"auto"``'s exact size, a count a guard keeps
        out of its bucket); ``state``: the call being traced (else an earlier program's)."""
        exact = self.exact_program(state.rows, state.bucket) if state is not None else size in self._exact_sizes
        return f"exact {size}" if exact else str(size)

    def exact_program(self, rows: int, bucket: int) -> bool:
        """Whether a call of ``rows`` run in ``bucket`` runs a program of its own count only."""
        state = getattr(self._local, "call", None)
        return rows == bucket and (rows == 0 or self.sizes.exact(rows) or self.sizes.choose(rows, str) != rows
                                   or getattr(self, "exact_why", None) is not None
                                   or getattr(state, "exact_why", None) is not None)

    def annotate(self, event: Recompile) -> Recompile:
        changes = self.explain(event.changes)
        return event if changes == event.changes else dataclasses.replace(event, changes=changes)


def _rows_text(text: str, k: int) -> str:
    """An aval's text with axis ``k`` written ``rows`` (``f32[8,4]`` → ``f32[rows,4]``)."""
    dims = text.rsplit("[", 1)
    if len(dims) != 2:
        return text
    parts = dims[1][:-1].split(",")
    if k < len(parts):
        parts[k] = "rows"
    return f"{dims[0]}[{','.join(parts)}]"


def _dims(text: str) -> list[int] | None:
    """The dimensions in an aval's text (``f32[32,4]`` → ``[32, 4]``)."""
    if not text.endswith("]") or "[" not in text:
        return None
    inner = text.rsplit("[", 1)[1][:-1]
    try:
        return [int(d) for d in inner.split(",")] if inner else []
    except ValueError:
        return None
