"""State dicts: an instance's dynamic leaves as nested dicts keyed by field name.

``to_state_dict`` and ``from_state_dict`` follow the conventions of
``flax.serialization`` (string keys, list and tuple items under ``"0"``, ``"1"``,
...) without importing flax, so the result goes through
``flax.serialization.msgpack_serialize`` as is, and both functions can be
registered with ``flax.serialization.register_serialization_state``. Static
fields are not in the state: they are part of the template's structure.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

import jax
import numpy as np

from .._core import _compat

T = TypeVar("T")

_PY_SCALARS = (bool, int, float, complex)

_MISSING = (
    "sf.from_state_dict: {where} is missing from the state dict{has}. The state must "
    "come from sf.to_state_dict of an instance with the same fields and structure."
)
_EXTRA = (
    "sf.from_state_dict: the state dict has the key {key!r} under {here}, which the "
    "template does not have ({valid}). Restore into a template with the same fields "
    "and structure, or drop the key."
)
_NOT_A_DICT = (
    "sf.from_state_dict: {where} should be a dict (with the key {keys}) in the state, "
    "got {type}. The state must come from sf.to_state_dict of an instance with the "
    "same fields and structure."
)
_MISMATCH = (
    "sf.from_state_dict: {where}: the state holds {got}, the template {want}. Restore "
    "into a template of the saved shape and dtype (sf.replace the field), or convert "
    "the state first."
)


def _key_str(key: Any) -> str:
    for attr in ("name", "key", "idx"):
        if hasattr(key, attr):
            return str(getattr(key, attr))
    return str(key)


def _desc(x: Any) -> str:
    from .._core._display import summary

    if isinstance(x, _PY_SCALARS):
        return f"a Python {type(x).__name__}"
    if hasattr(x, "shape") and hasattr(x, "dtype"):
        return summary(x)
    return f"a {type(x).__name__}"


def to_state_dict(obj: Any) -> dict[str, Any]:
    """Return the dynamic leaves of ``obj`` as nested dicts keyed by field name.

    Nested instances, dicts, lists and tuples become nested dicts (list and tuple
    items under ``"0"``, ``"1"``, ...); leaves are returned as they are (no copy,
    no device sync). Static fields are left out: they come from the template that
    ``from_state_dict`` restores into.
    """
    paths_leaves = jax.tree_util.tree_flatten_with_path(obj)[0]
    root = _root_name(obj)
    state: dict[str, Any] = {}
    for path, leaf in paths_leaves:
        keys = [_key_str(k) for k in path]
        if not keys:
            raise TypeError(
                f"sf.to_state_dict: {root} is a single leaf, not a container of fields; "
                "pass an @sf.dataclass instance (or a dict, list or tuple of arrays)."
            )
        node = state
        for i, k in enumerate(keys[:-1]):
            child = node.setdefault(k, {})
            if not isinstance(child, dict):
                where = root + jax.tree_util.keystr(path[: i + 1])
                raise ValueError(f"sf.to_state_dict: two entries of {where} have the key {k!r}.")
            node = child
        if keys[-1] in node:
            where = root + jax.tree_util.keystr(path)
            raise ValueError(
                f"sf.to_state_dict: {where}: two keys have the same string form "
                f"{keys[-1]!r}; state dict keys must be unique as strings."
            )
        node[keys[-1]] = leaf
    return state


def from_state_dict(template: T, state: Mapping[str, Any]) -> T:
    """Return a copy of ``template`` whose dynamic leaves are read from ``state``.

    ``state`` is what ``to_state_dict`` returned (or its msgpack round-trip). Static
    fields come from ``template``, which is left untouched. Every leaf's shape and
    dtype must match the template's; a missing or unknown key, or a mismatch, is a
    ``ValueError`` naming the field. Restored leaves take the template leaf's kind:
    a ``jax.Array`` (placed with the template's sharding), a NumPy array or a
    Python scalar.
    """
    root = _root_name(template)
    paths_leaves, treedef = jax.tree_util.tree_flatten_with_path(template)
    leaf_keys = {tuple(_key_str(k) for k in path) for path, _ in paths_leaves}
    prefixes = {keys[:n]: path[:n] for path, _ in paths_leaves
                for keys in [tuple(_key_str(k) for k in path)] for n in range(len(keys))}
    _check_extra(state, (), prefixes, leaf_keys, root)
    leaves = [
        _restore_leaf(root + jax.tree_util.keystr(path), tmpl, _lookup(state, path, root))
        for path, tmpl in paths_leaves
    ]
    return jax.tree_util.tree_unflatten(treedef, leaves)


def _lookup(state: Any, path: tuple, root: str) -> Any:
    """The value at ``path`` in nested dicts, or a ValueError naming the missing field."""
    node = state
    for i, key in enumerate(path):
        k, here = _key_str(key), root + jax.tree_util.keystr(path[:i])
        if not isinstance(node, Mapping):
            raise ValueError(_NOT_A_DICT.format(where=here, keys=repr(k), type=_desc(node)))
        if k not in node:
            keys = ", ".join(map(repr, node)) if node else "none"
            has = f" (the state at {here} has keys: {keys})"
            raise ValueError(_MISSING.format(where=root + jax.tree_util.keystr(path[: i + 1]), has=has))
        node = node[k]
    return node


def _root_name(obj: Any) -> str:
    from .._core._registry import is_instance

    return type(obj).__qualname__ if is_instance(obj) else "state"


def _check_extra(node: Any, keys: tuple[str, ...], expected: dict, leaf_keys: set, root: str) -> None:
    """Raise ValueError for the first key of ``state`` that no template leaf reads."""
    if keys in leaf_keys or not isinstance(node, Mapping):
        return
    for k, v in node.items():
        sub = (*keys, str(k))
        if sub in leaf_keys or sub in expected:
            _check_extra(v, sub, expected, leaf_keys, root)
        elif not (isinstance(v, Mapping) and not v):  # an empty container carries nothing
            valid = sorted({p[-1] for p in (*expected, *leaf_keys) if len(p) == len(sub) and p[:-1] == keys})
            here = root + jax.tree_util.keystr(expected[keys])
            there = f"keys there: {', '.join(map(repr, valid))}" if valid else "no keys there"
            raise ValueError(_EXTRA.format(key=str(k), here=here, valid=there))


# Which kinds of scalar may restore into a leaf of each kind: never a kind change that
# loses information (a float into an int, a bool into an int or back, a str into anything).
_FROM_KINDS = {"b": "b", "i": "i", "u": "i", "f": "if", "c": "ifc", "V": "if"}


def _scalar_kind(x: Any) -> str | None:
    if isinstance(x, (bool, np.bool_)):
        return "b"
    if isinstance(x, (int, np.integer)):
        return "i"
    if isinstance(x, (float, np.floating)):
        return "f"
    if isinstance(x, (complex, np.complexfloating)):
        return "c"
    return None


def _exact_scalar(where: str, tmpl: Any, value: Any, kind: str, convert: Any) -> Any:
    """``convert(value)``, refused when the kinds differ or an int does not survive it."""
    got = _scalar_kind(value)
    refuse = ValueError(_MISMATCH.format(where=where, got=_desc(value), want=f"has {_desc(tmpl)}"))
    if got is None or got not in _FROM_KINDS.get(kind, kind):
        raise refuse
    try:
        with np.errstate(over="ignore", invalid="ignore"):
            out = convert(value)
    except (TypeError, ValueError, OverflowError):
        raise refuse from None
    if (got == "i" or got == "f" and np.isfinite(value)) and not np.all(np.isfinite(np.asarray(out).real)):
        raise refuse  # 1e40 into an f32 leaf: out of range, it would come back as inf
    if got == "i" and int(np.asarray(out).real if kind == "c" else np.asarray(out)) != int(value):
        raise refuse
    return out


def _restore_leaf(where: str, tmpl: Any, value: Any) -> Any:
    if isinstance(value, Mapping):
        raise ValueError(_MISMATCH.format(where=where, got=f"a dict with keys {list(value)}", want=f"has {_desc(tmpl)}"))
    if isinstance(tmpl, _PY_SCALARS):
        if np.ndim(value) != 0:
            raise ValueError(_MISMATCH.format(where=where, got=_desc(value), want=f"has {_desc(tmpl)}"))
        if hasattr(value, "item"):
            value = value.item()
        kind = _scalar_kind(tmpl)
        return _exact_scalar(where, tmpl, value, kind, type(tmpl))
    if not (hasattr(tmpl, "shape") and hasattr(tmpl, "dtype")):
        return value  # e.g. a custom leaf type: returned as stored
    want_shape, want_dtype = tuple(tmpl.shape), np.dtype(tmpl.dtype)
    if isinstance(value, _PY_SCALARS) or not hasattr(value, "dtype") and not isinstance(value, (list, tuple)):
        value = _exact_scalar(where, tmpl, value, want_dtype.kind, lambda v: np.asarray(v, dtype=want_dtype))
    # The value's own shape and dtype: never np.asarray of a jax leaf (a copy to the host,
    # an error for a tracer or an array spread over processes).
    shape = tuple(value.shape) if hasattr(value, "shape") else tuple(np.shape(value))
    dtype = np.dtype(value.dtype) if hasattr(value, "dtype") else np.asarray(value).dtype
    if shape != want_shape or dtype != want_dtype:
        raise ValueError(_MISMATCH.format(where=where, got=_desc(value), want=f"has {_desc(tmpl)}"))
    if isinstance(tmpl, np.ndarray):
        return np.asarray(value)
    if isinstance(tmpl, np.generic):
        return want_dtype.type(value)
    sharding = getattr(tmpl, "sharding", None)
    if isinstance(tmpl, _compat.Tracer) or sharding is None:
        return jax.numpy.asarray(value)
    return jax.device_put(value, sharding)
