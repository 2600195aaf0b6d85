"""The traced ``self`` of a ``deps="read"`` method: an instance of the user's own class
whose static values are answered, and recorded, by its ``__dict__``.

While a ``deps="read"`` method traces, ``self`` is made by ``stand_in``: a new instance
of ``type(obj)`` itself (no subclass is ever created, so ``type(self) is Cls``,
``type(self)(...)``, treedef comparisons, ``__init_subclass__`` registries and
metaclasses see what they see with ``deps="all"``). Its ``__dict__`` is a ``Record``
holding the dynamic fields and nothing else: no static value, no cached key, flatten,
binding or cached property of the instance it stands for.

The invariant: **every way of obtaining a static value of the traced ``self`` goes
through ``Record.static``, which records the read.** Why no read can escape it:

- ``self.n``: the dict lacks ``n``, so Python asks the class. There a ``StaticSlot``
  (``_core/_slots``) calls ``Record.static``; a user's data descriptor (a property
  over a static name, in a subclass too) runs as on any instance, and reaches the
  value only through the dict (below) or other attributes. A name that resolves to
  anything else (a later ``Cls.n = 5``, a method, a cached_property, a slot-less
  class sent by an older pickle) is put in the dict and counted as read up front:
  that is what an ordinary instance would answer.
- The dict itself (``vars(self)``, ``self.__dict__``, ``cached_property``, every
  staticfield function that reads fields: the key, flatten, ``hash``, ``==``,
  ``repr``, ``copy``, pickle, ``sf.replace``): a lookup of a static name records that
  static; iterating, copying, comparing or printing the dict records every static
  and puts the values in. C code that reads a dict without its methods (attribute
  lookup) finds no static value there, so it falls back to the class (above).
- Cached entries cannot answer: none is copied in. What the trace itself caches
  (a key built from recorded reads, a cached property computed from them) derives
  from recorded reads only.
- A nested static value is returned as it is (its identity kept: ``self.cfg is
  DEFAULT`` holds), so the read of ``self.cfg`` records ``cfg`` whole, and whatever
  is read inside it is covered.
- A read after the trace returned (a callback, a ``custom_vjp`` rule, a kept
  reference) still goes through ``Record.static``; the recorder then marks it read
  and stops sharing (``_share``), and the reference count check catches the escape
  before the program is shared at all.
"""

from __future__ import annotations

import os
from typing import Any, Callable

from .._core._deep import DeepKey
from .._core._slots import StandIn, answers
from .._core._spec import SPECS
from .._core._traceback import call_site
from ._read import Recorder


def where() -> str:
    """The user's source line that is reading, as ``file.py:line`` (staticfield's and
    JAX's frames skipped: a flatten by ``jax.jit`` names the user's call)."""
    return os.path.basename(call_site())


class Record(StandIn):
    """The ``__dict__`` of a traced ``self``: dynamic fields in it, statics answered and recorded."""

    __slots__ = ("recorder", "statics", "original")

    def __init__(self, recorder: Any, statics: dict[str, Any], original: dict[str, Any]) -> None:
        super().__init__()
        self.recorder = recorder
        self.statics = statics  # the static values not (yet) in the dict
        self.original = original  # the dict of the instance it stands for, in its order

    def static(self, name: str) -> Any:
        return self.recorder.read(name, self.statics[name], where())

    def whole(self, what: str) -> None:
        """The dict used as a whole: every static is read, and the dict becomes the one
        ``deps="all"`` would show (the original's entries in its order, then the trace's)."""
        if self.statics:
            self.recorder.read_all(what, where())
            now = dict(dict.items(self))
            dict.clear(self)
            for name, value in self.original.items():
                dict.__setitem__(self, name, now.pop(name, value))
            dict.update(self, now)
            self.statics = {}

    # ----- one key: a static name is one read ---------------------------------------------
    def __getitem__(self, key: Any) -> Any:
        try:
            return dict.__getitem__(self, key)
        except KeyError:
            if key in self.statics:
                return self.static(key)
            raise

    def get(self, key: Any, default: Any = None) -> Any:
        if dict.__contains__(self, key):
            return dict.__getitem__(self, key)
        return self.static(key) if key in self.statics else default

    def __contains__(self, key: Any) -> bool:
        return dict.__contains__(self, key) or key in self.statics

    def setdefault(self, key: Any, default: Any = None) -> Any:
        if key in self:
            return self[key]
        dict.__setitem__(self, key, default)
        return default

    def pop(self, key: Any, *default: Any) -> Any:
        if key in self.statics:
            self.whole("__dict__.pop")
        return dict.pop(self, key, *default)

    def __delitem__(self, key: Any) -> None:
        if key in self.statics:
            self.whole("del __dict__[...]")
        dict.__delitem__(self, key)


def _whole(name: str) -> Callable[..., Any]:
    method = getattr(dict, name)

    def use(self: Record, *args: Any, **kwargs: Any) -> Any:
        self.whole(f"__dict__.{name}" if not name.startswith("__") else "__dict__")
        return method(self, *args, **kwargs)

    use.__name__ = use.__qualname__ = name
    return use


for _name in ("keys", "values", "items", "__iter__", "__len__", "__reversed__", "copy",
              "__repr__", "__eq__", "__ne__", "__or__", "__ror__", "__ior__", "update",
              "popitem", "clear"):
    setattr(Record, _name, _whole(_name))
Record.__reduce_ex__ = lambda self, protocol: (Record.whole(self, "pickle") or (dict, (dict(self),)))  # type: ignore[method-assign,assignment]
Record.__hash__ = None  # type: ignore[assignment]


def stand_in(obj: Any, trace: Any, key: Any) -> tuple[Any, list[tuple], list[tuple[tuple, Any]]]:
    """A new instance of ``type(obj)`` whose statics are answered by a recording dict; so
    is each nested instance at a path of ``key`` (a ``DeepKey``: see ``_core/_deep``).

    Also returns the static paths that could not be left out of a dict (the class would
    answer: read up front by the caller) and, by path, the nested stand-ins and the tuples
    made to hold them (a tuple of layers kept by a closure keeps its layers)."""
    nested = set(key._at) if isinstance(key, DeepKey) else set()
    inner = key._inner if isinstance(key, DeepKey) else frozenset()
    shadowed: list[tuple] = []
    made: list[tuple[tuple, Any]] = []

    def make(o: Any, prefix: tuple) -> Any:
        cls = o.__class__
        spec = SPECS[cls]
        od = o.__dict__
        statics = {name: od[name] for name in spec.static_names}
        d = Record(Recorder(trace, prefix, spec.static_names), statics, od)
        for name in spec.dynamic_names:
            dict.__setitem__(d, name, sub(od[name], (*prefix, name)))
        for name in spec.static_names:
            if not answers(cls, name):  # the class would answer, not the dict: keep it, as read
                dict.__setitem__(d, name, statics.pop(name))
                shadowed.append((*prefix, name))
        new = object.__new__(cls)
        object.__setattr__(new, "__dict__", d)
        return new

    def sub(value: Any, path: tuple) -> Any:
        if path in nested and value.__class__ in SPECS:
            made.append((path, make(value, path)))
            return made[-1][1]
        if path in inner and value.__class__ is tuple:
            made.append((path, tuple(sub(v, (*path, i)) for i, v in enumerate(value))))
            return made[-1][1]  # a container of stand-ins: kept past the trace, it lets them escape
        return value

    return make(obj, ()), shadowed, made
