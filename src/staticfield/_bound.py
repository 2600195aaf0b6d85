"""``obj.method`` for an ``@sf.jit_method``: bound once per instance, and a pytree.

Instances are immutable, so binding is done once: the first ``obj.method`` stores a
``BoundMethod`` in ``obj.__dict__`` (a non-data descriptor gives way to it from then
on), and calling it is a C-level ``partial`` call into the variant's ``jax.jit`` with
the instance's children. The bound object holds the children and the static key, not
``obj`` itself, so caching it makes no reference cycle. It is a pytree whose leaves are
``obj``'s dynamic leaves.
"""

from __future__ import annotations

import functools
from typing import Any

import jax

from ._args import qualname
from ._jit import JitFunction
from ._spec import SPECS
from ._state import cache_binding


class JitMethod:
    """The class attribute made by ``@sf.jit_method``.

    ``Cls.method`` is this object: callable as ``Cls.method(obj, ...)``, and carrying
    the counters of its engine (``compile_count``, ``cache_size()``, ``recompiles``,
    ``lower``). ``obj.method`` is a ``BoundMethod``.
    """

    def __init__(self, engine: JitFunction) -> None:
        self._jit = engine
        self._name: str | None = None
        # Without static arguments the variant depends on the instance alone: bind to it.
        self._variants = engine._variants if engine._fast else None
        self.__doc__ = engine.fn.__doc__
        self.__wrapped__ = engine.fn

    def __set_name__(self, owner: type, name: str) -> None:
        self._name = name

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        if obj is None:
            return self
        variants = self._variants
        if variants is None:
            return _make(self._jit, None, self._jit._call, obj)
        try:
            children, key = obj._staticfield_flat
            jitted = variants[key]
        except (KeyError, AttributeError):
            jitted, children, key = self._jit.variant_of(obj)
        bound = BoundMethod(jitted, children)
        bound.engine = self._jit
        bound.key = key
        if self._name is not None:  # immutable instance: bind once
            cache_binding(obj, self._name, self, bound)
        return bound

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self._jit, name)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._jit._call(*args, **kwargs)

    def __repr__(self) -> str:
        return repr(self._jit)


class BoundMethod(functools.partial):
    """``obj.method`` for an ``@sf.jit_method``: callable, and a pytree of ``obj``'s leaves.

    Without static arguments it is ``partial(variant_jit, children)``; with them it is
    ``partial(engine_call, obj)``, since the variant depends on the call's arguments.
    """

    __slots__ = ("engine", "key")
    __staticfield_bound__ = True  # lets construction checks drop a stale cached binding

    engine: JitFunction
    key: Any

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.engine, name)

    @property
    def __self__(self) -> Any:
        """The instance this method is bound to (rebuilt from its children if needed)."""
        if self.key is None:
            return self.args[0]
        return SPECS[self.key.cls].unflatten(self.key, self.args[0])

    def lower(self, *args: Any, **kwargs: Any) -> Any:
        """``jax.jit(...).lower`` for ``obj.method(*args, **kwargs)``."""
        return self.engine.lower(self.__self__, *args, **kwargs)

    def __repr__(self) -> str:
        return f"<bound sf.jit_method {qualname(self.engine.fn)} of {self.__self__!r}>"


def _make(engine: JitFunction, key: Any, func: Any, arg: Any) -> BoundMethod:
    bound = BoundMethod(func, arg)
    bound.engine = engine
    bound.key = key
    return bound


def _flatten(b: BoundMethod) -> tuple[Any, tuple]:
    aux = (b.engine, b.key)
    return (b.args[0] if b.key is not None else (b.args[0],)), aux


def _flatten_with_keys(b: BoundMethod) -> tuple[Any, tuple]:
    children, aux = _flatten(b)
    if b.key is None:
        return [(jax.tree_util.GetAttrKey("__self__"), children[0])], aux
    names = SPECS[b.key.cls].dynamic_names
    return [(jax.tree_util.GetAttrKey(n), c) for n, c in zip(names, children)], aux


def _unflatten(aux: tuple, children: Any) -> BoundMethod:
    engine, key = aux
    if key is None:
        return _make(engine, None, engine._call, children[0])
    return _make(engine, key, engine._variants[key], tuple(children))


jax.tree_util.register_pytree_with_keys(
    BoundMethod, _flatten_with_keys, _unflatten, flatten_func=_flatten
)
