"""``jit_method`` and ``jit``: jit with ``self`` as a pytree, counted and explained.

The hit path is one dict lookup: each top-level ``@sf.dataclass`` argument's static
key (hashed once per instance) picks a per-variant ``jax.jit`` that receives only
the instance's dynamic children. So JAX never compares aux_data on a hit, and the
cost does not grow with the number of static variants. All tracking (counting,
explaining, the ``max_compiles`` budget) runs while tracing, never on a hit.

Dependencies run one way: ``_variant`` (one variant's ``jax.jit``) and ``_tracker``
(the counters) know nothing of this module; ``_hitpath`` generates the hit paths from
explicit inputs; ``_bound`` (the method descriptor) builds on the engine here.
"""

from __future__ import annotations

import functools
import inspect
import logging
import os
import sys
import threading
from typing import Any, Callable, TypeVar, overload

from typing_extensions import Concatenate, ParamSpec

from jax._src import source_info_util, traceback_util

from . import _explain
from ._args import check_jit_kwargs, qualname, resolve_donation, resolve_static, signature_parts
from ._errors import RecompileError
from ._freeze import StaticArgKey
from ._hitpath import UNSET, general_call, method_call, public_function
from ._spec import SPECS
from ._state import flat
from ._tracker import TRACKER_COUNTERS, Tracker, check_positive, default_warn_compiles
from ._types import Jitted, JitMethodDescriptor
from ._variant import Split, StaticArg, make_jitted

# JAX drops these files' frames (and our generated code's) from user tracebacks and
# from the call sites it reports, as it does its own.
traceback_util.register_exclusion(os.path.dirname(os.path.abspath(__file__)))
source_info_util.register_exclusion(os.path.dirname(os.path.abspath(__file__)))
source_info_util.register_exclusion("<staticfield generated")

logger = logging.getLogger("staticfield")
P = ParamSpec("P")
T = TypeVar("T")
S = TypeVar("S")

_OWN_KWARGS = ("static_argnums", "static_argnames")


