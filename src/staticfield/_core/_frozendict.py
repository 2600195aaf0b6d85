"""``FrozenDict``: the immutable, hashable mapping a ``dict`` static value is frozen into."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Iterator

import jax


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
