"""What the program store keeps of a bucketed function beside its programs.

A record keeps the bucket of the call that made the program, and whether ``"auto"`` ran it
at its exact size, so that ``sf.warmup`` in the next process runs that size exactly too
and its calls find the recorded program. A program's ``trust="source"`` key keeps what its
trace found about the row count (the guards on it, and whether the bucket serves other
counts), so that a program loaded without a trace serves only the counts it may; it is
written with the program, so it is always that program's. ``Recorded`` is a base of
``_front.BucketSpec``, kept apart so that ``_front`` holds the call path only.
"""

from __future__ import annotations

import json
from typing import Any

from ._sizes import Sizes
from ._symbolic import Guard
from ._trace import Retry


class Recorded:
    """A bucketed function's part of its programs' records (see the module docstring)."""

    # Set by BucketSpec: what these methods read.
    sizes: Sizes
    _local: Any
    _lock: Any
    guards: list
    exact: set
    exact_why: str | None
    _fits: dict
    fits: Any

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
        """What the program traced last on this thread leaves for a load without a trace
        (``trust="source"``): the guards its trace put on the row count and whether its
        bucket serves its own size only, as JSON (``None`` when there is nothing to keep).
        Its outputs' row axes travel in its output tree (``_trace.Rows``)."""
        last = getattr(self._local, "last_verdict", None)
        self._local.last_verdict = None
        if last is None:
            return None
        verdict, fits = last
        return json.dumps({"guards": [[g.text(), g.line] for g in verdict.guards], "fits": bool(fits)})

    def learn(self, outputs: Any) -> None:
        """A program loaded without a trace: what its trace found (``outputs()``) holds here
        too; a call it may not serve (a guard fails for its rows, or its bucket serves its
        own size only) runs at its exact size instead (``Retry``)."""
        try:
            found = json.loads(outputs) if isinstance(outputs, str) else None
        except ValueError:
            found = None
        state = getattr(self._local, "call", None)
        if not isinstance(found, dict):
            if state is not None and state.rows != state.bucket:
                raise Retry()  # an entry that cannot say: the exact program is always right
            return
        with self._lock:
            for text, line in found.get("guards", ()):
                guard = Guard(text, line)
                if guard not in self.guards:
                    self.guards.append(guard)
                    self._fits.clear()
            if not found.get("fits", True) and state is not None:
                self.exact.add(state.bucket)
                self.exact_why = self.exact_why or "a program loaded from the store was not the one analysed"
        if state is not None and state.rows != state.bucket and not self.fits(state.rows, state.bucket):
            raise Retry()
