"""``jit_method`` and ``jit``: jit with ``self`` as a pytree, counted and explained.

The hit path is one dict lookup: each top-level ``@sf.dataclass`` argument's static
key picks a per-variant ``jax.jit`` that receives only the instance's dynamic
children, so the cost does not grow with the number of static variants. All
tracking (counting, explaining, the ``max_compiles`` budget) runs while tracing,
never on a hit.

Dependencies run one way: this module (the public decorators) builds on
``_bound`` (the method descriptor and bound-method pytree), ``_hitpath_jit`` (what
``sf.jit`` returns) and ``_engine`` (the variants and misses), which builds on
``_variant`` (one variant's ``jax.jit``), ``_hitpath`` and its siblings (the generated
hit paths) and ``_tracker`` (the counters).
"""

from __future__ import annotations

import functools
import types
from typing import Any, Callable, Literal, TypeVar, overload

from typing_extensions import Concatenate, ParamSpec

from . import _auto
from ._args import qualname, resolve_static, signature_parts
from ._compiled import prefixed
from .._buckets import bucket_spec
from ._bound import JitMethod, make_method
from ._engine import JitFunction
from ._hitpath_jit import public_function
from .._core._registry import SPECS
from ._tracker import UNSET, default_warn_compiles
from ._types import JitMethodDescriptor, Jitted

_JIT_DEPS = (
    "{name}: sf.jit does not take deps=: it applies to @sf.jit_method, where it chooses "
    "which static fields of `self` key the cache (deps=\"read\": only those the method "
    "reads). Decorate a method with @sf.jit_method(deps=\"read\"), or drop deps=."
)

P = ParamSpec("P")
T = TypeVar("T")
S = TypeVar("S")


def _unpickle(fn: Callable, options: dict[str, Any], method: bool, attr_name: str) -> Any:
    """Rebuild a pickled ``sf.jit`` function or ``@sf.jit_method``: fresh programs and counters."""
    if not method:
        return jit(fn, **options)
    descriptor: Any = jit_method(fn, **options)
    descriptor.__set_name__(None, attr_name)
    return descriptor


# sf.jit(fn, **opts) again with the same function and options gives the same function,
# kept on ``fn`` itself, so it lives exactly as long as ``fn`` (and a cycle with it is freed).
_SHARED_ATTR = "__staticfield_jit__"


class _SharedCache(dict):
    """``fn``'s wrappers by options; pickled empty (a copy of ``fn`` starts afresh)."""

    def __init__(self, owner: Any = None) -> None:
        super().__init__()
        self.owner = owner

    def __reduce__(self) -> Any:
        return _SharedCache, ()


def _shared(fn: Callable, options: dict[str, Any], make: Callable[[], Any]) -> Any:
    if not isinstance(fn, types.FunctionType):  # never write into a callable object's state
        return make()
    try:
        key = tuple(sorted(options.items()))
        hash(key)
    except TypeError:  # unhashable options (e.g. a list of shardings): not shared
        return make()
    cache = fn.__dict__.get(_SHARED_ATTR)
    if cache is None or cache.owner is not fn:  # none yet, or copied from another by functools.wraps
        cache = fn.__dict__[_SHARED_ATTR] = _SharedCache(fn)
    public = cache.get(key)
    if public is None:
        public = cache[key] = make()
    return public


def _is_plain_method_of_instance(fn: Any) -> bool:
    """``obj.method`` for a plain function ``method`` and a staticfield instance ``obj``."""
    return (
        isinstance(fn, types.MethodType)
        and type(fn.__self__) in SPECS
        and isinstance(fn.__func__, types.FunctionType)
    )


def _shift_argnums(jit_kwargs: dict[str, Any]) -> dict[str, Any]:
    """``jax.jit(obj.method)``'s argument numbers count from the first argument after
    ``self``; the function ``method`` takes ``self`` first."""
    out = dict(jit_kwargs)
    for key in ("static_argnums", "donate_argnums"):
        nums = jit_kwargs.get(key)
        if nums is not None:
            out[key] = tuple(n + 1 if n >= 0 else n for n in ((nums,) if isinstance(nums, int) else nums))
    return out


