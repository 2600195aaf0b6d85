"""A program found by what its trace produced (``trust="trace"``): loaded, or compiled and written.

``ByTrace`` is a base of ``StoredJit`` (``_program``). ``_trace`` is the miss of every
``trust="trace"`` call, and of a ``trust="source"`` call whose program was not found
without a trace, in five named steps:

1. ``_trace_deferred``: the variant traced, its compile ticket left for the store to
   settle as a load or a compile (``Hooks.deferred``);
2. ``_keyed``: the key, from the traced jaxpr's digest (``_digest``) and ``_trace_key``
   (the ``jax.jit`` options, JAX's trace context, the avals and the machine, ``_key``);
3. ``_load``: the entry the key names (``_entries``), its whole key checked, its program
   deserialized (``_executable``); found, the ticket is settled as a load;
4. ``_missed``: else why no stored program served the call (``_misses``), logged and told
   to ``sf.watch``;
5. ``_compile``: the ticket counted as a compile (refused over ``max_compiles`` before any
   work), the trace lowered and compiled, and ``_write``: the entry written.

A program loaded or written here gets its ``trust="source"`` key too (``BySource``'s
``_relink`` and ``_write_link``, through ``self``), so that an entry serves either trust.

Imports: ``_core`` (errors) and the store's ``_digest``, ``_entries``, ``_executable``,
``_hooks``, ``_key``, ``_misses`` and ``_saying``. Called by ``_program``
(``StoredJit.program``).
"""

from __future__ import annotations

import logging
import time
from typing import Any, Callable

from .._core import _lowering
from .._core._errors import RecompileError
from . import _digest, _entries, _executable, _hooks, _key, _misses, _saying

logger = logging.getLogger("staticfield")


