"""``sf.watch``: every compile of a JAX program, per jitted function, explained in user paths.

A ``watch`` keeps a ``WatchedFunction`` per function (by code location) and a
``Compile`` per trace. ``_hooks`` feeds it from JAX, on cache misses only:
``_traced`` records each new trace (``_compiles._record``: its arguments described and
diffed with the closest earlier compile); ``_duration`` adds trace, lowering and
compile seconds to the compile in progress; ``_calling`` notes the placements of a
compile that needs no new trace (a new sharding), which ``_compiles._relowered``
explains. Each thread's traces in progress are a stack (``_open``), innermost last.
Where JAX lacks the trace hook, the watcher says so once and keeps counts and times only.

Imports: ``_core`` (``_compat``), ``_explain`` (``Change``) and this room's ``_compiles``,
``_describe``, ``_hooks``, ``_records``, ``_report`` and ``_site``. Called by the package
root (``sf.watch``), ``_cli``, ``_stance`` (the trace in progress, for ``sf.no_compiles``)
and the pytest plugin; its hooks by JAX.
"""

from __future__ import annotations

import threading
from typing import Any, Callable

import jax

from . import _describe
from .._core import _compat
from .._explain._diff import Change
from ._compiles import Compiles
from ._hooks import activate, deactivate
from ._records import Compile as Compile
from ._records import WatchedFunction as WatchedFunction
from ._report import render, to_dict
from ._site import identify, squash, transformed

TRACE_EVENT = "/jax/core/compile/jaxpr_trace_duration"
LOWER_EVENT = "/jax/core/compile/jaxpr_to_mlir_module_duration"
COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"
_FIELD = {TRACE_EVENT: "trace_s", LOWER_EVENT: "lower_s", COMPILE_EVENT: "compile_s"}

NO_HOOK = (
    "staticfield watch: this JAX ({version}) has no jax._src.pjit._trace_for_jit to hook, "
    "so recompiles are counted and timed but not explained"
)
FAILED = (
    "staticfield watch: the watcher failed inside {where} ({error}); the program went on "
    "unharmed, but this report may be incomplete"
)


