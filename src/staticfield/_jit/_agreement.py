"""What a new program of an ``sf`` function publishes for the agreement between processes.

The digest is made from the call's own arguments, as JAX received them (arrays, Python
scalars, or the ``ShapeDtypeStruct``s of ``precompile`` and ``sf.warmup``), rebuilt into
the user's arguments by the variant: never from a trace's tracers, whose shardings are
the abstract ones (``P('x', None)`` where the array has ``P('x',)``). So a process that
traces and compiles a program and one that loads it from the store without a trace
(``trust="source"``) describe the same call alike. Under ``deps="read"`` the statics its
trace did not read are left out: processes that differ only there make the same program.

When: a program made for a call agrees when its trace ends (``publish_traced``, before
lowering and compiling) or, loaded without a trace, before it runs (``publish``). A
program prepared ahead of its first run (``sf.warmup``, ``precompile``: ``ahead``) is
only remembered then, and agrees on its first run (``first_run``, from the miss of its
variant's C++ front, ``agreeing``), since processes may prepare in other orders than they
run; on a JAX without the C++ front, whose first runs staticfield does not see, it agrees
when prepared, as a program made for a call does.
"""

from __future__ import annotations

import functools
from typing import Any, Callable

import jax

from .._agree import agree, digest, enabled, prepare, prepared, preparing, spans_processes
from .._agree import ahead as ahead  # sf.warmup and precompile prepare ahead
from .._core import _front
from .._core._compat import traced_call
from .._core._deep import display, paths_of
from .._deps._share import stored_paths
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
    variant's way back to the user's arguments), or remember it when it is prepared
    ahead; nothing for a host-local program."""
    description = _description(engine, user_call, dyn, kwargs, deps, base, seen)
    if description is None:
        return
    function = engine.tracker.function
    if preparing() and _front.available():  # it agrees on its first run (first_run)
        prepare(function, digest(function, description))
        return
    agree(function, description)


def agreeing(engine: Any, jitted: Any, miss: Callable[..., Any], deps: Any, base: Any) -> Callable[..., Any]:
    """The miss of variant ``jitted``'s C++ front: ``miss``, before which a program
    prepared ahead agrees on its first run (a dict lookup when none was)."""
    return functools.partial(_first_run, engine, jitted, miss, deps, base)


def _first_run(engine: Any, jitted: Any, miss: Callable[..., Any], deps: Any, base: Any, *dyn: Any,
               **kwargs: Any) -> Any:
    if prepared(engine.tracker.function) and enabled():
        first_run(engine, jitted, deps, base, dyn, kwargs)
    return miss(*dyn, **kwargs)


def first_run(engine: Any, jitted: Any, deps: Any, base: Any, dyn: tuple, kwargs: dict) -> None:
    """If the program of a call ``(dyn, kwargs)`` of variant ``jitted`` was prepared ahead
    and has not agreed, it agrees now, before it first runs (under ``deps="read"``, on the
    statics its variant read)."""
    user_call = getattr(getattr(jitted, "__wrapped__", None), "__sf_user_call__", None)
    seen = None
    if deps is not None:
        paths = stored_paths(deps.reads_of(base))
        seen = set(paths) if paths is not None else None
    description = _description(engine, user_call, dyn, kwargs, deps, base, seen)
    function = engine.tracker.function
    if description is not None and prepared(function, digest(function, description)):
        agree(function, description)


def _description(engine: Any, user_call: Any, dyn: tuple, kwargs: dict, deps: Any, base: Any,
                 seen: set | None) -> dict | None:
    """The description the digest is made of; ``None`` for a host-local program."""
    if user_call is None or not spans_processes(jax.tree_util.tree_leaves((dyn, kwargs))):
        return None
    user = user_call(dyn, dict(kwargs))
    description = _describe.describe(engine.names, user.args, user.kwargs, engine.static_pos,
                                     engine.static_names)
    if deps is not None and seen is not None:
        unread = {display(deps.self_name, p) for p in paths_of(base) if p not in seen}
        description = {path: entry for path, entry in description.items()
                       if not (entry[0] == "static" and path in unread)}
    return description
