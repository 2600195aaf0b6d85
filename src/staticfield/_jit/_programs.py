"""A jitted function's programs as JAX's own methods see them: ``lower``, ``trace``,
``eval_shape``, ``precompile`` (the program store), ``clear_cache`` and ``cache_size``.

``Programs`` is a base of the engine (``_engine.JitFunction``), kept apart so the engine
holds the call and miss paths only. Each method takes the user's arguments (instances,
not children) and goes through the variant JAX would run for them.
"""

from __future__ import annotations

from typing import Any, Callable

from .._core import _compat
from .._core import _front
from .._store import StoredJit


class Programs:
    """AOT, inspection and the cache of every variant (see the module docstring)."""

    # Set by the engine: what these methods read.
    fn: Any
    fast: bool
    deps: Any
    rest_deps: Any
    variants: dict
    tracker: Any
    prepare: Callable[[tuple, dict], tuple[Any, list, dict]]
    method_miss: Callable[[Any], tuple[Any, tuple]]
    front: Any  # JAX's C++ dispatch in front of the variants (_front), or None

    def _jax_call(self, args: tuple, kwargs: dict) -> tuple[Any, list, dict]:
        if not self.fast:
            return self.prepare(args, kwargs)
        jitted, children = self.method_miss(args[0])
        return jitted, [children, *args[1:]], kwargs

    def _aot(self, what: str, args: tuple, kwargs: dict) -> Any:
        if self.rest_deps is not None:
            return self.rest_deps.aot(what, args, kwargs)
        if self.deps is not None and args:
            return self.deps.call(args[0], lambda jitted, children: aot(jitted, what)(
                children, *args[1:], **kwargs))
        jitted, dyn, kwargs = self._jax_call(args, kwargs)
        return aot(jitted, what)(*dyn, **kwargs)

    def lower(self, *args: Any, **kwargs: Any) -> Any:
        """``jax.jit(...).lower`` for these arguments (ahead-of-time compilation)."""
        return self._aot("lower", args, kwargs)

    def trace(self, *args: Any, **kwargs: Any) -> Any:
        """``jax.jit(...).trace`` for these arguments (a ``Traced``: ``.jaxpr``, ``.lower()``)."""
        return self._aot("trace", args, kwargs)

    def eval_shape(self, *args: Any, **kwargs: Any) -> Any:
        """``jax.jit(...).eval_shape``: the output's shapes and dtypes, without running it."""
        return self._aot("eval_shape", args, kwargs)

    def precompile(self, *args: Any, **kwargs: Any) -> None:
        """Trace and compile the program for these arguments (arrays or
        ``jax.ShapeDtypeStruct``s) without running it: with a program store, load it or
        compile and store it; without one, into this function's cache. Either way a later
        call with those avals traces nothing; a precompile counts as a compile."""
        self._aot("precompile", args, kwargs)

    def clear_cache(self) -> None:
        """Drop every compiled program of every variant; ``compile_count`` stays a history,
        and ``max_compiles`` counts the programs compiled from now on."""
        for jitted in self.programs():
            jitted.clear_cache()
        if self.front is not None:
            _front.clear(self.front)
        self.tracker.programs_cleared()

    def programs(self) -> list[Any]:
        """Each variant's ``jax.jit`` once (with deps="read", several keys share one)."""
        jitted = [j for j, _ in list(self.variants.values())]
        if self.rest_deps is not None:
            jitted += self.rest_deps.programs()
        return list({id(j): j for j in jitted}.values())

    def buckets(self) -> dict[int, dict[str, int]]:
        """``buckets=``: ``{bucket: {"calls": n, "rows": real rows, "padded": rows added}}``
        (empty without ``buckets=``)."""
        spec = getattr(self, "bucket_spec", None)
        return {} if spec is None else spec.buckets()

    def cache_size(self) -> int:
        """JAX's count of compiled executables over all static variants (with a program
        store, the programs each variant keeps)."""
        programs = self.programs()
        if any(isinstance(j, StoredJit) for j in programs):  # the programs each variant keeps
            return sum(j._cache_size() if isinstance(j, StoredJit) else _compat.cache_size(j) for j in programs)
        # the C++ front's entries (sf.jit, Cls.method), each a variant's program, and the
        # variants' own (obj.method)
        return (sum(_compat.cache_size(j) for j in programs)
                + (_front.cache_size(self.front) if self.front is not None else 0))


def aot(jitted: Any, what: str) -> Callable[..., Any]:
    """A variant's ``lower``, ``trace``, ``eval_shape`` or ``precompile`` (a variant
    without a program store precompiles into ``jax.jit``'s own caches)."""
    if what == "precompile" and not isinstance(jitted, StoredJit):
        return lambda *dyn, **kwargs: jitted.trace(*dyn, **kwargs).lower().compile()
    return getattr(jitted, what)  # type: ignore[no-any-return]
