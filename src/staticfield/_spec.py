"""Per-class facts, computed once at decoration, and the construction checks.

A ``Spec`` lists a class's fields split into static and dynamic names, their
converters and the flags the generated code needs. ``finish`` validates an
instance after a custom ``__init__`` or ``__post_init__`` assigned its fields.
"""

from __future__ import annotations

import dataclasses
import operator
import weakref
from typing import Any

import jax
import numpy as np

from . import _errors
from ._field import converter_of, is_static
from ._freeze import ATOMIC, StaticKey, freeze

SPEC_ATTR = "__staticfield_spec__"
KEY_ATTR = "_staticfield_key"
# Instances are immutable, so what JAX's flatten returns, (children, key), is computed
# once per instance (by unflatten, or on first use) and JAX reads it with one
# C-level attrgetter: no Python frame per flatten.
FLAT_ATTR = "_staticfield_flat"

try:  # the concrete jax.Array type; looked up without creating an array, which would
    # start the XLA backend at import (jax.distributed.initialize must come first).
    from jax._src.array import ArrayImpl as _ArrayImpl

    _ARRAY_TYPES: tuple[type, ...] = (_ArrayImpl,)
except ImportError:  # pragma: no cover - a JAX without that module: isinstance still works
    _ARRAY_TYPES = ()

# Leaf types accepted in dynamic fields without a closer look.
LEAF_OK = frozenset({np.ndarray, float, int, bool, complex, type(None), *_ARRAY_TYPES})
_LEAF_CLASSES = (jax.Array, np.ndarray, np.generic, bool, int, float, complex, jax.ShapeDtypeStruct)

# ids of instances whose custom __init__ / __post_init__ is running: they may set fields.
INITIALIZING: set[int] = set()


class Spec:
    """What staticfield knows about one decorated class."""

    def __init__(self, cls: type, check: bool) -> None:
        self.cls = cls
        self.fields: tuple[dataclasses.Field, ...] = dataclasses.fields(cls)
        self.names = tuple(f.name for f in self.fields)
        self.name_set = frozenset(self.names)
        self.static_names = tuple(f.name for f in self.fields if is_static(f))
        self.dynamic_names = tuple(f.name for f in self.fields if not is_static(f))
        self.static_set = frozenset(self.static_names)
        self.converters = {f.name: c for f in self.fields if (c := converter_of(f)) is not None}
        self.check = check
        self.by_name = {f.name: f for f in self.fields}
        self.unflatten: Any = None  # the generated pytree functions, set by register()
        self.flatten: Any = None
        self.flatten_with_keys: Any = None
        self.flat: Any = None  # computes and caches (children, key) on an instance
        self.make_key: Any = None  # builds (or reuses) an instance's StaticKey
        self.constant_key = (
            None if self.static_names else StaticKey(cls, (), (), KEY_ATTR)
        )

    def key_of(self, obj: Any) -> StaticKey:
        try:
            return obj.__dict__[KEY_ATTR]
        except KeyError:
            return self.make_key(obj)

    def set_value(self, obj: Any, name: str, value: Any, convert: bool) -> None:
        """Convert, freeze or check one field value and store it (construction path)."""
        if convert and name in self.converters:
            value = self.converters[name](value)
        if name in self.static_set:
            if value.__class__ not in ATOMIC:
                value = freeze(value, f"{self.cls.__qualname__}.{name}", name)
        elif self.check and value.__class__ not in LEAF_OK:
            check_dynamic(self.cls, name, value)
        obj.__dict__[name] = value


_REGISTERED: weakref.WeakSet[type] = weakref.WeakSet()
# Every decorated class's spec by exact type: the jit hit path's one-lookup test.
SPECS: dict[type, Spec] = {}


def register(spec: Spec, generated: dict[str, Any]) -> None:
    """Register ``spec.cls`` with JAX as a pytree with ``GetAttrKey`` keys."""
    spec.flat = generated["flat"]
    spec.make_key = generated["make_key"]
    spec.flatten = operator.attrgetter(FLAT_ATTR)
    setattr(spec.cls, FLAT_ATTR, FlatCache(spec))
    spec.flatten_with_keys = generated["flatten_with_keys"]
    spec.unflatten = generated["unflatten"]
    ensure_registered(spec.cls)


