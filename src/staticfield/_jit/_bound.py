"""``obj.method`` for an ``@sf.jit_method``: bound once per instance, and a pytree.

Instances are immutable, so binding is done once: the first ``obj.method`` stores a
``BoundMethod`` in ``obj.__dict__`` under a name private to this descriptor, and later
``obj.method`` lookups (which always reach the class attribute first, so replacing,
mocking or deleting it on the class takes effect) return it. Calling it is a C-level
``partial`` call into the variant's ``jax.jit`` with the instance's children (for a
large model, into the engine's ``large_front`` with its interned ``Shape`` and flat leaves:
``_core._flatform``, from the instance's fourth ``obj.method`` on). The bound object
holds the children and the static key, not ``obj`` itself, so caching it makes no
reference cycle. It is a pytree whose leaves are ``obj``'s dynamic leaves.
"""

from __future__ import annotations

import functools
import itertools
import operator
import weakref
from typing import Any

import jax

from ._args import qualname
from ._compiled import prefixed
from ._engine import JitFunction
from ._hitpath_large import method_large_path
from .._core._deep import rebuild
from .._core._flatform import SMALL, WAIT, used
from .._core._registry import SPECS
from .._core._state import cache_binding, flat
from ._tracker import TRACKER_SETTINGS, check_positive


_SLOTS = itertools.count()


