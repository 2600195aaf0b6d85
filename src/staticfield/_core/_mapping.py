"""``@sf.dataclass(mappable=True)``: instances are ``collections.abc.Mapping``s over their
fields, as ``chex.dataclass`` makes them by default.

``state["step"]``, ``state.keys()``, ``len(state)``, ``**state``, and libraries that walk
mappings (dm-tree, ``tf.nest``) descend into an instance. Iteration covers every field,
static ones included, in declaration order; ``bool(obj)`` is ``len(obj) > 0``; ``==``,
``hash`` and ``repr`` stay staticfield's (the class is registered as a ``Mapping``, it
does not inherit one). As in chex, the class also accepts ``Cls(mapping)`` and
``Cls(iterable of (name, value) pairs)``, which is how dm-tree rebuilds a mapping: a
single positional argument is read as field names only when its keys are all field
names and it is not an instance of the first field's annotated type (``Outer(Inner(...))``
with a mappable ``Inner`` sets ``Outer``'s first field); fields that ``__init__`` does
not take are left out of such a call, as chex leaves them out. A class with a
user-written ``__init__`` keeps it, and is built from field names by the generated
field-wise constructor instead. A field named like a ``Mapping`` method is a
``TypeError`` when the class is made.
"""

from __future__ import annotations

import collections.abc
import functools
import sys
import types
import typing
import weakref
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
    ``(name, value)`` pairs, whose keys are all field names and that is not an instance
    of the first field's annotated type; ``None`` when it is the first field's value."""
    if not spec.names or _is_first_field_value(spec, value):
        return None
    if isinstance(value, collections.abc.Mapping):
        items = list(value.items())
    elif isinstance(value, (str, bytes)) or not isinstance(value, collections.abc.Iterable) or hasattr(
            value, "shape"):
        return None
    else:
        items = list(value)
        if not all(isinstance(p, tuple) and len(p) == 2 for p in items):
            return None
    if not all(k.__class__ is str and k in spec.name_set for k, _ in items):
        return None
    taken = {f.name for f in spec.fields if f.init}
    return {k: v for k, v in items if k in taken}


def _is_first_field_value(spec: Any, value: Any) -> bool:
    """Whether ``value`` is an instance of the first field's annotated type (``Any``, a
    TypeVar or an annotation that does not resolve counts as one)."""
    kinds = _KINDS.get(spec.cls)
    if kinds is None:
        kinds = _first_kinds(spec)
        if kinds is not _ANY:  # a forward reference may resolve later
            _KINDS[spec.cls] = kinds
    return kinds is _ANY or isinstance(value, kinds)


_ANY = object()
_KINDS: weakref.WeakKeyDictionary[type, tuple] = weakref.WeakKeyDictionary()


def _first_kinds(spec: Any) -> Any:
    """The classes the first field's annotation names (a tuple), or ``_ANY``."""
    name = spec.names[0]
    hint = spec.by_name[name].type
    owner = next((k for k in spec.cls.__mro__ if name in k.__dict__.get("__annotations__", {})), spec.cls)
    module = sys.modules.get(owner.__module__)
    for _ in range(3):  # resolved alone (another field's unresolvable annotation is no matter);
        if not isinstance(hint, str):  # a quoted name under `from __future__ import annotations` twice
            break
        try:
            hint = eval(hint, dict(vars(module)) if module else {}, dict(vars(owner)))  # noqa: S307
        except Exception:  # noqa: BLE001 - an annotation that does not resolve matches anything
            return _ANY
    out: list[type] = []
    todo = [hint]
    while todo:
        h = todo.pop()
        origin = typing.get_origin(h)
        if origin is typing.Union or (sys.version_info >= (3, 10) and origin is types.UnionType):
            todo.extend(typing.get_args(h))
        elif origin is typing.Annotated:
            todo.append(typing.get_args(h)[0])
        elif h is type(None):
            out.append(type(None))
        elif isinstance(origin, type):
            out.append(origin)
        elif isinstance(h, type):
            out.append(h)
        else:  # Any, a TypeVar, a string, a Literal, ...
            return _ANY
    return tuple(out)


def install(cls: type, spec: Any, fieldwise: Callable[..., None] | None = None) -> None:
    """Make ``cls``'s instances mappings over their fields (see the module docstring);
    ``fieldwise``, a class with a user-written ``__init__``: the generated field-wise
    constructor, which builds an instance from the fields a mapping names."""
    clash = [n for n in spec.names if n in _METHODS]
    if clash:
        raise TypeError(_errors.MAPPABLE_CLASH.format(cls=cls.__qualname__, name=clash[0]))
    for name, fn in MAPPING_METHODS.items():
        if name not in cls.__dict__:
            setattr(cls, name, fn)
    init = cls.__dict__["__init__"]
    by_fields = fieldwise if fieldwise is not None else init

    @functools.wraps(init)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        if len(args) == 1 and not kwargs:
            fields = _pairs(spec, args[0])
            if fields is not None:
                by_fields(self, **fields)
                return
        init(self, *args, **kwargs)

    if getattr(init, "__staticfield_custom_init__", False):  # a subclass inherits the user's own
        __init__.__wrapped__ = init.__wrapped__  # type: ignore[attr-defined]
    cls.__init__ = __init__  # type: ignore[misc]
    collections.abc.Mapping.register(cls)