def ensure_registered(cls: type) -> None:
    """Register a class once; also for a class rebuilt by value (cloudpickle in a new process)."""
    if cls in _REGISTERED:
        return
    spec: Spec = cls.__dict__[SPEC_ATTR]
    SPECS[cls] = spec
    jax.tree_util.register_pytree_with_keys(
        cls, spec.flatten_with_keys, spec.unflatten, flatten_func=spec.flatten
    )
    _REGISTERED.add(cls)


class FlatCache:
    """Non-data descriptor: ``obj._staticfield_flat`` computed once, then an instance-dict hit."""

    __slots__ = ("spec",)

    def __init__(self, spec: Spec) -> None:
        self.spec = spec

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        if obj is None:
            return self
        if obj.__class__ is self.spec.cls:
            return self.spec.flat(obj)
        return spec_of(obj).flat(obj)  # a decorated subclass, or the undecorated-subclass error


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


def is_instance(obj: Any) -> bool:
    return SPEC_ATTR in type(obj).__dict__


def check_dynamic(cls: type, name: str, value: Any) -> None:
    """Raise TypeError if a leaf of a dynamic field's value is not array-like."""
    leaves = jax.tree_util.tree_leaves(value)
    if all(leaf.__class__ in LEAF_OK or isinstance(leaf, _LEAF_CLASSES) for leaf in leaves):
        return
    for path, leaf in jax.tree_util.tree_flatten_with_path(value)[0]:
        if not (leaf.__class__ in LEAF_OK or isinstance(leaf, _LEAF_CLASSES)):
            where = f"{cls.__qualname__}.{name}{jax.tree_util.keystr(path)}"
            is_fn = callable(leaf) and not isinstance(leaf, type)
            tname = "function" if is_fn else type(leaf).__name__
            ann = "Callable" if is_fn else tname
            raise TypeError(
                _errors.BAD_DYNAMIC_LEAF.format(where=where, type=tname, ann=ann, field=name)
            )


def bad_subclass(obj: Any, base: type) -> None:
    raise TypeError(
        _errors.UNDECORATED_SUBCLASS.format(sub=type(obj).__qualname__, base=base.__qualname__)
    )


def finish(obj: Any, convert: bool) -> None:
    """Validate an instance whose fields were assigned by user code.

    Fills defaults of unset fields, then converts (custom ``__init__`` only),
    freezes and checks every field, and drops any cached key.
    """
    spec: Spec = type(obj).__dict__[SPEC_ATTR]
    d = obj.__dict__
    d.pop(KEY_ATTR, None)
    d.pop(FLAT_ATTR, None)
    for n in [n for n in d if getattr(type(d[n]), "__staticfield_bound__", False)]:
        del d[n]  # a jit_method bound while __init__ ran: its children may change below
    extra = [n for n in d if n not in spec.name_set]
    if extra:
        raise TypeError(_errors.NOT_A_FIELD_ATTR.format(cls=spec.cls.__qualname__, name=extra[0]))
    missing = []
    for f in spec.fields:
        if f.name in d:
            continue
        if f.default is not dataclasses.MISSING:
            d[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            d[f.name] = f.default_factory()
        else:
            missing.append(f.name)
    if missing:
        names = ", ".join(repr(m) for m in missing)
        raise TypeError(
            _errors.MISSING_AFTER_INIT.format(cls=spec.cls.__qualname__, names=names)
        )
    for name in spec.names:
        spec.set_value(obj, name, d[name], convert)
    if spec.constant_key is not None:
        d[KEY_ATTR] = spec.constant_key


def fields(cls_or_obj: Any) -> tuple[dataclasses.Field, ...]:
    """The ``dataclasses.Field`` objects of an ``@sf.dataclass`` class or instance, in order."""
    return spec_of(cls_or_obj, "sf.fields").fields


def static_fields(cls_or_obj: Any) -> tuple[str, ...]:
    """Names of the static fields (the jit cache key), in declaration order."""
    return spec_of(cls_or_obj, "sf.static_fields").static_names


def dynamic_fields(cls_or_obj: Any) -> tuple[str, ...]:
    """Names of the dynamic fields (the pytree children), in declaration order."""
    return spec_of(cls_or_obj, "sf.dynamic_fields").dynamic_names