class JitMethod(property):
    """The class attribute made by ``@sf.jit_method``: a C-level ``property``.

    ``obj.method`` runs no Python once the instance is bound: ``property.__get__`` (C)
    calls ``operator.attrgetter(slot)`` (C), which finds the instance's binding in its
    ``__dict__``. The first read on an instance misses there and reaches ``BindingSlot``,
    the class attribute under ``slot`` (a non-data descriptor), which binds the instance
    once and caches the binding under ``slot``. The property is found on the class at
    every ``obj.method``, so replacing, mocking or deleting the method on the class takes
    effect at once.

    ``Cls.method`` is this object: callable as ``Cls.method(obj, ...)`` (its per-method
    class's ``__call__`` is the engine's hit path itself, so no frame of ours runs before
    it), and carrying the counters of its engine (``compile_count``, ``cache_size()``,
    ``recompiles``, ``lower``). Its counters follow the definition: ``Sub.method`` is
    ``Base.method``, and each ``sf.Recompile`` names the class that compiled.
    """

    def __init__(self, engine: JitFunction) -> None:
        fn = engine.fn
        self._jit = engine
        self._name: str | None = None
        # Where an instance keeps its binding: unique per descriptor, never reused.
        self._slot = f"_staticfield_bound_{next(_SLOTS)}"
        # Without static arguments the binding depends on the instance alone: cache it.
        self._variants = engine.variants if engine.fast else None
        # Until __set_name__ puts the slot's descriptor on a class, bind in Python (a
        # method assigned to a class after its creation still works, a frame slower).
        property.__init__(self, self._bind, None, None, fn.__doc__)
        # The user's function, as doctest, Sphinx and IDEs should see it.
        self.__name__ = getattr(fn, "__name__", "method")
        self.__qualname__ = qualname(fn)
        self.__module__ = getattr(fn, "__module__", None)  # type: ignore[assignment]
        self.__wrapped__ = fn
        self._bound_cls = _bound_class(fn, engine)
        # obj.method.__func__, as for a plain bound method (held so that it is not a descriptor)
        self._bound_cls.method = staticmethod(self)

    def __reduce__(self) -> Any:
        # pickle/cloudpickle of a class holding this (e.g. defined in __main__): the
        # function and options; programs, locks and counters are not pickled.
        return self._jit.reduce(self)

    def __set_name__(self, owner: type | None, name: str) -> None:
        self._name = name
        self._owner = owner
        self._jit.attr_name = name
        self._jit.owner = owner
        if owner is not None and (self._variants is not None or self._jit.bound_call is not None):
            if not isinstance(owner.__dict__.get(self._slot), BindingSlot):  # type: ignore[union-attr]
                setattr(owner, self._slot, BindingSlot(self))
            # from now on obj.method is C all the way: the cached binding, or BindingSlot
            property.__init__(self, operator.attrgetter(self._slot), None, None, self._jit.fn.__doc__)
            self.__name__ = getattr(self._jit.fn, "__name__", name)  # re-init clears it (3.13)

    def _bind(self, obj: Any) -> Any:
        cls = self._bound_cls
        variants = self._variants
        engine = self._jit
        if engine.bound_call is not None:  # deps="read" or static arguments: (children, key, ...)
            deep = engine.deps is not None or engine.rest_deps is not None
            children, key = obj._staticfield_deep if deep else obj._staticfield_flat
            bound = _make(cls, key, engine.deps_front or engine.bound_call, children, key)
            bound.ref = _weak(obj)
            return cache_binding(obj, self._slot, bound)
        if variants is None:
            # buckets=, deps="read" with static arguments, or a signature the static hit path
            # cannot take: the binding holds obj, so it is not cached (that would be a cycle)
            return _make(cls, None, engine.call, obj)
        try:
            children, key = obj._staticfield_flat
            jitted = variants[key][0]
        except (KeyError, AttributeError):
            jitted, children = engine.method_miss(obj)
            key = flat(obj)[1]
        # A large model (_core._flatform) is bound to its flat form from its WARM_UPS + 1-th use
        # on; until then its binding is not kept, so its next obj.method comes here again.
        large = used(obj) if engine.large_front is not None else SMALL
        bound = (_make(cls, key, engine.large_front, large[1], large[0], children=children) if large[2]
                 else _make(cls, key, jitted, children))
        bound.ref = _weak(obj)
        return bound if large is WAIT else cache_binding(obj, self._slot, bound)  # immutable: bind once

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in ("_jit", "_owner", "_slot", "_variants", "_bound_cls", "_name"):
            raise AttributeError(name)
        return getattr(self._jit, name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in TRACKER_SETTINGS:  # the budget and warning threshold live in the tracker
            check_positive(self.__qualname__, name, value)
            setattr(self._jit.tracker, name, value)
        else:
            object.__setattr__(self, name, value)

    def __repr__(self) -> str:
        return repr(self._jit)


def make_method(engine: JitFunction) -> JitMethod:
    """An ``@sf.jit_method``: a ``JitMethod`` of a class of its own, whose ``__call__`` is the
    engine's hit path (``Cls.method(obj, ...)`` calls it directly), whose ``__doc__`` is the
    user's, and which is abstract where the user's function is."""
    fn = engine.fn
    namespace: dict[str, Any] = {"__call__": staticmethod(engine.call), "__doc__": fn.__doc__,
                                 "__module__": JitMethod.__module__, "__qualname__": "JitMethod"}
    if getattr(fn, "__isabstractmethod__", False):  # @sf.jit_method over @abc.abstractmethod
        namespace["__isabstractmethod__"] = True
    cls = type("JitMethod", (JitMethod,), namespace)
    if engine.front is not None:  # past FRONT_VARIANTS variants, Cls.method takes the Python path
        home = weakref.ref(cls)

        def leave_front() -> None:
            owner = home()
            if owner is not None:
                owner.__call__ = staticmethod(engine.python_call)  # type: ignore[method-assign]

        engine.leave_front = leave_front
        method_large_path(engine, fn, home)
    return cls(engine)  # type: ignore[no-any-return]


class BindingSlot:
    """The class attribute under a ``JitMethod``'s slot: binds an instance on its first
    ``obj.method`` and caches the binding in the instance's ``__dict__``, where every later
    read finds it first (this is a non-data descriptor), with no Python."""

    __slots__ = ("method",)

    def __init__(self, method: JitMethod | None) -> None:
        self.method = method

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        if obj is None:
            return self
        if self.method is None:  # unpickled with its class: the method was rebuilt
            raise AttributeError("an unbound staticfield slot")
        return self.method._bind(obj)

    def __reduce__(self) -> Any:
        # cloudpickle of a class by value: the method pickles as sf.jit_method(fn, ...) and
        # binds in Python in the new process (its __set_name__ does not run again there)
        return BindingSlot, (None,)


class BoundMethod(functools.partial):
    """``obj.method`` for an ``@sf.jit_method``: callable, and a pytree of ``obj``'s leaves.

    Without static arguments it is ``partial(variant_jit, children)`` (a large model's:
    ``partial(large_front, shape, leaves)``, its children kept beside); with them it is
    ``partial(engine_call, obj)``, since the variant depends on the call's arguments. With
    ``deps="read"`` it is ``partial(bound_call, children, key)``: the key's program may
    change (see ``_deps``), so it is looked up on each call.
    """

    __slots__ = ("key", "ref", "children")

    engine: JitFunction  # class attributes of the per-method subclass (see _bound_class)
    method: JitMethod
    key: Any
    ref: Any  # a weak reference to the instance it was bound to, where there is one
    children: Any  # the instance's children where the call takes its flat leaves, else None

    def __new__(cls, func: Any, obj: Any, /) -> Any:
        """``type(obj.method)(obj.method.__func__, obj)`` is ``obj.method``, as for a plain
        bound method (``weakref.WeakMethod`` rebuilds a method so). staticfield makes its
        bindings with ``_make``, which does not come here."""
        if func is not cls.method:
            raise TypeError(f"{cls.__qualname__} binds {qualname(cls.engine.fn)} only; "
                            "get a bound method as obj.method.")
        return func.__get__(obj, type(obj))

    def __getattr__(self, name: str) -> Any:
        # Only reached for names not found normally, so this costs nothing on a call.
        if name in ("engine", "key", "ref", "method", "children"):  # unset: never recurse
            raise AttributeError(name)
        if name == "__wrapped__":
            return self.engine.fn
        if name in ("__name__", "__qualname__"):
            return getattr(self.engine.fn, name)
        if name == "__signature__":
            return self.engine.bound_signature()
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.engine, name)

    @property
    def __doc__(self) -> str | None:  # type: ignore[override]
        return self.engine.fn.__doc__

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, BoundMethod):
            return NotImplemented
        return self.engine is other.engine and bool(self.__self__ == other.__self__)  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash((BoundMethod, id(self.engine), self.__self__))

    def _staticfield_rebind(self, obj: Any) -> None:
        """``obj`` changed a field with ``object.__setattr__`` (``_sealed.reassign``): from
        now on this binding is ``partial(Cls.method, obj)``, so it computes with ``obj``'s
        fields as they are at each call, like a plain bound method."""
        _setstate(self, (self.engine.call, (obj,), {}, None))
        self.key = None
        self.ref = None
        self.children = None

    def __reduce__(self) -> tuple:
        # copy, deepcopy and pickle: the method, looked up again on (a copy of) the instance.
        return getattr, (self.__self__, self.engine.attr_name)

    @property
    def __self__(self) -> Any:
        """The instance this method is bound to: the one ``obj.method`` was read on while it
        lives (the binding holds it weakly), else rebuilt from its children."""
        if self.key is None:
            return self.args[0]
        ref = self.ref
        obj = ref() if ref is not None else None
        return rebuild(self.key, _children(self)) if obj is None else obj

    @property
    def __func__(self) -> Any:
        """The class attribute this method was bound from (``Cls.method``)."""
        return type(self).method

    def lower(self, *args: Any, **kwargs: Any) -> Any:
        """``jax.jit(...).lower`` for ``obj.method(*args, **kwargs)``."""
        return prefixed(self.engine.lower(self.__self__, *args, **kwargs), (self.__self__,))

    def trace(self, *args: Any, **kwargs: Any) -> Any:
        """``jax.jit(...).trace`` for ``obj.method(*args, **kwargs)``."""
        return self.engine.trace(self.__self__, *args, **kwargs)

    def eval_shape(self, *args: Any, **kwargs: Any) -> Any:
        """``jax.jit(...).eval_shape`` for ``obj.method(*args, **kwargs)``."""
        return self.engine.eval_shape(self.__self__, *args, **kwargs)

    def precompile(self, *args: Any, **kwargs: Any) -> None:
        """Prepare the program of ``obj.method(*args, **kwargs)`` without running it."""
        self.engine.precompile(self.__self__, *args, **kwargs)

    def __repr__(self) -> str:
        return f"<bound sf.jit_method {qualname(self.engine.fn)} of {self.__self__!r}>"


