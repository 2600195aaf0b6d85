"""The program store: compiled programs kept across processes (``sf.set_program_store``).

Owns the store's directory and its entry files (``_entries``: format, atomic writes,
listing, clearing), what an entry is keyed by (``_key``: environment, function,
statics, avals; ``_sources``: the code that ran while tracing), and ``StoredJit``
(``_program``): a static variant's ``jax.jit`` that loads a stored program instead
of tracing, or writes the program it compiled.

Imports: ``_core`` and ``_explain`` only; ``_jit`` wraps a variant's ``jax.jit`` in
``StoredJit`` on a miss while a store is set, and ``_watch`` hears of loads.
"""

from __future__ import annotations

import os
import threading
from typing import Any, Callable

from ._entries import check_directory
from ._program import LOAD_LISTENERS as LOAD_LISTENERS
from ._program import StoredJit as StoredJit

ENV = "STATICFIELD_PROGRAM_STORE"
_UNSET: Any = object()
_lock = threading.Lock()
_state: dict[str, Any] = {"set": _UNSET, "env": None, "env_dir": None}


def set_program_store(path: str | os.PathLike | None) -> None:
    """Keep compiled programs in the directory ``path`` across processes (``None``: off).

    While a store is set, a static variant first seen by ``sf.jit`` or
    ``sf.jit_method`` loads each program (per argument shapes, dtypes and shardings)
    from the store when an entry with the same key is there, with no trace and no
    compile; otherwise it traces and compiles as usual and writes the program. The
    key holds the JAX and Python setup, the function, its static values, the
    arguments' avals, and a hash of every source file whose code ran while tracing.
    A store holds executable programs: trust it as you trust your code. A directory
    that other users may write to is refused with ``PermissionError``.
    Overrides ``STATICFIELD_PROGRAM_STORE``.
    """
    with _lock:
        _state["set"] = None if path is None else check_directory(path)


def directory() -> str | None:
    """The store in use: ``set_program_store``'s, else ``STATICFIELD_PROGRAM_STORE``'s."""
    chosen = _state["set"]
    if chosen is not _UNSET:
        return chosen
    env = os.environ.get(ENV) or None
    if env != _state["env"]:
        with _lock:
            _state["env_dir"] = None if env is None else check_directory(env)
            _state["env"] = env
    return _state["env_dir"]


def stored(jitted: Any, fn: Callable, vkey: Any, traces: Callable[[], int], loaded: Callable[[], None]) -> Any:
    """``jitted`` as a ``StoredJit`` when a store is set, else ``jitted`` itself."""
    if directory() is None:
        return jitted
    return StoredJit(jitted, fn, vkey, directory, traces, loaded)
