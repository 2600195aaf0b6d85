"""``@sf.dataclass(mappable=True)``: instances are ``collections.abc.Mapping``s over their
fields, as ``chex.dataclass`` makes them by default.

``state["step"]``, ``state.keys()``, ``len(state)``, ``**state``, and libraries that walk
mappings (dm-tree, ``tf.nest``) descend into an instance. Iteration covers every field,
static ones included, in declaration order; ``bool(obj)`` is ``len(obj) > 0``; ``==``,
``hash`` and ``repr`` stay staticfield's (the class is registered as a ``Mapping``, it
does not inherit one). As in chex, the class also accepts ``Cls(mapping)`` and
``Cls(iterable of (name, value) pairs)``, which is how dm-tree rebuilds a mapping; fields
that ``__init__`` does not take are left out of such a call, as chex leaves them out. A
field named like a ``Mapping`` method is a ``TypeError`` when the class is made.
"""

from __future__ import annotations

import collections.abc
import functools
from typing import Any, Callable

from . import _errors

_METHODS = ("keys", "items", "values", "get")


def _getitem(self: Any, key: Any) -> Any:
    if key.__class__ is str and key in self.__staticfield_spec__.name_set:
        return getattr(self, key)  # a deps="read" trace records a static read here
    raise KeyError(key)


def _iter(self: Any) -> Any:
    return iter(self.__staticfield_spec__.names)


def _len(self: Any) -> int:
    return len(self.__staticfield_spec__.names)


def _contains(self: Any, key: Any) -> bool:
    return key.__class__ is str and key in self.__staticfield_spec__.name_set


MAPPING_METHODS: dict[str, Callable[..., Any]] = {
    "__getitem__": _getitem,
    "__iter__": _iter,
    "__len__": _len,
    "__contains__": _contains,
    **{name: getattr(collections.abc.Mapping, name) for name in _METHODS},
}


def _pairs(spec: Any, value: Any) -> dict[str, Any] | None:
    """A single argument read as the fields it names: a mapping, or an iterable of
    ``(name, value)`` pairs naming fields; ``None`` when it is neither (a field's value)."""
    if isinstance(value, collections.abc.Mapping):
        items = list(value.items())
    elif isinstance(value, (str, bytes)) or not isinstance(value, collections.abc.Iterable) or hasattr(
            value, "shape"):
        return None
    else:
        items = list(value)
        if not all(isinstance(p, tuple) and len(p) == 2 and p[0] in spec.name_set for p in items):
            return None
    taken = {f.name for f in spec.fields if f.init}
    return {k: v for k, v in items if k in taken or k not in spec.name_set}


def install(cls: type, spec: Any) -> None:
    """Make ``cls``'s instances mappings over their fields (see the module docstring)."""
    clash = [n for n in spec.names if n in _METHODS]
    if clash:
        raise TypeError(_errors.MAPPABLE_CLASH.format(cls=cls.__qualname__, name=clash[0]))
    for name, fn in MAPPING_METHODS.items():
        if name not in cls.__dict__:
            setattr(cls, name, fn)
    init = cls.__dict__["__init__"]

    @functools.wraps(init)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        if len(args) == 1 and not kwargs:
            fields = _pairs(spec, args[0])
            if fields is not None:
                init(self, **fields)
                return
        init(self, *args, **kwargs)

    if getattr(init, "__staticfield_custom_init__", False):  # a subclass inherits the user's own
        __init__.__wrapped__ = init.__wrapped__  # type: ignore[attr-defined]
    cls.__init__ = __init__  # type: ignore[misc]
    collections.abc.Mapping.register(cls)
