"""``vars(obj)`` and ``obj.__dict__``: an instance's fields, and nothing staticfield keeps.

An instance's real ``__dict__`` holds its fields and what staticfield derives from them
(the static key, the flattened children, bindings; see ``_state``), because CPython's
attribute lookup, which JAX's C++ flatten and the C-level hit paths run, finds entries
there without a Python call. Code written for chex or plain dataclasses reads
``vars(obj).items()`` and ``obj.__dict__.values()`` as the fields; so the class's
``__dict__`` attribute is a ``FieldsView``: reading it gives a fresh dict of the fields
in declaration order (writing to that dict never changes the frozen instance), while
the real dict stays reachable, C-level, as ``obj._staticfield_dict`` (a ``RealDict``,
a ``property`` over the getter and setter of the ``__dict__`` slot CPython made).

==================================  =============================================
who                                 sees
==================================  =============================================
``vars(obj)``, ``obj.__dict__``     a new dict of the fields, declaration order
a ``deps="read"`` trace's ``self``  the same, after telling its recording dict
                                    (``StandIn``) that it is used whole (every
                                    static is read), as ``deps="all"`` shows it
``functools.cached_property``       the real dict (its value is a derived entry)
attribute lookup, JAX's flatten,    the real dict (CPython's dict pointer)
the hit paths
staticfield's own code              ``obj._staticfield_dict``: the real dict
``object.__setattr__(obj,           the real dict is replaced, as before
"__dict__", d)``
==================================  =============================================

CPython refuses ``setattr(cls, "__dict__", ...)`` (the metatype's own ``__dict__`` wins),
so ``install`` writes the view into the class's namespace itself: the mechanism,
``_compat.class_namespace``, is checked at import, and where it fails ``vars(obj)``
also shows staticfield's entries (said once) and everything else works.
"""

from __future__ import annotations

import functools
import operator
import sys
import types
import warnings
from typing import Any

from . import _compat
from ._errors import StaticFieldWarning
from ._slots import StandIn
from ._registry import SPECS

REAL_ATTR = "_staticfield_dict"
real = operator.attrgetter(REAL_ATTR)  # an instance's real dict (C-level)

# ``functools.cached_property`` stores its value in ``instance.__dict__``: it gets the real
# dict, so the value is cached (a derived entry: ``object.__setattr__`` drops it, ``vars``
# never shows it), and on a ``deps="read"`` trace's ``self`` it reads only what it reads.
_CACHED_PROPERTY = functools.cached_property.__get__.__code__


class FieldsView:
    """The ``__dict__`` attribute of a decorated class (see the module docstring). Not a
    ``property``, so that cloudpickle leaves it out of a class it sends by value (the
    class's spec installs it again there)."""

    __slots__ = ("real",)

    def __init__(self, real_slot: Any) -> None:
        self.real = real_slot  # the getset descriptor CPython made for the __dict__ slot

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        if obj is None:
            return self
        d = self.real.__get__(obj)
        if sys._getframe(1).f_code is _CACHED_PROPERTY:  # its value is kept with the derived entries
            return d
        if d.__class__ is not dict and isinstance(d, StandIn):
            d.whole("vars(self)")  # a deps="read" trace: the dict as a whole reads every static
        spec = SPECS.get(obj.__class__)
        if spec is None:  # an instance of an undecorated subclass: no fields to show
            return d
        return {n: d[n] for n in spec.names if n in d}

    def __set__(self, obj: Any, value: Any) -> None:
        self.real.__set__(obj, value)

    def __delete__(self, obj: Any) -> None:
        self.real.__delete__(obj)

    def __reduce__(self) -> Any:
        return FieldsView, (self.real,)


class RealDict(property):
    """``obj._staticfield_dict``: the real instance dict, through CPython's own getter (no
    Python frame). Pickled as the lookup that finds it again in the class it is sent with."""

    def __reduce__(self) -> Any:
        return _real_dict_of, (self.__objclass__,)


def _slot_of(cls: type) -> Any:
    """The getset descriptor of the ``__dict__`` slot nearest in ``cls``'s MRO."""
    for klass in cls.__mro__:
        found = klass.__dict__.get("__dict__")
        if isinstance(found, FieldsView):
            return found.real
        if isinstance(found, types.GetSetDescriptorType):
            return found
    raise TypeError(f"{cls.__qualname__} instances have no __dict__")


def _real_dict_of(cls: type) -> RealDict:
    made = RealDict(_slot_of(cls).__get__, _slot_of(cls).__set__)
    made.__objclass__ = cls  # type: ignore[attr-defined]
    return made


_warned: list[bool] = []


def install(cls: type, view: bool = True) -> None:
    """Give a decorated class its ``FieldsView`` (with ``view``, where
    ``_compat.class_namespace`` works) and ``_staticfield_dict``. A class sent by
    cloudpickle calls this again."""
    slot = _slot_of(cls)
    namespace = _compat.class_namespace(cls)
    if not view:  # a class whose generated code (an older staticfield's) reads obj.__dict__
        if namespace is not None and isinstance(namespace.get("__dict__"), FieldsView):
            namespace["__dict__"] = slot
    elif namespace is not None:
        namespace["__dict__"] = FieldsView(slot)
    elif not _warned:
        _warned.append(True)
        warnings.warn(_compat.CLASS_NAMESPACE_PROBLEM, StaticFieldWarning, stacklevel=4)
    # A setattr on the class also tells CPython its namespace changed (PyType_Modified).
    setattr(cls, REAL_ATTR, _real_dict_of(cls))
