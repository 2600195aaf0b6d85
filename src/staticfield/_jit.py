"""``jit_method`` and ``jit``: jit with ``self`` as a pytree, counted and explained.

The hit path is one dict lookup: each top-level ``@sf.dataclass`` argument's static
key (hashed once per instance) picks a per-variant ``jax.jit`` that receives only
the instance's dynamic children. So JAX never compares aux_data on a hit, and the
cost does not grow with the number of static variants. All tracking (counting,
explaining, the ``max_compiles`` budget) runs while tracing, never on a hit.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import operator
import threading
from typing import Any, Callable, TypeVar, overload

from typing_extensions import Concatenate, ParamSpec

import jax

from . import _explain
from ._args import qualname, resolve_donation, resolve_static, signature_parts
from ._hitpath import method_call, public_function
from ._errors import RecompileError
from ._explain import Recompile
from ._freeze import StaticArgKey
from ._spec import FLAT_ATTR, SPECS, Spec
from ._types import Jitted, JitMethodDescriptor

logger = logging.getLogger("staticfield")
P = ParamSpec("P")
T = TypeVar("T")
S = TypeVar("S")

_OWN_KWARGS = ("static_argnums", "static_argnames")


_flat = operator.attrgetter(FLAT_ATTR)  # an instance's cached (children, static key)


class _Split:
    """Layout entry: argument ``i`` is an instance passed to JAX as its children."""

    __slots__ = ("spec", "key")

    def __init__(self, spec: Spec, key: Any) -> None:
        self.spec, self.key = spec, key

    def rebuild(self, children: tuple) -> Any:
        return self.spec.unflatten(self.key, children)


class _StaticArg:
    """Layout entry: argument ``i`` is static; JAX sees ``None`` in its place."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value