class ByTrace:
    """Find a variant's program by its trace (see the module docstring)."""

    # Set by StoredJit: what these methods read.
    jitted: Any
    fn: Callable
    vkey: Any
    _options: dict[str, Any]
    _hooks: _hooks.Hooks
    _static: dict[str, Any]
    # BySource's, through self: a program found here gets its trust="source" key too.
    _relink: Callable[..., None]
    _write_link: Callable[..., None]

    def _trace(self, directory: str, sig: Any, dyn: tuple, kwargs: dict, why: str = "",
               relink: bool = False, submit: Any = None, keep: Any = None, note: Any = None) -> Any:
        """Trace, then load the program by the trace's key, or compile and write it.
        ``relink``: a program loaded here gets this function's ``trust="source"`` key too
        (another function's identical program, or a source change that left it alone).
        With ``submit``, the compile (and write) is handed over, and ``keep`` is called
        with the program when it ran; ``None`` is returned."""
        traced, tickets, kept = self._trace_deferred(dyn, kwargs)
        record, key, unkeyed = self._keyed(traced, sig)
        if key is None:
            _saying.cannot_serve(self.fn, unkeyed, directory)
            return self._compile(traced, tickets, "", submit=submit, keep=keep)
        path = _entries.entry_path(directory, _entries.key_digest(key))
        program = self._load(path, key, traced.in_tree, traced.out_tree)
        if program is not None:
            self._hooks.settle(tickets, loaded=True)
            _hooks.counts()["loaded"] += 1
            if relink:
                self._relink(directory, path, traced, sig, kept)
            return program
        shown = {"function": _saying.name(self.fn), "statics": _saying.display_statics(self.vkey),
                 "described": _misses.as_text(self._hooks.description(tickets)), "note": note}
        why = self._missed(why, directory, key, record, shown)
        return self._compile(traced, tickets, why, submit=submit, keep=keep,
                             write=lambda compiled: self._write(directory, path, key, compiled, traced,
                                                                record, sig, kept, shown))

    def _trace_deferred(self, dyn: tuple, kwargs: dict) -> tuple[Any, list, dict[str, Any] | None]:
        """Step 1: the variant traced, with the tickets it reserved and what it found that a
        load without a trace needs (``Hooks.kept``)."""
        self._hooks.kept()  # what an earlier trace left is not this program's
        with self._hooks.deferred() as tickets:
            traced = self.jitted.trace(*dyn, **kwargs)
        kept = self._hooks.kept()
        _hooks.counts()["traced"] += 1
        return traced, tickets, kept

    def _keyed(self, traced: Any, sig: Any) -> tuple[_digest.Digest | None, dict[str, Any] | None, str]:
        """Step 2: the traced jaxpr's digest and the store key, or no key and why there is
        none (a value that cannot be written by value)."""
        try:
            record = _digest.digest(traced.jaxpr)
            key = self._trace_key(record.hexdigest, sig)
        except _digest.Undigestible as exc:
            return None, None, str(exc)
        return record, key, "a jax.jit option or JAX setting that cannot be written by value"

    def _trace_key(self, jaxpr_digest: str, sig: Any) -> dict[str, Any] | None:
        if "options" not in self._static:
            self._static["options"] = _key.options(self._options)
        options, context = self._static["options"], _key.context()
        if options is None or context is None:
            return None
        # No tree: the program is a function of the flat arguments, which the jaxpr's avals
        # and the leaves' shardings describe; a load takes its trees from this trace.
        _, leaves, _ = sig
        key = {"format": _key.FORMAT, "trust": "trace", "jaxpr": jaxpr_digest, "options": options,
               "context": context, "avals": [_key.describe_leaf(leaf) for leaf in leaves],
               "environment": _key.environment()}
        if key["environment"]["process_count"] > 1:
            # The program's name is in it (jit_f, jit(f)/mul): the processes of a job run the
            # same program only if it is the same function's (see _core._lowering).
            key["name"] = getattr(self.fn, "__name__", "fn")
        return key

    def _load(self, path: str, key: dict[str, Any], in_tree: Any, out_tree: Any) -> Any:
        """Step 3: the program of the entry at ``path`` if its whole key is ``key``, else
        ``None`` (none there, another key with the same digest, or a damaged entry)."""
        start = time.perf_counter()
        try:
            with _entries.open_entry(path) as f:
                header = _entries.read_header(f)
                if header.get("key") != key:
                    return None  # another key with the same digest: compile again
                payload = _entries.read_payload(f, header)
            program = _executable.deserialize(payload, header, in_tree, out_tree)
        except FileNotFoundError:
            return None
        except Exception as exc:  # corrupt, truncated, foreign, untrusted: ignored, written again
            _saying.bad_entry(self.fn, path, exc)
            return None
        _hooks.loaded(self.fn, time.perf_counter() - start, traced=True)
        return program

    def _missed(self, why: str, directory: str, key: dict[str, Any], now: _digest.Digest | None,
                shown: dict[str, Any]) -> str:
        """Step 4: why no stored program served this call (``why``: a ``trust="source"``
        lookup's reason, else ``_misses`` against the store's closest program), logged and
        told to ``sf.watch``; never raises."""
        if not why:
            try:
                why = _misses.why(directory, shown["function"], shown["statics"], key, now, shown["described"])
            except Exception as exc:  # an explanation must never break the call
                logger.debug("staticfield could not explain a program store miss: %s", exc)
                why = ""
        if why:
            logger.info("staticfield: %s: %s", _saying.name(self.fn), why)
            _hooks.missed(self.fn, why)
        return why

    def _compile(self, traced: Any, tickets: list, why: str, submit: Any = None, keep: Any = None,
                 write: Callable[[Any], None] | None = None) -> Any:
        """Step 5: count the trace as a compile (refused over ``max_compiles``, before
        compiling), lower it, then compile and ``write`` it here, or hand that to ``submit``."""
        try:
            self._hooks.settle(tickets, loaded=False, why=why)
        except RecompileError:
            self.jitted.clear_cache()  # JAX's trace of it too: the next call begins again
            raise
        with _lowering.settings():  # one program on every process of a job (a warm-up worker's too)
            lowered = traced.lower()

        def compile_() -> Any:
            compiled = lowered.compile()
            _hooks.counts()["compiled"] += 1
            return compiled

        def written(compiled: Any) -> Any:
            if write is not None:
                write(compiled)
            return compiled

        if submit is None:
            return written(compile_())
        submit(compile_, lambda compiled: keep(written(compiled)))
        return None

    def _write(self, directory: str, path: str, key: dict, compiled: Any, traced: Any,
               record: _digest.Digest, sig: Any, kept: dict[str, Any] | None, display: dict[str, Any]) -> None:
        """The entry (its JSON line names each top-level equation, for the checking mode, and
        what the call was by the user's paths, to explain a later miss), then its
        ``trust="source"`` link: an entry serves either trust."""
        try:
            payload, runs_on = _executable.serialize(compiled)
            _entries.write(path, {"key": key, "display": display, **runs_on,
                                  "equations": record.equations, "consts": record.consts}, payload)
            self._write_link(directory, path, traced, sig, kept)
        except _executable.Unstorable as exc:
            _saying.cannot_serve(self.fn, str(exc), directory)
        except Exception as exc:  # a program that cannot be stored still runs
            _saying.cannot_serve(self.fn, f"{type(exc).__name__}: {exc}", directory)
