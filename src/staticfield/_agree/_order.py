"""Each function's cross-process programs in the order this process first runs them.

Processes of an SPMD job run their cross-process programs in the same order, so the k-th
program each process first runs of a function must be the same one: this module gives
each new program (by its digest) its index k, and remembers the programs prepared ahead
of their first run (``sf.warmup``, ``precompile``: ``ahead``), which take their index
when they first run, not when prepared, since processes may prepare in other orders.

Its state, per function name, is owned here: only these functions write it, under one
lock.

=================  ==============================  ==================================
entry              written by                      cleared by
=================  ==============================  ==================================
``_next[f]``       ``claim`` (a new digest takes   never: an index is used once, by
                   the next index)                 a program that agreed or not
``_claimed[f]``    ``claim`` (digest -> index)     ``failed`` (a program that did not
                                                   agree claims a new index next time)
``_agreed[f]``     ``agreed`` (digests)            never: an agreed program is never
                                                   checked again (a retrace, a reload)
``_prepared[f]``   ``prepare`` (digests)           ``agreed``
=================  ==============================  ==================================
"""

from __future__ import annotations

import contextlib
import threading
from typing import Iterator

_lock = threading.Lock()
_next: dict[str, int] = {}
_claimed: dict[str, dict[str, int]] = {}
_agreed: dict[str, set[str]] = {}
_prepared: dict[str, set[str]] = {}
_here = threading.local()  # .ahead: this thread prepares programs ahead of their first run


@contextlib.contextmanager
def ahead() -> Iterator[None]:
    """While open, the programs this thread makes are prepared ahead of their first run
    (``sf.warmup``, ``precompile``): they agree when they first run."""
    outer = getattr(_here, "ahead", False)
    _here.ahead = True
    try:
        yield
    finally:
        _here.ahead = outer


def preparing() -> bool:
    """Whether this thread prepares programs ahead of their first run (``ahead``)."""
    return bool(getattr(_here, "ahead", False))


def claim(function: str, digest: str) -> int | None:
    """The index of the program ``digest`` among the programs of ``function`` this process
    runs (a new program takes the next one); ``None`` when it agreed before."""
    with _lock:
        if digest in _agreed.get(function, ()):
            return None
        claimed = _claimed.setdefault(function, {})
        if digest not in claimed:
            claimed[digest] = _next.get(function, 0)
            _next[function] = claimed[digest] + 1
        return claimed[digest]


def agreed(function: str, digest: str) -> None:
    """Every process runs the program ``digest`` of ``function``."""
    with _lock:
        _agreed.setdefault(function, set()).add(digest)
        _prepared.get(function, set()).discard(digest)


def failed(function: str, digest: str) -> None:
    """The program ``digest`` did not agree (and does not run): its index stays used."""
    with _lock:
        _claimed.get(function, {}).pop(digest, None)


def prepare(function: str, digest: str) -> None:
    """The program ``digest`` of ``function`` was prepared ahead of its first run."""
    with _lock:
        if digest not in _agreed.get(function, ()):
            _prepared.setdefault(function, set()).add(digest)


def prepared(function: str, digest: str | None = None) -> bool:
    """Whether a program of ``function`` (``digest``'s, when given) was prepared ahead and
    has not agreed yet: a dict lookup, for every miss of a variant."""
    found = _prepared.get(function)
    if not found:
        return False
    return digest is None or digest in found
