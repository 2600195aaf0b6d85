"""staticfield's frames leave users' tracebacks the way JAX's own do.

JAX drops the frames of registered paths from a traceback when an exception passes
one of its API boundaries (``jax.jit``'s call), and from the call sites it reports
(``source_info_util``). This package's directory is registered for both; generated
code is named under that directory (see ``_gen``), so it is covered too.

An exception raised below a hit path passes JAX's boundary first, and our frames,
above it, are added afterwards as it propagates. So each hit path also catches what
passes through it and calls ``hide``, then re-raises with a bare ``raise`` (which
adds no frame): that costs nothing on a call that does not raise. ``hide`` obeys
``JAX_TRACEBACK_FILTERING`` as JAX does, and never replaces the user's exception.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import types
import warnings
from typing import Iterator

from . import _compat
from ._errors import StaticFieldWarning

# The whole package (this file is in its _core/ subpackage).
PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_register = _compat.get("tb_register_exclusion"), _compat.get("source_register_exclusion")
_filtering_mode = _compat.get("tb_filtering_mode")
_filter = _compat.get("tb_filter")
_hide_frames = _compat.get("tb_hide_frames")
if _compat.unavailable("tracebacks"):  # said once, at import; errors themselves are unchanged
    warnings.warn(_compat.unavailable("tracebacks"), StaticFieldWarning, stacklevel=2)
for _fn in _register:
    if _fn is not None:
        _fn(PACKAGE_DIR)


def hide(exc: BaseException) -> None:
    """Drop staticfield's (and JAX's) frames from ``exc``'s traceback, in place."""
    if _filtering_mode is None or _filter is None or _hide_frames is None:
        return
    try:
        mode = _filtering_mode()
        tb = exc.__traceback__
        if mode == "off" or tb is None:
            return
        if mode == "tracebackhide":  # IPython hides frames marked __tracebackhide__
            _hide_frames(tb)
            return
        exc.with_traceback(_filter(tb))
    except Exception:  # noqa: BLE001 - a failure here must never replace the user's error
        return


_located = threading.local()  # .site: the user's call that a worker thread works for


@contextlib.contextmanager
def located(site: str) -> Iterator[None]:
    """In this thread, the user's call site is ``site`` (a worker thread of ``sf.warmup``
    has no user frame: its compiles are located at the ``sf.warmup()`` call)."""
    outer = getattr(_located, "site", None)
    _located.site = site
    try:
        yield
    finally:
        _located.site = outer


def call_site() -> str:
    """The user's innermost frame (outside staticfield and JAX), as ``path:line``; ``""``
    when there is none. Recompile locations and ``deps="read"`` read sites use it."""
    site = getattr(_located, "site", None)
    if site is not None:
        return site  # type: ignore[no-any-return]
    frame: types.FrameType | None = sys._getframe(1)
    while frame is not None:
        filename = frame.f_code.co_filename
        if not (filename.startswith(PACKAGE_DIR) or _is_jax_file(filename)):
            return f"{filename}:{frame.f_lineno}"
        frame = frame.f_back
    return ""


def warn_at_call_site(message: str, category: type[Warning] = StaticFieldWarning) -> None:
    """``warnings.warn`` located at the user's call (``call_site``): that frame's file, line
    and module, so that Python's filters by module and its once-per-location registry see
    the user's code, as a ``stacklevel`` that reached it would (a fixed ``stacklevel``
    lands on staticfield's own lines, whose depth depends on the path a call took)."""
    site = getattr(_located, "site", None)
    frame: types.FrameType | None = None if site is not None else sys._getframe(1)
    while frame is not None and (frame.f_code.co_filename.startswith(PACKAGE_DIR)
                                 or _is_jax_file(frame.f_code.co_filename)):
        frame = frame.f_back
    if frame is not None:
        module = frame.f_globals
        warnings.warn_explicit(message, category, frame.f_code.co_filename, frame.f_lineno,
                               module=module.get("__name__"), registry=module.setdefault("__warningregistry__", {}),
                               module_globals=module)
        return
    filename, _, line = (site or "").rpartition(":")
    if filename and line.isdigit():  # a worker thread of sf.warmup: at the sf.warmup() call
        warnings.warn_explicit(message, category, filename, int(line))
    else:
        warnings.warn(message, category, stacklevel=2)


def _is_jax_file(filename: str) -> bool:
    parts = filename.replace("\\", "/").split("/")
    return "jax" in parts or "jaxlib" in parts or "contextlib.py" in parts[-1:]
