"""What to say first when a function keeps compiling: the one cause behind every compile.

``float_static`` finds a static of a float type (a learning rate marked static) that
took a new value at every compile of a function, from its recompile events and the
descriptions of its compiles (``_describe``), and says to make it traced. Used by the
compile-count warning, on the miss path only.
"""

from __future__ import annotations

from typing import Any, Iterable, Sequence

import numpy as np

from ._diff import Recompile

_FIELD = (
    "every compile changed `{path}`, a float static: make it a dynamic field (drop "
    "sf.Static / sf.static(): a float traces, so one program serves every value)"
)
_ARGUMENT = (
    "every compile changed `{path}`, a float static argument: pass it traced (leave it out "
    "of static_argnames/static_argnums and sf.Static[...], or pass jnp.asarray({name}) "
    "under static=\"auto\"): a float traces, so one program serves every value"
)


def _is_float(value: Any) -> bool:
    return isinstance(value, (float, np.floating))


def float_static(events: Sequence[Recompile], descriptions: Iterable[dict[str, tuple]]) -> str:
    """The first sentence for a function whose every recompile (``events``) changed one
    static of a float type (a float in every description of its compiles that has it);
    ``""`` when there is none."""
    if not events:
        return ""
    common: dict[str, str] | None = None
    for event in events:
        here = {c.path: c.kind for c in event.changes if c.kind in ("static", "static_arg")}
        common = here if common is None else {p: k for p, k in common.items() if here.get(p) == k}
        if not common:
            return ""
    described = list(descriptions)
    for path, kind in (common or {}).items():
        values = [d[path][1] for d in described if path in d and d[path][0] == kind]
        if values and all(_is_float(v) for v in values):
            text = _FIELD if kind == "static" else _ARGUMENT
            return text.format(path=path, name=path.rpartition(".")[2])
    return ""
