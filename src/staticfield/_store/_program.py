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
"""

from __future__ import annotations

import contextlib
import logging
import os
import pickle
import threading
import time
from typing import Any, Callable, Iterator, Protocol

import jax

from .._core import _compat, _front
from .._core._errors import STORE_CHECK, RecompileError, StoreCheckError
from . import _digest, _entries, _key, _misses, _records, _saying, _sources
from ._executable import Unstorable, deserialize, serialize

logger = logging.getLogger("staticfield")

LOAD_LISTENERS: list[Callable[[Callable, float, bool], None]] = []  # sf.watch: (function, seconds, traced)
MISS_LISTENERS: list[Callable[[Callable, str], None]] = []  # sf.watch: (function, why no program loaded)
CHECK_ENV = "STATICFIELD_CHECK_STORE"
_here = threading.local()  # .counts: this thread's traces, loads and compiles (sf.warmup reads them)


_trace_context = _compat.get("trace_context") or (lambda: None)  # the store is off without it


@contextlib.contextmanager
def compiling_on(submit: Callable[[Callable[[], Any], Callable[[Any], Any]], None]) -> Iterator[None]:
    """While open, this thread's ``precompile``s trace, key, load or lower and count here,
    and hand each XLA compile over as ``submit(compile, then)`` instead of running it
    (``sf.warmup``: the next program traces while this one compiles on another thread):
    ``compile()`` returns the program, and ``then(program)`` writes it to the store and
    keeps it."""
    outer = getattr(_here, "submit", None)
    _here.submit = submit
    try:
        yield
    finally:
        _here.submit = outer


def counts() -> dict[str, int]:
    """This thread's running counts of programs ``traced``, ``loaded`` and ``compiled`` here."""
    found = getattr(_here, "counts", None)
    if found is None:
        found = _here.counts = {"traced": 0, "loaded": 0, "compiled": 0}
    return found


class Hooks(Protocol):
    """What the engine gives a ``StoredJit``: its counters, around one trace."""

    def deferred(self) -> Any:
        """A context in which the variant's trace reserves its compile (tickets) instead of
        counting it."""

    def settle(self, tickets: list, loaded: bool, why: str = "") -> None:
        """The trace's program was loaded (a load) or is compiled now (a compile, budgeted;
        ``why``: why the store had no program for it)."""

    def agree(self, jitted: Any, dyn: tuple, kwargs: dict, kept: Any) -> None:
        """A program is about to come from the store with no trace here: in a multi-process
        job, agree on it with the other processes (``sf.HostMismatchError`` if they differ);
        ``kept`` as for ``loaded_untraced``."""

    def loaded_untraced(self, kept: Any) -> None:
        """A program came from the store with no trace here (``trust="source"``); ``kept``:
        what ``kept()`` said when it was made, or ``None``."""

    def note(self) -> dict[str, Any] | None:
        """What the record of the program made now keeps beside its arguments (``buckets=``:
        the bucket), or ``None``."""

    def description(self, tickets: list) -> dict[str, tuple] | None:
        """What the trace that reserved ``tickets`` was called with, by the user's paths
        (``_explain._describe``), or ``None``: a store miss is explained in those words."""

    def kept(self) -> dict[str, Any] | None:
        """What the trace made last on this thread found that a load without a trace needs
        (``buckets=``: which outputs carry the rows; ``deps="read"``: the statics read), as
        JSON, or ``None``; kept with the program's ``trust="source"`` key, read once."""


