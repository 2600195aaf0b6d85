"""What runs while JAX traces a variant: the user's function, described, budgeted, counted.

``Tracing`` is a base of the engine (``_engine.JitFunction``). ``_traced`` is the body JAX
traces for variant ``vkey`` (``_variant`` rebuilds the instances and calls it), in four
named steps: describe the call, begin (a ticket from the tracker, the budget checked),
run the user's function, settle (the ticket counted as a compile). While the program
store traces a variant to look its program up (``deferring``), the ticket waits for the
store to say whether the program was loaded or compiled (``VariantHooks.settle``).
``VariantHooks`` is how a variant's ``StoredJit`` sees the engine's counters, ``deps="read"``
and buckets (see ``_store.Hooks``).

Imports: ``_core``, ``_explain`` (describing a call), ``_deps`` (``stored_paths``),
``_store`` (``Hooks``), ``_agree`` (whether several processes run), ``_agreement``,
``_auto_plan`` and ``_hints``. Called by JAX, through the wrapper ``_variant`` makes, and
by ``_miss`` (the hooks of a new variant).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from typing import Any, Callable

from .._agree import enabled as several_processes
from .._buckets import ROWS_KW
from .._core._errors import RecompileError
from .._deps._share import Deps, stored_paths
from .._explain import _describe
from .._store import Hooks
from ._agreement import publish, publish_traced
from ._auto_plan import AutoKey, partition_out
from ._hints import add_float_note, add_hint, add_note

logger = logging.getLogger("staticfield")


def chain(first: Callable | None, second: Callable | None) -> Callable | None:
    """One rewrite of an explanation after the other (``deps="read"``'s, then buckets')."""
    if first is None or second is None:
        return first or second
    return lambda x: second(first(x))


class Tracing:
    """The trace of each variant (see the module docstring)."""

    # Set by the engine: what these methods read.
    traced_fn: Callable[..., Any]  # the user's function (with buckets=, the bucket body)
    method: bool
    names: list
    star: str | None
    static_pos: Any
    static_names: Any
    variants: dict
    tracker: Any
    bucket_spec: Any
    auto_signature: Any
    _lock: threading.Lock
    _compiled: set  # variant keys with a successful trace
    _deferring: threading.local  # .pending: (vkey, tickets) while the store traces
    _deps_of: Callable[[Any], tuple[Any, Any]]

    @contextlib.contextmanager
    def deferring(self, vkey: Any) -> Any:
        """While the program store traces variant ``vkey``: its trace reserves a compile
        (a ticket in the list yielded) that the store then counts as a compile or a load."""
        local = self._deferring
        outer = getattr(local, "pending", None)
        tickets: list = []
        local.pending = (vkey, tickets)
        try:
            yield tickets
        except BaseException:
            for ticket in tickets:
                self.tracker.abort(ticket)
            raise
        finally:
            local.pending = outer

    def _traced(self, vkey: Any, args: tuple, kwargs: dict) -> Any:
        """The user's function while JAX traces variant ``vkey``, in four named steps:

        1. ``_describe_call``: the arguments by user path, for the explanation of the next
           recompile (``static="auto"`` first rebuilds the user's call from traced leaves);
        2. ``_begin``: a ticket from the tracker, the budget checked now unless the program
           store will count this trace as a compile or a load (``deferring``);
        3. ``_run``: the user's function (``deps="read"``: recording the statics it reads);
           a failure aborts the ticket, with a hint where one helps;
        4. ``_settle``: the ticket counted as a compile (only a trace that succeeded
           counts), or left for the store.
        """
        dyn = None
        if isinstance(vkey, AutoKey):  # static="auto": the traced leaves; the user's call rebuilt
            dyn, (args, kwargs) = args, vkey.user_call(self.auto_signature, args)
        description = self._describe_call(vkey, dyn, args, kwargs)
        deps, base = self._deps_of(vkey)
        pending = getattr(self._deferring, "pending", None)
        deferred = pending[1] if pending is not None and pending[0] is vkey else None
        ticket = self._begin(vkey, deps, base, description, args, deferred)
        try:
            out = self._run(deps, base, dyn, args, kwargs)
        except BaseException as exc:
            self.tracker.abort(ticket)
            add_hint(exc, self.names, args, kwargs)
            add_note(exc, self.names, args, kwargs, self.static_pos, self.static_names, dyn)
            add_float_note(exc, self.names, args, kwargs, self.static_pos, self.static_names)
            raise
        self._settle(vkey, ticket, deferred)
        return out

    def _describe_call(self, vkey: Any, dyn: Any, args: tuple, kwargs: dict) -> Any:
        """Step 1: the call's arguments by user path (``None`` if that fails: tracking must
        never break the user's call)."""
        try:
            spec = self.bucket_spec  # buckets=: its own arguments (the rows, mask="valid"'s mask) are no change
            shown = kwargs if spec is None else {k: v for k, v in kwargs.items() if k not in (ROWS_KW, spec.mask)}
            described = (_describe.describe(self.names, args, shown, self.static_pos, self.static_names, self.star)
                         if dyn is None else vkey.describe(dyn))
            if spec is not None and spec.mask:
                described = {p: e for p, e in described.items() if p.split(".", 1)[0].split("[", 1)[0] != spec.mask}
            return described
        except Exception as exc:  # tracking must never break the user's call
            logger.warning("staticfield could not describe the arguments of %s (%s: %s); "
                           "the call goes on", self.tracker.function, type(exc).__name__, exc)
            return None

    def _begin(self, vkey: Any, deps: Deps | None, base: Any, description: Any, args: tuple,
               deferred: list | None) -> Any:
        """Step 2: the tracker's ticket for this trace. Refused over budget
        (``RecompileError``): the variant is not cached either, unless it has programs."""
        try:
            return self.tracker.begin(description, type(args[0]) if self.method and args else None,
                                      chain(deps.annotate if deps is not None else None,
                                            self.bucket_spec.annotate if self.bucket_spec is not None else None),
                                      budget=deferred is None)
        except RecompileError:
            variants = self.variants if deps is None else deps.variants
            with self._lock:  # refused: not cached either, unless the variant has programs
                if vkey not in self._compiled:
                    variants.pop(base, None)
            raise

    def _run(self, deps: Deps | None, base: Any, dyn: Any, args: tuple, kwargs: dict) -> Any:
        """Step 3: the user's function (with ``deps="read"``, recording what it reads), its
        outputs partitioned for ``static="auto"``; in a multi-process job, the program
        published for the other processes to agree with."""
        seen: set | None = None if deps is None else set()  # deps="read": what this trace read
        out = self.traced_fn(*args, **kwargs) if deps is None else deps.run(self.traced_fn, base, args,
                                                                             kwargs, seen)
        if dyn is not None:
            out = partition_out(out, self.tracker.function)
        if several_processes():  # a multi-process job: every process makes this program
            publish_traced(self, deps, base, seen)
        return out

    def _settle(self, vkey: Any, ticket: Any, deferred: list | None) -> None:
        """Step 4: the ticket committed as a compile, or, while the store traces, left for
        it to count as a load or a compile."""
        if self.bucket_spec is not None:  # a bucket size's first program: no warn_compiles count
            ticket.new_bucket = self.bucket_spec.took_new_bucket()
        if deferred is not None:  # the program store counts it: a load or a compile
            deferred.append(ticket)
        else:
            self.tracker.commit(ticket)  # only a trace that succeeded counts
        self._compiled.add(vkey)


class VariantHooks(Hooks):
    """A variant's counters as its ``StoredJit`` sees them (see ``_store.Hooks``)."""

    __slots__ = ("engine", "vkey", "deps", "base")

    def __init__(self, engine: Any, vkey: Any, deps: Deps | None, base: Any) -> None:
        self.engine, self.vkey, self.deps, self.base = engine, vkey, deps, base

    def deferred(self) -> Any:
        return self.engine.deferring(self.vkey)

    def settle(self, tickets: list, loaded: bool, why: str = "") -> None:
        tracker = self.engine.tracker
        for i, ticket in enumerate(tickets):
            if loaded:
                tracker.loaded(ticket)
                continue
            try:
                tracker.commit(ticket, budget=True, store=why)
            except RecompileError:
                for rest in tickets[i + 1:]:
                    tracker.abort(rest)
                raise

    def agree(self, jitted: Any, dyn: tuple, kwargs: dict, kept: Any) -> None:
        """A program loaded with no trace (``trust="source"``): it agrees between processes
        as a traced one does; under ``deps="read"``, on the statics its variant read when it
        was stored (``kept``), else on every static."""
        if several_processes():
            paths = stored_paths(kept.get("reads")) if self.deps is not None and isinstance(kept, dict) else None
            seen = set(paths) if paths is not None else None
            publish(self.engine, getattr(getattr(jitted, "__wrapped__", None), "__sf_user_call__", None),
                    dyn, kwargs, self.deps, self.base, seen)

    def loaded_untraced(self, kept: Any) -> None:
        """No trace here: with ``deps="read"``, the statics the stored program's trace read
        (``kept``), else every static (``Deps.loaded``); with ``buckets=``, which outputs
        carry the rows."""
        self.engine.tracker.loaded()
        kept = kept if isinstance(kept, dict) else {}
        if self.deps is not None:
            self.deps.loaded(self.base, kept.get("reads"))
        if self.engine.bucket_spec is not None:
            self.engine.bucket_spec.learn(kept.get("rows"))

    def description(self, tickets: list) -> dict[str, tuple] | None:
        return next((t.description for t in tickets if t.description is not None), None)

    def note(self) -> dict[str, Any] | None:
        spec = self.engine.bucket_spec
        return None if spec is None else spec.note()

    def kept(self) -> dict[str, Any] | None:
        spec = self.engine.bucket_spec
        found = {"rows": spec.outputs() if spec is not None else None,
                 "reads": self.deps.reads_of(self.base) if self.deps is not None else None}
        return {k: v for k, v in found.items() if v is not None} or None
