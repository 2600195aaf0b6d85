"""The hook on JAX's one compile entry point, ``jax._src.compiler.compile_or_get_cached``.

Every XLA compile of any JAX function goes through it (a ``jax.jit`` miss, a
``.compile()``, an eager operation's program), after the trace and the lowering and
before XLA runs. It is wrapped while at least one ``no_compiles`` block is open in any
thread (a thread outside a block passes through after reading a thread-local counter),
and put back when the last one closes. In a refusing thread it lets JAX look in its
persistent compilation cache first: a hit compiles nothing and runs; the refusal comes
from the wrapper on ``backend_compile_and_load``, which every XLA compile inside it calls
(in both JAX versions we support), before XLA runs. Where this JAX lacks that function,
the refusal comes at the entry, persistent-cache hits included. Its watcher (a private ``sf.watch``, running
as long) hears each trace, so a refusal names the user's function and its call site,
and what changed against the closest compile it saw while a block was open, or else
against the closest one ``_history`` kept from before the block.
"""

from __future__ import annotations

import functools
import re
import threading
import warnings
from typing import Any

from .._core import _compat
from .._core._errors import RecompileError, StaticFieldWarning
from .._watch import _site
from .._watch._watcher import watch
from . import _history, _message, _state

_installed: dict[str, Any] = {}
_lock = threading.Lock()
_blocks = [0]  # no_compiles blocks open now, in all threads
_local = threading.local()  # .pending: the compile_or_get_cached call in progress, while refusing


def acquire() -> None:
    """A block opens: the first one wraps JAX's compile entry point and starts the watcher
    (where this JAX lacks the entry point, ``sf`` functions are still refused by their own
    trackers, and one warning says so)."""
    with _lock:
        _blocks[0] += 1
        if _blocks[0] > 1:
            return
        watcher = watch()
        watcher.start()
        _installed["watcher"] = watcher
        original = _compat.get("compile_or_get_cached")
        if original is None:
            if "warned" not in _installed:
                _installed["warned"] = True
                warnings.warn(_compat.unavailable("no_compiles"), StaticFieldWarning, stacklevel=4)
            return
        module = _compat.module_of("compile_or_get_cached")
        compile_now = _compat.get("backend_compile_and_load")
        if compile_now is None and "warned_cache" not in _installed:
            _installed["warned_cache"] = True
            warnings.warn(_compat.unavailable("no_compiles_cache"), StaticFieldWarning, stacklevel=4)

        @functools.wraps(original)
        def compile_or_get_cached(*args: Any, **kwargs: Any) -> Any:
            if not _state.refusing():
                return original(*args, **kwargs)
            if compile_now is None:  # cannot tell a persistent-cache hit from a compile
                raise RecompileError(_explain(args, kwargs))
            outer, _local.pending = getattr(_local, "pending", None), (args, kwargs)
            try:  # a hit in JAX's persistent cache returns; a compile reaches the wrapper below
                return original(*args, **kwargs)
            finally:
                _local.pending = outer

        _installed["original"] = (module, original)
        module.compile_or_get_cached = compile_or_get_cached
        if compile_now is not None:
            @functools.wraps(compile_now)
            def backend_compile_and_load(*args: Any, **kwargs: Any) -> Any:
                if _state.refusing():
                    pending = getattr(_local, "pending", None)
                    raise RecompileError(_explain(*pending) if pending is not None else
                                         _explain((args[0], args[1] if len(args) > 1 else kwargs.get("module")), {}))
                return compile_now(*args, **kwargs)

            _installed["compile_now"] = compile_now
            module.backend_compile_and_load = backend_compile_and_load


def release() -> None:
    """A block closes: the last one puts JAX's entry point back and stops the watcher, so
    nothing of the stance runs while no block is open."""
    with _lock:
        _blocks[0] -= 1
        if _blocks[0] > 0:
            return
        if "original" in _installed:
            module, original = _installed.pop("original")
            module.compile_or_get_cached = original
            if "compile_now" in _installed:
                module.backend_compile_and_load = _installed.pop("compile_now")
        watcher = _installed.pop("watcher", None)
        if watcher is not None:
            watcher.stop()


def _explain(args: tuple, kwargs: dict) -> str:
    """The refusal's text, from the watcher's trace in progress in this thread (when it is
    the program being compiled), else from the lowered module's name."""
    module = _module_name(args[1] if len(args) > 1 else kwargs.get("computation"))
    watcher: watch | None = _installed.get("watcher")
    try:
        found = watcher.trace_in_progress(module) if watcher is not None else None
    except Exception:  # an explanation must never hide the refusal
        found = None
    if found is not None and watcher is not None:
        name, location, changes, eager = found
        if changes is None and not eager:  # first seen by the block: a compile before it?
            changes = _earlier(watcher, module)
        watcher.forget_trace()  # refused: nothing compiled
        return _message.refused(name, location, changes, eager=eager)
    name = re.sub(r"^(p?jit_)+", "", module) or "a JAX program"
    return _message.refused(name, _site.call_site(), None, eager=_site.eager())


def _earlier(watcher: watch, module: str) -> list | None:
    """The changes against the closest compile made before the block opened (``_history``)."""
    try:
        current = watcher.description_in_progress(module)
        return _history.changes(*current) if current is not None else None
    except Exception:  # an explanation must never hide the refusal
        return None


def _module_name(computation: Any) -> str:
    try:
        return str(computation.operation.attributes["sym_name"].value)
    except Exception:
        return ""
