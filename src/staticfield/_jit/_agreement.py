"""What a new program of an ``sf`` function publishes for the agreement between processes.

The digest is made from the call's own arguments, as JAX received them (arrays, Python
scalars, or the ``ShapeDtypeStruct``s of ``precompile`` and ``sf.warmup``), rebuilt into
the user's arguments by the variant: never from a trace's tracers, whose shardings are
the abstract ones (``P('x', None)`` where the array has ``P('x',)``). So a process that
traces and compiles a program and one that loads it from the store without a trace
(``trust="source"``) describe the same call alike. Under ``deps="read"`` the statics its
trace did not read are left out: processes that differ only there make the same program.
"""

from __future__ import annotations

from typing import Any

import jax

from .._agree import agree, spans_processes
from .._core._compat import traced_call
from .._core._deep import display, paths_of
from .._explain import _describe


def publish_traced(engine: Any, deps: Any = None, base: Any = None, seen: set | None = None) -> None:
    """After a trace: agree on the program of the call JAX is tracing (``seen``: the paths
    a ``deps="read"`` trace read)."""
    call = traced_call()
    if call is not None:
        fun, dyn, kwargs = call
        publish(engine, getattr(fun, "__sf_user_call__", None), dyn, kwargs, deps, base, seen)


def publish(engine: Any, user_call: Any, dyn: tuple, kwargs: dict, deps: Any = None, base: Any = None,
            seen: set | None = None) -> None:
    """Agree on the program of a variant's call ``(dyn, kwargs)`` (``user_call``: the
    variant's way back to the user's arguments); nothing for a host-local program."""
    if user_call is None or not spans_processes(jax.tree_util.tree_leaves((dyn, kwargs))):
        return
    user = user_call(dyn, dict(kwargs))
    description = _describe.describe(engine.names, user.args, user.kwargs, engine.static_pos,
                                     engine.static_names)
    if deps is not None and seen is not None:
        unread = {display(deps.self_name, p) for p in paths_of(base) if p not in seen}
        description = {path: entry for path, entry in description.items()
                       if not (entry[0] == "static" and path in unread)}
    agree(engine.tracker.function, description)
