"""Instance semantics: frozen assignment, ``==``, ``hash``, ``repr``, ``replace``, pickling.

``==`` returns a Python bool (type, static key, then dynamic leaves by structure,
shape, dtype and value); ``hash`` uses the static key and leaf shapes/dtypes only,
never array values, so it needs no device sync and never raises for arrays.
"""

from __future__ import annotations

import reprlib
from typing import Any, TypeVar

import jax
import numpy as np

from . import _errors
from ._spec import INITIALIZING, KEY_ATTR, ensure_registered, spec_of

T = TypeVar("T")

_DTYPE_SHORT = {"float": "f", "int": "i", "uint": "u", "complex": "c", "bfloat": "bf"}


def __setattr__(self: Any, name: str, value: Any) -> None:
    if id(self) in INITIALIZING:
        object.__setattr__(self, name, value)
        return
    spec_of(self)  # an undecorated subclass's own __init__ lands here: say to decorate it
    raise _errors.frozen_error(type(self), name)


def __delattr__(self: Any, name: str) -> None:
    if id(self) in INITIALIZING:
        object.__delattr__(self, name)
        return
    spec_of(self)
    raise _errors.frozen_error(type(self), name, deleting=True)


def _leaf_sig(leaf: Any) -> tuple:
    # weak_type is part of it: a weak and a strong f32 constant promote differently
    # (x * f16 gives f16 vs f32), so as static_argnums they must not share a program.
    if hasattr(leaf, "shape") and hasattr(leaf, "dtype"):
        return (tuple(leaf.shape), np.dtype(leaf.dtype), getattr(leaf, "weak_type", False))
    return ((), leaf.__class__)


def _leaf_equal(cls: type, name: str, a: Any, b: Any) -> bool:
    if a is b:
        return True
    if _leaf_sig(a) != _leaf_sig(b):
        return False
    for leaf in (a, b):
        if isinstance(leaf, jax.core.Tracer):
            raise TypeError(
                _errors.TRACED_EQ.format(cls=cls.__qualname__, field=name, type=type(leaf).__name__)
            )
    if isinstance(a, jax.ShapeDtypeStruct) or isinstance(b, jax.ShapeDtypeStruct):
        return type(a) is type(b)
    x, y = np.asarray(a), np.asarray(b)
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
    spec = spec_of(self)
    if spec.key_of(self) != spec.key_of(other):
        return False
    d, e = self.__dict__, other.__dict__
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
    spec = spec_of(self)
    d = self.__dict__
    leaves, treedef = jax.tree_util.tree_flatten([d[n] for n in spec.dynamic_names])
    return hash((spec.key_of(self), treedef, tuple(_leaf_sig(leaf) for leaf in leaves)))


def short_dtype(dtype: Any) -> str:
    """``float32`` → ``f32``, ``bfloat16`` → ``bf16``, ``bool`` → ``bool``."""
    name = np.dtype(dtype).name
    for long, short in _DTYPE_SHORT.items():
        if name.startswith(long) and name[len(long):].isdigit():
            return short + name[len(long):]
    return name


def summary(leaf: Any) -> str:
    """``f32[2,3]`` for an array-like leaf, ``repr`` for anything else."""
    if hasattr(leaf, "shape") and hasattr(leaf, "dtype"):
        try:
            return f"{short_dtype(leaf.dtype)}[{','.join(map(str, leaf.shape))}]"
        except TypeError:
            pass
    return repr(leaf)


class _Shown:
    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return self.text


def _summarize(value: Any) -> str:
    if hasattr(value, "shape") and hasattr(value, "dtype"):
        return summary(value)
    return repr(jax.tree_util.tree_map(lambda leaf: _Shown(summary(leaf)), value))


@reprlib.recursive_repr()
def __repr__(self: Any) -> str:
    spec = spec_of(self)
    d = self.__dict__
    parts = []
    for f in spec.fields:
        if not f.repr:
            continue
        if f.name not in d:
            parts.append(f"{f.name}=<unset>")
        elif f.name in spec.static_set:
            parts.append(f"{f.name}={d[f.name]!r}")
        else:
            parts.append(f"{f.name}={_summarize(d[f.name])}")
    return f"{spec.cls.__qualname__}({', '.join(parts)})"


def __getstate__(self: Any) -> dict[str, Any]:
    spec = spec_of(self)
    d = self.__dict__
    return {n: d[n] for n in spec.names}


def __setstate__(self: Any, state: dict[str, Any]) -> None:
    spec = spec_of(self)
    ensure_registered(type(self))  # a class cloudpickle rebuilt in a new process
    d = self.__dict__
    d.update(state)
    for name in spec.static_names:  # e.g. unpickled NumPy arrays come back writeable
        spec.set_value(self, name, d[name], convert=False)
    if spec.constant_key is not None:
        d[KEY_ATTR] = spec.constant_key


def __copy__(self: T) -> T:
    new = object.__new__(type(self))
    new.__dict__.update(self.__dict__)
    return new


def replace(obj: T, /, **changes: Any) -> T:
    """Return a copy of ``obj`` with ``changes`` applied, without calling ``__init__``.

    Converters and checks run on the changed fields; an unknown name is a TypeError.
    """
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
    new = object.__new__(spec.cls)
    d = new.__dict__
    od = obj.__dict__
    for name in spec.names:  # fields only: cached flatten results and bindings are stale
        d[name] = od[name]
    static_changed = False
    for name, value in changes.items():
        spec.set_value(new, name, value, convert=True)
        static_changed = static_changed or name in spec.static_set
    if not static_changed and KEY_ATTR in od:
        d[KEY_ATTR] = od[KEY_ATTR]
    return new


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
