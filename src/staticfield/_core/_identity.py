"""The one identity of a static value: what "the same static value" means, everywhere.

Every site that keys, digests or compares a static value derives from this module (see
DESIGN, "One identity for static values"): ``key`` is the in-process identity (a
hashable, type-strict, order-strict stand-in that compares without raising);
``_portable.write`` is the same identity written for another process (no memory
addresses, no hash-seed-dependent orders); ``difference`` names, for an explanation, how
two values that Python calls equal differ for the identity.

The identity, recursively: type-strict (``1``, ``1.0``, ``True`` and ``np.int64(1)`` are
four values) and order-strict (a frozenset or a dict by its iteration order); floats and
complex numbers by their bits (``0.0`` and ``-0.0`` differ, a NaN is its bits); NumPy
arrays by (shape, dtype, bytes); tuples and named tuples by class and items;
``functools.partial`` by function, arguments and keywords; frozen dataclasses by class
and field identities; any other hashable value by its class, then ``==`` (called only
between values of one class, never raising). In one process a function, a class or a
module is itself (``is``): stricter than across processes, where a function is its
module, qualified name, code, closure cells and defaults.

A fast key on a hit path may only be a cheaper spelling of ``key``: ``==``/``hash`` of a
value of a type for which ``exact_eq`` holds merges nothing that ``key`` keeps apart (with
the value's type beside it); ``float.hex`` of a float that is not a NaN is its bits. Any
other leaf (a frozenset, a complex, a frozen dataclass, a NaN) must be looked up through
``key``.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import math
import struct
import types
from typing import Any

import numpy as np

from ._frozendict import FrozenDict

_NUMBERS = frozenset({int, float, bool, complex})
_ATOMIC_KEYS = frozenset({str, bytes, type(None), type(Ellipsis)})

_IDENTITY_EXEMPT = (
    types.FunctionType, types.BuiltinFunctionType, types.MethodType, type, types.ModuleType,
    enum.Enum, functools.partial,
)
BY_INTENT = "__staticfield_identity_hashed__"  # set by sf.identity_hashed; subclasses inherit it


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


class ById:
    """Key part of an unhashable value: the object itself, compared by identity (the key
    holds it, so its id is never reused while the key lives)."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def __hash__(self) -> int:
        return id(self.value)

    def __eq__(self, other: object) -> bool:
        return other.__class__ is ById and other.value is self.value  # type: ignore[attr-defined]


def _float_key(x: float) -> Any:
    """A float by its bits where ``==`` is not: ``-0.0`` differs from ``0.0`` (``1/x``
    tells them apart) and a NaN is its bits (NaNs are never ``==``)."""
    if x != x or x == 0.0:
        return struct.pack("<d", x)
    return x


def key(value: Any) -> Any:
    """The in-process identity of a (frozen) static value: a hashable, type-strict,
    order-strict stand-in whose ``==`` never raises (see the module docstring)."""
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
        return (t, tuple(key(v) for v in value))
    # Iteration order is part of a static value: a trace that iterates {"a": 1, "b": 2} and one
    # that iterates {"b": 2, "a": 1} compute in different orders, so they never share a key.
    if isinstance(value, frozenset):
        return (t, tuple(key(v) for v in value))
    if isinstance(value, FrozenDict):
        return (FrozenDict, tuple((key(k), key(v)) for k, v in value._d.items()))
    if isinstance(value, (int, float, complex)):  # subclasses, e.g. IntEnum
        return (t, value)
    if isinstance(value, functools.partial) or _by_fields(t):
        try:
            parts = _parts(value)
            hash(parts)
        except Exception:  # an unhashable argument or field: the object, by its own ==
            return _SafeEq(value)
        return (t, parts)
    return _SafeEq(value)


def _by_fields(t: type) -> bool:
    """A dataclass compared by its fields (its generated ``__eq__``), not an ``sf`` class
    (whose ``==`` is type-strict already)."""
    params = getattr(t, "__dataclass_params__", None)
    return (params is not None and params.eq and t.__hash__ is not None
            and "__staticfield_spec__" not in t.__dict__)


def _parts(value: Any) -> tuple:
    if isinstance(value, functools.partial):
        return (key(value.func), tuple(key(a) for a in value.args),
                tuple((k, key(v)) for k, v in value.keywords.items()))
    return tuple(key(getattr(value, f.name)) for f in dataclasses.fields(value) if f.compare)


def leaf_key(leaf: Any) -> Any:
    """A non-array leaf's key (``static="auto"``, ``leaves="any"``): ``key`` where the leaf
    is hashable, else by identity (``ById``)."""
    try:
        hash(leaf)
    except Exception:  # noqa: BLE001 - unhashable: keyed by identity
        return ById(leaf)
    return key(leaf)


def keyed_by_object(value: Any) -> bool:
    """Whether ``leaf_key(value)`` is the object itself, compared by ``is`` (an unhashable
    value, or one whose ``==`` is ``object``'s): its key never reads what it holds."""
    found = leaf_key(value)
    return found.__class__ is ById or (found.__class__ is _SafeEq and type(value).__eq__ is object.__eq__)


def exact_eq(t: type) -> bool:
    """Whether ``==`` and ``hash`` between two values of type ``t`` are exactly ``key``'s
    answer, so that a fast key holding ``t`` beside the value may decide. Not so: float
    (``-0.0 == 0.0``, NaNs: a fast key spells a float as ``float.hex`` and leaves NaNs to
    ``key``), complex (the same per part), tuples and frozensets (their items compare with
    Python's ``==``: ``(1,) == (True,)``, and a frozenset ignores order), ``FrozenDict``,
    dataclasses compared by fields, ``functools.partial``, NumPy values. Any other type's
    identity in one process is its ``==`` (or ``is``), within the type."""
    return not (issubclass(t, (float, complex, tuple, frozenset, FrozenDict, np.ndarray, np.generic,
                               functools.partial)) or _by_fields(t))


def identity_keyed(value: Any) -> bool:
    """Whether a static value is keyed by identity though it may change in place: an
    unhashable value (a ``set``, a ``@dataclass`` with ``eq=True``), or a plain object
    hashed by identity (functions, classes, modules, enum members and classes marked
    ``sf.identity_hashed`` are exempt)."""
    t = type(value)
    if t.__hash__ is None:
        return True
    return (
        t.__hash__ is object.__hash__
        and hasattr(value, "__dict__")
        and not isinstance(value, _IDENTITY_EXEMPT)
        and not hasattr(value, "__wrapped__")  # a wrapped function: jax.jit's, functools.wraps'
        and not getattr(t, BY_INTENT, False)
    )


def difference(old: Any, new: Any) -> str:
    """How two values Python calls equal differ for the identity, in an explanation's
    words: ``"equal value, another type"``, ``"same elements, another order"``; ``""``
    when they are not ``==`` (or not both of a kind this can say)."""
    try:
        equal = bool(old == new)
    except Exception:
        return ""
    if not equal:
        if type(old) is type(new) and type(old) is float and math.isnan(old) and math.isnan(new):
            return "another NaN"
        return ""
    if type(old) is not type(new):
        return "equal value, another type"
    if isinstance(old, (frozenset, FrozenDict, dict)):
        try:
            if list(old) != list(new):
                return "same elements, another order"
        except Exception:
            return ""
    if type(old) is float and math.copysign(1.0, old) != math.copysign(1.0, new):
        return "another sign of zero"
    return ""
