"""``sf.jit(fn, static="auto")``: arguments partitioned as ``eqx.filter_jit`` does.

jax and NumPy arrays (and NumPy scalars) are traced; every other leaf of an argument (a
Python bool, int, float or str, a function, an object) is static, keyed by value where
it is hashable (type-strictly: ``1`` and ``1.0`` compile apart) and by identity
otherwise; an ``sf`` instance keeps its own static/dynamic split. Each argument that is
not an array or an ``sf`` instance goes to the engine as an ``AnyLeaves`` node (the node
of ``sf.field(leaves="any")``, see ``_core._anyleaves``), whose array leaves are its
children and whose other leaves are its pytree metadata; the function the engine traces
takes the nodes apart again, so the user's function sees its arguments as given. The
engine counts and explains as for any ``sf.jit`` (a static leaf's change is a
``static_arg`` change at its path).
"""

from __future__ import annotations

import functools
from typing import Any, Callable

from .._core._anyleaves import ARRAY_LEAVES, unwrap, wrap
from .._core._keys import keyable
from .._core._spec import SPECS
from .._core._traceback import hide

CHOICES = ("auto",)


# Python atoms are most of what static="auto" sees: each value's node is made once (a node
# is immutable), keyed type-strictly (so 0.0 and -0.0, 1 and True stay apart).
_ATOMS = frozenset({bool, int, float, complex, str, bytes})
_ATOM_NODES: dict[Any, Any] = {}


def _partition(value: Any) -> Any:
    cls = value.__class__
    if cls in _ATOMS:
        key = keyable(value)
        node = _ATOM_NODES.get(key)
        if node is None:
            if len(_ATOM_NODES) > 4096:
                _ATOM_NODES.clear()
            node = _ATOM_NODES[key] = wrap(value)
        return node
    if value is None or cls in SPECS or isinstance(value, ARRAY_LEAVES):
        return value
    return wrap(value)


def traced(fn: Callable) -> Callable:
    """The function the engine traces: ``fn`` with its arguments taken out of their nodes.
    It carries ``fn``'s name, signature and module (``functools.wraps``)."""

    @functools.wraps(fn)
    def auto(*args: Any, **kwargs: Any) -> Any:
        return fn(*[unwrap(a) for a in args], **{k: unwrap(v) for k, v in kwargs.items()})

    auto.__staticfield_auto__ = True  # type: ignore[attr-defined]
    return auto


class AutoJit:
    """What ``sf.jit(fn, static="auto")`` returns: partitions each call's arguments, then
    calls the ``sf.jit`` of ``traced(fn)``. Counters and settings are that function's."""

    def __init__(self, public: Any, fn: Callable) -> None:
        object.__setattr__(self, "_public", public)
        for name in functools.WRAPPER_ASSIGNMENTS:
            if hasattr(fn, name):
                object.__setattr__(self, name, getattr(fn, name))
        object.__setattr__(self, "__wrapped__", fn)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return self._public(*[_partition(a) for a in args],
                                **{k: _partition(v) for k, v in kwargs.items()})
        except Exception as exc:
            hide(exc)
            raise

    def _with(self, method: str, args: tuple, kwargs: dict) -> Any:
        return getattr(self._public, method)(*[_partition(a) for a in args],
                                             **{k: _partition(v) for k, v in kwargs.items()})

    def lower(self, *args: Any, **kwargs: Any) -> Any:
        """``jax.jit(...).lower`` for this call's arguments."""
        return self._with("lower", args, kwargs)

    def trace(self, *args: Any, **kwargs: Any) -> Any:
        """``jax.jit(...).trace`` for this call's arguments."""
        return self._with("trace", args, kwargs)

    def eval_shape(self, *args: Any, **kwargs: Any) -> Any:
        """``jax.jit(...).eval_shape`` for this call's arguments."""
        return self._with("eval_shape", args, kwargs)

    def precompile(self, *args: Any, **kwargs: Any) -> Any:
        """Trace and compile for these arguments without running (see ``sf.jit``)."""
        return self._with("precompile", args, kwargs)

    def __getattr__(self, name: str) -> Any:  # compile_count, recompiles, cache_size, ...
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self._public, name)

    def __setattr__(self, name: str, value: Any) -> None:  # max_compiles, warn_compiles
        setattr(self._public, name, value)

    def __repr__(self) -> str:
        return f"<sf.jit(static='auto') {getattr(self, '__qualname__', '?')}: {self._public.compile_count} compile(s)>"
