"""A hint added to JAX's concretization errors when the value is a dynamic field.

The most common first mistake: a field holding a Python int, used as one inside a
jitted method (``for _ in range(self.depth)``). JAX traces every dynamic field, so
it raises a ``ConcretizationTypeError`` (or, for a shape, a ``TypeError``) whose
text says the value "depends on the value of the argument self.depth". When the named
argument path ends in a dynamic field of a staticfield instance, ``add_hint`` adds
one paragraph saying to mark that field static, keeping JAX's text (and the
exception object, so its traceback) as they are. Runs only when a trace fails.

``add_note`` covers every other error raised while tracing (a ``TracerBoolConversionError``,
a library's own check of ``well_posed=JitTracer(bool[])``): where a dynamic leaf of an
instance in the call was a Python ``bool`` or ``int``, a note names those fields and how to
make them static.
"""

from __future__ import annotations

import ast
import re
from typing import Any

import jax
import numpy as np

from .._core._compat import traced_call
from .._core._registry import SPECS, is_instance

_ORIGIN = re.compile(r"depends on the values? of the arguments? (.+?)\.(?:\n|$)", re.MULTILINE)
_STEP = re.compile(r"\.([A-Za-z_]\w*)|\[([^\]]*)\]")

HINT = (
    "staticfield: `{path}` is read from `{field}`, a dynamic field of {cls}, so jax.jit "
    "traces it and its value is unknown while tracing. A value used as a Python int, bool, shape or in control "
    "flow must be static: mark it `{field}: sf.Static[{ann}]` (each distinct value then "
    "compiles once), or compute with it using jax.lax / jnp operations."
)


