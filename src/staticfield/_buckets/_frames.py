"""Which code is the user's: the frames outside JAX and staticfield that decide on the row
count, and the line a refusal names.

``outside_jax``: a file that is neither JAX's nor staticfield's (the user's, a notebook
cell, ``exec``'d code, NumPy, another library: a decision made there is recorded);
``user_frame``: the user's own code, outside the Python installation and installed
distributions too (the line a message names); ``where`` and ``user_line``: that line.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import jax

_STDLIB = os.path.dirname(os.__file__) + os.sep
_OWN_DIRS = tuple(
    os.path.dirname(os.path.abspath(m.__file__)) + os.sep
    for m in (jax, sys.modules.get("jaxlib"), sys.modules[__name__.split(".")[0]]) if m is not None
)


def outside_jax(filename: str) -> bool:
    """A file of the user's (or a library's on top of JAX), not JAX's or staticfield's."""
    return not os.path.abspath(filename).startswith(_OWN_DIRS)


def user_frame(filename: str) -> bool:
    """A frame of the user's own code (a file, a notebook cell, ``exec``'d code): outside
    JAX and staticfield, the Python installation and installed distributions."""
    if not outside_jax(filename):
        return False
    if filename.startswith("<"):
        return True
    return not filename.startswith(_STDLIB) and "site-packages" not in filename and "dist-packages" not in filename


_GENERATED = frozenset(("__eq__", "__ne__", "__hash__"))


def _caller(frame: Any) -> Any:
    """The frame that made a comparison: past generated comparison methods (a dataclass's
    ``__eq__`` or ``__hash__``, compiled from ``<string>``), whose caller decides. Any other
    code outside JAX decides, a notebook cell's, ``exec``'d code's or NumPy's included."""
    while frame is not None and frame.f_code.co_filename.startswith("<") and frame.f_code.co_name in _GENERATED:
        frame = frame.f_back
    return frame


def users(frame: Any) -> bool:
    """Whether ``frame`` (past generated comparison methods) is outside JAX and staticfield."""
    frame = _caller(frame)
    return frame is not None and outside_jax(frame.f_code.co_filename)


def where(frame: Any) -> str:
    frame = _caller(frame) or frame
    return f"{frame.f_code.co_filename}:{frame.f_lineno}"


def user_line(tb: Any) -> str | None:
    """The innermost frame of ``tb`` in the user's code, as ``path:line``."""
    found = None
    while tb is not None:
        if user_frame(tb.tb_frame.f_code.co_filename):
            found = f"{tb.tb_frame.f_code.co_filename}:{tb.tb_lineno}"
        tb = tb.tb_next
    return found
