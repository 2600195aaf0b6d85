"""Turning static values into immutable, hashable values, and refusing those that would
break JAX's cache.

``freeze`` runs on construction: it makes a static value immutable (list→tuple,
set→frozenset (built in a canonical order, so equal sets iterate alike), dict→FrozenDict, ndarray→read-only copy) and refuses values that
would break JAX's cache (jax arrays and tracers at any depth, bound methods of
array-holding objects, unhashable objects).
"""

from __future__ import annotations

import functools
import types
import warnings
from collections.abc import Mapping
from typing import Any

import jax
import numpy as np

from . import _compat, _errors, _identity
from ._frozendict import FrozenDict

_NoneType = type(None)
# Values that are already immutable and hashable; freeze returns them as is.
ATOMIC = frozenset({int, float, bool, str, bytes, complex, _NoneType, type(Ellipsis)})


_WARNED: set[str] = set()  # "Class.field" that got the identity-hash warning already
_BY_INTENT = _identity.BY_INTENT  # set by identity_hashed; subclasses inherit it


def identity_hashed(cls: type) -> type:
    """Declare that instances of ``cls`` (and of its subclasses) are hashed by identity on
    purpose: tag singletons such as ``symmetric_tag = Tag()``, compared with ``is``. A
    static value of that type then draws no ``sf.StaticFieldWarning``; it still keys a
    compiled program by identity (a new object is a new key). Use it as a class decorator
    or call it on a class defined elsewhere; it returns the class."""
    if not isinstance(cls, type):
        raise TypeError(
            f"sf.identity_hashed takes a class, got {_errors.article(type(cls).__name__)} ({cls!r}). "
            "Decorate the tag's class, or call sf.identity_hashed(type(tag))."
        )
    setattr(cls, _BY_INTENT, True)
    return cls


def freeze(value: Any, where: str, field: str) -> Any:
    """Return an immutable, hashable version of a static value, or raise TypeError.

    ``where`` is ``Class.field`` (plus a path inside the value) for the messages.
    """
    if value.__class__ in ATOMIC:
        return value
    try:
        return _freeze(value, where, field)
    except RecursionError:
        raise TypeError(_errors.RECURSIVE_STATIC.format(where=where, field=field)) from None


def _freeze(value: Any, where: str, field: str) -> Any:
    t = value.__class__
    if t in ATOMIC:
        return value
    if isinstance(value, (jax.Array, _compat.Tracer)):
        _refuse_array(value, where, field)
    if isinstance(value, np.ndarray):
        if value.dtype == object:
            raise TypeError(
                f"{where}: a NumPy array of dtype object cannot be a static value (its "
                f"bytes are pointers, not values). Use a tuple, or make `{field}` dynamic."
            )
        frozen = np.array(value, copy=True)
        frozen.flags.writeable = False
        return frozen
    if isinstance(value, np.generic):
        return value
    if isinstance(value, (list, tuple)):
        items = [_freeze(v, f"{where}[{i}]", field) for i, v in enumerate(value)]
        if isinstance(value, tuple) and hasattr(value, "_fields"):  # namedtuple
            return t(*items)
        return tuple(items)
    if isinstance(value, (set, frozenset)):
        return _canonical(_freeze(v, f"{where}{{…}}", field) for v in value)
    if isinstance(value, Mapping) and not _is_instance(value):  # a mappable=True instance stays one
        out = {}
        for k, v in value.items():
            k = _freeze(k, f"{where} key {k!r}", field)
            out[k] = _freeze(v, f"{where}[{k!r}]", field)
        return FrozenDict(out)
    _check_opaque(value, where, field)
    try:
        hash(value)
    except Exception:
        mixed = _errors.MIXED_HINT if _holds_arrays(value) else _mixed(where, field)
        if not mixed and _opaque(value):  # a plain dynamic field refuses it too
            mixed = _errors.OPAQUE_HINT.format(field=field)
        raise TypeError(
            _errors.UNHASHABLE_STATIC.format(where=where, type=t.__name__, field=field, mixed=mixed)
        ) from None
    return value


def _order(v: Any) -> tuple:
    return type(v).__module__, type(v).__qualname__, repr(v)


def _canonical(items: Any) -> frozenset:
    """A frozenset built in one canonical order, so that equal sets a static holds iterate
    alike (iteration order is part of a static value: ``_keys.keyable``), however they were
    built, copied or unpickled."""
    items = list(items)
    try:
        items.sort(key=_order)
    except Exception:  # a repr that raises: the order the set gave
        pass
    return frozenset(items)