class JitFunction:
    """What ``sf.jit(fn)`` returns (and the class attribute of an ``@sf.jit_method``)."""

    def __init__(self, fn: Callable, jit_kwargs: dict[str, Any], max_compiles: int | None, method: bool) -> None:
        if not callable(fn):
            raise TypeError(f"sf.jit expects a function, got {type(fn).__name__}.")
        if max_compiles is not None and (not isinstance(max_compiles, int) or max_compiles < 1):
            raise TypeError(f"{qualname(fn)}: max_compiles must be a positive int, got {max_compiles!r}.")
        functools.update_wrapper(self, fn)
        self.fn = fn
        self.max_compiles = max_compiles
        self.compile_count = 0
        self.recompiles: list[Recompile] = []
        self._method = method
        self._history: list[dict[str, tuple]] = []
        self._lock = threading.RLock()
        self._variants: dict[Any, tuple[Any, Callable]] = {}
        self._names, self._static_pos, self._static_names = resolve_static(fn, jit_kwargs)
        self._jit_kwargs = {k: v for k, v in jit_kwargs.items() if k not in _OWN_KWARGS}
        self._jit_kwargs.update(resolve_donation(fn, self._jit_kwargs))
        has_static = bool(self._static_pos or self._static_names)
        self._fast = method and not has_static
        # sf.jit without static arguments replaces this with its generated hit path.
        self._call: Callable[..., Any] = method_call(self) if self._fast else self._call_general
        self.public: Callable[..., Any] = self  # what sf.jit hands out (see public_function)

    # ----- hit paths -------------------------------------------------------------
    def _prepare(self, args: tuple, kwargs: dict) -> tuple[Any, list, dict]:
        """Pick the variant for these arguments; return it with what JAX should see."""
        static_pos = self._static_pos
        parts: list[Any] = []
        for i, a in enumerate(args):
            if i in static_pos:
                parts.append(self._static_key(a, self._arg_name(i)))
            elif a.__class__ in SPECS:
                parts.append(_flat(a)[1])
            else:
                if self._method and i == 0:
                    self._not_an_instance(a)
                parts.append(None)
        if self._static_names and kwargs:
            kwargs = dict(kwargs)
            for name in sorted(self._static_names.intersection(kwargs)):
                parts.append((name, self._static_key(kwargs.pop(name), name)))
        vkey = tuple(parts)
        try:
            jitted, split = self._variants[vkey]
        except KeyError:
            jitted, split = self._general_miss(vkey, args, parts)
        dyn = list(args)
        for i in static_pos:
            if i < len(dyn):
                dyn[i] = None
        for i in split:
            dyn[i] = _flat(args[i])[0]
        return jitted, dyn, kwargs

    def _call_general(self, *args: Any, **kwargs: Any) -> Any:
        jitted, dyn, kwargs = self._prepare(args, kwargs)
        return jitted(*dyn, **kwargs)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._call(*args, **kwargs)

    def lower(self, *args: Any, **kwargs: Any) -> Any:
        """``jax.jit(...).lower`` for these arguments (ahead-of-time compilation)."""
        if not self._fast:
            jitted, dyn, kwargs = self._prepare(args, kwargs)
            return jitted.lower(*dyn, **kwargs)
        jitted, children = self._method_miss(args[0])
        return jitted.lower(children, *args[1:], **kwargs)

    # ----- misses: make a per-variant jax.jit -----------------------------------
    def variant_of(self, obj: Any) -> tuple[Any, tuple, Any]:
        """The per-variant jit for ``obj``'s static key (made on first sight), with ``obj``'s
        children and key: what a method call hands to JAX."""
        spec = SPECS.get(type(obj))
        if spec is None:
            self._not_an_instance(obj)
        children, key = _flat(obj)
        jitted = self._variants.get(key)
        if jitted is None:
            with self._lock:
                if key not in self._variants:
                    self._variants[key] = self._make_jitted({0: _Split(spec, key)}, (), 1)
                jitted = self._variants[key]
        return jitted, children, key

    def _method_miss(self, obj: Any) -> tuple[Any, tuple]:
        jitted, children, _ = self.variant_of(obj)
        return jitted, children

    def _general_miss(self, vkey: tuple, args: tuple, parts: list) -> tuple[Any, list]:
        with self._lock:
            if vkey in self._variants:
                return self._variants[vkey]
            layout: dict[int, Any] = {}
            for i, a in enumerate(args):
                if i in self._static_pos:
                    layout[i] = _StaticArg(a)
                elif parts[i] is not None:
                    layout[i] = _Split(SPECS[type(a)], parts[i])
            split = tuple(i for i, entry in layout.items() if isinstance(entry, _Split))
            static_kwargs = tuple((name, key.raw) for name, key in parts[len(args):])
            entry = (self._make_jitted(layout, static_kwargs, len(args)), split)
            self._variants[vkey] = entry
            return entry

    def _make_jitted(self, layout: dict[int, Any], static_kwargs: tuple, nargs: int) -> Any:
        fn, names = self.fn, self._names
        static_pos, static_names = self._static_pos, self._static_names
        begin, commit = self._begin_trace, self._commit_trace

        def inner(*dyn: Any, **kwargs: Any) -> Any:
            args = list(dyn)
            for i, entry in layout.items():
                if isinstance(entry, _Split):
                    args[i] = entry.rebuild(dyn[i])
                else:
                    args[i] = entry.value
            kwargs.update(static_kwargs)
            description = _explain.describe(names, tuple(args), kwargs, static_pos, static_names)
            event = begin(description)
            out = fn(*args, **kwargs)
            commit(description, event)  # only a trace that succeeded counts
            return out

        inner.__name__ = getattr(fn, "__name__", "fn")
        inner.__qualname__ = qualname(fn)
        kwargs = dict(self._jit_kwargs)
        if "in_shardings" in kwargs:
            kwargs["in_shardings"] = _split_in_shardings(kwargs["in_shardings"], layout, static_pos)
        return jax.jit(inner, **kwargs)

    # ----- tracking (runs while tracing only) ------------------------------------
    def _begin_trace(self, description: dict[str, tuple]) -> Recompile | None:
        """Explain a trace before it runs; refuse it if it would exceed ``max_compiles``."""
        with self._lock:
            if not self._history:
                return None
            event = Recompile(
                qualname(self.fn), _explain.closest(self._history, description), self.compile_count + 1
            )
            if self.max_compiles is not None and self.compile_count + 1 > self.max_compiles:
                raise RecompileError(
                    f"{event.function} would compile {self.compile_count + 1} times, over its "
                    f"budget max_compiles={self.max_compiles}{event.reasons()}\nKeep the changing "
                    "value dynamic (a traced field or argument), reuse an earlier value, or "
                    "raise max_compiles."
                )
            return event

    def _commit_trace(self, description: dict[str, tuple], event: Recompile | None) -> None:
        """Count a trace that succeeded, and log it."""
        with self._lock:
            if event is not None:
                event = dataclasses.replace(event, compile_number=self.compile_count + 1)
                self.recompiles.append(event)
                logger.info("%s", event)
            else:
                logger.debug("%s compiled for the first time", qualname(self.fn))
            self._history.append(description)
            self.compile_count += 1
            if self.public is not self:
                self.public.compile_count = self.compile_count  # type: ignore[attr-defined]

    def cache_size(self) -> int:
        """JAX's count of compiled executables over all static variants."""
        entries = list(self._variants.values())
        return sum((e[0] if isinstance(e, tuple) else e)._cache_size() for e in entries)

    # ----- helpers -----------------------------------------------------------------
    def _arg_name(self, i: int) -> str:
        return self._names[i] if i < len(self._names) else f"args[{i}]"

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
        kind = "jit_method" if self._method else "jit"
        return f"<sf.{kind} {qualname(self.fn)}: {self.compile_count} compile(s)>"


