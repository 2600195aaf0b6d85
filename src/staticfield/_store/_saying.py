"""What the program store says: a function whose programs it cannot keep, an entry it
ignores, and the names it says them with.

A function the store cannot serve (a Python callback in its program, a value it cannot
write) gets one ``sf.StaticFieldWarning`` per reason and process, located at the user's
call, so that Python's default filters show it once wherever the call is made; the
refusal is also kept in the store (``<digest>.sfref``: the function and why), so that
``python -m staticfield store PATH`` lists it. A damaged or untrusted entry gets one
warning naming it, and is written again.
"""

from __future__ import annotations

import threading
from typing import Any, Callable

from .._core._errors import StaticFieldWarning
from .._core._keys import StaticArgKey, StaticKey
from .._core._traceback import warn_at_call_site
from . import _entries

REFUSED = _entries.REFUSED
_warned: set[tuple[str, str]] = set()
_warned_lock = threading.Lock()


def name(fn: Callable) -> str:
    """A function's qualified name, as messages and the listing write it."""
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', getattr(fn, '__name__', '?'))}"


def display_statics(vkey: Any) -> str:
    """The static values as the listing shows them: ``M(n=3)``, ``k=3``."""
    def show(part: Any) -> str | None:
        if isinstance(part, StaticKey):
            return f"{part.cls.__qualname__}({', '.join(f'{n}={v!r}' for n, v in zip(part.names, part.values))})"
        if isinstance(part, StaticArgKey):
            return repr(part.raw)
        if isinstance(part, tuple) and len(part) == 2 and isinstance(part[1], StaticArgKey):
            return f"{part[0]}={part[1].raw!r}"
        return None

    try:
        parts = vkey if isinstance(vkey, tuple) else (vkey,)
        text = ", ".join(p for p in map(show, parts) if p is not None) or "(none)"
    except Exception:
        text = "?"
    return text if len(text) <= 300 else text[:297] + "..."


def cannot_serve(fn: Callable, why: str, directory: str | None = None) -> None:
    """Say once per process that the store cannot keep ``fn``'s programs, and why; with
    ``directory``, the program is not stored at all: keep the refusal for the listing."""
    function = name(fn)
    with _warned_lock:
        if (function, why) in _warned:
            return
        _warned.add((function, why))
    if directory is not None:
        try:
            record = {"function": function, "why": why}
            _entries.write(_entries.entry_path(directory, _entries.key_digest(record), REFUSED),
                           {"refused": record}, b"")
        except Exception:  # the warning below still says it
            pass
    warn_at_call_site(f"staticfield: the program store cannot keep the programs of {function}: {why}. "
                      "They compile as without a store.", StaticFieldWarning)


def refused(directory: str) -> list[tuple[str, str]]:
    """The refusals kept in the store: (function, why), by function."""
    found = []
    for record in _entries.headers(directory, REFUSED, "refused"):
        try:
            found.append((str(record["function"]), str(record["why"])))
        except (KeyError, TypeError):
            continue
    return sorted(found)


def bad_entry(fn: Callable, path: str, exc: Exception) -> None:
    """One warning for an entry that cannot be used; the program is compiled and written again."""
    why = str(exc) if isinstance(exc, _entries.BadEntry) else f"unreadable ({type(exc).__name__}: {exc})"
    warn_at_call_site(f"staticfield: the program store entry {path} for {name(fn)} is {why}; it is "
                      "ignored, and the program is compiled and written again.", StaticFieldWarning)
