"""``stack`` and ``unstack``: many instances as one, with a leading axis on every leaf.

``stack`` flattens each instance once and compares its treedef with the first
one's (static values live in the treedef's aux_data, so one comparison checks
them all). Only when something differs does it walk the two instances field by
field, to name the first difference in the user's words. The result is built
with ``tree_unflatten``, so it keeps the frozen static values and never runs
``__init__``.
"""

from __future__ import annotations

from typing import Any, Iterable, TypeVar

import jax
import jax.numpy as jnp
import numpy as np

from .._core import _compat

from .._core._frozendict import FrozenDict
from .._core._keys import keyable
from .._core._display import summary
from .._core._spec import spec_of
from .._core._registry import SPEC_ATTR, is_instance

T = TypeVar("T")

# Leaf types that live on the host: a column made only of these is stacked with
# NumPy and moved to the device once, instead of once per instance.
_HOST = frozenset({np.ndarray, float, int, bool, complex})
_PY_SCALARS = frozenset({float, int, bool, complex})

STATIC_DIFFERS = (
    "sf.stack: static field {path} differs: {a} at position {i} but {b} at position {j}. "
    "Stacked instances share one set of static values (they are part of the jit cache "
    "key, not arrays). Stack groups of instances with equal static values separately, "
    "or make `{name}` a dynamic field if it should vary."
)
STRUCTURE_DIFFERS = (
    "sf.stack: {path} is {a} at position {i} but {b} at position {j}. Stacked instances "
    "must have the same classes and pytree structure; give every instance the same "
    "structure (e.g. the same dict keys, list lengths, None-ness), or stack them in groups."
)
LEAF_DIFFERS = (
    "sf.stack: leaf {path} is {a} at position {i} but {b} at position {j}. Stacked leaves "
    "must share one shape and dtype; pad or cast them to match (e.g. "
    "x.astype(jnp.float32)), or stack them in groups."
)
CANNOT_STACK = (
    "sf.stack: leaf {path} holds a {type}, which is not an array, so it cannot be "
    "stacked. Make that field static (sf.static()) or store an array in it."
)
NOT_AN_INSTANCE = (
    "sf.stack: the item at position {i} has type {type}, not an @sf.dataclass class. "
    "sf.stack takes a list of instances of one @sf.dataclass class."
)
NO_LEADING_AXIS = (
    "sf.unstack: leaf {path} is {a}, {why}. Every dynamic leaf of a stacked instance "
    "needs the same leading axis (the one sf.stack adds)."
)


def stack(instances: Iterable[T]) -> T:
    """Stack instances of one ``@sf.dataclass`` into one instance.

    Every dynamic leaf of the result gains a leading axis of length
    ``len(instances)``; the static values are those shared by all instances.
    Differing static values, structures, leaf shapes or dtypes, and an empty list
    are ``ValueError``s that name the field and the two positions.
    """
    __tracebackhide__ = True
    if is_instance(instances):
        raise TypeError(
            f"sf.stack expects a list of instances, got a single {type(instances).__qualname__}. "
            "Pass a list: sf.stack([a, b, ...])."
        )
    try:
        objs = list(instances)
    except TypeError:
        raise TypeError(
            f"sf.stack expects a list of @sf.dataclass instances, got {type(instances).__qualname__}."
        ) from None
    if not objs:
        raise ValueError(
            "sf.stack got an empty list: there is no instance to take the class and static "
            "values from. Pass at least one instance."
        )
    for i, obj in enumerate(objs):
        if not is_instance(obj):
            if hasattr(type(obj), SPEC_ATTR):
                spec_of(obj, "sf.stack")  # an undecorated subclass: that error says why
            raise TypeError(NOT_AN_INSTANCE.format(i=i, type=type(obj).__qualname__))
    first = objs[0]
    leaves0, treedef = jax.tree_util.tree_flatten(first)
    columns = [leaves0]
    for j in range(1, len(objs)):
        leaves, td = jax.tree_util.tree_flatten(objs[j])
        if td != treedef:  # type: ignore[operator]  # compares the static keys too
            raise ValueError(_explain_mismatch(first, objs[j], j))
        columns.append(leaves)
    stacked = [_stack_column(first, k, col) for k, col in enumerate(zip(*columns))]
    return jax.tree_util.tree_unflatten(treedef, stacked)


def unstack(stacked: T) -> list[T]:
    """Split an instance along the leading axis of its leaves: the inverse of ``sf.stack``."""
    __tracebackhide__ = True
    spec_of(stacked, "sf.unstack")
    leaves, treedef = jax.tree_util.tree_flatten(stacked)
    if not leaves:
        raise ValueError(
            f"sf.unstack: {type(stacked).__qualname__} has no dynamic leaves, so there is no "
            "leading axis to split along (the number of stacked instances is unknown)."
        )
    n = None
    for k, leaf in enumerate(leaves):
        shape = np.shape(leaf)
        why = None
        if not shape:
            why = "a scalar with no leading axis"
        elif n is not None and shape[0] != n:
            why = f"whose leading axis has length {shape[0]}, but earlier leaves have {n}"
        if why is not None:
            raise ValueError(NO_LEADING_AXIS.format(path=_leaf_path(stacked, k), a=summary(leaf), why=why))
        if n is None:
            n = shape[0]
    slices = [_rows(leaf, n) for leaf in leaves]
    return [jax.tree_util.tree_unflatten(treedef, parts) for parts in zip(*slices)]


