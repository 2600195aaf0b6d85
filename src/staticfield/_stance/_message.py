"""The words of a refused compile: the watch explanation, and the way out."""

from __future__ import annotations

from typing import Any, Sequence

REFUSED = (
    "{function} would compile inside sf.no_compiles(){where}: {why}. Nothing may compile in "
    "this block, so the call was refused before compiling. Prepare the program before the "
    "block (call the function once with these arguments, f.precompile(...), or sf.warmup() "
    "from a program store), or make this call outside sf.no_compiles().{changes}"
)


def refused(function: str, location: str, changes: Sequence[Any] | None, store: str = "",
            eager: bool = False) -> str:
    """``RecompileError``'s text for a compile refused by the stance: ``changes`` against
    the closest program of the function compiled or loaded in this process (``None``:
    there is none), else ``store`` (with a program store: why it had no program, against
    its closest one), else "first compile"; ``eager``: an operation run outside jit,
    compiled once per operand shape and dtype."""
    if eager:
        function = f"the eager operation {function} (run outside jit)"
        why, lines = "no program of it for these operand shapes and dtypes yet", ""
    elif changes:
        why, lines = "what changed since its closest earlier compile or load in this process is below", "".join(
            f"\n  {c}" for c in changes)
    elif changes is None:
        why, lines, store = store or "first compile", "", ""
    else:
        why, lines = "no argument differs from an earlier compile or load (JAX traced it again)", ""
    if store:
        why += f" ({store})"
    where = f" (called at {location})" if location else ""
    return REFUSED.format(function=function, where=where, why=why, changes=lines)
