"""Turning static values into hashable, immutable, type-strict cache keys.

``freeze`` runs on construction: it makes a static value immutable (list→tuple,
set→frozenset, dict→FrozenDict, ndarray→read-only copy) and refuses values that
would break JAX's cache (jax arrays, tracers, unhashable objects).

``StaticKey`` is the aux_data of every instance. Its equality is type-strict and
never raises: ``1``, ``1.0``, ``True`` and ``np.int32(1)`` are four keys, and a
user's ``__eq__`` is only called against a value of the same type, inside a
``try``, so a bad ``__eq__`` cannot poison JAX's caches.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Iterator

import jax
import numpy as np

from . import _errors

_NoneType = type(None)
# Values that are already immutable and hashable; freeze returns them as is.
ATOMIC = frozenset({int, float, bool, str, bytes, complex, _NoneType, type(Ellipsis)})
_NUMBERS = frozenset({int, float, bool, complex})
_NAN = float("nan")
_NEG_ZERO = "-0.0"  # stands in for -0.0, which == 0.0


class FrozenDict(Mapping):
    """An immutable, hashable mapping: what a ``dict`` static value is frozen into.

    Compares equal to any mapping with the same items, like ``dict``. It is also a
    pytree (children are the values, keys sorted like ``dict``'s).
    """

    __slots__ = ("_d", "_hash")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._d = dict(*args, **kwargs)
        self._hash: int | None = None

    def __getitem__(self, key: Any) -> Any:
        return self._d[key]

    def __iter__(self) -> Iterator[Any]:
        return iter(self._d)

    def __len__(self) -> int:
        return len(self._d)

    def __repr__(self) -> str:
        return f"FrozenDict({self._d!r})"

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash(frozenset(self._d.items()))
        return self._hash

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Mapping):
            return self._d == dict(other.items())
        return NotImplemented

    def __or__(self, other: Mapping) -> FrozenDict:
        return FrozenDict({**self._d, **other})

    def __reduce__(self) -> tuple:
        return (FrozenDict, (self._d,))

    def copy(self, **changes: Any) -> FrozenDict:
        """A new FrozenDict with ``changes`` applied."""
        return FrozenDict({**self._d, **changes})


def _sorted_keys(d: FrozenDict) -> list:
    try:
        return sorted(d._d)
    except TypeError:
        return list(d._d)


def _fd_flatten_with_keys(d: FrozenDict) -> tuple:
    keys = _sorted_keys(d)
    return [(jax.tree_util.DictKey(k), d._d[k]) for k in keys], tuple(keys)


def _fd_flatten(d: FrozenDict) -> tuple:
    keys = _sorted_keys(d)
    return [d._d[k] for k in keys], tuple(keys)


jax.tree_util.register_pytree_with_keys(
    FrozenDict,
    _fd_flatten_with_keys,
    lambda keys, values: FrozenDict(zip(keys, values)),
    flatten_func=_fd_flatten,
)


def freeze(value: Any, where: str, field: str) -> Any:
    """Return an immutable, hashable version of a static value, or raise TypeError.

    ``where`` is ``Class.field`` (plus a path inside the value) for the messages.
    """
    t = value.__class__
    if t in ATOMIC:
        return value
    if isinstance(value, jax.Array) or isinstance(value, jax.core.Tracer):
        what = "tracer" if isinstance(value, jax.core.Tracer) else "jax.Array"
        raise TypeError(_errors.JAX_ARRAY_IN_STATIC.format(where=where, what=what, field=field))
    if isinstance(value, np.ndarray):
        if value.dtype == object:
            raise TypeError(
                f"{where}: a NumPy array of dtype object cannot be a static value (its "
                f"bytes are pointers, not values). Use a tuple, or make `{field}` dynamic."
            )
        frozen = np.array(value, copy=True)
        frozen.flags.writeable = False
        return frozen
    if isinstance(value, np.generic):
        return value
    if isinstance(value, (list, tuple)):
        items = [freeze(v, f"{where}[{i}]", field) for i, v in enumerate(value)]
        if isinstance(value, tuple) and hasattr(value, "_fields"):  # namedtuple
            return t(*items)
        if t is list or t is tuple:
            return tuple(items)
        return tuple(items)
    if isinstance(value, (set, frozenset)):
        return frozenset(freeze(v, f"{where}{{…}}", field) for v in value)
    if isinstance(value, Mapping):
        out = {}
        for k, v in value.items():
            k = freeze(k, f"{where} key {k!r}", field)
            out[k] = freeze(v, f"{where}[{k!r}]", field)
        return FrozenDict(out)
    try:
        hash(value)
    except Exception:
        raise TypeError(
            _errors.UNHASHABLE_STATIC.format(where=where, type=t.__name__, field=field)
        ) from None
    return value


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
    if t in ATOMIC or isinstance(value, type):
        return value
    if isinstance(value, np.ndarray):
        return _ArrayKey(value)
    if isinstance(value, np.generic):
        return (t, value.tobytes())
    if isinstance(value, tuple):
        return (t, tuple(keyable(v) for v in value))
    if isinstance(value, frozenset):
        return (frozenset, frozenset(keyable(v) for v in value))
    if isinstance(value, FrozenDict):
        return (FrozenDict, frozenset((keyable(k), keyable(v)) for k, v in value._d.items()))
    if isinstance(value, (int, float, complex)):  # subclasses, e.g. IntEnum
        return (t, value)
    return _SafeEq(value)


class StaticKey(int):
    """The aux_data of an instance: its class plus its static values, by value.

    It is an ``int`` equal to its own hash, so hashing it (every jit cache lookup)
    costs no Python call; equality is the type-strict comparison of the values.
    ``state`` is the dict that unflatten copies into a new instance's ``__dict__``
    (the frozen static values and the key itself), so unflatten is one update.
    """

    cls: type
    names: tuple[str, ...]
    values: tuple
    parts: tuple
    state: dict[str, Any]

    def __new__(cls, owner: type, names: tuple[str, ...], values: tuple, attr: str) -> StaticKey:
        parts = tuple(keyable(v) for v in values)
        self = super().__new__(cls, hash((owner, parts)))
        self.cls = owner
        self.names = names
        self.values = values
        self.parts = parts
        self.state = dict(zip(names, values))
        self.state[attr] = self
        return self

    __hash__ = int.__hash__

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if other.__class__ is not StaticKey:
            return False
        return (
            int.__eq__(self, other)
            and self.cls is other.cls  # type: ignore[attr-defined]
            and self.parts == other.parts  # type: ignore[attr-defined]
        )

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    def __repr__(self) -> str:
        inner = ", ".join(f"{n}={v!r}" for n, v in zip(self.names, self.values))
        return f"StaticKey({self.cls.__qualname__}: {inner})"

    __str__ = __repr__

    def __reduce__(self) -> tuple:
        # The hash of a str differs between processes, so rebuild rather than copy it.
        attr = next(k for k, v in self.state.items() if v is self)
        return (StaticKey, (self.cls, self.names, self.values, attr))

    def __deepcopy__(self, memo: dict) -> StaticKey:
        return self


class StaticArgKey:
    """A type-strict key for a jit static argument (``static_argnums``); ``raw`` is the value."""

    __slots__ = ("raw", "part", "_hash")

    def __init__(self, raw: Any) -> None:
        self.raw = raw
        self.part = keyable(raw)
        self._hash = hash(self.part)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return other.__class__ is StaticArgKey and self._hash == other._hash and self.part == other.part  # type: ignore[attr-defined]
