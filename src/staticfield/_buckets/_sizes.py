"""Bucket sizes: which padded size a row count goes to.

``"pow2"`` (1, 2, 4, ...), a sorted list of sizes, or ``"auto"``: the exact row count
until the row count first changes, then pow2 (the first size keeps its exact program)
(torch.compile's automatic dynamic shapes, in buckets); ``sf.warmup`` adds the exact sizes
an earlier process recorded (``keep_exact``). A pow2 bucket wastes less than half of its
rows: ``n`` rows pad to fewer than ``2n``. Where a ``shard_map`` in the function splits the
rows over ``m`` devices (``require``), every bucket is a multiple of ``m`` (pow2: rounded
up; a list: its first such size, or an error naming the fix).
"""

from __future__ import annotations

import bisect
import threading
from typing import Any, Callable

import numpy as np

_SIZES = (
    "{function}: bucket_sizes must be \"pow2\", \"auto\" or a sorted list of positive ints, "
    "got {got!r}. Pass e.g. bucket_sizes=[8, 32, 128] or bucket_sizes=\"pow2\"."
)
_SPLIT = (
    "{function}: a shard_map in it splits the rows of {names} over {m} devices, so each bucket must be a "
    "multiple of {m}, and no size of bucket_sizes={sizes!r} at or above {rows} rows is one. Add a multiple "
    "of {m} (e.g. {suggest}) to bucket_sizes."
)
TOO_MANY = (
    "{function}: the bucketed argument {names} has {rows} rows, more than the largest bucket "
    "({largest}) of bucket_sizes={sizes!r}. Add a larger size to bucket_sizes, or split the "
    "batch; the function keeps working for batches that fit."
)


class Sizes:
    """The rule for one function; ``choose(n)`` gives the bucket for ``n`` rows."""

    def __init__(self, function: str, sizes: Any) -> None:
        self.function = function
        self.spec = sizes
        self.auto = sizes == "auto"
        self.pow2 = sizes in ("pow2", "auto")
        self._exact: set[int] | None = None  # "auto": the exact sizes (the first seen, and warm-up's)
        self.multiple = 1  # a shard_map in the function splits the rows over this many devices
        self._lock = threading.Lock()
        if not self.pow2:
            if isinstance(sizes, (str, bytes)) or not hasattr(sizes, "__iter__"):
                raise TypeError(_SIZES.format(function=function, got=sizes))
            listed = list(sizes)
            if not listed or any(not isinstance(s, int) or isinstance(s, bool) or s < 1 for s in listed) \
                    or listed != sorted(set(listed)):
                raise TypeError(_SIZES.format(function=function, got=sizes))
            self.listed = listed

    def choose(self, n: int, names: Callable[[], str]) -> int:
        """The bucket for ``n`` rows; ``names()`` names the bucketed arguments in an error."""
        if self.auto:
            with self._lock:
                if self._exact is None:
                    self._exact = {n}
            if n in self._exact and n % self.multiple == 0:  # the first size keeps its exact program
                return n
        m = self.multiple
        if self.pow2:
            bucket = 1 if n <= 1 else 1 << (n - 1).bit_length()
            return bucket if bucket % m == 0 else -(-bucket // m) * m
        i = bisect.bisect_left(self.listed, n)
        if i == len(self.listed):
            raise ValueError(TOO_MANY.format(function=self.function, names=names(), rows=n,
                                             largest=self.listed[-1], sizes=self.spec))
        if m > 1:
            fits = [s for s in self.listed[i:] if s % m == 0]
            if not fits:
                raise ValueError(_SPLIT.format(function=self.function, names=names(), m=m, sizes=self.spec,
                                               rows=n, suggest=-(-n // m) * m))
            return fits[0]
        return self.listed[i]

    def require(self, m: int) -> bool:
        """Buckets from now on are multiples of ``m`` too (a ``shard_map`` splits the rows over
        ``m`` devices); whether that changed the rule."""
        with self._lock:
            new = int(np.lcm(self.multiple, m))
            changed, self.multiple = new != self.multiple, new
        return changed

    def exact(self, n: int) -> bool:
        """``"auto"``: whether ``n`` rows run exactly (unpadded)."""
        return self.auto and self._exact is not None and n in self._exact

    def keep_exact(self, n: int) -> None:
        """``"auto"``: run ``n`` rows exactly from now on, as the process that recorded its
        program did (``sf.warmup``). This process then goes on where that one left off: a
        first size of its own that was not recorded gets a pow2 bucket."""
        with self._lock:
            if self._exact is None:
                self._exact = set()
            self._exact.add(n)