def _bound_class(fn: Any, engine: JitFunction) -> type:
    """A ``BoundMethod`` subclass per method, whose ``__module__`` is the user's and whose
    ``engine`` is the method's: so ``obj.method.__module__`` costs nothing per binding,
    and a binding sets one slot. Registered with JAX like its base."""
    namespace = {"__slots__": (), "__module__": getattr(fn, "__module__", None), "__doc__": fn.__doc__,
                 "engine": engine}
    cls = type("BoundMethod", (BoundMethod,), namespace)
    cls.__qualname__ = f"BoundMethod[{qualname(fn)}]"
    jax.tree_util.register_pytree_with_keys(cls, _flatten_with_keys, _unflatten, flatten_func=_flatten)
    return cls


_new_partial = functools.partial.__new__
_setstate = functools.partial.__setstate__


def _make(cls: type, key: Any, func: Any, arg: Any, *more: Any, children: Any = None) -> BoundMethod:
    bound = _new_partial(cls, func, arg, *more)  # not BoundMethod.__new__: that one rebinds
    bound.key = key
    bound.ref = None
    bound.children = children
    return bound


def _children(b: BoundMethod) -> Any:
    """The bound instance's children (its key's), however the call takes them."""
    children = b.children
    return b.args[0] if children is None else children


def _weak(obj: Any) -> Any:
    try:
        return weakref.ref(obj)
    except TypeError:  # an instance that takes no weak references: __self__ rebuilds it
        return None


def _flatten(b: BoundMethod) -> tuple[Any, tuple]:
    aux = (b.__class__, b.key)
    return (_children(b) if b.key is not None else (b.args[0],)), aux


def _flatten_with_keys(b: BoundMethod) -> tuple[Any, tuple]:
    children, aux = _flatten(b)
    if b.key is None:
        return [(jax.tree_util.GetAttrKey("__self__"), children[0])], aux
    names = SPECS[b.key.cls].dynamic_names
    return [(jax.tree_util.GetAttrKey(n), c) for n, c in zip(names, children)], aux


def _unflatten(aux: tuple, children: Any) -> BoundMethod:
    cls, key = aux
    engine = cls.engine
    if key is None:
        return _make(cls, None, engine.call, children[0])
    children = tuple(children)
    if engine.bound_call is not None:  # deps="read", static arguments
        return _make(cls, key, engine.deps_front or engine.bound_call, children, key)
    entry = engine.variants.get(key)
    if entry is None:  # e.g. after the variants were rebuilt: make it again from the instance
        return _make(cls, key, engine.method_miss(SPECS[key.cls].unflatten(key, children))[0], children)
    return _make(cls, key, entry[0], children)


jax.tree_util.register_pytree_with_keys(
    BoundMethod, _flatten_with_keys, _unflatten, flatten_func=_flatten
)
