"""Per-class facts, computed once at decoration: the ``Spec`` of a decorated class.

A ``Spec`` lists a class's fields split into static and dynamic names, their
converters, its ``__check_init__`` hooks and the generated pytree functions;
``spec_of`` finds it (or says to decorate the class), and ``sf.fields``,
``sf.static_fields`` and ``sf.dynamic_fields`` read it. Which classes are decorated
(``SPECS``) and their registration with JAX is ``_registry``'s business; what an
*instance* holds, and who writes it, ``_state``'s.

Imports: ``_errors``, ``_field``, ``_keys``, ``_registry`` and ``_vars`` (a spec
unpickled with its class registers it and installs ``vars(obj)``'s view again). Called
by the decorator, ``_state``, ``_codegen`` and every room that reads a class's fields.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from . import _errors, _registry, _vars
from ._field import converter_of, is_static, leaves_of
from ._keys import StaticKey
from ._registry import SPEC_ATTR


class Spec:
    """What staticfield knows about one decorated class.

    A spec unpickled as part of its class (cloudpickle, by value) registers the class with
    JAX in the new process, or takes over from the spec of the empty class cloudpickle
    built first.
    """

    any_set: frozenset[str] = frozenset()  # also for a spec pickled before leaves= existed
    mappable = False  # also for a spec pickled before mappable= existed

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        # cloudpickle leaves a class's __dict__ attribute behind: install it again, unless the
        # class was pickled by a staticfield whose generated code reads obj.__dict__ itself
        old = "__dict__" in getattr(getattr(self.flat, "__code__", None), "co_names", ())
        _vars.install(self.cls, view=not old)
        _registry.take_over(self)

    def __init__(self, cls: type, check: bool) -> None:
        self.cls = cls
        self.fields: tuple[dataclasses.Field, ...] = dataclasses.fields(cls)
        self.names = tuple(f.name for f in self.fields)
        self.name_set = frozenset(self.names)
        self.static_names = tuple(f.name for f in self.fields if is_static(f))
        self.dynamic_names = tuple(f.name for f in self.fields if not is_static(f))
        self.static_set = frozenset(self.static_names)
        # leaves="any" fields: their non-array leaves are static (see _anyleaves)
        self.any_set = frozenset(f.name for f in self.fields if leaves_of(f) == "any")
        self.converters = {f.name: c for f in self.fields if (c := converter_of(f)) is not None}
        self.check = check
        self.by_name = {f.name: f for f in self.fields}
        # Each class's own __check_init__, the class itself first (equinox's order).
        self.check_inits = tuple(
            k.__dict__["__check_init__"] for k in cls.__mro__ if "__check_init__" in k.__dict__
        )
        self.unflatten: Any = None  # the generated pytree functions, set by register()
        self.flatten: Any = None
        self.flatten_with_keys: Any = None
        self.flat: Any = None  # computes and caches (children, key) on an instance
        self.make_key: Any = None  # builds (or reuses) an instance's StaticKey
        self.constant_key = None if self.static_names else StaticKey(cls, (), ())
        self.provisional = False  # set by the decorator for an empty class body


def spec_of(cls_or_obj: Any, what: str = "this function") -> Spec:
    cls = cls_or_obj if isinstance(cls_or_obj, type) else type(cls_or_obj)
    spec = cls.__dict__.get(SPEC_ATTR)
    if spec is None:
        base = next((b for b in cls.__mro__[1:] if SPEC_ATTR in b.__dict__), None)
        if base is not None:
            raise TypeError(
                _errors.UNDECORATED_SUBCLASS.format(sub=cls.__qualname__, base=base.__qualname__)
            )
        raise TypeError(
            f"{what} expects an @sf.dataclass class or instance, got {cls.__qualname__}. "
            "Decorate the class with @sf.dataclass."
        )
    return spec


def bad_subclass(obj: Any, base: type) -> None:
    raise TypeError(
        _errors.UNDECORATED_SUBCLASS.format(sub=type(obj).__qualname__, base=base.__qualname__)
    )


def fields(cls_or_obj: Any) -> tuple[dataclasses.Field, ...]:
    """The ``dataclasses.Field`` objects of an ``@sf.dataclass`` class or instance, in order."""
    return spec_of(cls_or_obj, "sf.fields").fields


def static_fields(cls_or_obj: Any) -> tuple[str, ...]:
    """Names of the static fields (the jit cache key), in declaration order."""
    return spec_of(cls_or_obj, "sf.static_fields").static_names


def dynamic_fields(cls_or_obj: Any) -> tuple[str, ...]:
    """Names of the dynamic fields (the pytree children), in declaration order."""
    return spec_of(cls_or_obj, "sf.dynamic_fields").dynamic_names
