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

import os
import sys
import types

from jax._src import source_info_util, traceback_util

# The whole package (this file is in its _core/ subpackage).
PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

traceback_util.register_exclusion(PACKAGE_DIR)
source_info_util.register_exclusion(PACKAGE_DIR)


def hide(exc: BaseException) -> None:
    """Drop staticfield's (and JAX's) frames from ``exc``'s traceback, in place."""
    try:
        mode = traceback_util._filtering_mode()
        tb = exc.__traceback__
        if mode == "off" or tb is None:
            return
        if mode == "tracebackhide":  # IPython hides frames marked __tracebackhide__
            traceback_util._add_tracebackhide_to_hidden_frames(tb)
            return
        exc.with_traceback(traceback_util.filter_traceback(tb))
    except Exception:  # noqa: BLE001 - a failure here must never replace the user's error
        return


def call_site() -> str:
    """The user's innermost frame (outside staticfield and JAX), as ``path:line``; ``""``
    when there is none. Recompile locations and ``deps="read"`` read sites use it."""
    frame: types.FrameType | None = sys._getframe(1)
    while frame is not None:
        filename = frame.f_code.co_filename
        if not (filename.startswith(PACKAGE_DIR) or _is_jax_file(filename)):
            return f"{filename}:{frame.f_lineno}"
        frame = frame.f_back
    return ""


def _is_jax_file(filename: str) -> bool:
    parts = filename.replace("\\", "/").split("/")
    return "jax" in parts or "jaxlib" in parts or "contextlib.py" in parts[-1:]
