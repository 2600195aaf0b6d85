"""``sf.watch``: every compile of a JAX program, per jitted function, explained in user paths.

Two hooks, both silent on a cache hit (JAX's C++ dispatch never reaches Python then):

* counts and times: a ``jax.monitoring`` duration listener (public API) for the
  trace, lowering and backend-compile events JAX records on a miss;
* explanations: a wrapper around ``jax._src.pjit._trace_for_jit``, the one function
  JAX calls only after its caches missed, with the user's function, its jit options
  and the call's own arguments. Where a JAX version lacks it, the watcher says so
  once and reports counts and times only.

Nothing here raises into the user's program: a failure inside the watcher becomes
a notice in the report.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import re
import sys
import threading
import weakref
from typing import Any, Callable

import jax

from . import _watch_diff
from ._explain import Change
from ._watch_report import render, to_dict

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
    """One trace (and usually one compile) of a function: where it was called and why."""

    number: int
    call_site: str
    changes: list[Change]
    trace_s: float = 0.0
    lower_s: float = 0.0
    compile_s: float = 0.0


@dataclasses.dataclass
class WatchedFunction:
    """A jitted function, identified by its code location, and its compiles."""

    name: str
    location: str
    compiles: list[Compile] = dataclasses.field(default_factory=list)
    eager: bool = False  # an op-by-op primitive (jnp.ones(3) outside jit)
    _descriptions: list = dataclasses.field(default_factory=list, repr=False)
    _functions: Any = dataclasses.field(default_factory=weakref.WeakSet, repr=False)

    @property
    def count(self) -> int:
        return len(self.compiles)

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
        _activate(self)

    def stop(self) -> None:
        _deactivate(self)

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
        user_fun, args, kwargs, static_leaf = _unwrap_library(fun, args, kwargs)
        key, name, location, eager = _identify(user_fun, dbg)
        with self._lock:
            entry = self._by_key.get(key)
            if entry is None:
                entry = self._by_key[key] = WatchedFunction(name, location, eager=eager)
        changes: list[Change] = []
        description: dict = {}
        if not eager:
            description = _watch_diff.describe(
                user_fun, args, kwargs, tuple(getattr(ji, "static_argnums", ()) or ()),
                tuple(getattr(ji, "static_argnames", ()) or ()), static_leaf,
            )
            if entry.compiles:
                changes = _watch_diff.closest(entry._descriptions, description)[1]
                if not _seen(entry, fun):
                    changes.insert(0, _new_function(fun))
            _remember(entry, fun)
        record = Compile(len(entry.compiles) + 1, _call_site(), changes)
        entry.compiles.append(record)
        entry._descriptions.append(description)
        self._local.current = (record, _squash(getattr(fun, "__name__", "")))

    def _duration(self, event: str, seconds: float, fun_name: str) -> None:
        try:
            field = _FIELD.get(event)
            if field is None:
                return
            current = getattr(self._local, "current", None)
            if current is not None and current[1] in _squash(fun_name):
                record = current[0]
                if event == COMPILE_EVENT:
                    self._local.current = None
            else:
                record = self._unexplained(fun_name, field)
            setattr(record, field, getattr(record, field) + seconds)
        except Exception as e:
            self._failed("its jax.monitoring listener", e)

    def _unexplained(self, fun_name: str, field: str) -> Compile:
        """A compile the trace hook did not see (a transformed jit, or no hook): by name."""
        entry = self._other.get(fun_name)
        if entry is None:
            entry = self._other[fun_name] = WatchedFunction(fun_name, "")
        last = entry.compiles[-1] if entry.compiles else None
        if last is None or field == "trace_s" or getattr(last, field):
            last = Compile(entry.count + 1, "", [])
            entry.compiles.append(last)
        return last


# -- installing the hooks once for all active watchers ---------------------------------

_ACTIVE: list[watch] = []
_ORIGINAL: dict[str, Any] = {}


def _activate(w: watch) -> None:
    if w in _ACTIVE:
        return
    if not _ACTIVE:
        jax.monitoring.register_event_duration_secs_listener(_on_duration)
        _install_trace_hook()
    _ACTIVE.append(w)
    if "trace" not in _ORIGINAL:
        w.explained = False
        w._notice(NO_HOOK.format(version=jax.__version__))


def _deactivate(w: watch) -> None:
    if w not in _ACTIVE:
        return
    _ACTIVE.remove(w)
    if not _ACTIVE:
        try:
            jax.monitoring.unregister_event_duration_listener(_on_duration)
        except Exception:  # an older JAX without unregister: the listener stays, idle
            pass
        _remove_trace_hook()


def _on_duration(event: str, duration: float, **kwargs: Any) -> None:
    for w in list(_ACTIVE):
        w._duration(event, duration, str(kwargs.get("fun_name", "")))


def _install_trace_hook() -> None:
    try:
        from jax._src import core, pjit
    except Exception:
        return
    original = getattr(pjit, "_trace_for_jit", None)
    clean = getattr(core, "trace_state_clean", None)
    if original is None or clean is None:
        return

    @functools.wraps(original)
    def _trace_for_jit(*args: Any, **kwargs: Any) -> Any:
        if _ACTIVE and len(args) == 7 and clean():
            fun, ji, _, dbg, _, call_args, call_kwargs = args
            for w in list(_ACTIVE):
                w._traced(fun, ji, dbg, call_args, call_kwargs)
        return original(*args, **kwargs)

    _ORIGINAL["trace"] = (pjit, original)
    pjit._trace_for_jit = _trace_for_jit


def _remove_trace_hook() -> None:
    if "trace" in _ORIGINAL:
        module, original = _ORIGINAL.pop("trace")
        module._trace_for_jit = original


# -- who was compiled, and from where ---------------------------------------------------


def _unwrap_library(fun: Callable, args: tuple, kwargs: dict) -> tuple:
    """The user's function and arguments behind equinox's filter_jit wrapper."""
    if getattr(fun, "__module__", "") == "equinox._jit" and len(args) == 3:
        from equinox._compile_utils import hashable_combine  # type: ignore[import-not-found]

        dynamic = {**args[0], **args[1]}
        static_fun, static_first, static_rest = args[2]
        user = hashable_combine(dynamic["fun"], static_fun)
        first = hashable_combine(dynamic["first"], static_first)
        rest, kw = hashable_combine(dynamic["rest"], static_rest)
        return user, (first, *rest), kw, _not_an_array
    return fun, args, kwargs, None


def _not_an_array(x: Any) -> bool:
    import numpy as np

    return not isinstance(x, (jax.Array, np.ndarray, np.generic))


def _identify(fun: Callable, dbg: Any) -> tuple[Any, str, str, bool]:
    if getattr(fun, "_apply_primitive", False):
        name = getattr(fun, "__name__", "primitive")
        return ("eager", name), name, "", True
    f = fun
    while isinstance(f, functools.partial):
        f = f.func
    f = getattr(f, "__func__", f)  # a bound method: its function
    code = getattr(f, "__code__", None)
    name = getattr(f, "__qualname__", None) or getattr(f, "__name__", None) or type(f).__name__
    if code is not None and code.co_filename.startswith(_JAX_DIR):
        return ("eager", name), name, "", True  # jnp's own jitted helpers, called eagerly
    if code is not None:
        location = f"{_relative(code.co_filename)}:{code.co_firstlineno}"
        return (code.co_filename, code.co_firstlineno, name), name, location, False
    src = str(getattr(dbg, "func_src_info", "") or "")
    location = src.split(" at ", 1)[1] if " at " in src else ""
    return ("src", src or name), name, location, False


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


def _new_function(fun: Callable) -> Change:
    name = getattr(fun, "__qualname__", type(fun).__name__)
    return Change(
        "(the function)", "new function", "an earlier function object",
        f"a new {name} object, same code", _watch_diff.HINTS["new function"],
    )


def _squash(name: str) -> str:
    return re.sub(r"[^0-9A-Za-z]", "", name)


def _relative(path: str) -> str:
    try:
        rel = os.path.relpath(path)
    except ValueError:
        return path
    return path if rel.startswith("..") else rel


def _library_dirs() -> tuple[str, ...]:
    dirs = [os.path.dirname(os.path.abspath(__file__)) + os.sep]
    for name in ("jax", "jaxlib", "equinox", "flax", "runpy", "functools", "contextlib"):
        module = sys.modules.get(name)
        file = getattr(module, "__file__", None)
        if file:
            base = os.path.dirname(file) if file.endswith("__init__.py") else file
            dirs.append(base + (os.sep if file.endswith("__init__.py") else ""))
    return tuple(dirs)


_JAX_DIR = os.path.dirname(os.path.abspath(jax.__file__)) + os.sep
_EXAMPLES_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "examples") + os.sep


def _call_site() -> str:
    """file:line of the first frame outside JAX, the wrappers and this package."""
    skip = _library_dirs()
    frame = sys._getframe(1)
    while frame is not None:
        file = frame.f_code.co_filename
        if file.startswith(_EXAMPLES_DIR) or not (file.startswith(skip) or file.startswith("<frozen")):
            return f"{_relative(file)}:{frame.f_lineno}"
        frame = frame.f_back  # type: ignore[assignment]
    return ""
