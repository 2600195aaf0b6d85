"""``sf.watch``: every compile of a JAX program, per jitted function, explained in user paths.

A ``watch`` keeps a ``WatchedFunction`` per function (by code location) and a
``Compile`` per trace. ``_hooks`` feeds it from JAX, on cache misses only:
``_traced`` describes the arguments of each new trace (``_describe``, ``_diff``) and diffs
them with the closest earlier compile; ``_duration`` adds trace, lowering and
compile seconds to the compile in progress; ``_calling``/``_relowered`` explain a
compile that needed no new trace (a new sharding). Where JAX lacks the trace hook,
the watcher says so once and keeps counts and times only.
"""

from __future__ import annotations

import dataclasses
import re
import threading
import weakref
from typing import Any, Callable

import jax

from . import _describe, _diff
from .._core import _compat
from .._explain._diff import Change
from ._hooks import activate, deactivate
from ._report import render, to_dict
from ._site import call_site, eager, identify, squash, unwrap_library, via

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


@dataclasses.dataclass
class Compile:
    """One trace (and usually one compile) of a function: where it was called and why.

    ``via`` is ``".lower"``, ``".trace"`` or ``".eval_shape"`` for a trace made by one
    of those (ahead of time, or to inspect), ``""`` for a call; such a trace compiles
    nothing until its program is compiled (``compiled``).
    """

    number: int
    call_site: str
    changes: list[Change]
    trace_s: float = 0.0
    lower_s: float = 0.0
    compile_s: float = 0.0
    via: str = ""
    compiled_later: bool = False
    store: str = ""  # with a program store set: why it had no program for this compile

    @property
    def compiled(self) -> bool:
        return not self.via or self.compiled_later


@dataclasses.dataclass
class WatchedFunction:
    """A jitted function, identified by its code location, and its compiles."""

    name: str
    location: str
    compiles: list[Compile] = dataclasses.field(default_factory=list)
    eager: bool = False  # an op-by-op primitive (jnp.ones(3) outside jit)
    note: str = ""  # why a recompile may show no changed argument
    failed_traces: int = 0  # traces that raised (nothing compiled)
    loads: int = 0  # programs loaded from the program store (no trace, no compile)
    _descriptions: list = dataclasses.field(default_factory=list, repr=False)
    _owners: list = dataclasses.field(default_factory=list, repr=False)  # id of the function
    _functions: Any = dataclasses.field(default_factory=weakref.WeakSet, repr=False)
    _placements: list = dataclasses.field(default_factory=list, repr=False)  # per compile

    @property
    def count(self) -> int:
        """Compiles: traces by a call, and traces by ``.lower`` etc. that were compiled."""
        return sum(c.compiled for c in self.compiles)

    @property
    def uncompiled(self) -> int:
        """Traces by ``.lower``/``.trace``/``.eval_shape`` that compiled nothing."""
        return len(self.compiles) - self.count

    def seconds(self, field: str) -> float:
        return sum(getattr(c, field) for c in self.compiles)