def _split_in_shardings(in_shardings: Any, layout: dict[int, Any], static_pos: frozenset) -> Any:
    """Map the user's ``in_shardings`` (static arguments left out, as in ``jax.jit``) onto
    what JAX sees: ``None`` at static positions, children at split instances."""
    if not isinstance(in_shardings, (tuple, list)):
        return in_shardings
    given = list(in_shardings)
    out = []
    for i in range(len(given) + len(static_pos)):
        if i in static_pos:
            out.append(None)
            continue
        s = given.pop(0) if given else None
        entry = layout.get(i)
        if isinstance(entry, _Split) and isinstance(s, entry.spec.cls):
            s = _flat(s)[0]
        out.append(s)
    return tuple(out)


@overload
def jit(fn: Callable[P, T], /, *, max_compiles: int | None = None, **jit_kwargs: Any) -> Jitted[P, T]: ...
@overload
def jit(
    fn: None = None, /, *, max_compiles: int | None = None, **jit_kwargs: Any
) -> Callable[[Callable[P, T]], Jitted[P, T]]: ...


def jit(fn: Callable | None = None, /, *, max_compiles: int | None = None, **jit_kwargs: Any) -> Any:
    """``jax.jit`` with compile tracking, for free functions.

    Top-level ``@sf.dataclass`` arguments are looked up by their static key, so
    many static variants cost no more per call than one. Takes ``jax.jit``'s keyword
    arguments, plus ``max_compiles``. The result has ``compile_count``,
    ``cache_size()`` and ``recompiles``; each call of ``sf.jit`` makes a new counter.
    """
    if fn is None:
        return functools.partial(jit, max_compiles=max_compiles, **jit_kwargs)
    return public_function(JitFunction(fn, jit_kwargs, max_compiles, method=False))


@overload
def jit_method(
    fn: Callable[Concatenate[S, P], T], /, *, max_compiles: int | None = None, **jit_kwargs: Any
) -> JitMethodDescriptor[S, P, T]: ...
@overload
def jit_method(
    fn: None = None, /, *, max_compiles: int | None = None, **jit_kwargs: Any
) -> Callable[[Callable[Concatenate[S, P], T]], JitMethodDescriptor[S, P, T]]: ...


def jit_method(fn: Callable | None = None, /, *, max_compiles: int | None = None, **jit_kwargs: Any) -> Any:
    """Jit a method of an ``@sf.dataclass``, with ``self`` passed as a pytree.

    New array values in ``self`` never recompile; a changed static field always
    does, and the recompile is explained in ``Cls.method.recompiles``. ``obj.method``
    is itself a pytree of ``obj``'s dynamic leaves.
    """
    if fn is None:
        return functools.partial(jit_method, max_compiles=max_compiles, **jit_kwargs)
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

    return JitMethod(JitFunction(fn, jit_kwargs, max_compiles, method=True))