HINT_ARRAY = (
    "staticfield: `{path}` is read from `{field}`, a dynamic array field of {cls}, so jax.jit "
    "traces it and its value is unknown while tracing: Python control flow cannot branch on it. "
    "A jax array cannot be static; branch inside the program with jnp.where(...) or "
    "jax.lax.cond(...), or keep the Python value that decides the branch in a static field "
    "(`flag: sf.Static[bool]`)."
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
    if _is_array_annotation(owner.by_name[field].type):  # never advised into sf.Static[...]
        return HINT_ARRAY.format(path=path, cls=owner.cls.__qualname__, field=field)
    return HINT.format(path=path, cls=owner.cls.__qualname__, field=field, ann=_annotation(owner, field))


def _is_array_annotation(ann: Any) -> bool:
    """An array type (``jax.Array``, ``np.ndarray``, ``"jax.Array"``, ``Float[Array, "n"]``)."""
    if isinstance(ann, type):
        return issubclass(ann, (jax.Array, np.ndarray))
    text = ann if isinstance(ann, str) else repr(ann)
    return any(word in text for word in ("Array", "ndarray"))


def _annotation(spec: Any, name: str) -> str:
    ann = spec.by_name[name].type
    if isinstance(ann, str):
        return ann
    return getattr(ann, "__name__", None) or repr(ann).replace("typing.", "")


# ----- a note on any error raised while tracing: the dynamic fields that held Python bools/ints
NOTE_HEAD = "staticfield: jax.jit traced a Python bool or int held in a dynamic field ({which}):"
NOTE_FIELD = (
    "  {path}: a Python {kind} in a dynamic field of {cls} is traced (no {kind} while tracing); "
    "mark it `{field}: sf.Static[{kind}]`"
)
NOTE_NESTED = (
    "  {path}: a Python {kind} inside {cls}.{field}, a dynamic field, is traced; "
    "mark `{field}` sf.field(leaves=\"any\") for a nested module (its non-array leaves stay static), "
    "or sf.static()"
)


def add_note(exc: BaseException, names: list[str], args: tuple, kwargs: dict, static_pos: Any,
             static_names: Any, traced_leaves: Any = None) -> None:
    """If a dynamic leaf of an instance among the traced call's arguments was a Python
    ``bool`` or ``int`` in the call (JAX's ``_trace_for_jit`` holds the call as it came),
    add a note (PEP 678) naming those fields (``traced_leaves``: the leaves JAX traced, where
    they are not those of ``args``, as under ``static="auto"``): where a ``TracerBoolConversionError`` or a
    library's own check fails on the tracer, the field is named."""
    try:
        call = traced_call()
        if call is None:
            return
        traced = ([a for i, a in enumerate(args) if i not in static_pos],
                  {k: v for k, v in kwargs.items() if k not in static_names})
        given = jax.tree_util.tree_leaves(call[1:])
        here = jax.tree_util.tree_leaves(traced if traced_leaves is None else traced_leaves)
        if len(given) != len(here):
            return
        python = {id(t): type(c).__name__ for t, c in zip(here, given) if type(c) in (bool, int)}
        lines = scalar_fields(python, {**dict(zip(names, args)), **kwargs})
        if lines:
            exc.add_note("\n".join([NOTE_HEAD.format(which=f"{len(lines)} field{'s' if len(lines) > 1 else ''}"),
                                    *lines]))
    except Exception:  # noqa: BLE001 - a note must never replace the user's error
        return


def scalar_fields(python: dict[int, str], values: dict[str, Any]) -> list[str]:
    """A note's lines: each leaf (by id, with its Python type's name) held in a dynamic
    field of an instance among ``values`` (by argument name), by its path."""
    lines: list[str] = []

    def walk(value: Any, path: str) -> None:
        spec = SPECS.get(type(value))
        if spec is None:
            for keypath, leaf in jax.tree_util.tree_flatten_with_path(value, is_leaf=is_instance)[0]:
                if type(leaf) in SPECS:
                    walk(leaf, path + jax.tree_util.keystr(keypath))
            return
        d = value._staticfield_dict
        for name in spec.dynamic_names:
            for keypath, leaf in jax.tree_util.tree_flatten_with_path(d[name], is_leaf=is_instance)[0]:
                where = f"{path}.{name}{jax.tree_util.keystr(keypath)}"
                if type(leaf) in SPECS:
                    walk(leaf, where)
                elif id(leaf) in python:
                    text = NOTE_NESTED if keypath else NOTE_FIELD
                    lines.append(text.format(path=where, kind=python[id(leaf)], cls=spec.cls.__qualname__,
                                             field=name))

    for name, value in values.items():
        walk(value, name)
    return lines


# ----- a note on an error that wants an integer, where a static held a float
_WANTS_INT = re.compile(r"integ|interpreted as an int|must be an int", re.IGNORECASE)
FLOAT_NOTE = (
    "staticfield: {what} is a Python {kind} ({value!r}), and this error wants an integer (a "
    "shape, a pad width, a size, an index): {fix}"
)
_FLOAT_FIELD_FIX = "make it `{field}: sf.Static[int]` and pass an int, or convert where it is used (int(self.{field}))"
_FLOAT_ARG_FIX = "pass an int, or convert where it is used (int({name}))"


def add_float_note(exc: BaseException, names: list[str], args: tuple, kwargs: dict, static_pos: Any,
                   static_names: Any) -> None:
    """If ``exc`` wants an integer (``pad_width must be of integral type``) and a static field
    of an instance in the call, or a static argument, holds a float, add a note (PEP 678)
    naming it (the class, the field, its type) and the fix: JAX's words name nothing."""
    try:
        if not _WANTS_INT.search(str(exc)):
            return
        lines: list[str] = []
        values = {**dict(zip(names, args)), **kwargs}
        for i, name in enumerate(names[: len(args)]):
            if (i in static_pos or name in static_names) and _is_float(values[name]):
                lines.append(FLOAT_NOTE.format(what=f"the static argument `{name}`", kind=_kind(values[name]),
                                               value=values[name], fix=_FLOAT_ARG_FIX.format(name=name)))
        for name, value in values.items():
            _float_fields(value, lines)
        for line in lines[:4]:
            exc.add_note(line)
    except Exception:  # noqa: BLE001 - a note must never replace the user's error
        return


def _float_fields(value: Any, lines: list[str], depth: int = 0) -> None:
    spec = SPECS.get(type(value))
    if spec is None or depth > 8:
        return
    d = value._staticfield_dict
    for field in spec.static_names:
        if _is_float(d[field]):
            lines.append(FLOAT_NOTE.format(what=f"{spec.cls.__qualname__}.{field}, a static field,",
                                           kind=_kind(d[field]), value=d[field],
                                           fix=_FLOAT_FIELD_FIX.format(field=field)))
    for field in spec.dynamic_names:
        for leaf in jax.tree_util.tree_leaves(d[field], is_leaf=is_instance):
            if type(leaf) in SPECS:
                _float_fields(leaf, lines, depth + 1)


def _is_float(value: Any) -> bool:
    return isinstance(value, (float, np.floating))


def _kind(value: Any) -> str:
    return "float" if type(value) is float else type(value).__name__