class watch:
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
        return [*self._by_key.values(), *self._other.values()]

    def report(self) -> str:
        """The report as text: per function, compiles, seconds, and why each recompile."""
        return render(self.functions, self.notices)

    def as_dict(self) -> dict:
        """The report as JSON-ready data."""
        return to_dict(self.functions, self.notices, self.explained)

    def over_budget(self, max_compiles: int) -> list[WatchedFunction]:
        return [f for f in self.functions if not f.eager and f.count > max_compiles]

    # -- called by the hooks; each catches its own failures -------------------------

    def _notice(self, text: str) -> None:
        if text not in self.notices:
            self.notices.append(text)

    def _failed(self, where: str, error: BaseException) -> None:
        self._notice(FAILED.format(where=where, error=f"{type(error).__name__}: {error}"))

    def _traced(self, fun: Callable, ji: Any, dbg: Any, args: tuple, kwargs: dict) -> None:
        try:
            self._record(fun, ji, dbg, args, kwargs)
        except Exception as e:
            self._local.current = None
            self._failed("its trace hook", e)

    def _record(self, fun: Callable, ji: Any, dbg: Any, args: tuple, kwargs: dict) -> None:
        user_fun, args, kwargs, static_leaf = unwrap_library(fun, args, kwargs)
        static_argnums = tuple(getattr(ji, "static_argnums", ()) or ())
        static_argnames = tuple(getattr(ji, "static_argnames", ()) or ())
        user_call = getattr(fun, "__sf_user_call__", None)
        if user_call is not None:  # sf.jit/sf.jit_method: its instances rebuilt, statics back
            user_fun, args, kwargs, static_argnums, static_argnames = user_call(args, kwargs)
        key, name, location, eager = identify(user_fun, dbg)
        with self._lock:
            entry = self._by_key.get(key)
            if entry is None:
                entry = self._by_key[key] = WatchedFunction(name, location, eager=eager)
        changes: list[Change] = []
        description: dict = {}
        if not eager:
            description = _describe.describe(
                user_fun, args, kwargs, static_argnums, static_argnames, static_leaf,
            )
            if entry.compiles:
                # staticfield makes one function per static variant: not the user's doing
                own = not entry.note and user_call is None and _seen(entry, fun)
                earlier = [d if not own or o == id(fun) else None
                           for d, o in zip(entry._descriptions, entry._owners)]
                changes = _diff.closest(earlier, description)[1]
                explain = getattr(fun, "__sf_explain__", None)  # deps="read": by what was read
                if explain is not None:
                    changes = explain(changes)
                if not entry.note and user_call is None and not own:
                    changes.insert(0, _diff.new_function(fun))
            _remember(entry, fun)
        record = Compile(len(entry.compiles) + 1, call_site(), changes, via=via())
        entry.compiles.append(record)
        entry._descriptions.append(description)
        entry._owners.append(id(fun))
        entry._placements.append(None)
        if not eager:
            self._by_source[str(getattr(dbg, "func_src_info", ""))] = entry
        self._local.current = (record, squash(getattr(fun, "__name__", "")), entry)

    def _loaded(self, fun: Callable, seconds: float, traced: bool) -> None:
        """A program of ``fun`` came from the program store: a load, not a compile (with
        ``trust="trace"``, the trace just recorded was the store's check: forgotten)."""
        entry = self._forget() if traced else None
        key, name, location, eager = identify(fun, None)
        with self._lock:
            entry = entry or self._by_key.get(key)
            if entry is None:
                entry = self._by_key[key] = WatchedFunction(name, location, eager=eager)
            entry.loads += 1

    def _store_missed(self, why: str) -> None:
        """The program store said why it had no program for this thread's trace."""
        current = getattr(self._local, "current", None)
        if current is not None:
            current[0].store = why

    def trace_in_progress(self, program: str) -> tuple[str, str, list[Change] | None, bool] | None:
        """This thread's trace that is now being compiled as ``program`` (JAX's module
        name, ``jit_f``): its function's name, call site, the changes against the closest
        earlier compile (``None`` for its first), and whether it is an eager operation;
        ``None`` when there is none."""
        current = getattr(self._local, "current", None)
        if current is None or not current[1] or current[1] not in squash(program):
            return None
        record, _, entry = current
        return entry.name, record.call_site, record.changes if record.number > 1 else None, entry.eager

    def forget_trace(self) -> None:
        """This thread's trace in progress compiled nothing (``sf.no_compiles`` refused it)."""
        self._forget()

    def _trace_raised(self, retrace: bool = False) -> None:
        """The user's function raised while tracing: nothing compiled, so forget the trace
        (and count it as failed, unless staticfield stopped it to trace again)."""
        entry = self._forget()
        if entry is not None:
            entry.failed_traces += not retrace

    def _forget(self) -> WatchedFunction | None:
        """Drop this thread's trace in progress; the function it was recorded for."""
        current, self._local.current = getattr(self._local, "current", None), None
        if current is None:
            return None
        record, _, entry = current
        if not (entry.compiles and entry.compiles[-1] is record):
            return None
        entry.compiles.pop()
        entry._descriptions.pop()
        entry._owners.pop()
        entry._placements.pop()
        return entry

    def _calling(self, args: tuple, params: dict) -> None:
        """JAX runs a traced function afresh (its C++ cache missed): note the placements."""
        try:
            dbg = params["jaxpr"].jaxpr.debug_info
            current = getattr(self._local, "current", None)
            if current is None:
                self._local.pending = (args, dbg)  # used only if a lowering follows
            elif current[2]._placements and current[2]._placements[-1] is None:
                current[2]._placements[-1] = _describe.placements(args, dbg)
        except Exception as e:
            self._failed("its call hook", e)

    def _relowered(self) -> tuple | None:
        """A compile with no new trace (same types, another sharding): explain by placements."""
        pending, self._local.pending = getattr(self._local, "pending", None), None
        if pending is None:
            return None
        args, dbg = pending
        entry = self._by_source.get(str(dbg.func_src_info))
        if entry is None:
            return None
        placements = _describe.placements(args, dbg)
        window = entry._placements[-_diff.CLOSEST_WINDOW :]
        earlier = [p for p in window if p is not None]
        changes = min(
            (_diff.placement_changes(p, placements) for p in earlier), key=len, default=[]
        )
        record = Compile(len(entry.compiles) + 1, call_site(), changes)
        entry.compiles.append(record)
        entry._placements.append(placements)
        return (record, squash(dbg.func_name), entry)

    def _duration(self, event: str, seconds: float, fun_name: str) -> None:
        try:
            field = _FIELD.get(event)
            if field is None:
                return
            current = getattr(self._local, "current", None)
            if current is None and event == LOWER_EVENT:
                current = self._local.current = self._relowered()
            if current is not None and current[1] in squash(fun_name):
                record = current[0]
                if event == COMPILE_EVENT:
                    record.compiled_later = True
                    self._local.current = None
            else:
                record = self._unexplained(fun_name, field)
            setattr(record, field, getattr(record, field) + seconds)
        except Exception as e:
            self._failed("its jax.monitoring listener", e)

    def _unexplained(self, fun_name: str, field: str) -> Compile:
        """A compile the trace hook did not see (a transformed jit, or no hook): by name."""
        while (inner := re.fullmatch(r"p?jit\((.*)\)", fun_name)) is not None:
            fun_name = inner.group(1)  # lowering and compile events say jit(f), tracing f
        entry = self._other.get(fun_name)
        if entry is None:  # an operation outside jit, traced before this watcher started?
            entry = self._other[fun_name] = WatchedFunction(fun_name, "", eager=eager())
        last = entry.compiles[-1] if entry.compiles else None
        if last is None or field == "trace_s" or getattr(last, field):
            last = Compile(entry.count + 1, call_site(), [])
            entry.compiles.append(last)
        return last


# -- which function objects a watched function has seen ----------------------------


def _seen(entry: WatchedFunction, fun: Callable) -> bool:
    try:
        return fun in entry._functions
    except TypeError:
        return True  # cannot be weakly referenced: cannot tell, so do not blame it


def _remember(entry: WatchedFunction, fun: Callable) -> None:
    try:
        entry._functions.add(fun)
    except TypeError:
        pass
