"""Instance semantics: frozen assignment, ``==``, ``hash``, ``replace``, pickling and copying.

``==`` returns a Python bool (type, static key, then dynamic leaves by structure,
shape, dtype, weak type and value); ``hash`` uses the static key and leaf shapes,
dtypes and weak types only, never array values, so it needs no device sync and never
raises for arrays.
"""

from __future__ import annotations

from typing import Any, TypeVar

import jax
import numpy as np

from . import _compat, _errors, _sealed, _state
from ._slots import used_whole
from ._spec import spec_of
from ._registry import ensure_registered
from ._state import BUILDING

T = TypeVar("T")


def __setattr__(self: Any, name: str, value: Any) -> None:
    if id(self) in BUILDING:
        _state.setattr_building(self, name, value)
        return
    spec_of(self)  # an undecorated subclass's own __init__ lands here: say to decorate it
    raise _errors.frozen_error(type(self), name)


def __delattr__(self: Any, name: str) -> None:
    if id(self) in BUILDING:
        object.__delattr__(self, name)
        return
    spec_of(self)
    raise _errors.frozen_error(type(self), name, deleting=True)


def _leaf_sig(leaf: Any) -> tuple:
    # Shape, dtype and JAX's weak type: a weak f32 (jnp.asarray(2.0)) times an f16 array
    # is f16, a strong one gives f32, so the two are different values to a program (and
    # to jax.jit's static_argnums, which goes by == and hash). NumPy leaves are strong.
    if hasattr(leaf, "shape") and hasattr(leaf, "dtype"):
        return (tuple(leaf.shape), _dtype(leaf.dtype), getattr(leaf, "weak_type", False) is True)
    return ((), leaf.__class__)


def _dtype(dtype: Any) -> Any:
    """NumPy's dtype where there is one; JAX's own for extended dtypes (typed PRNG keys)."""
    try:
        return np.dtype(dtype)
    except TypeError:
        return dtype


def _host(leaf: Any) -> np.ndarray:
    if jax.dtypes.issubdtype(getattr(leaf, "dtype", None), jax.dtypes.extended):
        leaf = jax.random.key_data(leaf)  # a typed PRNG key: compare its bits
    return np.asarray(leaf)


def _spread(leaf: Any) -> bool:
    """A jax.Array with shards in other processes: its values cannot come to this host."""
    return (isinstance(leaf, jax.Array) and not isinstance(leaf, _compat.Tracer)
            and not leaf.is_fully_addressable)


def _same_bits(x: Any, y: Any) -> Any:
    """Whether two arrays hold the same bits (floats bitwise, as ``_leaf_equal`` compares)."""
    def bits(v: Any) -> Any:
        if jax.dtypes.issubdtype(v.dtype, jax.dtypes.extended):
            v = jax.random.key_data(v)
        if jax.numpy.iscomplexobj(v):
            return bits(jax.numpy.stack([v.real, v.imag]))
        if jax.dtypes.issubdtype(v.dtype, jax.numpy.floating):
            width = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[v.dtype.itemsize]
            return jax.lax.bitcast_convert_type(v, width)
        return v
    return jax.numpy.all(bits(x) == bits(y))


_SAME_BITS: list = []


def _same_bits_on_devices() -> Any:
    """``_same_bits`` jitted (made on first use): for arrays spread over processes, compared
    where they are; the scalar result is replicated, so every process reads it."""
    if not _SAME_BITS:
        _SAME_BITS.append(jax.jit(_same_bits))
    return _SAME_BITS[0]


def _leaf_equal(cls: type, name: str, a: Any, b: Any) -> bool:
    if a is b:
        return True
    if _leaf_sig(a) != _leaf_sig(b):
        return False
    for leaf in (a, b):
        if isinstance(leaf, _compat.Tracer):
            raise TypeError(
                _errors.TRACED_EQ.format(cls=cls.__qualname__, field=name, type=type(leaf).__name__)
            )
    if isinstance(a, jax.ShapeDtypeStruct) or isinstance(b, jax.ShapeDtypeStruct):
        return type(a) is type(b)
    if _spread(a) or _spread(b):
        try:
            return bool(_same_bits_on_devices()(a, b))
        except Exception as e:
            raise ValueError(_errors.SPREAD_EQ.format(
                cls=cls.__qualname__, field=name, error=f"{type(e).__name__}: {e}")) from e
    x, y = _host(a), _host(b)
    if x.dtype.kind in "fcV":
        # Bitwise for floats: -0.0 and 0.0 are different values to a program that bakes
        # them in (1/x), and a NaN equals itself, so == stays reflexive.
        return np.ascontiguousarray(x).tobytes() == np.ascontiguousarray(y).tobytes()
    return bool(np.array_equal(x, y))


def __eq__(self: Any, other: Any) -> Any:
    if other.__class__ is not self.__class__:
        return NotImplemented
    if self is other:
        return True
    used_whole(self, "==")
    used_whole(other, "==")
    spec = spec_of(self)
    if _state.key_of(spec, self) != _state.key_of(spec, other):
        return False
    d, e = self._staticfield_dict, other._staticfield_dict
    for name in spec.dynamic_names:
        xs, xdef = jax.tree_util.tree_flatten(d[name])
        ys, ydef = jax.tree_util.tree_flatten(e[name])
        if xdef != ydef:
            return False
        for x, y in zip(xs, ys):
            if not _leaf_equal(spec.cls, name, x, y):
                return False
    return True


def __hash__(self: Any) -> int:
    used_whole(self, "hash")
    spec = spec_of(self)
    d = self._staticfield_dict
    leaves, treedef = jax.tree_util.tree_flatten([d[n] for n in spec.dynamic_names])
    return hash((_state.key_of(spec, self), treedef, tuple(_leaf_sig(leaf) for leaf in leaves)))


def __getstate__(self: Any) -> dict[str, Any]:
    return _sealed.getstate(self)


def __setstate__(self: Any, state: dict[str, Any]) -> None:
    ensure_registered(type(self))  # a class cloudpickle rebuilt in a new process
    _sealed.setstate(self, state)


def __copy__(self: T) -> T:
    return _sealed.copy(self)


def replace(obj: T, /, **changes: Any) -> T:
    """Return a copy of ``obj`` with ``changes`` applied, without calling ``__init__``.

    Converters and checks run on the changed fields, then ``__check_init__``; an
    unknown name is a TypeError listing the valid ones.
    """
    if isinstance(obj, type):
        raise TypeError(_errors.REPLACE_CLASS.format(cls=obj.__qualname__))
    spec = spec_of(obj, "sf.replace")
    unknown = [n for n in changes if n not in spec.name_set]
    if unknown:
        raise TypeError(
            _errors.UNKNOWN_REPLACE.format(
                cls=spec.cls.__qualname__,
                names=", ".join(map(repr, unknown)),
                valid=", ".join(spec.names),
            )
        )
    return _sealed.derive(obj, changes)


def _replace_method(self: T, /, **changes: Any) -> T:
    """Return a copy with ``changes`` applied (``sf.replace(self, **changes)``)."""
    return replace(self, **changes)


METHODS = {
    "__setattr__": __setattr__,
    "__delattr__": __delattr__,
    "__getstate__": __getstate__,
    "__setstate__": __setstate__,
    "__copy__": __copy__,
    "__replace__": _replace_method,
}
EQ_METHODS = {"__eq__": __eq__, "__hash__": __hash__}
