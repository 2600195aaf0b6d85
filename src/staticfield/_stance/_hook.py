"""The hook on JAX's one compile entry point, ``jax._src.compiler.compile_or_get_cached``.

Every XLA compile of any JAX function goes through it (a ``jax.jit`` miss, a
``.compile()``, an eager operation's program), after the trace and the lowering and
before XLA runs. Installed once, at the first ``no_compiles`` block, and left in place:
outside a block it only reads a thread-local counter. Its watcher (a private
``sf.watch`` that stays on from then) hears each trace, so a refusal names the user's
function, its call site, and what changed against the closest compile it saw.
"""

from __future__ import annotations

import functools
import re
import threading
from typing import Any

from .._core import _compat
from .._core._errors import RecompileError
from .._watch import _site
from .._watch._watcher import watch
from . import _message, _state

_installed: dict[str, Any] = {}
_lock = threading.Lock()


def install() -> None:
    """Wrap JAX's compile entry point (once); where this JAX lacks it, ``sf`` functions are
    still refused by their own trackers, and the first block says so once."""
    if _installed:
        return
    with _lock:
        if _installed:
            return
        original = _compat.get("compile_or_get_cached")
        watcher = watch()
        watcher.start()
        _installed["watcher"] = watcher
        if original is None:
            import warnings

            from .._core._errors import StaticFieldWarning

            warnings.warn(_compat.unavailable("no_compiles"), StaticFieldWarning, stacklevel=4)
            _installed["original"] = None
            return
        module = _compat.module_of("compile_or_get_cached")

        @functools.wraps(original)
        def compile_or_get_cached(*args: Any, **kwargs: Any) -> Any:
            if _state.refusing():
                raise RecompileError(_explain(args, kwargs))
            return original(*args, **kwargs)

        _installed["original"] = original
        module.compile_or_get_cached = compile_or_get_cached


def _explain(args: tuple, kwargs: dict) -> str:
    """The refusal's text, from the watcher's trace in progress in this thread (when it is
    the program being compiled), else from the lowered module's name."""
    module = _module_name(args[1] if len(args) > 1 else kwargs.get("computation"))
    watcher: watch = _installed["watcher"]
    try:
        found = watcher.trace_in_progress(module)
    except Exception:  # an explanation must never hide the refusal
        found = None
    if found is not None:
        name, location, changes, eager = found
        watcher.forget_trace()  # refused: nothing compiled
        return _message.refused(name, location, changes, eager=eager)
    name = re.sub(r"^(p?jit_)+", "", module) or "a JAX program"
    return _message.refused(name, _site.call_site(), None, eager=_site.eager())


def _module_name(computation: Any) -> str:
    try:
        return str(computation.operation.attributes["sym_name"].value)
    except Exception:
        return ""
