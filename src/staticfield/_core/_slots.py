"""The class attribute of each field, and the dict that may stand in for an instance's.

An instance's field values live in its ``__dict__`` (see ``_state``). Under each
field's name the class holds a ``FieldSlot``: a *data* descriptor, so every read and
every write of ``obj.name`` reaches it, ``object.__setattr__`` included:

==========================================  ===========================================
where                                       the slot answers
==========================================  ===========================================
an instance (``obj.n``)                     its real dict's ``n`` (``_vars``)
the class itself (``Cls.n``)                the field's default, as the dataclass class
                                            attribute did (``AttributeError`` if none)
a custom ``__init__`` before it sets ``n``  the same
an instance whose ``__dict__`` is a         the dict's ``__getitem__``: for a static
``StandIn`` (``deps="read"``'s traced self)  name it records the read (see ``_deps``)
``object.__setattr__(obj, n, v)``           while building, stores ``v``; on a built
                                            instance, ``_sealed.reassign``: checked, then
                                            everything derived is derived again
``object.__delattr__(obj, n)``              while building, deletes; else refused
==========================================  ===========================================

Why a data descriptor: with a plain dict entry, ``object.__setattr__`` (the
frozen-dataclass escape hatch) would change a field behind the instance's derived
entries (its static key, cached children, bindings), and everything that used them
would keep computing with the old value. Nothing else writes a field after sealing.
A read costs one Python call more than a dict lookup; no read runs on a cache hit.

``install`` puts a slot under a field's name only where the class's own attribute
there is the field's default (the name is declared in this class, or inherited from
a plain stdlib dataclass base, or not set at all): a property, method or other
descriptor a user defines over a field name is left alone and keeps its meaning.
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
    """An instance ``__dict__`` that answers reads of static values itself (``static``).

    Attribute reads find dynamic fields and cached entries in it as in any dict; for a
    static name, the class's ``FieldSlot`` asks ``self[name]``, which a subclass answers
    with ``static`` (recording the read).
    """

    __slots__ = ()

    def static(self, name: str) -> Any:
        """The value of static field ``name`` (subclasses record the read)."""
        raise AttributeError(name)

    def whole(self, what: str) -> None:
        """The instance is used as a whole (``what``: hash, ==, copy...): every static is read."""

    def read_key(self) -> Any:
        """The statics read so far by the trace this dict stands in for, as a hashable set of
        (path, value): what its program is keyed by (subclasses; ``None``: not known)."""
        return None


def used_whole(obj: Any, what: str) -> None:
    """Tell a stand-in dict that ``obj`` is used as a whole (no-op on ordinary instances)."""
    d = obj._staticfield_dict
    if d.__class__ is not dict and isinstance(d, StandIn):
        d.whole(what)


class FieldSlot:
    """Class attribute of field ``name``: see the module docstring."""

    __slots__ = ("name", "default")

    # ``_state`` and ``_sealed`` own writes: they set these (a building instance, and a built one).
    building: Any = None
    reassign: Any = None
    refuse_delete: Any = None

    def __init__(self, name: str, default: Any) -> None:
        self.name, self.default = name, default

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        if obj is not None:
            try:
                return obj._staticfield_dict[self.name]  # a StandIn's __getitem__ records a static read
            except KeyError:
                pass
        if self.default is NO_DEFAULT:
            who = f"{owner.__qualname__!r}" if obj is None and owner is not None else f"{type(obj).__qualname__!r} object"
            raise AttributeError(f"{'type object ' if obj is None else ''}{who} has no attribute {self.name!r}")
        return self.default

    def __set__(self, obj: Any, value: Any) -> None:
        if self.building(obj):
            obj._staticfield_dict[self.name] = value
        else:
            self.reassign(obj, self.name, value)

    def __delete__(self, obj: Any) -> None:
        if not self.building(obj):
            self.refuse_delete(obj, self.name)
        try:
            del obj._staticfield_dict[self.name]
        except KeyError:
            raise AttributeError(self.name) from None

    def __repr__(self) -> str:
        return f"<field {self.name!r}>"


def _resolve(cls: type, name: str) -> tuple[type | None, Any]:
    for klass in cls.__mro__:
        if name in klass.__dict__:
            return klass, klass.__dict__[name]
    return None, None


def install(cls: type, fields: list[dataclasses.Field], decorated: str) -> None:
    """Put a ``FieldSlot`` under each field name whose class attribute is its default.

    ``decorated`` is the attribute that marks a class decorated by staticfield (whose
    own attributes over field names are already slots, or a user's choice)."""
    own = cls.__dict__.get("__annotations__", {})
    for f in fields:
        owner, _ = _resolve(cls, f.name)
        plain_base = (
            owner is not None and owner is not cls and decorated not in owner.__dict__
            and f.name in owner.__dict__.get("__annotations__", {})
        )
        if f.name in own or owner is None or plain_base:
            default = NO_DEFAULT if f.default is dataclasses.MISSING else f.default
            setattr(cls, f.name, FieldSlot(f.name, default))


def answers(cls: type, name: str) -> bool:
    """Whether ``cls().name`` reaches a ``FieldSlot`` (or a user's data descriptor, which
    answers whatever the dict holds) when the instance dict lacks ``name``."""
    _, attr = _resolve(cls, name)
    if isinstance(attr, FieldSlot):
        return True
    kind = type(attr)
    return hasattr(kind, "__set__") or hasattr(kind, "__delete__")
