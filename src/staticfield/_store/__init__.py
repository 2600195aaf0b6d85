"""The program store: compiled programs kept across processes (``sf.set_program_store``).

Owns the store's directory and its entry files (``_entries``: format, atomic writes,
ownership and permission checks, listing, clearing), what an entry is keyed by
(``_digest``: what a trace produced, ``_prng`` for random keys; ``_key``: options,
trace context, machine, function and statics; ``_sources``: the user's code loaded at
trace time), serialized programs (``_executable``), and ``StoredJit`` (``_program``): a
static variant's ``jax.jit`` that loads a stored program instead of lowering and
compiling, or writes the program it compiled; it finds the program by its trace
(``_by_trace``, ``trust="trace"``) or without one (``_by_source``, ``trust="source"``).
Beside them: why a program was not found (``_misses``), what the store says and warns
(``_saying``), the records ``sf.warmup`` reads (``_records``), the listing command
(``_cli``), and what the store gives the rooms above it (``_hooks``: the engine's
``Hooks``, ``sf.watch``'s listeners, ``sf.warmup``'s counts).

Imports: ``_core`` and ``_explain`` only; ``_jit`` wraps a variant's ``jax.jit`` in
``StoredJit`` on a miss while a store is set, and ``_watch`` hears of loads.
"""

from __future__ import annotations

import os
import threading
import warnings
from typing import Any, Callable

from .._core import _compat
from .._core._errors import StaticFieldWarning
from ._entries import check_directory
from ._hooks import LOAD_LISTENERS as LOAD_LISTENERS
from ._hooks import MISS_LISTENERS as MISS_LISTENERS
from ._hooks import Hooks as Hooks
from ._program import StoredJit as StoredJit

ENV = "STATICFIELD_PROGRAM_STORE"
TRUST_ENV = "STATICFIELD_PROGRAM_STORE_TRUST"
TRUSTS = ("trace", "source")
_UNSET: Any = object()
_lock = threading.Lock()
# "set": set_program_store's (directory, trust) or None; "env": the variables last read,
# and "env_store" what they gave (checked once per value, never on every call).
_state: dict[str, Any] = {"set": _UNSET, "env": None, "env_store": None}


def set_program_store(path: str | os.PathLike | None, trust: str | None = None) -> None:
    """Keep compiled programs in the directory ``path`` across processes (``None``: off).

    ``trust="trace"`` (the default) traces every new call signature as usual and loads
    a stored program only for the same traced program (its jaxpr, constants, jit
    options, JAX settings and devices): the miss skips lowering and the XLA compile,
    and a result never changes. ``trust="source"`` finds the program without tracing,
    from the function, its closure values, statics, argument shapes and the source of
    the user's code: use it only for code that is a pure function of those (a value
    read from the environment or a file at trace time is not in its key).

    The directory is made with mode 0700, entries with 0600. A directory owned by
    another user, or writable by group or others, is refused with ``PermissionError``;
    a path that is not a usable directory with an ``OSError``. Overrides
    ``STATICFIELD_PROGRAM_STORE`` and ``STATICFIELD_PROGRAM_STORE_TRUST``.
    """
    if trust is None:
        trust = _env_trust(warn=False) or "trace"
    _check_trust(trust)
    if path is not None and _compat.unavailable("store"):
        raise RuntimeError(_compat.unavailable("store"))
    store = None if path is None else (check_directory(path), trust)
    with _lock:
        _state["set"] = store


def _check_trust(trust: Any) -> None:
    if trust not in TRUSTS:
        raise ValueError(f"sf.set_program_store: trust must be \"trace\" (the default: sound for any "
                         f"code) or \"source\" (no trace on a restart), got {trust!r}.")


def _env_trust(warn: bool) -> str | None:
    raw = os.environ.get(TRUST_ENV, "").strip()
    if not raw:
        return None
    if raw in TRUSTS:
        return raw
    if warn:
        warnings.warn(f"staticfield: {TRUST_ENV}={raw!r} is not \"trace\" or \"source\"; the "
                      "program store uses trust=\"trace\".", StaticFieldWarning, stacklevel=4)
    return None


def current() -> tuple[str, str] | None:
    """The store in use, ``(directory, trust)``: ``set_program_store``'s, else the
    environment variables' (a bad value there is one warning, and the store stays off)."""
    chosen = _state["set"]
    if chosen is not _UNSET:
        return chosen
    env = (os.environ.get(ENV) or None, os.environ.get(TRUST_ENV))
    if env != _state["env"]:
        with _lock:
            _state["env_store"] = _from_environment(env[0])
            _state["env"] = env
    return _state["env_store"]


def _from_environment(path: str | None) -> tuple[str, str] | None:
    if path is None:
        return None
    problem = _compat.unavailable("store")
    if problem:
        warnings.warn(problem, StaticFieldWarning, stacklevel=5)
        return None
    try:
        return check_directory(path, who=ENV), _env_trust(warn=True) or "trace"
    except OSError as exc:
        warnings.warn(f"staticfield: {ENV}={path!r} cannot be used, so the program store is off: "
                      f"{exc}", StaticFieldWarning, stacklevel=5)
        return None


def directory() -> str | None:
    """The store directory in use, or ``None``."""
    store = current()
    return None if store is None else store[0]


def stored(jitted: Any, fn: Callable, vkey: Any, options: dict[str, Any], hooks: Hooks) -> Any:
    """``jitted`` as a ``StoredJit`` when a store is set, else ``jitted`` itself."""
    if current() is None:
        return jitted
    return StoredJit(jitted, fn, vkey, current, options, hooks)
