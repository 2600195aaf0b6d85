"""Whether this thread refuses compiles now, and whether a trace in progress is abstract.

One thread-local counter of nested ``no_compiles`` blocks is the whole state: other
threads never see it, and leaving the outermost block restores the thread as it was.
"""

from __future__ import annotations

import sys
import threading

from .._core import _own

_local = threading.local()

# The frames of JAX's ahead-of-time methods (``jax.jit(f).lower``/``.trace``/``.eval_shape``,
# which ``jax.eval_shape`` and ``jax.make_jaxpr`` call): a trace made under one compiles
# nothing by itself.
_ABSTRACT = frozenset({"jit_lower", "jit_trace", "jit_eval_shape"})


def depth() -> int:
    return getattr(_local, "depth", 0)


def enter() -> None:
    _local.depth = depth() + 1


def leave() -> None:
    _local.depth = max(depth() - 1, 0)


def refusing() -> bool:
    """Whether this thread is inside ``sf.no_compiles()`` (and not in staticfield's own work,
    ``_core._own``: the buckets' checking mode, whose programs are not the user's)."""
    return getattr(_local, "depth", 0) > 0 and not _own.active()


def abstract() -> bool:
    """Whether the trace in progress was asked for by ``.lower``, ``.trace`` or
    ``.eval_shape`` (directly, or by ``jax.eval_shape``/``jax.make_jaxpr``): such a trace
    compiles nothing, so the stance lets it run (a later ``.compile()`` is refused)."""
    frame = sys._getframe(1)
    while frame is not None:
        code = frame.f_code
        if code.co_name in _ABSTRACT and code.co_filename.endswith("pjit.py"):
            return True
        frame = frame.f_back  # type: ignore[assignment]
    return False
