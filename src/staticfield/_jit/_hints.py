"""A hint added to JAX's concretization errors when the value is a dynamic field.

The most common first mistake: a field holding a Python int, used as one inside a
jitted method (``for _ in range(self.depth)``). JAX traces every dynamic field, so
it raises a ``ConcretizationTypeError`` (or, for a shape, a ``TypeError``) whose
text says the value "depends on the value of the argument self.depth". When the named
argument path ends in a dynamic field of a staticfield instance, ``add_hint`` adds
one paragraph saying to mark that field static, keeping JAX's text (and the
exception object, so its traceback) as they are. Runs only when a trace fails.
"""

from __future__ import annotations

import ast
import re
from typing import Any

from .._core._spec import SPECS

_ORIGIN = re.compile(r"depends on the values? of the arguments? (.+?)\.(?:\n|$)", re.MULTILINE)
_STEP = re.compile(r"\.([A-Za-z_]\w*)|\[([^\]]*)\]")

HINT = (
    "staticfield: `{path}` is read from `{field}`, a dynamic field of {cls}, so jax.jit "
    "traces it and its value is unknown while tracing. A value used as a Python int, bool, shape or in control "
    "flow must be static: mark it `{field}: sf.Static[{ann}]` (each distinct value then "
    "compiles once), or compute with it using jax.lax / jnp operations."
)


def add_hint(exc: BaseException, names: list[str], args: tuple, kwargs: dict) -> None:
    """If ``exc`` is JAX's concretization error about a dynamic field of an instance
    among the traced call's arguments, append the hint to its message, in place."""
    if not isinstance(exc, TypeError):  # JAX's concretization errors are all TypeErrors
        return
    try:
        text = exc.args[0] if exc.args and isinstance(exc.args[0], str) else None
        match = _ORIGIN.search(text) if text else None
        if match is None:
            return
        values = {**dict(zip(names, args)), **kwargs}
        hints = [h for path in _split(match.group(1)) if (h := _hint(path, values)) is not None]
        if hints:
            exc.args = (f"{text}\n{hints[0]}", *exc.args[1:])
    except Exception:  # noqa: BLE001 - a hint must never replace the user's error
        return


def _split(names: str) -> list[str]:
    """``a``, ``a and b``, ``a, b, and c`` (JAX's wording) into paths."""
    return [p.strip() for p in re.split(r",\s*(?:and\s+)?|\s+and\s+", names) if p.strip()]


def _hint(path: str, values: dict[str, Any]) -> str | None:
    """The hint for a path like ``self.depth``, ``params.cfg.n`` or ``self.sizes[0]``
    through a dynamic field of an instance (the last such field on the path); ``None``
    for any other path."""
    head = re.match(r"[A-Za-z_]\w*", path)
    if head is None or head.group(0) not in values:
        return None
    obj: Any = values[head.group(0)]
    owner = field = None
    for step in _STEP.finditer(path[head.end():]):
        name, index = step.group(1), step.group(2)
        if name is None:  # into a container: [0], ['a']
            obj = obj[ast.literal_eval(index)]
            continue
        spec = SPECS.get(type(obj))
        if spec is None or name not in spec.name_set:
            return None
        owner, field = spec, name
        obj = obj.__dict__[name]
    if owner is None or field is None or field in owner.static_set:
        return None
    return HINT.format(path=path, cls=owner.cls.__qualname__, field=field, ann=_annotation(owner, field))


def _annotation(spec: Any, name: str) -> str:
    ann = spec.by_name[name].type
    if isinstance(ann, str):
        return ann
    return getattr(ann, "__name__", None) or repr(ann).replace("typing.", "")
