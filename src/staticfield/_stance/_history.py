"""The compiles of plain JAX functions made before a ``no_compiles`` block opened.

A refusal explains a compile "against the closest earlier compile of that function in this
process"; the stance's watcher starts with the block, so a function compiled before it
(a plain ``jax.jit``, equinox, flax) would otherwise always read "first compile". One
``jax.monitoring`` listener (JAX's public API, called once per trace of a jitted call,
never on a cache hit) describes each top-level trace, as ``sf.watch`` does, and keeps the
latest ``PER_FUNCTION`` descriptions of the latest ``FUNCTIONS`` functions: no arrays,
only paths, shapes, dtypes, shardings and static values. Nothing of JAX is wrapped.
``sf`` functions are left out (their own trackers explain them), and so are eager
operations and traces made in a refusing thread (inside a block every compile is refused).
"""

from __future__ import annotations

import collections
import sys
import threading
from typing import Any

import jax

from .._core import _compat
from .._explain._diff import Change
from .._watch import _describe, _diff
from .._watch._site import identify, unwrap_library
from .._watch._watcher import TRACE_EVENT
from . import _state

FUNCTIONS = 256
PER_FUNCTION = 8
_DEPTH = 12  # frames between the listener and JAX's _trace_for_jit, with room to spare

_lock = threading.Lock()
_seen: "collections.OrderedDict[tuple[str, str], collections.deque]" = collections.OrderedDict()
_installed: list[bool] = []


def install() -> None:
    """Start listening (once per process; at import, so compiles before any block count)."""
    if _installed or _compat.get("trace_for_jit") is None:
        return
    _installed.append(True)
    jax.monitoring.register_event_duration_secs_listener(_on_duration)


def _on_duration(event: str, duration_secs: float, **kwargs: Any) -> None:
    if event != TRACE_EVENT or _state.refusing():
        return
    try:
        _remember(sys._getframe(1))
    except Exception:  # remembering must never break a compile
        pass


def _remember(frame: Any) -> None:
    found = _compat.jit_trace_locals(frame, _DEPTH)
    if found is None:
        return
    fun = found.get("fun")
    if getattr(fun, "__sf_user_call__", None) is not None:
        return
    user_fun, args, kwargs, static_leaf, static_argnums, static_argnames = unwrap_library(
        fun, found.get("ji"), tuple(found.get("args") or ()), dict(found.get("kwargs") or {}))
    _, name, location, eager = identify(user_fun, found.get("dbg"))
    if eager:
        return
    description = _describe.describe(user_fun, args, kwargs, static_argnums, static_argnames, static_leaf)
    with _lock:
        kept = _seen.get((name, location))
        if kept is None:
            kept = _seen[(name, location)] = collections.deque(maxlen=PER_FUNCTION)
            while len(_seen) > FUNCTIONS:
                _seen.popitem(last=False)
        else:
            _seen.move_to_end((name, location))
        kept.append(description)


def changes(name: str, location: str, description: dict) -> list[Change] | None:
    """What changed in ``description`` against the closest earlier compile of the function
    at ``location`` (``[]``: nothing); ``None`` when it was never compiled before."""
    with _lock:
        earlier = list(_seen.get((name, location), ()))
    if not earlier:
        return None
    return _diff.closest(earlier, description)[1]