class StoredJit:
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
        self.program(sig, dyn, kwargs, getattr(_here, "submit", None))
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
        ``compiling_on``) a compile is handed over and kept when it ran (``None`` now)."""
        store = self._store()
        if store is None:
            return self.jitted  # the store was turned off since this variant was made
        directory, trust = store
        program, why = None, ""
        if trust == "source":
            link = self._source_key(sig)
            if link is None:
                _saying.cannot_serve(self.fn, "a closure value or static cannot be written by value, so "
                                     "trust=\"source\" cannot find its programs without tracing "
                                     "(trust=\"trace\" serves them)")
            else:
                program, why = self._load_by_source(directory, link, dyn, kwargs)
        note = self._hooks.note()
        keep = lambda made: self._keep(directory, sig, made, note)  # noqa: E731
        if program is None:
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

    def _trace(self, directory: str, sig: Any, dyn: tuple, kwargs: dict, why: str = "",
               relink: bool = False, submit: Any = None, keep: Any = None, note: Any = None) -> Any:
        """Trace, then load the program by the trace's key, or compile and write it.
        ``relink``: a program loaded here gets this function's ``trust="source"`` key too
        (another function's identical program, or a source change that left it alone).
        With ``submit``, the compile (and write) is handed over, and ``keep`` is called
        with the program when it ran; ``None`` is returned."""
        self._hooks.kept()  # what an earlier trace left is not this program's
        with self._hooks.deferred() as tickets:
            traced = self.jitted.trace(*dyn, **kwargs)
        kept = self._hooks.kept()
        counts()["traced"] += 1
        try:
            record = _digest.digest(traced.jaxpr)
            key = self._trace_key(record.hexdigest, sig)
        except _digest.Undigestible as exc:
            key, unkeyed = None, str(exc)
        else:
            unkeyed = "a jax.jit option or JAX setting that cannot be written by value"
        if key is None:
            _saying.cannot_serve(self.fn, unkeyed, directory)
            return self._compile(traced, tickets, "", submit=submit, keep=keep)
        path = _entries.entry_path(directory, _entries.key_digest(key))
        program = self._load(path, key, traced.in_tree, traced.out_tree)
        if program is not None:
            self._hooks.settle(tickets, loaded=True)
            counts()["loaded"] += 1
            if relink:
                try:
                    self._write_link(directory, path, traced, sig, kept)
                except Exception as exc:  # a program that loaded still runs
                    logger.debug("staticfield could not write a trust=\"source\" key: %s", exc)
            return program
        shown = {"function": _saying.name(self.fn), "statics": _saying.display_statics(self.vkey),
                 "described": _misses.as_text(self._hooks.description(tickets)), "note": note}
        why = why or self._why(directory, key, record, shown["described"])
        if why:
            logger.info("staticfield: %s: %s", _saying.name(self.fn), why)
            for listener in list(MISS_LISTENERS):
                listener(self.fn, why)
        return self._compile(traced, tickets, why, submit=submit, keep=keep,
                             write=lambda compiled: self._write(directory, path, key, compiled, traced,
                                                                record, sig, kept, shown))

    def _compile(self, traced: Any, tickets: list, why: str, submit: Any = None, keep: Any = None,
                 write: Callable[[Any], None] | None = None) -> Any:
        """Count the trace as a compile (refused over ``max_compiles``, before compiling),
        lower it, then compile and ``write`` it here, or hand that to ``submit``."""
        try:
            self._hooks.settle(tickets, loaded=False, why=why)
        except RecompileError:
            self.jitted.clear_cache()  # JAX's trace of it too: the next call begins again
            raise
        lowered = traced.lower()

        def compile_() -> Any:
            compiled = lowered.compile()
            counts()["compiled"] += 1
            return compiled

        def written(compiled: Any) -> Any:
            if write is not None:
                write(compiled)
            return compiled

        if submit is None:
            return written(compile_())
        submit(compile_, lambda compiled: keep(written(compiled)))
        return None

    # ----- keys ---------------------------------------------------------------------------
    def _trace_key(self, jaxpr_digest: str, sig: Any) -> dict[str, Any] | None:
        if "options" not in self._static:
            self._static["options"] = _key.options(self._options)
        options, context = self._static["options"], _key.context()
        if options is None or context is None:
            return None
        # No tree: the program is a function of the flat arguments, which the jaxpr's avals
        # and the leaves' shardings describe; a load takes its trees from this trace.
        _, leaves, _ = sig
        return {"format": _key.FORMAT, "trust": "trace", "jaxpr": jaxpr_digest, "options": options,
                "context": context, "avals": [_key.describe_leaf(leaf) for leaf in leaves],
                "environment": _key.environment()}

    def _source_key(self, sig: Any) -> dict[str, Any] | None:
        """The key found without tracing (see the module docstring); ``None`` when the
        function, a closure value or a static cannot be written by value."""
        if "identity" not in self._static:
            self._static["identity"] = _key.function_identity(self.fn)
            self._static["statics"] = _key.statics_digest(self.vkey)
            self._static["options"] = _key.options(self._options)
        identity, statics, options = (self._static[k] for k in ("identity", "statics", "options"))
        context = _key.context()
        if None in (identity, statics, options, context):
            return None
        tree, leaves, _ = sig
        return {"format": _key.FORMAT, "trust": "source", "function": identity, "statics": statics,
                "options": options, "context": context, "tree": _key.tree_digest(tree),
                "avals": [_key.describe_leaf(leaf) for leaf in leaves], "environment": _key.environment()}

    def _why(self, directory: str, key: dict[str, Any], now: _digest.Digest, described: Any) -> str:
        """Why no stored program served this call (see ``_misses``); never raises."""
        try:
            return _misses.why(directory, _saying.name(self.fn), _saying.display_statics(self.vkey), key, now,
                               described)
        except Exception as exc:  # an explanation must never break the call
            logger.debug("staticfield could not explain a program store miss: %s", exc)
            return ""

    # ----- reading ------------------------------------------------------------------------
    def _load(self, path: str, key: dict[str, Any], in_tree: Any, out_tree: Any) -> Any:
        start = time.perf_counter()
        try:
            with _entries.open_entry(path) as f:
                header = _entries.read_header(f)
                if header.get("key") != key:
                    return None  # another key with the same digest: compile again
                payload = _entries.read_payload(f, header)
            program = deserialize(payload, header, in_tree, out_tree)
        except FileNotFoundError:
            return None
        except Exception as exc:  # corrupt, truncated, foreign, untrusted: ignored, written again
            _saying.bad_entry(self.fn, path, exc)
            return None
        self._heard(time.perf_counter() - start, traced=True)
        return program

    def _heard(self, seconds: float, traced: bool) -> None:
        for listener in list(LOAD_LISTENERS):
            listener(self.fn, seconds, traced)

    def _load_by_source(self, directory: str, link: dict[str, Any], dyn: tuple,
                        kwargs: dict) -> tuple[Any, str]:
        """The program found with no trace, or ``None`` and why not (a changed file)."""
        start = time.perf_counter()
        path = _entries.entry_path(directory, _entries.key_digest(link), _entries.LINK)
        try:
            with _entries.open_entry(path) as f:
                header = _entries.read_header(f)
            if header.get("link") != link:
                return None, ""
            if not _sources.unchanged(header.get("sources", {})):
                return None, "not loaded from the program store: " + _misses.source_change(
                    header.get("sources", {}))
            entry = _entries.entry_path(directory, str(header["entry"]))
            with _entries.open_entry(entry) as f:
                program_header = _entries.read_header(f)
                payload = _entries.read_payload(f, program_header)
            in_tree, out_tree = pickle.loads(bytes.fromhex(header["trees"]))  # noqa: S301 - trusted store
        except FileNotFoundError:
            return None, ""
        except Exception as exc:
            _saying.bad_entry(self.fn, path, exc)
            return None, ""
        # The checking mode's trace runs the user's function (and agrees between processes):
        # what it raises is the user's, or StoreCheckError, never a bad entry.
        checked = _checking() and self._check(program_header, out_tree, dyn, kwargs)
        try:
            program = deserialize(payload, program_header, in_tree, out_tree)
        except Exception as exc:
            _saying.bad_entry(self.fn, path, exc)
            return None, ""
        if not checked:  # the check's trace counted it (and agreed), reads of deps="read" included
            kept = header.get("kept")
            self._hooks.agree(self.jitted, dyn, kwargs, kept)
            self._hooks.loaded_untraced(kept)
        counts()["loaded"] += 1
        self._heard(time.perf_counter() - start, traced=checked)
        return program, ""

    def _check(self, header: dict[str, Any], out_tree: Any, dyn: tuple, kwargs: dict) -> bool:
        """``STATICFIELD_CHECK_STORE=1``: trace anyway; a program other than the stored one
        raises ``StoreCheckError`` naming the first differing equation or constant."""
        with self._hooks.deferred() as tickets:
            traced = self.jitted.trace(*dyn, **kwargs)
        counts()["traced"] += 1
        self._hooks.settle(tickets, loaded=True)
        now = _digest.digest(traced.jaxpr)
        if now.hexdigest == header.get("key", {}).get("jaxpr") and traced.out_tree == out_tree:
            return True
        if now.hexdigest == header.get("key", {}).get("jaxpr"):
            raise StoreCheckError(STORE_CHECK.format(
                function=_saying.name(self.fn), what=f"its output's structure differs ({out_tree} stored, "
                                              f"{traced.out_tree} now)"))
        raise StoreCheckError(STORE_CHECK.format(function=_saying.name(self.fn), what=_misses.first_difference(header, now)))

    # ----- writing ------------------------------------------------------------------------
    def _write(self, directory: str, path: str, key: dict, compiled: Any, traced: Any,
               record: _digest.Digest, sig: Any, kept: dict[str, Any] | None, display: dict[str, Any]) -> None:
        """The entry (its JSON line names each top-level equation, for the checking mode, and
        what the call was by the user's paths, to explain a later miss), then its
        ``trust="source"`` link: an entry serves either trust."""
        try:
            payload, runs_on = serialize(compiled)
            _entries.write(path, {"key": key, "display": display, **runs_on,
                                  "equations": record.equations, "consts": record.consts}, payload)
            self._write_link(directory, path, traced, sig, kept)
        except Unstorable as exc:
            _saying.cannot_serve(self.fn, str(exc), directory)
        except Exception as exc:  # a program that cannot be stored still runs
            _saying.cannot_serve(self.fn, f"{type(exc).__name__}: {exc}", directory)

    def _write_link(self, directory: str, entry: str, traced: Any, sig: Any, kept: dict[str, Any] | None) -> None:
        """The ``trust="source"`` key of this program, for a later zero-trace load, with the
        source of the user's code loaded now (``_sources``) and what its trace found that a
        load without a trace needs (``Hooks.kept``)."""
        link = self._source_key(sig)
        sources = _sources.describe(_sources.loaded_files(self.fn)) if link is not None else None
        if link is None or sources is None:
            return
        trees = pickle.dumps((traced.in_tree, traced.out_tree), protocol=4).hex()
        name = os.path.basename(entry)[: -len(_entries.SUFFIX)]
        header = {"link": link, "entry": name, "sources": sources, "trees": trees}
        if kept is not None:
            header["kept"] = kept
        _entries.write(_entries.entry_path(directory, _entries.key_digest(link), _entries.LINK), header, b"")


def _checking() -> bool:
    return os.environ.get(CHECK_ENV, "").strip() not in ("", "0")
