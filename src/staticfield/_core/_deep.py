"""An instance's flatten with the statics of its nested instances lifted out (``deps="read"``).

``flat(obj)`` gives ``(children, key)``: JAX sees the children, whose nested ``sf``
instances carry their static keys in JAX's tree structure, so a model whose layers differ
in any static traces again. ``deep(obj)`` gives ``(hollow children, DeepKey)`` instead:
each nested instance held in a dynamic field, directly or in tuples (immutable, so the
result may be cached on the instance), becomes a plain tuple of its own hollow children,
and its static key moves into the ``DeepKey`` under its path (``("layers", 2)``). An
instance with no such nested instance gets ``flat(obj)`` itself. ``rebuild`` is the
inverse, for a trace: the nested instances are made again from their keys.

Nested instances inside lists, dicts or other containers stay as they are: JAX keys on
their statics, as always (sound; only not shared by what a method reads).

``flat_leaves(obj)`` is the other lifted form, for large models (DESIGN, "Large models"):
``(leaves, Shape)``, every array leaf of the instance in JAX's flatten order and one
interned ``Shape`` for all the rest (the classes, static keys and tuple nesting), or
``None`` where a dynamic field anywhere below holds something other than an array, a
scalar, ``None``, a tuple or an instance with the same property (a list or a dict may
change in place, so it must be flattened at each call). It is built from the nested
instances' own cached forms (O(children): ``sf.replace`` of one layer reuses the other
layers'), cached on the instance, and ``rebuild(shape, leaves)`` is its inverse too.

A path is a tuple of steps: a field name (``str``) or a tuple index (``int``), written
``self.layers[2].n`` (``display``), as ``sf.Recompile`` and ``sf.watch`` write paths.
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
from ._state import DEEP_ATTR, LEAVES_ATTR, flat

Path = tuple  # of str (a field) and int (a tuple index)


class DeepKey(int):
    """``self``'s static key and the static key of each nested instance, by path.

    Equality is that of the keys (type-strict). Like ``StaticKey`` it is an ``int`` whose
    value is its hash, so the dict lookups of every ``deps="read"`` hit hash it in C with
    no Python call. ``exact`` (the class of ``self`` and of each nested instance, by path)
    is what a shared program must match exactly; ``paths`` lists every static, as paths,
    and ``value_at`` gives one."""

    top: StaticKey
    nested: tuple
    cls: type
    exact: tuple
    _at: dict
    _inner: frozenset

    def __new__(cls, top: StaticKey, nested: tuple[tuple[Path, StaticKey], ...]) -> DeepKey:
        self = super().__new__(cls, hash((top, nested)))
        self.top, self.nested, self.cls = top, nested, top.cls
        self.exact = (top.cls, tuple((path, key.cls) for path, key in nested))
        self._at = dict(nested)
        self._inner = frozenset(path[:i] for path, _ in nested for i in range(1, len(path)))
        return self

    __hash__ = int.__hash__

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        return (other.__class__ is DeepKey and int.__eq__(self, other)  # type: ignore[operator]
                and self.top == other.top and self.nested == other.nested)  # type: ignore[attr-defined]

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    def __reduce__(self) -> tuple:
        # As StaticKey: the hash of a str differs between processes, so rebuild it.
        return (DeepKey, (self.top, self.nested))

    def __deepcopy__(self, memo: dict) -> DeepKey:
        return self

    def __repr__(self) -> str:
        inner = ", ".join(f"{display('self', p)}: {k!r}" for p, k in self.nested)
        return f"DeepKey({self.top!r}; {inner})"

    @property
    def paths(self) -> tuple[Path, ...]:
        return (*((n,) for n in self.top.names),
                *((*p, n) for p, k in self.nested for n in k.names))

    def value_at(self, path: Path) -> Any:
        if len(path) == 1:
            return self.top.state[path[0]]
        return self._at[path[:-1]].state[path[-1]]


def paths_of(key: Any) -> tuple[Path, ...]:
    """Every static of a key, as paths."""
    return key.paths if key.__class__ is DeepKey else tuple((n,) for n in key.names)


def value_at(key: Any, path: Path) -> Any:
    return key.value_at(path) if key.__class__ is DeepKey else key.state[path[0]]


def exact_of(key: Any) -> Any:
    return key.exact if key.__class__ is DeepKey else key.cls


def display(root: str, path: Path) -> str:
    return root + "".join(f"[{s}]" if isinstance(s, int) else f".{s}" for s in path)


def compute(obj: Any) -> tuple:
    """``deep(obj)`` computed (see the module docstring); ``DeepCache`` caches it."""
    children, key = flat(obj)
    nested: list = []
    names = SPECS[obj.__class__].dynamic_names
    hollow = tuple(_hollow(value, (name,), nested) for name, value in zip(names, children))
    if not nested:
        return children, key
    return hollow, DeepKey(key, tuple(nested))


def _hollow(value: Any, path: Path, nested: list) -> Any:
    if value.__class__ in SPECS:
        children, key = flat(value)
        nested.append((path, key))
        names = SPECS[value.__class__].dynamic_names
        return tuple(_hollow(v, (*path, n), nested) for n, v in zip(names, children))
    if value.__class__ is tuple:
        return tuple(_hollow(v, (*path, i), nested) for i, v in enumerate(value))
    return value


def rebuild(key: Any, children: tuple) -> Any:
    """The instance for ``key`` and (hollow) ``children``: ``unflatten``, nested ones too;
    for a ``Shape``, the instance of ``flat_leaves`` (``children`` are its leaves)."""
    if key.__class__ is Shape:
        return _inflate(key, iter(children))
    if key.__class__ is not DeepKey:
        return SPECS[key.cls].unflatten(key, children)

    def fill(value: Any, path: Path) -> Any:
        inner = key._at.get(path)
        if inner is not None:
            spec = SPECS[inner.cls]
            return spec.unflatten(inner, tuple(fill(v, (*path, n)) for n, v in zip(spec.dynamic_names, value)))
        if path in key._inner and value.__class__ is tuple:
            return tuple(fill(v, (*path, i)) for i, v in enumerate(value))
        return value

    spec = SPECS[key.cls]
    return spec.unflatten(key.top, tuple(fill(c, (n,)) for n, c in zip(spec.dynamic_names, children)))


class DeepCache:
    """Non-data descriptor: ``obj._staticfield_deep`` computed once, then an instance-dict hit."""

    __slots__ = ()

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        if obj is None:
            return self
        value = obj._staticfield_dict[DEEP_ATTR] = compute(obj)
        if value[1].__class__ is DeepKey and not hold_deep(obj):  # holds nested instances' statics
            obj._staticfield_dict.pop(DEEP_ATTR, None)  # and leaves: kept only if told of a reassign
        return value


def install(cls: type) -> None:
    setattr(cls, DEEP_ATTR, DeepCache())


# ----- flat_leaves: large models (see the module docstring) ---------------------------------

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
# ``flat_leaves`` of an instance with a list or dict below; ``used`` before the flat form.
NOT_FLAT = ((), None, False)
WAIT = ((), None, False)


def flat_leaves(obj: Any) -> tuple:
    """``(leaves, Shape, large)`` of ``obj`` (see the module docstring; ``large``: more than
    ``LARGE_NODES`` nodes), cached on it, or ``NOT_FLAT``."""
    d = obj._staticfield_dict
    cached = d.get(LEAVES_ATTR)
    if cached.__class__ is tuple:
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
    """A call form's use of ``obj``'s flat form: ``WAIT`` for its first ``WARM_UPS`` uses
    (counted in its cache entry), then ``flat_leaves(obj)``. A hit path reads the entry
    itself and calls this only while it is not a tuple."""
    d = obj._staticfield_dict
    n = d.get(LEAVES_ATTR) or 0
    if n.__class__ is tuple:
        return n  # type: ignore[no-any-return]
    if n < WARM_UPS:
        d[LEAVES_ATTR] = n + 1
        return WAIT
    return flat_leaves(obj)


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
