"""A large model's flat form: every array leaf in one tuple, and one interned ``Shape``.

``flat_leaves(obj)`` gives ``(leaves, Shape, large)``: every leaf of the instance in JAX's
flatten order, and one interned ``Shape`` for all the rest (the classes, static keys and
tuple nesting), or ``NOT_FLAT`` where a dynamic field anywhere below holds something other
than an array, a scalar, ``None``, a tuple or an instance with the same property (a list
or a dict may change in place, so it must be flattened at each call: DESIGN, "Large
models"). It is built from the nested instances' own cached forms (O(children):
``sf.replace`` of one layer reuses the other layers'), cached on the instance (``_state``'s
table), and ``_deep.rebuild(shape, leaves)`` (``inflate``) is its inverse. ``large``: more
than ``LARGE_NODES`` nested nodes, where JAX's own flatten costs more than a flat tuple's;
``used`` is how a call form asks (it makes the form from an instance's fourth use on).

Imports: ``_compat``, ``_keys``, ``_registry``, ``_sealed`` (``hold_deep``) and ``_state``.
Called by ``_deep`` (``rebuild``) and by ``_jit``'s large-model hit paths.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

import numpy as np

from . import _compat
from ._keys import StaticKey
from ._registry import SPECS
from ._sealed import hold_deep
from ._state import LEAVES_ATTR, flat


class Shape(int):
    """Everything of an instance but its array leaves: its static key, and per dynamic
    field a *form* (``LEAF``, ``None``, a tuple of forms, or a nested instance's ``Shape``).

    Interned: equal shapes made while one lives are one object, so JAX's C++ cache, which
    holds a shape as a static argument, compares it by identity (``==`` is identity: two
    shapes are never merged by their value); its value is its hash, so hashing it costs
    no Python call. ``nodes`` counts the instances and tuples in it (the work JAX's own
    flatten would do per call)."""

    key: StaticKey
    parts: tuple
    nodes: int
    anchor: Any

    __hash__ = int.__hash__

    def __eq__(self, other: object) -> bool:
        return self is other

    def __ne__(self, other: object) -> bool:
        return self is not other

    def __reduce__(self) -> tuple:
        raise TypeError("a staticfield Shape is an in-process cache key; it is not pickled")

    def __repr__(self) -> str:
        return f"Shape({self.key!r}, {self.nodes} nodes)"


class _Anchor:
    """The interning table's weak handle on a shape (an ``int`` takes no weak reference).
    A shape and its anchor hold each other, so the entry lives exactly as long as the
    shape does, in an instance's cache or as a static argument in JAX's C++ cache (a
    model made anew at every step finds the shape its predecessor had)."""

    __slots__ = ("shape", "__weakref__")

    def __init__(self, shape: Shape) -> None:
        self.shape = shape


LEAF = type("Leaf", (), {"__slots__": (), "__repr__": lambda self: "LEAF"})()
_SHAPES: weakref.WeakValueDictionary[tuple, _Anchor] = weakref.WeakValueDictionary()
_SHAPES_LOCK = threading.Lock()
_ARRAY = _compat.get("array_impl")
_LEAF_CLASSES: dict[type, bool] = {c: True for c in (int, float, complex, bool, np.ndarray, _ARRAY) if c}


def _is_leaf(cls: type) -> bool:
    """An array or scalar class, decided once per class (a tracer is not one: no instance
    built under a trace is cached flat)."""
    known = _LEAF_CLASSES.get(cls)
    if known is None:
        known = _LEAF_CLASSES[cls] = issubclass(cls, np.generic)
    return known


def _intern(key: StaticKey, parts: tuple, nodes: int) -> Shape:
    ident = (key, parts)
    with _SHAPES_LOCK:
        anchor = _SHAPES.get(ident)
        if anchor is None:
            shape = Shape(hash(ident))
            shape.key, shape.parts, shape.nodes = key, parts, nodes
            anchor = _SHAPES[ident] = shape.anchor = _Anchor(shape)
    return anchor.shape


# An instance with more nested instances and tuples than this is *large*: JAX's own flatten
# of its nested nodes costs more than a flat tuple's, so its calls pass its flat leaves
# (``_jit``: ``obj.method``, ``Cls.method(obj, ...)``, ``sf.jit``); a small model's costs
# nothing to speak of, and its calls stay as they are.
LARGE_NODES = 16
# Building the flat form costs about four calls' worth of what it saves per call, so a
# call form uses it from an instance's ``WARM_UPS + 1``-th use on (``used``): a model made
# anew at every training step, and called once, never pays for it.
WARM_UPS = 3
# ``flat_leaves`` of an instance with a list or dict below; ``used`` before the flat form;
# ``used`` of a small instance (its flat form is not made: it would never be used).
# (three distinct objects, compared by identity: equal tuple literals would be one constant)
NOT_FLAT, WAIT, SMALL = (tuple([(), None, False]) for _ in range(3))


def flat_leaves(obj: Any) -> tuple:
    """``(leaves, Shape, large)`` of ``obj`` (see the module docstring; ``large``: more than
    ``LARGE_NODES`` nodes), cached on it, or ``NOT_FLAT``."""
    d = obj._staticfield_dict
    cached = d.get(LEAVES_ATTR)
    if cached.__class__ is tuple and cached is not SMALL:
        return cached  # type: ignore[no-any-return]
    children, key = flat(obj)
    out: list = []
    count = [1]
    parts = _forms(children, out, count)
    # Holding nested instances' leaves, it is told when one of them is reassigned
    # (``_sealed.reassign``); one that takes no weak reference is never cached flat.
    if parts is _NOT or (count[0] > 1 and not hold_deep(obj)):
        d[LEAVES_ATTR] = NOT_FLAT
        return NOT_FLAT
    shape = _intern(key, parts, count[0])
    leaves = children if len(out) == len(children) and count[0] == 1 else tuple(out)  # all leaves: shared
    entry = d[LEAVES_ATTR] = (leaves, shape, count[0] > LARGE_NODES)
    return entry


def used(obj: Any) -> tuple:
    """A call form's use of ``obj``'s flat form: ``SMALL`` at once (and for good) for a
    small instance, else ``WAIT`` for its first ``WARM_UPS`` uses (counted in its cache
    entry), then ``flat_leaves(obj)``. ``obj.method``'s binding calls it until it is
    decided; ``_jit._hitpath_large``'s code reads the entry and counts the first uses itself."""
    d = obj._staticfield_dict
    n = d.get(LEAVES_ATTR) or 0
    if n.__class__ is tuple:
        return n  # type: ignore[no-any-return]
    if n == 0 and not _over(flat(obj)[0], LARGE_NODES):
        d[LEAVES_ATTR] = SMALL
        return SMALL
    if n < WARM_UPS:
        d[LEAVES_ATTR] = n + 1
        return WAIT
    return flat_leaves(obj)


def _over(values: tuple, budget: int) -> bool:
    """Whether ``values`` hold at least ``budget`` nested instances and tuples (counted as
    ``flat_leaves`` counts them, breadth first and only up to that bound: one call)."""
    queue = [values]
    for level in queue:
        for value in level:
            cls = value.__class__
            if cls in SPECS:
                budget -= 1
                queue.append(flat(value)[0])
            elif cls is tuple:
                budget -= 1
                queue.append(value)
            else:
                continue
            if budget <= 0:
                return True
    return False


_NOT = object()


def _forms(values: tuple, out: list, count: list) -> Any:
    """The form of each of ``values`` (its leaves appended to ``out``, its nodes counted),
    or ``_NOT``."""
    forms = []
    for value in values:
        cls = value.__class__
        leaf = _LEAF_CLASSES.get(cls)
        if leaf:  # (the common case first: an array)
            out.append(value)
            forms.append(LEAF)
        elif cls in SPECS:
            got = flat_leaves(value)
            if got is NOT_FLAT:
                return _NOT
            out.extend(got[0])
            count[0] += got[1].nodes
            forms.append(got[1])
        elif cls is tuple:
            count[0] += 1
            inner = _forms(value, out, count)
            if inner is _NOT:
                return _NOT
            forms.append(inner)
        elif value is None:
            forms.append(None)
        elif leaf is None and _is_leaf(cls):
            out.append(value)
            forms.append(LEAF)
        else:
            return _NOT
    return tuple(forms)


def inflate(shape: Shape, leaves: tuple) -> Any:
    """The instance of ``shape`` holding ``leaves`` (``_deep.rebuild`` of a ``Shape``)."""
    return _inflate(shape, iter(leaves))


def _inflate(shape: Shape, leaves: Any) -> Any:
    spec = SPECS[shape.key.cls]
    return spec.unflatten(shape.key, tuple(_fill(form, leaves) for form in shape.parts))


def _fill(form: Any, leaves: Any) -> Any:
    if form is LEAF:
        return next(leaves)
    if form is None:
        return None
    if form.__class__ is Shape:
        return _inflate(form, leaves)
    return tuple(_fill(f, leaves) for f in form)
