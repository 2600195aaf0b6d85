"""The class attribute of each static field, and the dict that may stand in for its value.

An instance's static values live in its ``__dict__`` (see ``_state``). Under each
static field's name the class holds a ``StaticSlot``: a *non-data* descriptor, so on
every ordinary instance the instance dict answers ``obj.name`` and the slot is never
reached (reads cost what they cost without it). It is reached only where the
instance dict lacks the name:

==========================================  ===========================================
where                                       the slot answers
==========================================  ===========================================
the class itself (``Cls.n``)                the field's default, as the dataclass class
                                            attribute did (``AttributeError`` if none)
a custom ``__init__`` before it sets ``n``  the same
an instance whose ``__dict__`` is a         ``StandIn.static(name)``: the dict decides
``StandIn`` (``deps="read"``'s traced self)  (it records the read, see ``_deps``)
==========================================  ===========================================

``install`` puts a slot under a static name only where the class's own attribute
there is the field's default (the name is declared in this class, or inherited from
a plain stdlib dataclass base, or not set at all): a property, method or other
descriptor a user defines over a static name is left alone and keeps its meaning.
``answers`` tells, at any time, whether a class's name still resolves to a slot (or
to a user's data descriptor, which wins over the instance dict anyway).
"""

from __future__ import annotations

import dataclasses
from typing import Any



class _NoDefault:
    __slots__ = ()

    def __repr__(self) -> str:
        return "<no default>"

    def __reduce__(self) -> str:
        return "NO_DEFAULT"  # one object, also in a class sent by value (cloudpickle)


NO_DEFAULT: Any = _NoDefault()


class StandIn(dict):
    """An instance ``__dict__`` that holds no static values and answers them itself.

    Attribute reads find dynamic fields and cached entries in it as in any dict; a
    static name falls through to the class's ``StaticSlot``, which calls ``static``.
    """

    __slots__ = ()

    def static(self, name: str) -> Any:
        """The value of static field ``name`` (subclasses record the read)."""
        raise AttributeError(name)

    def whole(self, what: str) -> None:
        """The instance is used as a whole (``what``: hash, ==, copy...): every static is read."""


def used_whole(obj: Any, what: str) -> None:
    """Tell a stand-in dict that ``obj`` is used as a whole (no-op on ordinary instances)."""
    d = obj.__dict__
    if d.__class__ is not dict and isinstance(d, StandIn):
        d.whole(what)


class StaticSlot:
    """Class attribute of static field ``name``: see the module docstring."""

    __slots__ = ("name", "default")

    def __init__(self, name: str, default: Any) -> None:
        self.name, self.default = name, default

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        if obj is not None:
            d = obj.__dict__
            if isinstance(d, StandIn):
                return d.static(self.name)
        if self.default is NO_DEFAULT:
            who = f"{owner.__qualname__!r}" if obj is None and owner is not None else f"{type(obj).__qualname__!r} object"
            raise AttributeError(f"{'type object ' if obj is None else ''}{who} has no attribute {self.name!r}")
        return self.default

    def __repr__(self) -> str:
        return f"<static field {self.name!r}>"


def _resolve(cls: type, name: str) -> tuple[type | None, Any]:
    for klass in cls.__mro__:
        if name in klass.__dict__:
            return klass, klass.__dict__[name]
    return None, None


def install(cls: type, static_fields: list[dataclasses.Field], decorated: str) -> None:
    """Put a ``StaticSlot`` under each static name whose class attribute is its default.

    ``decorated`` is the attribute that marks a class decorated by staticfield (whose
    own attributes over static names are already slots, or a user's choice)."""
    own = cls.__dict__.get("__annotations__", {})
    for f in static_fields:
        owner, _ = _resolve(cls, f.name)
        plain_base = (
            owner is not None and owner is not cls and decorated not in owner.__dict__
            and f.name in owner.__dict__.get("__annotations__", {})
        )
        if f.name in own or owner is None or plain_base:
            default = NO_DEFAULT if f.default is dataclasses.MISSING else f.default
            setattr(cls, f.name, StaticSlot(f.name, default))


def answers(cls: type, name: str) -> bool:
    """Whether ``cls().name`` reaches a ``StaticSlot`` (or a user's data descriptor, which
    answers whatever the dict holds) when the instance dict lacks ``name``."""
    _, attr = _resolve(cls, name)
    if isinstance(attr, StaticSlot):
        return True
    kind = type(attr)
    return hasattr(kind, "__set__") or hasattr(kind, "__delete__")
