"""Work of staticfield's own inside a user's call: programs that are no compile of the user's.

The buckets' checking mode (``STATICFIELD_CHECK_BUCKETS=1``) runs, beside a bucketed call,
the unpadded reference and both sides' gradients: staticfield's own check, which compiles
programs of its own (under an eager ``jax.grad`` each step traces the call again, and the
check's programs with it). Inside ``own()`` those compiles are not the user's:
``sf.no_compiles()`` lets them compile (its hook asks ``active()``), as it lets the
padding programs run, and they count in no function's ``compile_count``.

Imports: the standard library only.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Iterator

_local = threading.local()


def active() -> bool:
    """Whether this thread is doing staticfield's own work now (``own()``)."""
    return getattr(_local, "depth", 0) > 0


@contextlib.contextmanager
def own() -> Iterator[None]:
    """A block of staticfield's own work (see the module docstring); nests."""
    _local.depth = getattr(_local, "depth", 0) + 1
    try:
        yield
    finally:
        _local.depth -= 1