def _refuse_array(value: Any, where: str, field: str) -> None:
    what = "tracer" if isinstance(value, _compat.Tracer) else "jax.Array"
    raise TypeError(_errors.JAX_ARRAY_IN_STATIC.format(
        where=where, what=what, field=field, mixed=_mixed(where, field)))


def _holds_arrays(value: Any) -> bool:
    """Whether a pytree value (an eqx.Module, a closure-converted function) holds arrays."""
    try:
        return any(isinstance(leaf, (jax.Array, np.ndarray)) for leaf in jax.tree_util.tree_leaves(value))
    except Exception:  # noqa: BLE001 - only a hint depends on it
        return False


def _opaque(value: Any) -> bool:
    """Whether ``value`` is one leaf to JAX (not a pytree), and not an atom."""
    try:
        return jax.tree_util.all_leaves([value]) and not isinstance(value, (str, bytes, int, float, complex))
    except Exception:  # noqa: BLE001 - only a hint depends on it
        return False


def _mixed(where: str, field: str) -> str:
    """The leaves="any" hint, where the value is inside the field's value (not the whole)."""
    return "" if where.endswith(f".{field}") else _errors.MIXED_HINT


def _is_instance(value: Any) -> bool:
    return "__staticfield_spec__" in type(value).__dict__


def _check_no_arrays(value: Any, where: str, field: str) -> None:
    """Refuse a jax array or tracer anywhere inside ``value`` (a pytree)."""
    paths = jax.tree_util.tree_flatten_with_path(value)[0]
    for path, leaf in paths:
        if isinstance(leaf, (jax.Array, _compat.Tracer)):
            _refuse_array(leaf, f"{where}{jax.tree_util.keystr(path)}", field)
        if isinstance(leaf, functools.partial):
            _check_opaque(leaf, f"{where}{jax.tree_util.keystr(path)}", field)


def captured(obj: Any) -> str | None:
    """Why a bound method of ``obj`` cannot be a field value (``obj`` is an instance, or
    an object whose attributes hold arrays), for ``BOUND_METHOD``; ``None`` if it can."""
    if isinstance(obj, type):
        return None
    if _is_instance(obj):
        return f"{_errors.article(type(obj).__qualname__)} (an @sf.dataclass instance)"
    try:
        leaves = jax.tree_util.tree_leaves(list(vars(obj).values()))
    except Exception:  # no __dict__, or attributes JAX cannot flatten
        return None
    if any(isinstance(leaf, (jax.Array, np.ndarray)) for leaf in leaves):
        return f"{_errors.article(type(obj).__qualname__)} that holds arrays"
    return None


def bound_method_error(method: types.MethodType, where: str, field: str) -> TypeError | None:
    """The ``BOUND_METHOD`` error for a bound method that captures an instance, or ``None``."""
    why = captured(method.__self__)
    if why is None:
        return None
    name = f"{type(method.__self__).__qualname__}.{method.__func__.__name__}"
    return TypeError(_errors.BOUND_METHOD.format(where=where, method=name, captured=why, field=field))


def _check_opaque(value: Any, where: str, field: str) -> None:
    """Checks of a value that is not a container: arrays hidden inside it, a bound method
    that captures an array-holding object, an identity-hashed mutable object."""
    if _is_instance(value):
        _check_no_arrays(value, where, field)
    elif isinstance(value, functools.partial):
        _check_no_arrays((value.func, value.args, dict(value.keywords)), f"{where}<partial>", field)
    elif isinstance(value, types.FunctionType) and value.__closure__:
        # A closure cell is part of the function's identity: a jax.Array or a tracer there
        # is refused as one in the field is (a tracer would leak; an array is not a value).
        for cell in value.__closure__:
            try:
                contents = cell.cell_contents
            except ValueError:  # an empty cell (a name assigned after the def)
                continue
            if isinstance(contents, (jax.Array, _compat.Tracer)):
                _refuse_array(contents, f"{where}<closure {value.__qualname__}>", field)
    elif isinstance(value, types.MethodType):
        error = bound_method_error(value, where, field)
        if error is not None:
            raise error
    elif type(value).__hash__ is object.__hash__ and _identity.identity_keyed(value):
        root = where.split("[", 1)[0].split(" ", 1)[0].split("{", 1)[0]
        if root not in _WARNED:
            _WARNED.add(root)
            warnings.warn(
                _errors.IDENTITY_STATIC.format(
                    where=where, a_type=_errors.article(type(value).__qualname__),
                    type=type(value).__qualname__, field=field),
                _errors.StaticFieldWarning,
                stacklevel=5,
            )


__all__ = ["ATOMIC", "bound_method_error", "freeze", "identity_hashed"]