class BoundJit(functools.partial):
    """What ``sf.jit(obj.method)`` returns for a plain method of an instance: the shared
    ``sf.jit`` of the function, called with ``obj`` first as a pytree argument, so a new
    instance with new values (same statics) reuses its program, as ``obj.method`` of an
    ``@sf.jit_method`` does. The counters and ``clear_cache`` are the shared function's."""

    __slots__ = ()

    def __new__(cls, shared: Any, method: types.MethodType) -> BoundJit:
        self = super().__new__(cls, shared, method.__self__)
        fn = method.__func__
        for name in functools.WRAPPER_ASSIGNMENTS:
            if hasattr(fn, name):
                self.__dict__[name] = getattr(fn, name)
        self.__dict__["__wrapped__"] = method
        return self

    def __getattr__(self, name: str) -> Any:  # compile_count, recompiles, cache_size, ...
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.func, name)

    def lower(self, *args: Any, **kwargs: Any) -> Any:
        """``jax.jit(...).lower`` for ``obj.method(*args, **kwargs)``."""
        return prefixed(self.func.lower(*self.args, *args, **kwargs), tuple(self.args))

    def trace(self, *args: Any, **kwargs: Any) -> Any:
        """``jax.jit(...).trace`` for ``obj.method(*args, **kwargs)``."""
        return self.func.trace(*self.args, *args, **kwargs)

    def eval_shape(self, *args: Any, **kwargs: Any) -> Any:
        """``jax.jit(...).eval_shape`` for ``obj.method(*args, **kwargs)``."""
        return self.func.eval_shape(*self.args, *args, **kwargs)

    def precompile(self, *args: Any, **kwargs: Any) -> None:
        """Prepare the program of ``obj.method(*args, **kwargs)`` without running it."""
        self.func.precompile(*self.args, *args, **kwargs)

    def __repr__(self) -> str:
        return f"<sf.jit of bound method {self.__dict__.get('__qualname__')}: {self.func.compile_count} compile(s)>"


def _auto_jit(fn: Callable, jit_kwargs: dict[str, Any], max_compiles: int | None, warn_compiles: Any) -> Any:
    engine = JitFunction(fn, jit_kwargs, max_compiles, warn_compiles, method=False, rebuild=_unpickle)
    engine.options["static"] = "auto"  # a pickled copy is made again with it
    return _auto.AutoJit(engine, fn)


@overload
def jit(fn: Callable[P, T], /, *, max_compiles: int | None = None, warn_compiles: int | None = ...,
        **jit_kwargs: Any) -> Jitted[P, T]: ...
@overload
def jit(
    fn: None = None, /, *, max_compiles: int | None = None, warn_compiles: int | None = ..., **jit_kwargs: Any
) -> Callable[[Callable[P, T]], Jitted[P, T]]: ...


def jit(fn: Callable | None = None, /, *, max_compiles: int | None = None, warn_compiles: Any = UNSET,
        static: str | None = None, **jit_kwargs: Any) -> Any:
    """``jax.jit`` with compile tracking, for free functions.

    Top-level ``@sf.dataclass`` arguments are looked up by their static key, so
    many static variants cost no more per call than one. Takes ``jax.jit``'s keyword
    arguments, plus ``max_compiles`` and ``warn_compiles``. The result has
    ``compile_count``, ``cache_size()``, ``recompiles`` and ``clear_cache()``. Like
    ``jax.jit``, whose cache belongs to the function, calling ``sf.jit`` again with
    the same function and options gives the same compiled programs and counters.
    ``static="auto"`` partitions the arguments as ``eqx.filter_jit`` does: arrays are
    traced, every other leaf (a Python bool, number or str, a function, an object) is
    static, keyed by value (type-strictly) where hashable and by identity otherwise.
    ``sf.jit(obj.method)`` of a plain method of an ``sf`` instance, and ``sf.jit(obj)``
    of an instance with ``__call__``, pass ``obj`` as a pytree argument: a new instance
    with new values reuses the program.
    """
    if "deps" in jit_kwargs:
        raise TypeError(_JIT_DEPS.format(name=qualname(fn) if fn is not None else "sf.jit"))
    if static is not None and static not in _auto.CHOICES:
        raise ValueError(
            f"{qualname(fn) if fn is not None else 'sf.jit'}: static={static!r} is not a choice; "
            "pass static=\"auto\" (arrays traced, every other leaf static, as eqx.filter_jit), or "
            "leave it out and name static arguments with static_argnames."
        )
    if fn is None:
        return functools.partial(jit, max_compiles=max_compiles, warn_compiles=warn_compiles, static=static,
                                 **jit_kwargs)
    if warn_compiles is UNSET:
        warn_compiles = default_warn_compiles()
    if static == "auto":
        options = dict(jit_kwargs, max_compiles=max_compiles, warn_compiles=warn_compiles, static=static)
        return _shared(fn, options, lambda: _auto_jit(fn, jit_kwargs, max_compiles, warn_compiles))
    if (type(fn) in SPECS and isinstance(type(fn).__dict__.get("__call__") or getattr(type(fn), "__call__", None),
                                          JitMethod)
            and not jit_kwargs and max_compiles is None):
        # its __call__ is already an @sf.jit_method: the bound method is that jit
        return fn.__call__
    if type(fn) in SPECS and isinstance(getattr(type(fn), "__call__", None), types.FunctionType):
        # sf.jit(model) of an instance with __call__ (eqx.filter_jit(model)) is
        # sf.jit(model.__call__): the instance is a pytree argument, not baked in
        fn = types.MethodType(type(fn).__call__, fn)
    if _is_plain_method_of_instance(fn) and "in_shardings" not in jit_kwargs:
        shared = jit(fn.__func__, max_compiles=max_compiles, warn_compiles=warn_compiles,  # type: ignore[union-attr]
                     **_shift_argnums(jit_kwargs))
        return BoundJit(shared, fn)
    options = dict(jit_kwargs, max_compiles=max_compiles, warn_compiles=warn_compiles)
    jit_kwargs = dict(jit_kwargs)
    buckets = bucket_spec(fn, qualname(fn), jit_kwargs, resolve_static(fn, jit_kwargs)[2])
    return _shared(fn, options, lambda: public_function(
        JitFunction(fn, jit_kwargs, max_compiles, warn_compiles, method=False, rebuild=_unpickle, buckets=buckets)))


