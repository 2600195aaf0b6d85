"""Compiles JAX makes of a variant's program under a transformation applied outside it.

``jax.vmap(obj.method)(xs)`` called eagerly: JAX traces the user's function once (for
the per-example shapes) and then compiles a batched program of that trace, once per
batch size, with no new trace. Those are the function's compiles too. A call under a
transformation reaches the variant's C++ front with tracers, so it always misses, and
the miss runs inside ``watching``: while it goes on, this thread's lowering of a program
of the function's name (JAX's monitoring event after lowering, before the XLA compile)
is a compile of the function, handed to its tracker (``Tracker.program``): explained
against the closest earlier program (``vmap: batch 4 → 8``), budgeted, refused by
``sf.no_compiles()``, counted. The first lowering after a trace made in the same call is
that trace's own program (already counted); it is only remembered.

Under an outer ``jax.jit`` nothing is lowered during the call (the batched program is
inlined into the outer one), so nothing more counts.

Imports: ``_core`` (``_compat``) and ``_explain`` (describing the call). Called by
``_miss`` (each variant front's miss handler is wrapped); it hands each compile to the
engine's ``transformed_program`` (``_programs``) and its tracker.
"""

from __future__ import annotations

import threading
from typing import Any, Callable

import jax

from .._core import _compat
from .._core._compat import Tracer
from .._explain import _describe

LOWER_EVENT = "/jax/core/compile/jaxpr_to_mlir_module_duration"
from .._explain._transform import TRANSFORM

_clean = _compat.get("trace_state_clean") or (lambda: True)
_local = threading.local()  # .frames: the calls under a transformation in progress, innermost last
_listening: list = []


class _Frame:
    __slots__ = ("engine", "jitted", "dyn", "kwargs", "start", "own")

    def __init__(self, engine: Any, jitted: Any, dyn: tuple, kwargs: dict) -> None:
        self.engine, self.jitted, self.dyn, self.kwargs = engine, jitted, dyn, kwargs
        self.start = engine.tracker.compile_count
        self.own = False  # the program of a trace made in this call was lowered


def watching(engine: Any, jitted: Any, miss: Callable[..., Any]) -> Callable[..., Any]:
    """``miss`` (a variant front's miss handler), which counts the programs JAX compiles
    of the variant under a transformation applied outside it (see the module docstring)."""

    def call(*dyn: Any, **kwargs: Any) -> Any:
        if _clean() or not any(isinstance(x, Tracer) for x in jax.tree_util.tree_leaves((dyn, kwargs))):
            return miss(*dyn, **kwargs)
        _listen()
        frames = _local.__dict__.setdefault("frames", [])
        frames.append(_Frame(engine, jitted, dyn, kwargs))
        try:
            return miss(*dyn, **kwargs)
        finally:
            frames.pop()

    return call


def _listen() -> None:
    if not _listening:
        _listening.append(True)
        jax.monitoring.register_event_duration_secs_listener(_on_duration)


def _on_duration(event: str, seconds: float, **kwargs: Any) -> None:
    """JAX lowered a program: on a thread inside ``watching``, a program of that function
    is its compile (what the tracker raises, a refusal, propagates: nothing compiles)."""
    if event != LOWER_EVENT:
        return
    frames = getattr(_local, "frames", None)
    if not frames:
        return
    frame = frames[-1]
    engine = frame.engine
    name = str(kwargs.get("fun_name", ""))
    own = getattr(engine.fn, "__name__", None)
    if own is None or name not in (own, f"jit({own})", f"pjit({own})"):
        return
    description = _description(frame)
    if description is None:
        return
    if engine.tracker.compile_count > frame.start and not frame.own:
        frame.own = True  # the program of the trace this call made: counted as it
        engine.transformed += 1
        engine.tracker.remember(description)
        return
    engine.transformed_program(description)


def _description(frame: _Frame) -> dict | None:
    """The call as the user made it (per-example shapes), with the transformation around
    it: ``vmap`` (``batch 8``; nested: ``batch 4×8``) or another tracer's kind."""
    try:
        engine = frame.engine
        user_call = getattr(getattr(frame.jitted, "__wrapped__", None), "__sf_user_call__", None)
        if user_call is None:
            return None
        user = user_call(frame.dyn, dict(frame.kwargs))
        description = _describe.describe(engine.names, user.args, user.kwargs, engine.static_pos,
                                         engine.static_names, engine.star)
        description.update(transformation(jax.tree_util.tree_leaves((frame.dyn, frame.kwargs))))
        return description
    except Exception:  # noqa: BLE001 - tracking must never break the user's call
        return None


def transformation(leaves: list) -> dict[str, tuple]:
    """The entries naming the transformations the tracers among ``leaves`` stand for."""
    found: dict[str, tuple] = {}
    for leaf in leaves:
        sizes: list[int] = []
        while isinstance(leaf, Tracer):
            kind = type(leaf).__name__
            if kind == "BatchTracer":
                dim = getattr(leaf, "batch_dim", None)
                val = getattr(leaf, "val", None)
                if isinstance(dim, int) and hasattr(val, "shape"):
                    sizes.append(int(val.shape[dim]))
                leaf = val
                continue
            key = {"JVPTracer": "jvp", "LinearizeTracer": "jvp"}.get(kind, kind)
            found.setdefault(key, (TRANSFORM, "traced"))
            leaf = getattr(leaf, "primal", None)
        if sizes:
            text = "batch " + "×".join(map(str, sizes))
            old = found.get("vmap")
            if old is None or len(text) > len(old[1]):
                found["vmap"] = (TRANSFORM, text)
    return found
