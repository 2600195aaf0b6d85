"""``StoredJit``: one static variant's ``jax.jit`` while a program store is set.

Its invariant: **a program it runs is the program ``jax.jit`` would compile for the
call, in this process, now.** Three things make that hold by construction:

- In this process, programs are kept per call signature *and* JAX's trace context
  (the tree, each leaf's shape, dtype, weak type, sharding and commitment; x64,
  default device, promotion, mesh, ...), as ``jax.jit`` keys its own; under
  ``jax.disable_jit()`` the call goes to ``jax.jit`` itself, which runs it eagerly.
- ``trust="trace"`` (the default) traces every miss and keys the store by what the
  trace produced (``_digest``: the closed jaxpr with its constants by value), the
  ``jax.jit`` options, the trace context, the argument signature and the machine
  (versions, backend, every device with its process, ``XLA_FLAGS``, JAX's options).
  Whatever the function read is in its jaxpr, so a stored program is used only where
  a compile would give the same one; the miss skips lowering and the XLA compile.
  The pytree structures come from this trace, never from the entry.
- ``trust="source"`` finds the entry without tracing, by the function, its closure
  values, statics, argument signature, options, context and machine, and checks the
  source of every module of the user's code that was loaded when it was traced
  (``_sources``). What the key cannot see is the user's promise;
  ``STATICFIELD_CHECK_STORE=1`` traces anyway and compares.

A loaded program runs on the devices it was compiled for, by id and in order; an
entry names its process and devices in its key, so no other process or device set
ever uses it. No lock is held while user code or JAX runs: two threads that miss
at once may both trace, and the first program kept wins.

``StoredJit`` owns a variant's programs in this process, by signature: a front's miss
(``answer``) or a call (``__call__``) finds its program kept, else ``program`` finds it in
three named steps: with ``trust="source"``, ``_load_by_source`` (``BySource``, in
``_by_source``: no trace); else, or when that found none, ``_trace`` (``ByTrace``, in
``_by_trace``: trace, key, load, or compile and write); then ``_keep``: the record for
``sf.warmup`` written (``_records``) and the program kept for the signature.

Imports: ``_core`` (``_compat``, ``_front``) and the store's ``_by_source``, ``_by_trace``,
``_hooks``, ``_key``, ``_records`` and ``_saying``. Called by ``_store.stored`` (the
engine's ``_jit._miss`` on a new variant), by the C++ front of each variant (``answer``)
and by ``sf.warmup`` (``precompile``).
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Callable

import jax

from .._core import _compat, _front
from . import _hooks, _key, _records, _saying
from ._by_source import BySource
from ._by_trace import ByTrace
from ._hooks import Hooks

logger = logging.getLogger("staticfield")

_trace_context = _compat.get("trace_context") or (lambda: None)  # the store is off without it


class StoredJit(ByTrace, BySource):
    """A variant's ``jax.jit`` whose programs are loaded from, or written to, the store."""

    def __init__(self, jitted: Any, fn: Callable, vkey: Any, store: Callable[[], tuple[str, str] | None],
                 options: dict[str, Any], hooks: Hooks) -> None:
        self.jitted = jitted
        self.fn = fn
        self.vkey = vkey
        self._store = store  # (directory, trust), or None when the store is off
        self._options = options
        self._hooks = hooks
        self.programs: dict[Any, Any] = {}
        self._lock = threading.Lock()
        self._static: dict[str, Any] = {}  # per variant: options, statics, function identity

    def __call__(self, *dyn: Any, **kwargs: Any) -> Any:
        if jax.config.jax_disable_jit:  # jax.jit runs the function eagerly
            return self.jitted(*dyn, **kwargs)
        program = self._program_for(dyn, kwargs)
        return program(*dyn, **kwargs)

    def answer(self, *dyn: Any, **kwargs: Any) -> Any:
        """A C++ front's miss (the engine puts one before each variant, ``_core._front``):
        the call's program, as ``__call__`` chooses it, and its answer from JAX's miss
        handler, fast-path data included, so that JAX's C++ cache runs it on every hit."""
        return _front.jax_miss(self._program_for(dyn, kwargs), dyn, kwargs)

    def _program_for(self, dyn: tuple, kwargs: dict) -> Any:
        """The program for this call: kept, loaded or compiled (``self.jitted`` itself under
        another function's trace, where JAX inlines it, or for values that are not arrays)."""
        leaves, tree = jax.tree_util.tree_flatten((dyn, kwargs))
        sig = (tree, _key.signature(leaves), _trace_context())
        if None in sig[1]:
            return self.jitted
        program = self.programs.get(sig)
        if program is None:
            program = self.program(sig, dyn, kwargs)
        return program

    def precompile(self, *dyn: Any, **kwargs: Any) -> bool:
        """Load or compile (and store) the program for these arguments (as ``jax.jit``'s
        ``lower`` takes them, ``jax.ShapeDtypeStruct`` included); whether it was new."""
        leaves, tree = jax.tree_util.tree_flatten((dyn, kwargs))
        sig = (tree, _key.signature(leaves), _trace_context())
        if None in sig[1]:
            raise TypeError(f"{_saying.name(self.fn)}.precompile: called with traced values or values "
                            "that are not arrays; call it outside jax.jit, with arrays, Python "
                            "scalars or jax.ShapeDtypeStruct values.")
        if sig in self.programs:
            return False
        self.program(sig, dyn, kwargs, _hooks.submitter())
        return True

    # ----- jax.jit's interface, for the engine's lower/trace/eval_shape/clear_cache --------
    def __getattr__(self, name: str) -> Any:
        return getattr(self.jitted, name)

    def clear_cache(self) -> None:
        with self._lock:
            self.programs.clear()
        self.jitted.clear_cache()

    def _cache_size(self) -> int:
        return len(self.programs) + _compat.cache_size(self.jitted)

    # ----- a program miss ---------------------------------------------------------------
    def program(self, sig: Any, dyn: tuple, kwargs: dict, submit: Any = None) -> Any:
        """The program for ``sig``, loaded or compiled, and kept; with ``submit`` (see
        ``_hooks.compiling_on``) a compile is handed over and kept when it ran (``None`` now)."""
        store = self._store()
        if store is None:
            return self.jitted  # the store was turned off since this variant was made
        directory, trust = store
        program, why = self._load_by_source(directory, sig, dyn, kwargs) if trust == "source" else (None, "")
        note = self._hooks.note()
        keep = lambda made: self._keep(directory, sig, made, note)  # noqa: E731
        if program is None:  # trust="trace", or no program found without a trace
            program = self._trace(directory, sig, dyn, kwargs, why, relink=trust == "source",
                                  submit=submit, keep=keep, note=note)
            if program is None:  # handed over: kept when it compiled
                return None
        return keep(program)

    def _keep(self, directory: str, sig: Any, program: Any, note: Any) -> Any:
        try:  # what sf.warmup needs to make this program again, in another process
            _records.write(directory, self.fn, self.vkey, self._static.get("options") or _key.options(self._options), sig,
                           note)
        except Exception as exc:  # a program without a record still runs
            logger.debug("staticfield could not write a program store record: %s", exc)
        with self._lock:  # threads that missed together: the first program kept wins
            return self.programs.setdefault(sig, program)
