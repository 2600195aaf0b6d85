"""The traced ``self`` of a ``deps="read"`` method: an instance of the user's own class
whose static values are answered, and recorded, by its ``__dict__``.

While a ``deps="read"`` method traces, ``self`` is made by ``stand_in``: a new instance
of ``type(obj)`` itself (no subclass is ever created, so ``type(self) is Cls``,
``type(self)(...)``, treedef comparisons, ``__init_subclass__`` registries and
metaclasses see what they see with ``deps="all"``). Its ``__dict__`` is a ``Record``
holding the fields' values, the instance's own order (the dynamic ones standing in
where nested instances are), and nothing else: no cached key, flatten, binding or
cached property of the instance it stands for.

The invariant: **every way of obtaining a static value of the traced ``self`` through
Python goes through ``Record.static``, which records the read.** Why no read escapes:

- ``self.n``: a field's class attribute is a data descriptor (``FieldSlot``,
  ``_core/_slots``), so Python asks it before the dict; it asks ``self.__dict__[n]``,
  which is ``Record.static``. A user's data descriptor (a property over a static
  name, in a subclass too) runs as on any instance, and reaches the value only
  through the dict (below) or other attributes. A name that resolves to anything
  else (a later ``Cls.n = 5``, a method, a cached_property, a slot-less class sent by
  an older pickle) is counted as read up front: the dict answers it unrecorded.
- The dict itself (``vars(self)``, ``self.__dict__``, ``cached_property``, every
  staticfield function that reads fields: the key, flatten, ``hash``, ``==``,
  ``repr``, ``copy``, pickle, ``sf.replace``): a lookup of a static name records that
  static; iterating, copying, comparing or printing the dict records every static.
  ``inspect.getattr_static(self, "n")`` returns the class's ``FieldSlot`` (a data
  descriptor wins), as on any instance: no value.
- The one way around it: ``dict``'s own C methods called on the dict past its
  overrides (``dict.get(vars(self), "n")``, ``dict.items(vars(self))``). They see the
  user's values (the trace computes what ``deps="all"`` computes) but record nothing;
  CPython gives no hook where code obtains an instance's ``__dict__``. The checking
  mode (``_check``) catches such a read when the program is shared with a key that
  differs there.
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
from .._core._registry import SPECS
from .._core._traceback import call_site
from ._read import Recorder


def where() -> str:
    """The user's source line that is reading, as ``file.py:line`` (staticfield's and
    JAX's frames skipped: a flatten by ``jax.jit`` names the user's call)."""
    return os.path.basename(call_site())


class Record(StandIn):
    """The ``__dict__`` of a traced ``self``: the fields' values in it (dynamic ones
    standing in where nested), each static read through it recorded."""

    __slots__ = ("recorder", "statics", "original")

    def __init__(self, recorder: Any, statics: dict[str, Any], original: dict[str, Any]) -> None:
        super().__init__()
        self.recorder = recorder
        self.statics = statics  # the static values whose reads are still recorded
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

    def read_key(self) -> Any:
        """The read set of the program being traced, with the values there (every key the
        program serves agrees on them): a bucketed method's verdict is keyed by it."""
        trace = self.recorder.trace
        with trace.deps.lock:
            return frozenset((path, value) for path, (value, _) in trace.variant.reads.items())

    # ----- one key: a static name is one read ---------------------------------------------
    def __getitem__(self, key: Any) -> Any:
        if key in self.statics:
            return self.static(key)
        return dict.__getitem__(self, key)

    def get(self, key: Any, default: Any = None) -> Any:
        if key in self.statics:
            return self.static(key)
        return dict.get(self, key, default)

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
        od = o._staticfield_dict
        statics = {name: od[name] for name in spec.static_names}
        d = Record(Recorder(trace, prefix, spec.static_names), statics, od)
        for name in od:  # the fields, in the instance's order; nothing derived from them
            if name in spec.name_set and name not in statics:
                dict.__setitem__(d, name, sub(od[name], (*prefix, name)))
            elif name in statics:
                dict.__setitem__(d, name, statics[name])
        for name in spec.static_names:
            if not answers(cls, name):  # the class would answer, not the dict: read up front
                statics.pop(name)
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