class JitFunction:
    """The engine behind ``sf.jit(fn)`` and an ``@sf.jit_method``: its variants and tracker.

    ``variants`` maps a variant key to ``(jax.jit, split positions)``: for a method
    without static arguments the key is ``self``'s static key, else a tuple with one
    entry per argument (static key, instance key, or ``None``) and static keywords.
    """

    def __init__(self, fn: Callable, jit_kwargs: dict[str, Any], max_compiles: int | None,
                 warn_compiles: Any, method: bool) -> None:
        if not callable(fn):
            raise TypeError(f"sf.jit expects a function, got {type(fn).__name__}.")
        name = qualname(fn)
        check_positive(name, "max_compiles", max_compiles)
        if warn_compiles is UNSET:
            warn_compiles = default_warn_compiles()
        check_positive(name, "warn_compiles", warn_compiles)
        check_jit_kwargs(fn, jit_kwargs)
        self.fn = fn
        self.options = dict(jit_kwargs, max_compiles=max_compiles, warn_compiles=warn_compiles)
        self.attr_name: str = getattr(fn, "__name__", "method")  # a jit_method's class attribute
        self.method = method
        self.variants: dict[Any, tuple[Any, tuple]] = {}
        self.tracker = Tracker(name, max_compiles, warn_compiles, self.cache_size)
        self._lock = threading.Lock()
        self._compiled: set = set()  # variant keys with a successful trace
        self._bound_signature: inspect.Signature | None = None
        self.names, self.static_pos, self.static_names = resolve_static(fn, jit_kwargs)
        self._jit_kwargs = {k: v for k, v in jit_kwargs.items() if k not in _OWN_KWARGS}
        self._jit_kwargs.update(resolve_donation(fn, self._jit_kwargs))
        self.has_static = bool(self.static_pos or self.static_names)
        self.fast = method and not self.has_static
        self.call: Callable[..., Any] = (
            method_call(self.fn, self.variants, self.method_miss)
            if self.fast else general_call(self.prepare)
        )

    # ----- the general path (static arguments) ---------------------------------------
    def prepare(self, args: tuple, kwargs: dict) -> tuple[Any, list, dict]:
        """Pick the variant for these arguments; return it with what JAX should see."""
        static_pos = self.static_pos
        parts: list[Any] = []
        for i, a in enumerate(args):
            if i in static_pos:
                parts.append(self._static_key(a, self._arg_name(i)))
            elif a.__class__ in SPECS:
                parts.append(flat(a)[1])
            else:
                if self.method and i == 0:
                    self._not_an_instance(a)
                parts.append(None)
        if self.static_names and kwargs:
            kwargs = dict(kwargs)
            for name in sorted(self.static_names.intersection(kwargs)):
                parts.append((name, self._static_key(kwargs.pop(name), name)))
        vkey = tuple(parts)
        try:
            jitted, split = self.variants[vkey]
        except KeyError:
            jitted, split = self.general_miss(vkey, args, parts)
        dyn = list(args)
        for i in static_pos:
            if i < len(dyn):
                dyn[i] = None
        for i in split:
            dyn[i] = flat(args[i])[0]
        return jitted, dyn, kwargs

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.call(*args, **kwargs)

    # ----- AOT and inspection: the user's arguments, JAX's methods --------------------
    def _jax_call(self, args: tuple, kwargs: dict) -> tuple[Any, list, dict]:
        if not self.fast:
            return self.prepare(args, kwargs)
        jitted, children = self.method_miss(args[0])
        return jitted, [children, *args[1:]], kwargs

    def lower(self, *args: Any, **kwargs: Any) -> Any:
        """``jax.jit(...).lower`` for these arguments (ahead-of-time compilation)."""
        jitted, dyn, kwargs = self._jax_call(args, kwargs)
        return jitted.lower(*dyn, **kwargs)

    def trace(self, *args: Any, **kwargs: Any) -> Any:
        """``jax.jit(...).trace`` for these arguments (a ``Traced``: ``.jaxpr``, ``.lower()``)."""
        jitted, dyn, kwargs = self._jax_call(args, kwargs)
        return jitted.trace(*dyn, **kwargs)

    def eval_shape(self, *args: Any, **kwargs: Any) -> Any:
        """``jax.jit(...).eval_shape``: the output's shapes and dtypes, without running it."""
        jitted, dyn, kwargs = self._jax_call(args, kwargs)
        return jitted.eval_shape(*dyn, **kwargs)

    def clear_cache(self) -> None:
        """Drop every compiled program of every variant; ``compile_count`` stays a history,
        and ``max_compiles`` counts the programs compiled from now on."""
        for jitted, _ in list(self.variants.values()):
            jitted.clear_cache()
        self.tracker.programs_cleared()

    def cache_size(self) -> int:
        """JAX's count of compiled executables over all static variants."""
        return sum(jitted._cache_size() for jitted, _ in list(self.variants.values()))

    # ----- misses: make a per-variant jax.jit -----------------------------------------
    def method_miss(self, obj: Any) -> tuple[Any, tuple]:
        """The variant's jit for ``obj``'s static key (made on first sight), and ``obj``'s children."""
        if obj.__class__ not in SPECS:
            self._not_an_instance(obj)
        children, key = flat(obj)
        entry = self.variants.get(key)
        if entry is None:
            with self._lock:
                entry = self.variants.get(key)
                if entry is None:
                    spec = SPECS[obj.__class__]
                    entry = self.variants[key] = (self._make_jitted(key, {0: Split(spec, key)}, ()), (0,))
        return entry[0], children

    def general_miss(self, vkey: tuple, args: tuple, parts: list) -> tuple[Any, tuple]:
        with self._lock:
            if vkey in self.variants:
                return self.variants[vkey]
            layout: dict[int, Any] = {}
            for i, a in enumerate(args):
                if i in self.static_pos:
                    layout[i] = StaticArg(a)
                elif parts[i] is not None:
                    layout[i] = Split(SPECS[type(a)], parts[i])
            split = tuple(i for i, entry in layout.items() if isinstance(entry, Split))
            static_kwargs = tuple((name, key.raw) for name, key in parts[len(args):])
            entry = self.variants[vkey] = (self._make_jitted(vkey, layout, static_kwargs), split)
            return entry

    def _make_jitted(self, vkey: Any, layout: dict[int, Any], static_kwargs: tuple) -> Any:
        traced = functools.partial(self._traced, vkey)
        return make_jitted(self.fn, layout, static_kwargs, traced, self._jit_kwargs, self.static_pos)

    def _traced(self, vkey: Any, args: tuple, kwargs: dict) -> Any:
        """The user's function while JAX traces it: described, budgeted, counted."""
        tracker = self.tracker
        try:
            description = _explain.describe(self.names, args, kwargs, self.static_pos, self.static_names)
        except Exception as exc:  # tracking must never break the user's call
            logger.warning("staticfield could not describe the arguments of %s (%s: %s); "
                                    "the call goes on", tracker.function, type(exc).__name__, exc)
            description = None
        try:
            ticket = tracker.begin(description, type(args[0]) if self.method and args else None)
        except RecompileError:
            with self._lock:  # refused: not cached either, unless the variant has programs
                if vkey not in self._compiled:
                    self.variants.pop(vkey, None)
            raise
        try:
            out = self.fn(*args, **kwargs)
        except BaseException:
            tracker.abort(ticket)
            raise
        tracker.commit(ticket)  # only a trace that succeeded counts
        self._compiled.add(vkey)
        return out

    # ----- pickling: the function and options, never programs, locks or counters ----------
    def reduce(self, public: Any) -> Any:
        """``__reduce__`` of what ``sf.jit`` returned: a reference when the module holds it
        under its name, else ``sf.jit(fn, **options)`` (cloudpickle, ``__main__``, closures)."""
        module = sys.modules.get(getattr(self.fn, "__module__", None) or "")
        name = qualname(self.fn)
        if module is not None and module.__name__ != "__main__" and "<" not in name:
            target: Any = module
            for part in name.split("."):
                target = getattr(target, part, None)
            if target is public:
                return name
        return _unpickle, (self.fn, self.options, self.method, self.attr_name)

    # ----- helpers ----------------------------------------------------------------------
    def __getattr__(self, name: str) -> Any:
        if name in TRACKER_COUNTERS:  # one home: the tracker
            return getattr(self.tracker, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def bound_signature(self) -> inspect.Signature:
        """The wrapped signature without ``self``: what ``obj.method`` takes."""
        if self._bound_signature is None:
            sig = inspect.signature(self.fn)
            self._bound_signature = sig.replace(parameters=list(sig.parameters.values())[1:])
        return self._bound_signature

    def _arg_name(self, i: int) -> str:
        return self.names[i] if i < len(self.names) else f"args[{i}]"

    def _static_key(self, value: Any, name: str) -> Any:
        try:
            hash(value)
            return StaticArgKey(value)
        except TypeError:
            raise TypeError(
                f"{qualname(self.fn)}: the static argument `{name}` is an unhashable "
                f"{type(value).__name__}, so it cannot be part of the jit cache key. Pass a "
                "tuple/frozenset or an @sf.dataclass instance, or make it a traced argument."
            ) from None

    def _not_an_instance(self, obj: Any) -> None:
        raise TypeError(
            f"{qualname(self.fn)}: @sf.jit_method passes `self` to jax.jit as a pytree, so "
            f"`self` must be an @sf.dataclass instance, got {type(obj).__qualname__}. Decorate "
            "the class with @sf.dataclass, or use sf.jit for free functions."
        )

    def __repr__(self) -> str:
        kind = "jit_method" if self.method else "jit"
        return f"<sf.{kind} {qualname(self.fn)}: {self.tracker.compile_count} compile(s)>"


def _unpickle(fn: Callable, options: dict[str, Any], method: bool, attr_name: str) -> Any:
    """Rebuild a pickled ``sf.jit`` function or ``@sf.jit_method``: fresh programs and counters."""
    if not method:
        return jit(fn, **options)
    descriptor = jit_method(fn, **options)
    descriptor.__set_name__(None, attr_name)
    return descriptor


# sf.jit(fn, **opts) again with the same function and options gives the same function,
# kept on ``fn`` itself, so it lives exactly as long as ``fn`` (and a cycle with it is freed).
_SHARED_ATTR = "__staticfield_jit__"


class _SharedCache(dict):
    """``fn``'s wrappers by options; pickled empty (a copy of ``fn`` starts afresh)."""

    def __reduce__(self) -> Any:
        return _SharedCache, ()


def _shared(fn: Callable, options: dict[str, Any], make: Callable[[], Any]) -> Any:
    try:
        key = tuple(sorted(options.items()))
        hash(key)
        cache = fn.__dict__.setdefault(_SHARED_ATTR, _SharedCache())
    except (TypeError, AttributeError):  # unhashable options, or a callable without __dict__
        return make()
    public = cache.get(key)
    if public is None:
        public = cache[key] = make()
    return public


@overload
def jit(fn: Callable[P, T], /, *, max_compiles: int | None = None, warn_compiles: int | None = ...,
        **jit_kwargs: Any) -> Jitted[P, T]: ...
@overload
def jit(
    fn: None = None, /, *, max_compiles: int | None = None, warn_compiles: int | None = ..., **jit_kwargs: Any
) -> Callable[[Callable[P, T]], Jitted[P, T]]: ...


def jit(fn: Callable | None = None, /, *, max_compiles: int | None = None, warn_compiles: Any = UNSET,
        **jit_kwargs: Any) -> Any:
    """``jax.jit`` with compile tracking, for free functions.

    Top-level ``@sf.dataclass`` arguments are looked up by their static key, so
    many static variants cost no more per call than one. Takes ``jax.jit``'s keyword
    arguments, plus ``max_compiles`` and ``warn_compiles``. The result has
    ``compile_count``, ``cache_size()``, ``recompiles`` and ``clear_cache()``. Like
    ``jax.jit``, whose cache belongs to the function, calling ``sf.jit`` again with
    the same function and options gives the same compiled programs and counters.
    """
    if fn is None:
        return functools.partial(jit, max_compiles=max_compiles, warn_compiles=warn_compiles, **jit_kwargs)
    if warn_compiles is UNSET:
        warn_compiles = default_warn_compiles()
    options = dict(jit_kwargs, max_compiles=max_compiles, warn_compiles=warn_compiles)
    return _shared(fn, options, lambda: public_function(
        JitFunction(fn, jit_kwargs, max_compiles, warn_compiles, method=False)))


@overload
def jit_method(
    fn: Callable[Concatenate[S, P], T], /, *, max_compiles: int | None = None,
    warn_compiles: int | None = ..., **jit_kwargs: Any
) -> JitMethodDescriptor[S, P, T]: ...
@overload
def jit_method(
    fn: None = None, /, *, max_compiles: int | None = None, warn_compiles: int | None = ..., **jit_kwargs: Any
) -> Callable[[Callable[Concatenate[S, P], T]], JitMethodDescriptor[S, P, T]]: ...


def jit_method(fn: Callable | None = None, /, *, max_compiles: int | None = None, warn_compiles: Any = UNSET,
               **jit_kwargs: Any) -> Any:
    """Jit a method of an ``@sf.dataclass``, with ``self`` passed as a pytree.

    New array values in ``self`` never recompile; a changed static field always
    does, and the recompile is explained in ``Cls.method.recompiles``. ``obj.method``
    is itself a pytree of ``obj``'s dynamic leaves.
    """
    if fn is None:
        return functools.partial(jit_method, max_compiles=max_compiles, warn_compiles=warn_compiles, **jit_kwargs)
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
    from ._bound import JitMethod  # the descriptor and bound-method pytree built on this engine

    return JitMethod(JitFunction(fn, jit_kwargs, max_compiles, warn_compiles, method=True))
