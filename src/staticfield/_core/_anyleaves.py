"""``sf.field(leaves="any")``: a dynamic field whose value may hold any pytree leaves.

equinox pytrees hold leaves that are neither arrays nor statics: a closure-converted
function's ``Jaxpr``, a solver state's sentinel, ``jax.tree_util.Partial`` (arrays and a
function). In such a field the array leaves (``jax.Array``, NumPy arrays and scalars,
``ShapeDtypeStruct``) are children, as in any dynamic field, and every other leaf is
static: it goes into the instance's pytree metadata, keyed by value where it is hashable
(type-strictly, as static fields are) and by identity otherwise, as ``eqx.filter_jit``
keys them. So ``jax.jit``, ``sf.jit``, ``vmap`` and ``tree_map`` see only the arrays.

The generated flatten hands JAX ``wrap(value)``, an ``AnyLeaves`` node that records which
leaves are arrays, once, on the real values; the generated unflatten stores
``unwrap(child)`` in the field and keeps the node in the instance's flatten cache, so an
instance that JAX rebuilt around tracers or placeholders (``object()``) flattens with the
same split, never a new one made from the placeholders.
"""

from __future__ import annotations

import warnings
from typing import Any

import jax
import numpy as np

from . import _errors
from ._identity import identity_keyed
from ._identity import leaf_key as leaf_key
from ._registry import is_instance

ARRAY_LEAVES = (jax.Array, np.ndarray, np.generic, jax.ShapeDtypeStruct)


class Split:
    """The pytree metadata of an ``AnyLeaves`` node: the value's structure, which leaves
    are arrays, and the other leaves (with their type-strict keys)."""

    __slots__ = ("treedef", "mask", "statics", "keys", "_hash")

    def __init__(self, treedef: Any, mask: tuple[bool, ...], statics: tuple) -> None:
        self.treedef, self.mask, self.statics = treedef, mask, statics
        self.keys = tuple(leaf_key(s) for s in statics)
        self._hash = hash((treedef, mask, self.keys))

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return (
            other.__class__ is Split
            and self._hash == other._hash  # type: ignore[attr-defined]
            and self.mask == other.mask  # type: ignore[attr-defined]
            and self.treedef == other.treedef  # type: ignore[attr-defined]
            and self.keys == other.keys  # type: ignore[attr-defined]
        )

    def __repr__(self) -> str:
        return f"leaves='any' static leaves {self.statics!r}"


class AnyLeaves:
    """A ``leaves="any"`` field's value as JAX sees it: its array leaves are the children."""

    __slots__ = ("value", "dynamic", "split")

    def __init__(self, value: Any, dynamic: list, split: Split) -> None:
        self.value, self.dynamic, self.split = value, dynamic, split

    def __repr__(self) -> str:
        return f"AnyLeaves({self.value!r})"


def wrap(value: Any, where: str = "") -> AnyLeaves:
    """The node for a value (a node already is one). A nested ``sf`` instance is a child as
    a whole: it keeps its own static/dynamic split. ``where`` (``Class.field``) names the
    field in the warning for a static leaf keyed by identity."""
    if value.__class__ is AnyLeaves:
        return value
    leaves, treedef = jax.tree_util.tree_flatten(value, is_leaf=is_instance)
    mask = tuple(isinstance(leaf, ARRAY_LEAVES) or is_instance(leaf) for leaf in leaves)
    dynamic = [leaf for leaf, m in zip(leaves, mask) if m]
    statics = tuple(leaf for leaf, m in zip(leaves, mask) if not m)
    if where not in _WARNED:
        _warn_identity_keyed(statics, where)
    return AnyLeaves(value, dynamic, Split(treedef, mask, statics))


_WARNED: set[str] = set()  # "Class.field" that got the identity-key warning already


def _warn_identity_keyed(statics: tuple, where: str) -> None:
    """One ``sf.StaticFieldWarning`` per class and field for a static leaf keyed by identity
    though it may change in place (a ``set``, a plain ``@dataclass``, a plain object), as a
    static field warns: a change inside it does not recompile."""
    for leaf in statics:
        if identity_keyed(leaf):
            _WARNED.add(where)
            t = type(leaf)
            warnings.warn(_errors.IDENTITY_LEAF.format(
                where=where or "a leaves=\"any\" field", a_type=_errors.article(t.__qualname__), type=t.__qualname__,
                why="unhashable" if t.__hash__ is None else "hashed by identity"),
                _errors.StaticFieldWarning, stacklevel=4)
            return


def unwrap(child: Any) -> Any:
    """The field value for what unflatten received (a node, or a value given as it is)."""
    return child.value if child.__class__ is AnyLeaves else child


def _flatten(node: AnyLeaves) -> tuple[list, Split]:
    return node.dynamic, node.split


def _path_key(path: tuple) -> Any:
    """One key for a leaf's whole path inside the value, shown as the path (``.args[0]``)."""
    return jax.tree_util.GetAttrKey(jax.tree_util.keystr(path).lstrip("."))


def _flatten_with_keys(node: AnyLeaves) -> tuple[list, Split]:
    paths = [path for path, _ in jax.tree_util.tree_flatten_with_path(node.value, is_leaf=is_instance)[0]]
    if len(paths) != len(node.split.mask):  # a value JAX cannot walk the same way again
        return [(jax.tree_util.FlattenedIndexKey(i), c) for i, c in enumerate(node.dynamic)], node.split
    keys = [_path_key(path) for path, m in zip(paths, node.split.mask) if m]
    return list(zip(keys, node.dynamic)), node.split


def _unflatten(split: Split, children: Any) -> AnyLeaves:
    children = list(children)
    dynamic, statics = iter(children), iter(split.statics)
    leaves = [next(dynamic) if m else next(statics) for m in split.mask]
    return AnyLeaves(split.treedef.unflatten(leaves), children, split)


jax.tree_util.register_pytree_with_keys(AnyLeaves, _flatten_with_keys, _unflatten, flatten_func=_flatten)
