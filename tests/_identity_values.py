"""Static values of every kind DESIGN lists, and a reference of their one identity.

Shared by the property suite of the identity (``test_identity_properties.py``) and its
two-process part, which builds ``POOL`` in two fresh processes with different
``PYTHONHASHSEED``s. ``same(a, b)`` is the identity in one process, written from DESIGN's
rules independently of the library; ``same(a, b, across=True)`` is its cross-process
form (a function by module, name, code, closure cells and defaults; an identity-hashed
object by its type only).
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import struct
import types

import numpy as np

import staticfield as sf
from staticfield._core._frozendict import FrozenDict


def scale(x, k=2):
    return x * k


def shift(x, k=2):
    return x + k


SQUARE = lambda x: x * x  # noqa: E731


def make(n):
    return lambda x: x * n


class Color(enum.Enum):
    RED = 1
    ONE = 2


@dataclasses.dataclass(frozen=True)
class Frozen:
    flag: object


@sf.identity_hashed
class Tag:
    pass


TAG_A, TAG_B = Tag(), Tag()


@sf.dataclass
class Inner:
    n: object = sf.static(default=1)


_NAN_OTHER = struct.unpack("<d", struct.pack("<Q", 0x7FF8000000000001))[0]
_TABLE = np.zeros(2000, np.float32)
_TABLE_OTHER = _TABLE.copy()
_TABLE_OTHER[1000] = 1.0

# Hashable atoms, with many pairs that Python calls equal and the identity does not.
ATOMS = [0, 1, True, False, 1.0, 0.0, -0.0, float("nan"), _NAN_OTHER, np.int64(1), np.int32(1),
         np.float32(1.0), "a", "b", b"a", None, 0j, complex(-0.0, 0.0), 9, 17]
# Other kinds: arrays (unhashable as such: never inside a set), functions, classes, enums,
# instances, dataclasses, identity-hashed tags.
OTHERS = [np.ones(3), np.ones(3, np.float32), _TABLE, _TABLE_OTHER, scale, shift, SQUARE, make(1), make(1),
          make(2), make(True), functools.partial(scale, k=1), functools.partial(scale, k=True), int, float,
          Color.RED, Color.ONE, Inner(1), Inner(True), Inner(np.int64(1)), Frozen(1), Frozen(True),
          TAG_A, TAG_B, np.float32]


def containers(items):
    """Tuples, frozensets and dicts (both orders) of ``items``."""
    out = []
    for a in items:
        for b in items:
            out += [(a, b), FrozenDict({"x": a, "y": b}), FrozenDict({"y": b, "x": a})]
            try:
                out += [frozenset([a, b]), frozenset([b, a])]
            except TypeError:
                pass
    return out


# A deterministic pool: the same values in every process (for the two-process part).
POOL = ATOMS + OTHERS + containers([1, True, 1.0, 9, "a", "b", -0.0, 0.0, np.int64(1)])


def _python_equal(a, b) -> bool:
    try:
        return bool(a == b)
    except Exception:  # arrays: ambiguous
        return False


# For each pool value, the others Python calls equal to it: the pairs a second opinion
# (Python's == and hash) would merge.
EQUAL_FOR_PYTHON = [[b for b in POOL if b is not a and _python_equal(a, b)] for a in POOL]
EQUAL_PAIRS = [(a, b) for a, group in zip(POOL, EQUAL_FOR_PYTHON) for b in group]


def holds_identity_hashed(v) -> bool:
    if isinstance(v, Tag):
        return True
    if isinstance(v, (tuple, frozenset)):
        return any(holds_identity_hashed(x) for x in v)
    if isinstance(v, FrozenDict):
        return any(holds_identity_hashed(x) for x in v.values())
    return False


def holds_numpy(v) -> bool:
    if isinstance(v, (np.ndarray, np.generic)) or v is np.float32:
        return True
    if isinstance(v, (tuple, frozenset)):
        return any(holds_numpy(x) for x in v)
    if isinstance(v, FrozenDict):
        return any(holds_numpy(x) for x in v.values())
    if isinstance(v, Inner):
        return holds_numpy(v.n)
    return False


def holds_frozendict(v) -> bool:
    """(Under static="auto" and in a leaves="any" field a FrozenDict is a pytree node, as a
    dict is: JAX rebuilds it in sorted key order inside the trace, so there its order is
    structure that the trace never sees, not a static value.)"""
    if isinstance(v, FrozenDict):
        return True
    if isinstance(v, (tuple, frozenset)):
        return any(holds_frozendict(x) for x in v)
    return False


def holds_ndarray(v) -> bool:
    """(A static argument refuses an array: unhashable.)"""
    if isinstance(v, np.ndarray):
        return True
    if isinstance(v, (tuple, frozenset)):
        return any(holds_ndarray(x) for x in v)
    if isinstance(v, FrozenDict):
        return any(holds_ndarray(x) for x in v.values())
    return False


def _bits(x: float) -> bytes:
    return struct.pack("<d", x)


def same(a, b, across: bool = False, set_order: bool = True) -> bool:
    """DESIGN's identity of two static values (see the module docstring); ``set_order=False``:
    as the processes of a job compare them, a set's items in any order (its iteration order
    depends on each process's hash seed)."""
    if type(a) is not type(b):
        return False
    t = type(a)
    if t is float:
        return _bits(a) == _bits(b)
    if t is complex:
        return _bits(a.real) == _bits(b.real) and _bits(a.imag) == _bits(b.imag)
    if isinstance(a, np.ndarray):
        return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()
    if isinstance(a, np.generic):
        return a.tobytes() == b.tobytes()
    if isinstance(a, frozenset) and not set_order:  # its items in any order
        return len(a) == len(b) and all(any(same(x, y, across, set_order) for y in b) for x in a)
    if isinstance(a, (tuple, frozenset)):  # in iteration order
        return len(a) == len(b) and all(same(x, y, across, set_order) for x, y in zip(a, b))
    if isinstance(a, FrozenDict):
        return len(a) == len(b) and all(same(k, q, across, set_order) and same(v, w, across, set_order)
                                        for (k, v), (q, w) in zip(a.items(), b.items()))
    if isinstance(a, functools.partial):
        return (same(a.func, b.func, across, set_order) and same(a.args, b.args, across, set_order)
                and same(tuple(a.keywords.items()), tuple(b.keywords.items()), across, set_order))
    if isinstance(a, types.FunctionType):
        if not across:
            return a is b
        cells = lambda f: tuple(c.cell_contents for c in f.__closure__ or ())  # noqa: E731
        return (a.__module__ == b.__module__ and a.__qualname__ == b.__qualname__
                and a.__code__.co_code == b.__code__.co_code and a.__code__.co_consts == b.__code__.co_consts
                and same(cells(a), cells(b), across, set_order)
                and same(a.__defaults__, b.__defaults__, across, set_order))
    if isinstance(a, Inner):
        return same(a.n, b.n, across, set_order)
    if isinstance(a, Frozen):
        return same(a.flag, b.flag, across, set_order)
    if isinstance(a, Tag):
        return across or a is b
    if isinstance(a, (type, enum.Enum)):
        return a is b
    return bool(a == b)  # int, bool, str, bytes, None

