"""The JAX settings staticfield lowers its programs under: one program on every process.

In a job of several processes (``jax.process_count() > 1``) every program staticfield
lowers (on a miss, ahead of time, for the program store, in ``sf.warmup``) is lowered
without source locations: JAX's ``jax_traceback_in_locations_limit`` is 0 for this
thread during that lowering only, and the user's global setting is left alone.

Why: since jax 0.12.1, XLA's CPU collectives meet only between processes that run the
very same program, its location table included. A program's locations are the Python
frames that traced it, the caller's line too, so the same function is another program
when a process reaches it from another line, loads it from the program store (whose
serialization reorders the table), or loads another function's identical program by its
trace. Each of those waited forever in the program's first collective. Without locations
the program is the same on every process however it was reached; op names (``jit(f)/mul``)
stay, so profiles still name the function. A one-process program keeps its locations.

``alike(fn)`` wraps a function that may lower a program (a variant's miss handler, an
ahead-of-time call); ``settings()`` is the context itself. The program store keys a
program by ``jax.process_count()`` already, so an entry written with locations is never
loaded into a job of several processes lowered without them (its key carries
``LOCATIONS``).

Imports: JAX and ``_compat``.
"""

from __future__ import annotations

import contextlib
import functools
from typing import Any, Callable, ContextManager

import jax

from . import _compat

# What the store's key says of the locations in the programs of a job of several processes.
LOCATIONS = "none in a job of several processes"


def settings() -> ContextManager[Any]:
    """The context to lower a program under (see the module docstring)."""
    limit = _compat.get("locations_limit")
    if limit is None or jax.process_count() == 1:
        return contextlib.nullcontext()
    return limit(0)  # type: ignore[no-any-return]


def alike(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn``, run under ``settings()``: what it lowers is the same program on every process."""

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        with settings():
            return fn(*args, **kwargs)

    return call
