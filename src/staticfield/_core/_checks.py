"""Construction checks of one field value: convert, then freeze a static value or check
the leaves of a dynamic one, then store it. Never run on unflatten."""

from __future__ import annotations

import types
from typing import Any

import jax
import numpy as np

from . import _compat, _errors
from ._freeze import ATOMIC, bound_method_error, freeze
from ._registry import SPEC_ATTR, is_instance

# The concrete jax.Array type; looked up without creating an array, which would start
# the XLA backend at import (jax.distributed.initialize must come first). A JAX without
# it: isinstance below does the same check, a little slower.
_ARRAY_TYPES: tuple[type, ...] = tuple(t for t in (_compat.get("array_impl"),) if t is not None)

# Leaf types accepted in dynamic fields without a closer look (a NumPy array gets one:
# its dtype may be str, object or datetime).
LEAF_OK = frozenset({float, int, bool, complex, type(None), *_ARRAY_TYPES})
_LEAF_CLASSES = (jax.Array, np.ndarray, np.generic, bool, int, float, complex, jax.ShapeDtypeStruct)
_NOT_NUMERIC = frozenset("OUSMm")  # object, str, bytes, datetime, timedelta


def _leaf_ok(leaf: Any) -> bool:
    if leaf.__class__ in LEAF_OK:
        return True
    if isinstance(leaf, (np.ndarray, np.generic)):
        return leaf.dtype.kind not in _NOT_NUMERIC
    return isinstance(leaf, _LEAF_CLASSES)


def check_dynamic(cls: type, name: str, value: Any) -> None:
    """Raise TypeError if a leaf of a dynamic field's value is not array-like. A nested
    ``sf`` instance is not looked into: its own class checked it, under its own rules
    (``check=False``, ``leaves="any"``)."""
    if is_instance(value):
        return
    if value.__class__ is tuple or value.__class__ is list:
        # A model's tuple of layers: one pass over its items, not a walk of every leaf
        # inside them (which made ``sf.replace`` of one layer cost O(leaves)).
        if all(item.__class__ in LEAF_OK or is_instance(item) for item in value):
            return
    leaves = jax.tree_util.tree_leaves(value)
    if all(_leaf_ok(leaf) for leaf in leaves):
        return
    for path, leaf in jax.tree_util.tree_flatten_with_path(value, is_leaf=is_instance)[0]:
        if _leaf_ok(leaf) or is_instance(leaf):
            continue
        where = f"{cls.__qualname__}.{name}{jax.tree_util.keystr(path)}"
        error = bound_method_error(leaf, where, name) if isinstance(leaf, types.MethodType) else None
        if error is not None:
            raise error
        if isinstance(leaf, (np.ndarray, np.generic)):
            raise TypeError(
                _errors.BAD_DYNAMIC_DTYPE.format(where=where, dtype=leaf.dtype, field=name)
            )
        if type(leaf).__name__ in ("Jaxpr", "ClosedJaxpr") and type(leaf).__module__.startswith("jax"):
            raise TypeError(_errors.JAXPR_IN_FIELD.format(
                where=where, a_type=_errors.article(type(leaf).__name__), field=name, name=cls.__name__))
        if not _hashable(leaf):  # sf.static() would refuse it too: the fix that works, at once
            raise TypeError(_errors.UNHASHABLE_DYNAMIC.format(
                where=where, a_type=_errors.article(type(leaf).__name__), field=name,
                ann=_annotation(cls, name, value), type=type(leaf).__name__))
        is_fn = callable(leaf) and not isinstance(leaf, type)
        tname = "function" if is_fn else type(leaf).__name__
        if not path:  # the whole value: the field holds this one thing
            ann = "Callable" if is_fn else tname
            raise TypeError(_errors.BAD_DYNAMIC_VALUE.format(
                where=where, a_type=_errors.article(tname), ann=ann, field=name))
        raise TypeError(_errors.BAD_DYNAMIC_LEAF.format(
            cls=cls.__qualname__, where=jax.tree_util.keystr(path), a_type=_errors.article(tname),
            ann=_annotation(cls, name, value), field=name))


def _hashable(value: Any) -> bool:
    try:
        hash(value)
    except Exception:  # noqa: BLE001 - a __hash__ that raises anything: unhashable
        return False
    return True


def _annotation(cls: type, name: str, value: Any) -> str:
    """The field's annotation as written (else its value's type), for a hint about it."""
    spec = cls.__dict__.get(SPEC_ATTR)
    ann = spec.by_name[name].type if spec is not None and name in spec.by_name else None
    if isinstance(ann, str):
        return ann
    if ann is jax.Array:
        return "jax.Array"
    if isinstance(getattr(ann, "__name__", None), str) and not getattr(ann, "__args__", None):
        return ann.__name__.rpartition(".")[2]  # type: ignore[union-attr]
    if ann is not None:
        return str(ann).replace("typing.", "")
    return type(value).__name__


def store(spec: Any, obj: Any, name: str, value: Any, convert: bool) -> None:
    """Convert (if ``convert``), freeze or check one field value, and store it."""
    if convert and name in spec.converters:
        value = spec.converters[name](value)
    if name in spec.static_set:
        if value.__class__ not in ATOMIC:
            value = freeze(value, f"{spec.cls.__qualname__}.{name}", name)
    elif spec.check and value.__class__ not in LEAF_OK and name not in spec.any_set:
        check_dynamic(spec.cls, name, value)
    obj._staticfield_dict[name] = value
