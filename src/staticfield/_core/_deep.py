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

``rebuild`` is also the inverse of ``_flatform.flat_leaves``, the other lifted form
(large models: every leaf, and one interned ``Shape``).

A path is a tuple of steps: a field name (``str``) or a tuple index (``int``), written
``self.layers[2].n`` (``display``), as ``sf.Recompile`` and ``sf.watch`` write paths.
"""

from __future__ import annotations

from typing import Any

from ._flatform import Shape, inflate
from ._keys import StaticKey
from ._registry import SPECS
from ._sealed import hold_deep
from ._state import DEEP_ATTR, flat

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
        return inflate(key, children)
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
