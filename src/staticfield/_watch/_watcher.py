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

import re
import threading
from typing import Any, Callable

import jax

from . import _describe, _diff
from .._core import _compat
from .._explain._diff import Change
from ._hooks import activate, deactivate
from ._records import Compile as Compile
from ._records import WatchedFunction as WatchedFunction
from ._report import render, to_dict
from ._site import (call_site, eager, identify, in_jax, is_eqx_eval_shape, relative, squash, transformed,
                    unwrap_library, via)

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

    def _record(self, fun: Callable, ji: Any, dbg: Any, args: tuple, kwargs: dict, outer: str) -> str:
        user_fun, args, kwargs, static_leaf, static_argnums, static_argnames = unwrap_library(fun, ji, args, kwargs)
        user_call = getattr(fun, "__sf_user_call__", None)
        if user_call is not None:  # sf.jit/sf.jit_method: its instances rebuilt, statics back
            user_fun, args, kwargs, static_argnums, static_argnames = user_call(args, kwargs)
        key, name, location, eager = identify(user_fun, dbg)
        with self._lock:
            entry = self._by_key.get(key)
            if entry is None:
                entry = self._at_line(key, name, location, eager)
                entry.padding = bool(getattr(user_fun, "__staticfield_padding__", False))
        changes: list[Change] = []
        description: dict = {}
        # eqx.filter_eval_shape traces the user's function inside a partial of its own,
        # made anew each time: not another function object of the user's
        stand_in = not eager and is_eqx_eval_shape(fun)
        if not eager and not entry.padding:
            description = _describe.describe(
                user_fun, args, kwargs, static_argnums, static_argnames, static_leaf,
            )
        # The user's function object: staticfield makes one jax.jit per static variant,
        # not the user's doing, so its functions are told apart by the user's function.
        ident = user_fun if user_call is not None else fun
        if not eager and not entry.padding:
            if entry.compiles:
                seen = stand_in or entry.seen(ident) or all(o is None for o in entry._owners)
                own = not entry.note and seen
                earlier = [d if not own or o is None or o == id(ident) else None
                           for d, o in zip(entry._descriptions, entry._owners)]
                changes = _diff.closest(earlier, description)[1]
                explain = getattr(fun, "__sf_explain__", None)  # deps="read": by what was read
                if explain is not None:
                    changes = explain(changes)
                if not entry.note and not own:
                    changes.insert(0, _diff.new_function(ident, entry._bound))
                if all(entry._transformed):  # compiled only for transformations before
                    changes = [_diff.transformation(into=False)]
            if not stand_in:
                entry.remember(ident)
        record = Compile(len(entry.compiles) + 1, call_site(), changes, via=via(), inside=outer)
        recompiles = getattr(fun, "__sf_recompiles__", None)
        if recompiles is not None and not changes:
            record.history = (recompiles, len(recompiles()))
        entry.compiles.append(record)
        entry._descriptions.append(description)
        entry._owners.append(None if stand_in else id(ident))
        entry._flat.append(None)
        entry._transformed.append(False)
        if not eager:
            self._by_source[str(getattr(dbg, "func_src_info", ""))] = entry
        names = (getattr(fun, "__name__", ""), getattr(getattr(fun, "func", None), "__name__", ""),
                 getattr(user_fun, "__name__", ""))
        self._push((record, tuple({squash(n) for n in names if isinstance(n, str)} - {""}), entry))
        return entry.name

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
        return entry.name, record.call_site, record.changes if record.number > 1 else None, entry.eager

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

    def _at_line(self, key: Any, name: str, location: str, eager: bool) -> WatchedFunction:
        """The function at ``key``'s code location (one function however it was reached:
        called, or compiled for a transformation first), else a new one."""
        line = (key[0], key[1], name.rpartition(".")[2]) if len(key) == 3 else None
        entry = self._by_line.get(line) if line else None
        if entry is None:
            entry = WatchedFunction(name, location, eager=eager)
            if line:
                self._by_line[line] = entry
        self._by_key[key] = entry
        return entry

    def _relowered(self) -> tuple | None:
        """A compile with no new trace: another sharding, or a program for a transformation
        (``jax.vmap(f)``, ``jax.grad``): explained against the closest earlier compile of
        the same kind (direct or transformed), by its flat arguments."""
        pending, self._local.pending = getattr(self._local, "pending", None), None
        if pending is None:
            return None
        args, dbg, is_transformed = pending
        entry = self._by_source.get(str(dbg.func_src_info))
        if entry is None:
            src = _describe.source_line(dbg)
            if src is None or in_jax(src[1]):  # jnp's own helpers: counted as eager operations
                return None
            name, file, line = src
            with self._lock:
                entry = self._at_line((file, line, name), name, f"{relative(file)}:{line}", False)
            self._by_source[str(dbg.func_src_info)] = entry
        flat = _describe.flat_args(args, dbg)
        earlier = [f if t == is_transformed and f is not None
                   and (not t or f.keys() == flat.keys()) else None  # the same transformation
                   for f, t in zip(entry._flat, entry._transformed)]
        found, changes = _diff.closest(earlier, flat)
        if entry.compiles and found < 0:  # the first of its kind
            changes = [_diff.transformation(into=is_transformed)]
        record = Compile(len(entry.compiles) + 1, call_site(), changes)
        entry.compiles.append(record)
        entry._descriptions.append(None)
        entry._owners.append(None)
        entry._flat.append(flat)
        entry._transformed.append(is_transformed)
        return (record, tuple({squash(dbg.func_name)} - {""}), entry)

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


_OPEN_LIMIT = 16  # traces kept open per thread (see watch._open)


def _names_match(names: tuple[str, ...], fun_name: str) -> bool:
    """Whether a JAX event's function name (``f``, ``jit(f)``) is the traced function's. A
    function without a name (a ``functools.partial``) matches nothing: an empty name would
    match every event, and give another function's compile to it."""
    event = squash(fun_name)
    return any(name in event for name in names)

