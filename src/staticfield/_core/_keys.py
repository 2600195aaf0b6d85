"""Type-strict, never-raising cache keys for static values.

``StaticKey`` is the aux_data of every instance. Its equality is type-strict and
never raises: ``1``, ``1.0``, ``True`` and ``np.int32(1)`` are four keys, and a
user's ``__eq__`` is only called against a value of the same type, inside a
``try``, so a bad ``__eq__`` cannot poison JAX's caches.
"""

from __future__ import annotations

import math
import threading
import weakref
from typing import Any

import jax
import numpy as np

from ._frozendict import FrozenDict

_NUMBERS = frozenset({int, float, bool, complex})
_ATOMIC_KEYS = frozenset({str, bytes, type(None), type(Ellipsis)})
_NAN = float("nan")
_NEG_ZERO = "-0.0"  # stands in for -0.0, which == 0.0


class _ArrayKey:
    """Key part for a static NumPy array: compared by (shape, dtype, bytes)."""

    __slots__ = ("shape", "dtype", "data", "_hash")

    def __init__(self, a: np.ndarray) -> None:
        self.shape = a.shape
        self.dtype = a.dtype.str
        self.data = np.ascontiguousarray(a).tobytes()
        self._hash = hash((self.shape, self.dtype, self.data))

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return (
            other.__class__ is _ArrayKey
            and self._hash == other._hash  # type: ignore[attr-defined]
            and self.shape == other.shape  # type: ignore[attr-defined]
            and self.dtype == other.dtype  # type: ignore[attr-defined]
            and self.data == other.data  # type: ignore[attr-defined]
        )


class _SafeEq:
    """Key part for an arbitrary hashable object: equal only to the same type, never raises."""

    __slots__ = ("value", "_hash")

    def __init__(self, value: Any) -> None:
        self.value = value
        self._hash = hash((value.__class__, value))

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not _SafeEq:
            return False
        a, b = self.value, other.value  # type: ignore[attr-defined]
        if a is b:
            return True
        if a.__class__ is not b.__class__ or self._hash != other._hash:  # type: ignore[attr-defined]
            return False
        try:
            return bool(a == b)
        except Exception:
            return False


def _float_key(x: float) -> Any:
    """All NaNs are one key; ``-0.0`` differs from ``0.0`` (``1/x`` tells them apart)."""
    if x != x:
        return _NAN
    if x == 0.0 and math.copysign(1.0, x) < 0.0:
        return _NEG_ZERO
    return x


def keyable(value: Any) -> Any:
    """A type-strict, safely comparable stand-in for a frozen static value."""
    t = value.__class__
    if t in _NUMBERS:
        if t is float:
            return (t, _float_key(value))
        if t is complex:
            return (t, _float_key(value.real), _float_key(value.imag))
        return (t, value)
    if t in _ATOMIC_KEYS or isinstance(value, type):
        return value
    if isinstance(value, np.ndarray):
        return _ArrayKey(value)
    if isinstance(value, np.generic):
        return (t, value.tobytes())
    if isinstance(value, tuple):
        return (t, tuple(keyable(v) for v in value))
    # Iteration order is part of a static value: a trace that iterates {"a": 1, "b": 2} and one
    # that iterates {"b": 2, "a": 1} compute in different orders, so they never share a key.
    if isinstance(value, frozenset):
        return (frozenset, tuple(keyable(v) for v in value))
    if isinstance(value, FrozenDict):
        return (FrozenDict, tuple((keyable(k), keyable(v)) for k, v in value._d.items()))
    if isinstance(value, (int, float, complex)):  # subclasses, e.g. IntEnum
        return (t, value)
    return _SafeEq(value)


class StaticKey:
    """The aux_data of an instance: its class plus its static values, by value.

    Keys are *interned*: constructing a key equal (type-strictly, by ``keyable``) to a
    live one returns that same object. So equality is identity and the hash is the
    identity hash, both C-level (``object.__eq__``, ``object.__hash__``): JAX's C++
    dispatch compares the keys in a cached call signature with no Python call, and a
    dict lookup hashes one with none. ``state`` is what unflatten copies into a new
    instance's ``__dict__``: the frozen static values by field name (the key itself is
    stored beside them, so it holds no reference to itself).

    The invariant, owned here: two live keys are the same object exactly when their
    classes and field names are the same and their values are type-strictly equal. ``__new__`` is the
    only way to make one (``__reduce__`` and ``__deepcopy__`` go through it or return
    the key itself), and it looks the values up in ``_INTERNED`` under a lock; an entry
    goes when its key is collected, so a key made again later is a new object, equal
    to nothing that is still alive.
    """

    __slots__ = ("cls", "names", "values", "parts", "state", "__weakref__")

    cls: type
    names: tuple[str, ...]
    values: tuple
    parts: tuple
    state: dict[str, Any]

    def __new__(cls, owner: type, names: tuple[str, ...], values: tuple) -> StaticKey:
        parts = tuple(keyable(v) for v in values)
        ident = (owner, names, parts)
        with _INTERN_LOCK:
            found = _INTERNED.get(ident)
            if found is not None:
                return found
            self = object.__new__(cls)
            self.cls = owner
            self.names = names
            self.values = values
            self.parts = parts
            self.state = dict(zip(names, values))
            _INTERNED[ident] = self
        return self

    __hash__ = object.__hash__
    __eq__ = object.__eq__  # interned: equal keys are one object
    __ne__ = object.__ne__

    def __repr__(self) -> str:
        inner = ", ".join(f"{n}={v!r}" for n, v in zip(self.names, self.values))
        return f"StaticKey({self.cls.__qualname__}: {inner})"

    __str__ = __repr__

    def __reduce__(self) -> tuple:
        # Rebuilt (interned again) where it is loaded, never copied.
        return (StaticKey, (self.cls, self.names, self.values))

    def __copy__(self) -> StaticKey:
        return self

    def __deepcopy__(self, memo: dict) -> StaticKey:
        return self


# The live keys by (class, field names, type-strict parts): see StaticKey.
_INTERNED: weakref.WeakValueDictionary[tuple, StaticKey] = weakref.WeakValueDictionary()
_INTERN_LOCK = threading.Lock()


def _weak_types(value: Any) -> tuple:
    """An instance's leaves' weak types (a weak and a strong f32 promote differently, so
    they need two programs). ``==`` tells them apart too; the key says so itself, so it
    never depends on a class's ``__eq__``."""
    if "__staticfield_spec__" not in type(value).__dict__:
        return ()
    return tuple(getattr(leaf, "weak_type", False) for leaf in jax.tree_util.tree_leaves(value))


class StaticArgKey:
    """A type-strict key for a jit static argument (``static_argnums``); ``raw`` is the value.
    An instance's key includes its leaves' weak types."""

    __slots__ = ("raw", "part", "_hash")

    def __init__(self, raw: Any) -> None:
        self.raw = raw
        self.part = (keyable(raw), _weak_types(raw))
        self._hash = hash(self.part)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return other.__class__ is StaticArgKey and self._hash == other._hash and self.part == other.part  # type: ignore[attr-defined]
