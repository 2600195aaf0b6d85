"""What the program store keeps of a bucketed function beside its programs.

A record keeps the bucket of the call that made the program, and whether ``"auto"`` ran
it at its exact size, so that ``sf.warmup`` in the next process runs that size exactly too
and its calls find the recorded program. A program's ``trust="source"`` key keeps which of
its outputs carry the rows (as the trace that made it found them), so that a program loaded
without a trace is sliced without one; it is written with the program, so it is always
that program's. ``Recorded`` is a base of ``_front.BucketSpec``, kept apart so that
``_front`` holds the call path only.
"""

from __future__ import annotations

import pickle
from typing import Any

from ._sizes import Sizes


class Recorded:
    """A bucketed function's part of its programs' records (see the module docstring)."""

    # Set by BucketSpec: what these methods read.
    sizes: Sizes
    _local: Any
    _learn: Any

    def note(self) -> dict[str, Any] | None:
        """What the record of the program traced now keeps of its bucket (``None`` outside
        a bucketed call, as in ``precompile`` and warm-up)."""
        state = getattr(self._local, "call", None)
        if state is None:
            return None
        return {"bucket": state.bucket, "exact": self.sizes.exact(state.rows) and state.rows == state.bucket}

    def restore(self, note: Any) -> None:
        """Warm-up, before it prepares a recorded program: ``"auto"`` runs its exact size
        exactly again."""
        if isinstance(note, dict) and note.get("exact") and isinstance(note.get("bucket"), int):
            self.sizes.keep_exact(note["bucket"])

    def outputs(self) -> str | None:
        """Which outputs of the program traced last on this thread carry the rows, written by
        value (``None`` when there is none, or it cannot be written)."""
        last = getattr(self._local, "last_out", None)
        self._local.last_out = None
        if last is None:
            return None
        try:
            return pickle.dumps(last, protocol=4).hex()
        except Exception:
            return None

    def learn(self, outputs: Any) -> None:
        """A program loaded without a trace: which of its outputs carry the rows, as its key
        kept them (``outputs()``); without them, the first call traces abstractly instead."""
        if not isinstance(outputs, str):
            return
        try:
            key, axes = pickle.loads(bytes.fromhex(outputs))  # noqa: S301 - trusted store
        except Exception:
            return
        self._learn(key, axes)
