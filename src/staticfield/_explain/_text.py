"""How a value of a trace's description reads in an explanation: ``short`` (a repr, clipped),
an aval (``weak f32[3]``), an entry (a leaf, a class, a tree, a static).

Imports ``_core`` only. Used by ``_diff`` (and, through it, the program store's misses).
"""

from __future__ import annotations

import types
from typing import Any

from .._core._display import short_dtype


def short(value: Any, limit: int = 60) -> str:
    if isinstance(value, types.FunctionType):
        text = f"<function {value.__qualname__} at {id(value):#x}>"
    else:
        try:
            text = repr(value)
        except Exception:
            text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[: limit - 1] + "…"


def aval_text(shape: tuple, dtype: Any, weak: bool) -> str:
    return f"{'weak ' if weak else ''}{short_dtype(dtype)}[{','.join(map(str, shape))}]"


def entry_text(entry: tuple | None, absent: str = "absent") -> str:
    if entry is None:
        return absent
    kind = entry[0]
    if kind == "leaf":
        return aval_text(entry[1], entry[2], entry[3])
    if kind == "class":
        return entry[1].__qualname__
    if kind == "tree":  # already text (a plain str of it): clip it, do not quote it
        text = str(entry[1])
        if text == "PyTreeDef(None)":  # None, as sf.watch says it
            return "None"
        return text if len(text) <= 80 else text[:79] + "…"
    return short(entry[1])