def _rows(leaf: Any, n: int) -> list:
    """``leaf``'s rows along its leading axis. An array spread over processes cannot be
    iterated (JAX asserts); indexing runs where its shards are, in every process."""
    if isinstance(leaf, jax.Array) and not isinstance(leaf, _compat.Tracer) and not leaf.is_fully_addressable:
        return [leaf[i] for i in range(n)]
    return list(leaf)


def _stack_column(first: Any, k: int, col: tuple) -> Any:
    """Stack the ``k``-th leaf of every instance; raise naming the field if they differ."""
    try:
        sigs = {(x.shape, x.dtype) for x in col}
    except AttributeError:  # Python scalars, or leaves that are not arrays at all
        sigs = None
    if sigs is None or len(sigs) > 1:
        _check_column(first, k, col)
    kinds = set(map(type, col))
    if kinds <= _PY_SCALARS:  # as jnp.stack would: an int out of range is an error, not a wrap
        try:
            return jnp.asarray(list(col))
        except OverflowError as e:
            raise OverflowError(
                f"sf.stack: {_leaf_path(first, k)}: {e}. Store such values as a NumPy int64/uint64 "
                "array with jax_enable_x64 on, or keep them in a static field."
            ) from None
    if kinds <= _HOST:
        return jnp.asarray(np.stack(col))
    try:
        return jnp.stack(col)
    except TypeError:
        bad = next(x for x in col if not hasattr(x, "dtype"))
        raise TypeError(CANNOT_STACK.format(path=_leaf_path(first, k), type=type(bad).__name__)) from None


def _check_column(first: Any, k: int, col: tuple) -> None:
    """Compare leaves by shape and dtype (Python scalars count as JAX's default dtype)."""
    sig0 = _sig(col[0])
    for j, x in enumerate(col):
        sig = _sig(x)
        if sig is None:
            raise TypeError(CANNOT_STACK.format(path=_leaf_path(first, k), type=type(x).__name__))
        if sig != sig0:
            raise ValueError(
                LEAF_DIFFERS.format(path=_leaf_path(first, k), a=_show(col[0]), i=0, b=_show(x), j=j)
            )


def _sig(x: Any) -> tuple | None:
    if hasattr(x, "shape") and hasattr(x, "dtype"):  # its own dtype: an f64 is not an f32,
        return (tuple(x.shape), x.dtype)  # even where jax_enable_x64 is off and JAX would cast
    if type(x) in _HOST or isinstance(x, (bool, int, float, complex)):
        return ((), jax.dtypes.canonicalize_dtype(type(x)))
    return None


def _show(x: Any) -> str:
    if hasattr(x, "shape"):
        return summary(x)
    return f"the Python {type(x).__name__} {x!r}"


def _leaf_path(obj: Any, k: int) -> str:
    path = jax.tree_util.tree_flatten_with_path(obj)[0][k][0]
    return type(obj).__qualname__ + jax.tree_util.keystr(path)


def _explain_mismatch(a: Any, b: Any, j: int) -> str:
    """Name the first difference between instance 0 (``a``) and instance ``j`` (``b``)."""
    found = _first_difference(a, b, type(a).__qualname__)
    if found is None:  # not expected: the treedefs differ, so something above should
        ta, tb = jax.tree_util.tree_structure(a), jax.tree_util.tree_structure(b)
        return STRUCTURE_DIFFERS.format(path=type(a).__qualname__, a=ta, i=0, b=tb, j=j)
    kind, path, va, vb, name = found
    if kind == "static":
        return STATIC_DIFFERS.format(path=path, a=repr(va), i=0, b=repr(vb), j=j, name=name)
    return STRUCTURE_DIFFERS.format(path=path, a=va, i=0, b=vb, j=j)


def _first_difference(a: Any, b: Any, path: str) -> tuple | None:
    """``(kind, path, a_part, b_part, field)`` for the first difference, depth first."""
    if type(a) is not type(b):
        return ("structure", path, _describe(a), _describe(b), None)
    if is_instance(a):
        spec = spec_of(a)
        for name in spec.static_names:
            va, vb = getattr(a, name), getattr(b, name)
            if keyable(va) != keyable(vb):
                return ("static", f"{path}.{name}", va, vb, name)
        for name in spec.dynamic_names:
            found = _first_difference(getattr(a, name), getattr(b, name), f"{path}.{name}")
            if found is not None:
                return found
        return None
    kids_a, td_a = _one_level(a)
    kids_b, td_b = _one_level(b)
    if jax.tree_util.treedef_is_leaf(td_a):
        return None  # two leaves of one type: leaves are compared by sf.stack itself
    if td_a != td_b:
        return ("structure", path, _describe(a), _describe(b), None)
    for (key, ca), (_, cb) in zip(kids_a, kids_b):
        found = _first_difference(ca, cb, path + jax.tree_util.keystr(key))
        if found is not None:
            return found
    return None


def _one_level(x: Any) -> tuple[list, Any]:
    """The children of ``x`` (with their keys) and a treedef of ``x`` one level deep."""
    return jax.tree_util.tree_flatten_with_path(x, is_leaf=lambda y: y is not x)


def _describe(x: Any) -> str:
    if x is None:
        return "None"
    if isinstance(x, (dict, FrozenDict)):
        return f"a {type(x).__name__} with keys {', '.join(sorted(map(repr, x)))}"
    if isinstance(x, (list, tuple)):
        return f"a {type(x).__name__} of length {len(x)}"
    if is_instance(x):
        return f"a {type(x).__qualname__}"
    if jax.tree_util.treedef_is_leaf(jax.tree_util.tree_structure(x)):
        return _show(x)
    return f"a {type(x).__qualname__} ({jax.tree_util.tree_structure(x)})"
