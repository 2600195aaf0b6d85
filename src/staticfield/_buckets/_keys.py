"""Which calls may run padded: ``Keys`` is a base of ``_front.BucketSpec``.

A bucket's program that is not the program analysed (``_compare``) makes its non-row key's
buckets exact, that key only: the trace names the call (``_Call.exact_why``), and the
front keeps the call's own key (``call_key``, made of the unpadded arguments, as fine as
the trace's non-row key or coarser, never finer, so that calls sharing a program share
it) in ``exact_calls``; ``fits`` sends later calls of those keys to their exact size
before they pad, while other keys (another static value, other non-row shapes) keep their
buckets. A trace with no call to learn the key from (ahead of time, a program loaded from
the store) or a key that cannot be hashed makes every bucket exact (``exact_why``).

The trace's own non-row key is made here too: ``signature`` of each argument that is not
bucketed, and ``read_key`` for a ``deps="read"`` method's ``self`` (the statics it read).
"""

from __future__ import annotations

from typing import Any

import jax

from .._core import _compat
from .._core._registry import SPECS
from .._core._slots import StandIn


def read_key(key: Any, args: tuple) -> Any:
    """``key`` with what a ``deps="read"`` method's ``self`` read so far: the statics its
    program is keyed by, with their values (``_deps``' read set; an instance that is not
    a traced stand-in: its tree structure, every static)."""
    obj = args[0] if args else None
    if type(obj) not in SPECS:
        return key
    d = obj._staticfield_dict
    read = d.read_key() if isinstance(d, StandIn) else None
    new = (*key, read if read is not None else jax.tree_util.tree_structure(obj))
    try:
        hash(new)
    except TypeError:  # (a read value that cannot be hashed: no cached verdict)
        return None
    return new


def signature(value: Any, reads: bool = False) -> Any:
    """What a verdict's cache key holds of an argument that is not bucketed: its shapes and
    static values, an instance's static fields included (its tree structure). A
    ``deps="read"`` method's ``self`` (``reads``) is keyed here by its type alone (reading
    its statics would read them all), and, once traced, by the statics it read (``read_key``):
    what the engine keys its programs by."""
    if type(value) in SPECS:
        return type(value) if reads else jax.tree_util.tree_structure(value)
    flat, tree = jax.tree_util.tree_flatten(value)
    return tree, tuple((x.aval.shape, str(x.aval.dtype), getattr(x.aval, "weak_type", False))
                       if isinstance(x, _compat.Tracer) else (type(x), x) for x in flat)


_KEYS = 4096  # call keys kept exact per function


class Keys:
    """Exact keys and the guards' verdict on a call (see the module docstring)."""

    # Set by BucketSpec: what these methods read.
    params: list
    axes: dict
    static_names: frozenset
    reads_statics: bool
    exact: set
    exact_why: str | None
    exact_calls: dict
    guards: list
    _fits: dict
    _sound: bool
    _lock: Any
    _leaves: Any

    def call_key(self, args: tuple, kwargs: dict) -> Any:
        """The front's key of a call (its unpadded arguments): what the non-row key of its
        trace is made of, or coarser, never finer, so calls that share a program share it:
        static arguments by value, other leaves by shape without the row axis and dtype (a
        Python number by its type), trees by structure (an instance's static fields; a
        ``deps="read"`` method's ``self`` by its type, as its verdict). ``None``: a static
        value that cannot be hashed."""
        parts: list = []
        for i, value in enumerate(args):
            name = self.params[i] if i < len(self.params) else i
            parts.append(self._value_key(name, value, self.reads_statics and i == 0))
        parts += [(k, self._value_key(k, kwargs[k])) for k in sorted(kwargs)]
        key = tuple(parts)
        try:
            hash(key)
        except TypeError:
            return None
        return key

    def _value_key(self, name: Any, value: Any, by_type: bool = False) -> Any:
        if name in self.static_names:
            return (name, type(value), value)
        if by_type and type(value) in SPECS:
            return (name, type(value))
        leaves, tree = jax.tree_util.tree_flatten(value)
        axes = self._leaves(name, value, strict=False)[2] if name in self.axes else [None] * len(leaves)
        out = []
        for leaf, axis in zip(leaves, axes):
            shape = getattr(leaf, "shape", None)
            if shape is None or not hasattr(leaf, "dtype"):
                out.append(type(leaf))
            else:
                out.append((tuple(None if k == axis else d for k, d in enumerate(shape)), str(leaf.dtype)))
        return (name, tree, tuple(out))

    def keep_exact(self, given: tuple, why: str) -> None:
        """A call whose key's buckets are exact: later calls of its key run at their exact size."""
        key = self.call_key(*given)
        with self._lock:
            if key is None or len(self.exact_calls) >= _KEYS:  # (past that many: every bucket exact)
                self.exact_why = self.exact_why or why
            else:
                self.exact_calls[key] = why

    def exact_reason(self, given: tuple) -> str | None:
        """Why a call runs at its exact size, where its key's buckets are exact (``None``: they
        are not), for its recompile explanation."""
        return self.exact_why or self.exact_calls.get(self.call_key(*given))

    def fits(self, rows: int, bucket: int, call: tuple | None = None) -> bool:
        """Whether a call of ``rows`` rows may run in ``bucket``'s program (the front asks
        before it pads): not a bucket kept exact, nor a call of a key kept exact (``call``:
        its arguments; unknown, any such key counts), and every guard the function's traces
        put on the count holds for it."""
        if not self._sound or self.exact_why is not None or bucket in self.exact:
            return False
        if self.exact_calls and (call is None or self.call_key(*call) in self.exact_calls):
            return False
        if not self.guards:
            return True
        ok = self._fits.get(rows)
        if ok is None:
            ok = self._fits[rows] = all(g.holds(rows) for g in list(self.guards))
        return ok
