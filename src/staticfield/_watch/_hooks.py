"""The hooks that feed ``sf.watch``, installed once for all running watchers.

* ``jax.monitoring`` duration listener (public API): trace, lowering and
  backend-compile seconds, recorded by JAX on a miss only.
* ``jax._src.pjit._trace_for_jit``: called only after JAX's caches missed, with
  the user's function, its jit options and the call's arguments.
* ``jax._src.pjit._pjit_call_impl_python``: called only on a C++ cache miss; it
  sees the flat arguments of a function compiled again without a new trace (a
  new sharding).

Each is looked up through ``_core._compat``, which checked its signature at import,
and wrapped under guards, and restored when the last watcher
stops. Every call into a watcher goes through ``_guarded``: whatever fails
there becomes a notice in that watcher's report, never an exception in JAX.
"""

from __future__ import annotations

import functools
from typing import Any, Callable

import jax

from .._core import _compat
from .._core._errors import Retrace
from .._store import LOAD_LISTENERS, MISS_LISTENERS

_ACTIVE: list[Any] = []  # the running watchers
_ORIGINAL: dict[str, Any] = {}


def activate(w: Any) -> bool:
    """Start feeding ``w``; whether the trace hook (and so explanations) is in place."""
    if w not in _ACTIVE:
        if not _ACTIVE:
            jax.monitoring.register_event_duration_secs_listener(_on_duration)
            LOAD_LISTENERS.append(_on_load)
            MISS_LISTENERS.append(_on_miss)
            _install_trace_hook()
        _ACTIVE.append(w)
    return "trace" in _ORIGINAL


def deactivate(w: Any) -> None:
    """Stop feeding ``w``; the last one out removes the hooks."""
    if w not in _ACTIVE:
        return
    _ACTIVE.remove(w)
    if not _ACTIVE:
        try:
            jax.monitoring.unregister_event_duration_listener(_on_duration)
        except Exception:  # an older JAX without unregister: the listener stays, idle
            pass
        LOAD_LISTENERS.remove(_on_load)
        MISS_LISTENERS.remove(_on_miss)
        _remove_trace_hook()


def _guarded(w: Any, where: str, method: Callable, *args: Any) -> None:
    """Call into a watcher from JAX's code; whatever fails there stays there."""
    try:
        method(*args)
    except Exception as e:
        try:
            w._failed(where, e)
        except Exception:
            pass


def _on_duration(event: str, duration_secs: float, **kwargs: str | int) -> None:
    for w in list(_ACTIVE):
        _guarded(w, "its jax.monitoring listener", w._duration, event, duration_secs,
                 str(kwargs.get("fun_name", "")))


def _on_miss(fn: Callable, why: str) -> None:
    """The program store had no program for the trace in progress, and said why."""
    for w in list(_ACTIVE):
        _guarded(w, "its program store listener", w._store_missed, why)


def _on_load(fn: Callable, seconds: float, traced: bool) -> None:
    """A program loaded from the program store: no compile (``traced``: after its trace)."""
    for w in list(_ACTIVE):
        _guarded(w, "its program store listener", w._loaded, fn, seconds, traced)


def _install_trace_hook() -> None:
    original = _compat.get("trace_for_jit")
    clean = _compat.get("trace_state_clean")
    if original is None or clean is None:
        return  # _compat.unavailable("watch") says why, in the watcher's notice
    pjit = _compat.module_of("trace_for_jit")
    _install_call_hook(pjit, clean)
    register = _compat.get("tb_register_exclusion")
    if register is not None:  # the hooks' frames drop out of user tracebacks, as JAX's own do
        register(__file__)
    names = _compat.PRIVATE_BY_KEY["trace_for_jit"].params or ()

    @functools.wraps(original)
    def _trace_for_jit(*args: Any, **kwargs: Any) -> Any:
        # A trace inside another is seen only where JAX's trace context reads clean: a
        # primitive's rule runs with the current trace taken away (core.Primitive.bind), so
        # an eval_shape there looks like a trace of its own; the watcher knows it is not.
        watchers = list(_ACTIVE) if _ACTIVE and clean() else []
        if watchers:
            given = {**dict(zip(names, args)), **kwargs}  # _compat checked these names
            call = [given.get(name) for name in ("fun", "ji", "dbg", "args", "kwargs")]
            for w in watchers:
                _guarded(w, "its trace hook", w._traced, *call)
        try:
            return original(*args, **kwargs)
        except BaseException as exc:
            retrace = isinstance(exc, Retrace)  # staticfield traces again: not a failure
            for w in list(_ACTIVE):
                _guarded(w, "its trace hook", w._trace_raised, retrace)
            raise
        finally:
            for w in watchers:
                _guarded(w, "its trace hook", w._trace_over)

    _ORIGINAL["trace"] = (pjit, original)
    pjit._trace_for_jit = _trace_for_jit


def _install_call_hook(pjit: Any, clean: Callable[[], bool]) -> None:
    """Wrap _pjit_call_impl_python, which JAX reaches on a C++ cache miss only."""
    original = _compat.get("call_impl_python")
    if original is None:
        return

    @functools.wraps(original)
    def _pjit_call_impl_python(*args: Any, **params: Any) -> Any:
        watchers = list(_ACTIVE)
        if watchers and clean():
            for w in watchers:
                _guarded(w, "its call hook", w._calling, args, params)
        try:
            return original(*args, **params)
        finally:
            for w in watchers:
                _guarded(w, "its call hook", setattr, w._local, "pending", None)

    _ORIGINAL["call"] = (pjit, original)
    pjit._pjit_call_impl_python = _pjit_call_impl_python


def _remove_trace_hook() -> None:
    if "trace" in _ORIGINAL:
        module, original = _ORIGINAL.pop("trace")
        module._trace_for_jit = original
    if "call" in _ORIGINAL:
        module, original = _ORIGINAL.pop("call")
        module._pjit_call_impl_python = original