@overload
def jit_method(
    fn: Callable[Concatenate[S, P], T], /, *, max_compiles: int | None = None,
    warn_compiles: int | None = ..., deps: Literal["all", "read"] = "all", **jit_kwargs: Any
) -> JitMethodDescriptor[S, P, T]: ...
@overload
def jit_method(
    fn: None = None, /, *, max_compiles: int | None = None, warn_compiles: int | None = ...,
    deps: Literal["all", "read"] = "all", **jit_kwargs: Any
) -> Callable[[Callable[Concatenate[S, P], T]], JitMethodDescriptor[S, P, T]]: ...


def jit_method(fn: Callable | None = None, /, *, max_compiles: int | None = None, warn_compiles: Any = UNSET,
               deps: str = "all", **jit_kwargs: Any) -> Any:
    """Jit a method of an ``@sf.dataclass``, with ``self`` passed as a pytree.

    New array values in ``self`` never recompile; a changed static field always
    does, and the recompile is explained in ``Cls.method.recompiles``. ``obj.method``
    is itself a pytree of ``obj``'s dynamic leaves. Takes ``jax.jit``'s keyword
    arguments (``self`` is argument 0), plus ``max_compiles`` and ``warn_compiles``
    (the compile count of the first ``sf.StaticFieldWarning``; ``None`` for none).
    ``Sub.method`` of a subclass counts that class's compiles; the defining
    class's attribute counts them all. ``deps="read"`` compiles once per distinct
    value of the static fields the method actually reads (see docs/deps.md).
    """
    if fn is None:
        return functools.partial(jit_method, max_compiles=max_compiles, warn_compiles=warn_compiles,
                                 deps=deps, **jit_kwargs)
    if isinstance(fn, (staticmethod, classmethod, property)):
        raise TypeError(
            f"@sf.jit_method decorates a plain method (def name(self, ...)), got a "
            f"{type(fn).__name__}. Use sf.jit on the underlying function instead."
        )
    if not callable(fn):
        raise TypeError(f"@sf.jit_method decorates a method, got {type(fn).__name__}.")
    params = signature_parts(fn)[0]
    if not params and not getattr(fn, "__wrapped__", None):
        raise TypeError(
            f"@sf.jit_method: {qualname(fn)} takes no positional `self` parameter, so it is "
            "not a method. Use sf.jit for free functions."
        )
    jit_kwargs = dict(jit_kwargs)
    buckets = bucket_spec(fn, qualname(fn), jit_kwargs, resolve_static(fn, jit_kwargs)[2])
    if buckets is not None:  # deps="read": a verdict is keyed by self's type (reading all statics reads them)
        buckets.reads_statics, buckets.method = deps == "read", True
    return make_method(JitFunction(fn, jit_kwargs, max_compiles, warn_compiles, method=True, rebuild=_unpickle,
                                 deps=deps, buckets=buckets))
