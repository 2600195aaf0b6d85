"""The recording ``self`` of a ``deps="read"`` trace: a per-class subclass that reports reads.

While a ``deps="read"`` method traces, ``self`` is an instance of a *recording
subclass* of its class (made once per class, cached here). It holds the same
``__dict__`` as the real instance, and differs only in what its class defines:

- each static field is a data descriptor that returns the value and reports the
  read (field name, value, the user's source line) to the trace's recorder;
- every way of using the instance *as a whole* reports "every static read" first:
  ``__dict__``/``vars``, ``hash``, ``==``, ``repr``/``str``/``format``, ``copy``,
  ``deepcopy``, pickle (``__reduce_ex__``, ``__getstate__``), ``sf.replace`` and
  ``dataclasses.replace`` (through ``__dict__``/``__replace__``), the cached key and
  flatten entries (another ``sf.jit``/``jit_method`` reading them), and flattening it
  as a pytree (into ``jax.jit``, ``jax.grad``, ``jax.tree.map``...);
- ``__class__`` is the real class (so ``isinstance``, ``sf.replace``, staticfield's
  hit paths and pickling see the user's class), and calling the recording class
  (``type(self)(...)``) builds an instance of the real class.

Dynamic fields are plain instance-dict reads, as on the real class. Nothing here
decides anything: the recorder (``_deps``) does.
"""

from __future__ import annotations

import os
import weakref
from typing import Any, Callable

import jax

from .._core._spec import SPEC_ATTR, SPECS
from .._core._state import FLAT_ATTR, KEY_ATTR
from .._core._traceback import call_site

RECORDER = "_staticfield_recorder"
MARKER = "__staticfield_recording__"  # sf.Struct leaves a class carrying this undecorated
_CLASSES: weakref.WeakKeyDictionary[type, type] = weakref.WeakKeyDictionary()

# Whole-instance uses: these methods report "every static read" before they run.
_WHOLE = (
    "__eq__", "__ne__", "__hash__", "__repr__", "__str__", "__format__", "__reduce__",
    "__reduce_ex__", "__getstate__", "__copy__", "__deepcopy__", "__replace__", "__sizeof__",
)


def where() -> str:
    """The user's source line that is reading, as ``file.py:line`` (staticfield's and
    JAX's frames skipped: a flatten by ``jax.jit`` names the user's call)."""
    return os.path.basename(call_site())


def _real_dict_getter(cls: type) -> Callable[[Any], dict]:
    for klass in cls.__mro__:
        descriptor = klass.__dict__.get("__dict__")
        if descriptor is not None and type(descriptor).__name__ == "getset_descriptor":
            return descriptor.__get__  # type: ignore[no-any-return]
    raise TypeError(f"{cls.__qualname__} instances have no __dict__")


class _StaticRead:
    """A static field on the recording class: return the value, report the read."""

    __slots__ = ("name", "real_dict", "cls")

    def __init__(self, name: str, real_dict: Callable[[Any], dict], cls: Any) -> None:
        self.name, self.real_dict, self.cls = name, real_dict, cls

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        if obj is None:
            return getattr(self.cls, self.name)
        # The recorder may hand back a recording twin of a nested instance.
        return getattr(obj, RECORDER).read(self.name, self.real_dict(obj)[self.name], where())

    def __set__(self, obj: Any, value: Any) -> None:
        self.cls.__setattr__(obj, self.name, value)  # the frozen-instance error

    def __delete__(self, obj: Any) -> None:
        self.cls.__delattr__(obj, self.name)


class _WholeRead:
    """A cached entry that stands for every static (the key, the flatten cache)."""

    __slots__ = ("name", "real_dict", "what")

    def __init__(self, name: str, real_dict: Callable[[Any], dict], what: str) -> None:
        self.name, self.real_dict, self.what = name, real_dict, what

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        if obj is None:
            return self
        getattr(obj, RECORDER).read_all(self.what, where())
        d = self.real_dict(obj)
        if self.name not in d:  # not computed yet: compute it as the real class would
            spec = SPECS[obj.__class__]
            return spec.flat(obj) if self.name == FLAT_ATTR else spec.make_key(obj)
        return d[self.name]

    def __set__(self, obj: Any, value: Any) -> None:
        self.real_dict(obj)[self.name] = value


def _whole(name: str, method: Callable[..., Any]) -> Callable[..., Any]:
    what = name.strip("_")

    def use(self: Any, *args: Any, **kwargs: Any) -> Any:
        getattr(self, RECORDER).read_all(what, where())
        return method(self, *args, **kwargs)

    use.__name__ = name
    return use


def recording_class(cls: type) -> type:
    """The recording subclass of ``cls`` (made once, then cached)."""
    made = _CLASSES.get(cls)
    if made is not None:
        return made
    spec = SPECS[cls]
    real_dict = _real_dict_getter(cls)

    def whole_dict(self: Any) -> dict:
        getattr(self, RECORDER).read_all("__dict__", where())
        return real_dict(self)

    def new(klass: type, *args: Any, **kwargs: Any) -> Any:
        return cls(*args, **kwargs)  # type(self)(...): an instance of the real class

    namespace: dict[str, Any] = {
        "__slots__": (RECORDER,),
        "__module__": cls.__module__,
        "__doc__": cls.__doc__,
        MARKER: True,
        SPEC_ATTR: spec,
        "__class__": property(lambda self: cls),
        "__dict__": property(whole_dict),
        "__new__": new,
        KEY_ATTR: _WholeRead(KEY_ATTR, real_dict, "static key"),
        FLAT_ATTR: _WholeRead(FLAT_ATTR, real_dict, "flatten"),
    }
    for name in spec.static_names:
        namespace[name] = _StaticRead(name, real_dict, cls)
    for name in _WHOLE:
        method = getattr(cls, name, None)
        if method is not None:
            namespace[name] = _whole(name, method)
    made = type(cls.__name__, (cls,), namespace)
    made.__qualname__ = cls.__qualname__

    def flatten(o: Any) -> Any:
        getattr(o, RECORDER).read_all("pytree flatten", where())
        return spec.flatten(o)

    def flatten_with_keys(o: Any) -> Any:
        getattr(o, RECORDER).read_all("pytree flatten", where())
        return spec.flatten_with_keys(o)

    jax.tree_util.register_pytree_with_keys(made, flatten_with_keys, spec.unflatten, flatten_func=flatten)
    _CLASSES[cls] = made
    return made


def recording(obj: Any, recorder: Any) -> Any:
    """A recording twin of ``obj`` (same fields and cached entries) reporting to ``recorder``;
    ``None`` when its class cannot have a recording subclass (a user's ``__init_subclass__``
    refused it): the caller then counts every static as read."""
    try:
        made = recording_class(obj.__class__)
    except Exception:  # noqa: BLE001 - recording is optional; reading everything is always sound
        return None
    twin: Any = object.__new__(made)
    _real_dict_getter(obj.__class__)(twin).update(obj.__dict__)
    made.__dict__[RECORDER].__set__(twin, recorder)
    return twin
