"""How a class body becomes field marks, before and right after stdlib ``dataclass`` sees it.

``sf.Static[T]`` annotations (string annotations too, and inherited from plain stdlib
dataclass bases) become the ``static`` mark in each field's metadata; static defaults are
frozen (a list default becomes a tuple) and a ``jax.Array`` default becomes a shared
constant; contradictory marks and field options that cannot work are refused, naming the
class, the field and both marks. ``_decorator`` calls these in order.
"""

from __future__ import annotations

import dataclasses
import sys
import types
from typing import Any

import jax

from . import _compat, _display, _errors
from ._field import (
    LEAVES, STATIC, Field, annotation_is_static, converter_of, is_static, leaves_of, marks_of, sharding_of,
)
from ._freeze import freeze
from ._registry import SPEC_ATTR


def static_annotations(cls: type) -> frozenset[str]:
    """Names of the class's own fields annotated ``Static[T]`` (object or string annotation)."""
    module = sys.modules.get(cls.__module__)
    globalns = dict(vars(module)) if module else {}
    localns = {**vars(cls), cls.__name__: cls}
    return frozenset(
        name
        for name, ann in cls.__dict__.get("__annotations__", {}).items()
        if annotation_is_static(ann, globalns, localns)
    )


def inherited_static_annotations(cls: type) -> frozenset[str]:
    """``Static[T]`` fields declared on undecorated (plain stdlib dataclass) bases, whose
    Field objects carry no static mark of their own."""
    names: set[str] = set()
    for base in cls.__mro__[1:]:
        if SPEC_ATTR not in base.__dict__ and "__dataclass_fields__" in base.__dict__:
            names |= static_annotations(base)
    return frozenset(names)


def mark_static_annotations(cls: type, static_names: frozenset[str]) -> None:
    """Record ``x: Static[T]`` on the dataclass field: a ``Field`` that says static (a new
    one, so that a base's Field object is never changed). The user's metadata is kept as
    given; only an ``sf.field``'s own ``"static"`` key is set to match."""
    fields = cls.__dict__["__dataclass_fields__"]
    for name in static_names:
        f = fields.get(name)
        if f is None or f._field_type is not dataclasses._FIELD or is_static(f):  # type: ignore[attr-defined]
            continue
        new = fields[name] = Field.of(f, static=True)
        if isinstance(f, Field) and f.sf_marks is not None:  # sf.field wrote the "static" key
            new.metadata = types.MappingProxyType({**f.metadata, STATIC: True})


class _Constant:
    """A default_factory returning one immutable value (a jax.Array default)."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def __call__(self) -> Any:
        return self.value

    def __repr__(self) -> str:
        return f"<constant {_display.summary(self.value)}>"


def prepare_defaults(cls: type, static_names: frozenset[str]) -> None:
    """Before stdlib sees the class: freeze static defaults (a list default becomes a
    tuple) and let a jax.Array be a default (it is immutable, so sharing it is safe)."""
    for name in cls.__dict__.get("__annotations__", {}):
        if name not in cls.__dict__:
            continue
        value = cls.__dict__[name]
        f = value if isinstance(value, dataclasses.Field) else None
        default = f.default if f is not None else value
        if default is dataclasses.MISSING:
            continue
        static = (f is not None and is_static(f)) or name in static_names
        if static:
            frozen = freeze(default, f"{cls.__qualname__}.{name}", name)
            if f is not None:
                f.default = frozen
            else:
                setattr(cls, name, frozen)
        elif isinstance(default, jax.Array) and not isinstance(default, _compat.Tracer):
            if f is None:
                setattr(cls, name, dataclasses.field(default_factory=_Constant(default)))
            else:
                f.default, f.default_factory = dataclasses.MISSING, _Constant(default)


def check_marks(cls: type, annotated: frozenset[str]) -> None:
    """Refuse a field marked both static and dynamic (``sf.field(static=False)`` with
    ``metadata={"pytree_node": False}``, or under a ``sf.Static[T]`` annotation), naming
    the field and the two marks. Runs before the annotations are recorded as metadata."""
    for f in cls.__dict__["__dataclass_fields__"].values():
        if f._field_type is not dataclasses._FIELD:  # type: ignore[attr-defined]
            continue
        marks = list(marks_of(f))
        if f.name in annotated:
            marks.append(("the annotation sf.Static[...]", True))
        yes = [text for text, says in marks if says]
        no = [text for text, says in marks if not says]
        if yes and no:
            raise TypeError(_errors.CONTRADICTORY_MARKS.format(
                cls=cls.__qualname__, field=f.name, static=yes[0], dynamic=no[0]))


def check_field_options(cls: type) -> None:
    """Refuse field options that cannot work, naming the class and field."""
    for f in cls.__dict__["__dataclass_fields__"].values():
        conv = converter_of(f)
        if conv is not None and not callable(conv):
            what = type(conv).__name__
            raise TypeError(_errors.BAD_CONVERTER.format(cls=cls.__qualname__, field=f.name, type=what))
        if is_static(f) and sharding_of(f) is not None:
            raise TypeError(_errors.STATIC_SHARDING.format(cls=cls.__qualname__, field=f.name))
        leaves = leaves_of(f)
        if leaves not in LEAVES:
            raise ValueError(_errors.BAD_LEAVES.format(cls=cls.__qualname__, field=f.name, leaves=leaves))
        if is_static(f) and leaves == "any":
            raise TypeError(_errors.STATIC_LEAVES.format(cls=cls.__qualname__, field=f.name))
