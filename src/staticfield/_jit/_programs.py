"""A jitted function's programs as JAX's own methods see them: ``lower``, ``trace``,
``eval_shape``, ``precompile`` (the program store), ``clear_cache`` and ``cache_size``.

``Programs`` is a base of the engine (``_engine.JitFunction``), beside ``_fronts``,
``_miss`` and ``_traced``: one idea each. Each method takes the user's arguments (instances,
not children) and goes through the variant JAX would run for them; with ``buckets=``, for
the arguments padded to the bucket a call would run (``_buckets._ahead``).
"""

from __future__ import annotations

from typing import Any, Callable

import jax

from .._core import _compat
from .._core import _front, _lowering
from .._store import StoredJit
from .._store._key import signature as call_signature
from ._agreement import ahead
from ._args import qualname
from ._compiled import Lowered

_trace_context = _compat.get("trace_context") or (lambda: None)
_trace_state_clean = _compat.get("trace_state_clean") or (lambda: False)


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
    deps_front: Any  # deps="read": obj.method's C++ dispatch, or None
    large_front: Any  # a large model's obj.method: its C++ dispatch, or None
    static_fronts: list  # per static-argument hit path: its C++ fronts by static values
    executables: set
    transformed: int  # programs compiled under a transformation applied outside (_transformed)
    fastpath: dict  # a variant front's answers by call signature (_remembered)
    bucket_spec: Any  # buckets=: its BucketSpec, or None

    def _jax_call(self, args: tuple, kwargs: dict) -> tuple[Any, list, dict]:
        if not self.fast:
            return self.prepare(args, kwargs)
        jitted, children = self.method_miss(args[0])
        return jitted, [children, *args[1:]], kwargs

    def _aot(self, what: str, args: tuple, kwargs: dict) -> Any:
        # Abstract evaluation (lower, trace, eval_shape) runs no program, so it publishes
        # nothing for the agreement between processes: the program agrees on its first run.
        with ahead():
            return self._aot_ahead(what, args, kwargs)

    def _aot_ahead(self, what: str, args: tuple, kwargs: dict) -> Any:
        spec = self.bucket_spec
        if spec is None:
            return self._variant_aot(what, args, kwargs)
        # buckets=: the bucket's program, for the arguments a call would pad to it
        return spec.run_ahead(what, args, kwargs, lambda padded, kw: self._variant_aot(what, padded, kw))

    def _variant_aot(self, what: str, args: tuple, kwargs: dict) -> Any:
        if self.rest_deps is not None:
            return self.rest_deps.aot(what, args, kwargs)
        if self.deps is not None and args:
            return self.deps.call(args[0], lambda jitted, children: aot(jitted, what)(
                children, *args[1:], **kwargs))
        jitted, dyn, dyn_kwargs = self._jax_call(args, kwargs)
        out = aot(jitted, what)(*dyn, **dyn_kwargs)
        if what != "lower" or self.bucket_spec is not None:  # a bucket's program takes the padded rows
            return out
        return Lowered(out, self._compiled_call, _front.unwrap(jitted), qualname(self.fn))

    def _compiled_call(self, args: tuple, kwargs: dict) -> tuple:
        """What ``.lower(...).compile()(*args, **kwargs)`` runs (``_compiled``)."""
        jitted, dyn, dyn_kwargs = self._jax_call(args, kwargs)
        return _front.unwrap(jitted), dyn, dyn_kwargs, _same

    def _remembered(self, box: list, *dyn: Any, **kwargs: Any) -> Any:
        """A variant front's miss: JAX's answer, its program kept in ``executables`` (the
        programs ``cache_size`` counts, once each however many fronts and keys reach it).

        Another front asks for this variant's answer when it reuses the program (a
        ``deps="read"`` key new to its front, a static front's first call): where the call's
        signature (structure, each leaf's aval, sharding and commitment, the trace context,
        as the program store keys a program) is one this front already answered, the
        program runs from the front's own C++ cache and the fast-path data kept from that
        answer is given again, with no pass through JAX's Python dispatch."""
        jitted, front = box
        kept = self.fastpath
        sig = None
        asked, _front.ASKED.on = getattr(_front.ASKED, "on", False), False
        if asked and _trace_state_clean():  # another front asks, outside any trace
            leaves, tree = jax.tree_util.tree_flatten((dyn, kwargs))
            try:
                sig = (front, tree, call_signature(leaves), _trace_context())
            except Exception:  # noqa: BLE001 - a leaf with no such signature (a typed PRNG key)
                sig = None
            if sig is not None and None in sig[2]:  # a tracer, or a leaf JAX itself must judge
                sig = None
            data = kept.get(sig) if sig is not None else None
            if data is not None:  # (this front's own dispatch: a hit, or a miss that JAX serves)
                return front(*dyn, **kwargs), data, False
        answer = _front.jax_miss(jitted, dyn, kwargs)
        program = getattr(answer[1], "xla_executable", None)
        if program is not None:  # its id only: JAX's entries decide how long it lives
            self.executables.add(id(program))
            if sig is not None and len(kept) < 256:
                kept[sig] = answer[1]
        return answer

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
        call with those avals traces nothing; a precompile counts as a compile. In a
        multi-process job the program agrees between processes on its first run."""
        self._aot("precompile", args, kwargs)

    def clear_cache(self) -> None:
        """Drop every compiled program of every variant; ``compile_count`` stays a history,
        and ``max_compiles`` counts the programs compiled from now on."""
        for jitted in self.programs():
            jitted.clear_cache()
        for front in self.fronts():
            _front.clear(front)
        self.executables.clear()
        self.fastpath.clear()
        self.transformed = 0
        self.tracker.programs_cleared()

    def fronts(self) -> list[Any]:
        """JAX's C++ dispatch objects in front of the variants, and the variants' own (see
        ``_core._front``)."""
        own = [j for j, _ in self.entries() if hasattr(j, "__sf_jit__")]
        by_static = [f for fronts in self.static_fronts for f in list(fronts.values()) if f is not None]
        return [f for f in (self.front, self.deps_front, self.large_front) if f is not None] + own + by_static

    def entries(self) -> list[tuple[Any, tuple]]:
        """Every variant entry (with deps="read" and static arguments, every group's)."""
        found = list(self.variants.values())
        if self.rest_deps is not None:
            found += self.rest_deps.entries()
        return found

    def programs(self) -> list[Any]:
        """Each variant's ``jax.jit`` (or ``StoredJit``) once (with deps="read", several keys
        share one), from behind its front."""
        jitted = [_front.unwrap(j) for j, _ in self.entries()]
        return list({id(j): j for j in jitted}.values())

    def buckets(self) -> dict[int, dict[str, int]]:
        """``buckets=``: ``{bucket: {"calls": n, "rows": real rows, "padded": rows added}}``
        (empty without ``buckets=``)."""
        spec = getattr(self, "bucket_spec", None)
        return {} if spec is None else spec.buckets()

    def cache_size(self) -> int:
        """JAX's count of compiled executables over all static variants (with a program
        store, the programs each variant keeps)."""
        # The programs the variants' fronts ran (each once, however many fronts and keys
        # reach it), those a program store keeps, and any a variant's own jax.jit keeps (on
        # a JAX without fronts).
        if self.executables and not sum(_front.cache_size(f) for f in self.fronts()):
            self.executables.clear()  # JAX dropped every entry (jax.clear_caches())
        return len(self.executables) + self.transformed + sum(
            j._cache_size() if isinstance(j, StoredJit) else _compat.cache_size(j) for j in self.programs())

    def transformed_program(self, description: dict) -> None:
        """JAX is about to compile a program of a variant under a transformation applied
        outside it (``_transformed``): a compile of this function, explained against the
        closest earlier one, budgeted (the one in progress is live), refused by
        ``sf.no_compiles()`` (then nothing compiles), counted."""
        self.transformed += 1
        try:
            ticket = self.tracker.begin(description)
        except BaseException:
            self.transformed -= 1
            raise
        self.tracker.commit(ticket)

    def live_entries(self) -> int:
        """Every entry JAX's C++ caches keep for this function (a trace in progress has
        one already): what ``max_compiles`` forgives when JAX drops programs."""
        return self.transformed + sum(_front.cache_size(f) for f in self.fronts()) + sum(
            j._cache_size() if isinstance(j, StoredJit) else _compat.cache_size(j) for j in self.programs())


def _same(out: Any) -> Any:
    return out


def aot(jitted: Any, what: str) -> Callable[..., Any]:
    """A variant's ``lower``, ``trace``, ``eval_shape`` or ``precompile`` (a variant
    without a program store precompiles into ``jax.jit``'s own caches)."""
    jitted = _front.unwrap(jitted)
    if what == "precompile" and not isinstance(jitted, StoredJit):
        return _lowering.alike(lambda *dyn, **kwargs: jitted.trace(*dyn, **kwargs).lower().compile())
    return _lowering.alike(getattr(jitted, what))
