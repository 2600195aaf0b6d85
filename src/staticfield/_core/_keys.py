"""Type-strict, never-raising cache keys for static values, made of the one identity
(``_identity.key``).

``StaticKey`` is the aux_data of every instance. Its equality is type-strict and
never raises: ``1``, ``1.0``, ``True`` and ``np.int32(1)`` are four keys, and a
user's ``__eq__`` is only called against a value of the same type, inside a
``try``, so a bad ``__eq__`` cannot poison JAX's caches.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

import jax

from ._identity import key

# The in-process identity of a static value is ``_identity.key``: every key here is made of it.
keyable = key


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