class watch(Compiles):
    """Record every compile in a block: ``with sf.watch() as w: ...``, then ``w.report()``.

    ``w.functions`` lists a ``WatchedFunction`` per jitted function (by code location)
    with its ``compiles``, each with ``call_site``, ``changes`` (``Change`` objects:
    path, kind, old, new, hint) and trace/lower/compile seconds. ``w.as_dict()`` is the
    same as JSON-ready data. The watcher never raises into the watched program.
    """

    def __init__(self) -> None:
        self._by_key: dict[Any, WatchedFunction] = {}
        self._other: dict[str, WatchedFunction] = {}
        self._by_source: dict[str, WatchedFunction] = {}  # JAX's "f at file:line"
        self._by_line: dict[tuple, WatchedFunction] = {}  # (file, line, name): one function
        self.notices: list[str] = []
        self.explained = True
        self._local = threading.local()
        self._lock = threading.Lock()

    def __enter__(self) -> "watch":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        if not activate(self):
            self.explained = False
            self._notice(_compat.unavailable("watch") or NO_HOOK.format(version=jax.__version__))
        elif _compat.unavailable("watch_placement"):
            self._notice(_compat.unavailable("watch_placement"))

    def stop(self) -> None:
        deactivate(self)

    @property
    def functions(self) -> list[WatchedFunction]:
        unique = {id(f): f for f in self._by_key.values()}  # a function has one key per path
        return [*unique.values(), *self._other.values()]

    def report(self) -> str:
        """The report as text: per function, compiles, seconds, and why each recompile."""
        return render(self.functions, self.notices)

    def as_dict(self) -> dict:
        """The report as JSON-ready data."""
        return to_dict(self.functions, self.notices, self.explained)

    def over_budget(self, max_compiles: int) -> list[WatchedFunction]:
        return [f for f in self.functions if not f.eager and not f.padding and f.count > max_compiles]

    # -- called by the hooks; each catches its own failures -------------------------

    def _notice(self, text: str) -> None:
        if text not in self.notices:
            self.notices.append(text)

    def _failed(self, where: str, error: BaseException) -> None:
        self._notice(FAILED.format(where=where, error=f"{type(error).__name__}: {error}"))

    def _open(self) -> list:
        """This thread's traces whose events may still come, innermost last: a trace can start
        while another is in progress (a primitive's abstract-eval rule that calls
        ``eqx.filter_eval_shape`` runs inside the trace of the function binding it), and each
        JAX event goes to the innermost one of its own name."""
        stack = getattr(self._local, "open", None)
        if stack is None:
            stack = self._local.open = []
        return stack

    def _push(self, item: tuple) -> None:
        stack = self._open()
        stack.append(item)
        del stack[:-_OPEN_LIMIT]  # traces never compiled (.lower, eval_shape) are not kept forever

    def _traced(self, fun: Callable, ji: Any, dbg: Any, args: tuple, kwargs: dict) -> None:
        """A trace begins (``_trace_over`` when it ends): one inside another's is named so."""
        tracing = self._local.__dict__.setdefault("tracing", [])
        outer = tracing[-1] if tracing else ""
        try:
            tracing.append(self._record(fun, ji, dbg, args, kwargs, outer) or outer)
        except Exception as e:
            tracing.append(outer)
            self._failed("its trace hook", e)

    def _trace_over(self) -> None:
        tracing = self._local.__dict__.get("tracing")
        if tracing:
            tracing.pop()

    def _loaded(self, fun: Callable, seconds: float, traced: bool) -> None:
        """A program of ``fun`` came from the program store: a load, not a compile (with
        ``trust="trace"``, the trace just recorded was the store's check: forgotten)."""
        key, name, location, eager = identify(fun, None)
        with self._lock:
            entry = self._by_key.get(key)
            if entry is None:
                entry = self._by_key[key] = WatchedFunction(name, location, eager=eager)
            entry.loads += 1
        if traced:
            self._forget(entry)

    def _store_missed(self, why: str) -> None:
        """The program store said why it had no program for this thread's trace."""
        stack = self._open()
        if stack:
            stack[-1][0].store = why

    def trace_in_progress(self, program: str) -> tuple[str, str, list[Change] | None, bool] | None:
        """This thread's trace that is now being compiled as ``program`` (JAX's module
        name, ``jit_f``): its function's name, call site, the changes against the closest
        earlier compile (``None`` for its first), and whether it is an eager operation;
        ``None`` when there is none."""
        current = self._in_progress(program)
        if current is None:
            return None
        record, _, entry = current
        changes = record.changes if record.number > 1 and not record.first else None
        return entry.name, record.call_site, changes, entry.eager

    def description_in_progress(self, program: str) -> tuple[str, str, dict] | None:
        """This thread's trace being compiled as ``program``: its function's name and
        location, and the description of its arguments (``sf.no_compiles`` compares it
        with the compiles made before its watcher started)."""
        current = self._in_progress(program)
        if current is None:
            return None
        record, _, entry = current
        index = entry.compiles.index(record) if record in entry.compiles else -1
        description = entry._descriptions[index] if index >= 0 else None
        return (entry.name, entry.location, description) if description else None

    def _in_progress(self, program: str) -> tuple | None:
        """This thread's innermost trace in progress whose names match ``program``."""
        return next((item for item in reversed(self._open()) if _names_match(item[1], program)), None)

    def forget_trace(self) -> None:
        """This thread's trace in progress compiled nothing (``sf.no_compiles`` refused it)."""
        self._forget()

    def _trace_raised(self, retrace: bool = False) -> None:
        """The user's function raised while tracing: nothing compiled, so forget the trace
        (and count it as failed, unless staticfield stopped it to trace again)."""
        forgotten = self._forget()
        if forgotten is not None:
            self._local.raised = forgotten[0]  # JAX may still time the failed trace: not a compile
            forgotten[1].failed_traces += not retrace

    def _forget(self, of: WatchedFunction | None = None) -> tuple | None:
        """Drop this thread's innermost trace in progress (of function ``of``, when given):
        its names and its function, or ``None``."""
        stack = self._open()
        found = [i for i, item in enumerate(stack) if of is None or item[2] is of]
        if not found:
            return None
        record, names, entry = stack.pop(found[-1])
        if not (entry.compiles and entry.compiles[-1] is record):
            return None
        entry.compiles.pop()
        entry._descriptions.pop()
        entry._owners.pop()
        entry._flat.pop()
        entry._transformed.pop()
        return names, entry

    def _calling(self, args: tuple, params: dict) -> None:
        """JAX runs a traced function afresh (its C++ cache missed): note the placements."""
        try:
            dbg = params["jaxpr"].jaxpr.debug_info
            stack = self._open()
            current = stack[-1] if stack else None
            if current is None:  # used only if a lowering follows
                self._local.pending = (args, dbg, transformed())
            elif current[2]._flat and current[2]._flat[-1] is None:
                current[2]._flat[-1] = _describe.flat_args(args, dbg)
        except Exception as e:
            self._failed("its call hook", e)

    def _duration(self, event: str, seconds: float, fun_name: str) -> None:
        try:
            field = _FIELD.get(event)
            if field is None:
                return
            stack = self._open()
            current = next((item for item in reversed(stack) if _names_match(item[1], fun_name)), None)
            raised, self._local.raised = getattr(self._local, "raised", None), None
            if current is None and event == TRACE_EVENT and raised and _names_match(raised, fun_name):
                return  # the duration of a trace that raised (counted in failed_traces)
            if current is None and event == LOWER_EVENT:
                current = self._relowered()
                if current is not None:
                    self._push(current)
            if current is not None:
                record = current[0]
                if event == TRACE_EVENT:  # the trace is over: staticfield said why, if it did
                    record.take_history()
                if event == COMPILE_EVENT:  # compiled: no more events for this trace
                    record.compiled_later = True
                    stack.remove(current)
            else:
                record = self._unexplained(fun_name, field)
            setattr(record, field, getattr(record, field) + seconds)
        except Exception as e:
            self._failed("its jax.monitoring listener", e)

_OPEN_LIMIT = 16  # traces kept open per thread (see watch._open)


def _names_match(names: tuple[str, ...], fun_name: str) -> bool:
    """Whether a JAX event's function name (``f``, ``jit(f)``) is the traced function's. A
    function without a name (a ``functools.partial``) matches nothing: an empty name would
    match every event, and give another function's compile to it."""
    event = squash(fun_name)
    return any(name in event for name in names)

