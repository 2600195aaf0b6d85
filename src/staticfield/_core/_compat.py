"""Everything staticfield takes from JAX's private modules, checked once, at import.

JAX's private names (``jax._src...``, attributes of its C++ objects) and the
``jax.core`` names that come and go are looked up here and nowhere else. Each is
checked for the parameters staticfield calls it with. One that is missing or
changed (in an older or newer JAX) disables only the feature that needs it, and
that feature says so once, in one sentence naming the JAX version (``unavailable``);
the rest of the library works. ``tests/test_compat.py`` pins every name against
the installed JAX, so a release that changes one fails CI on the day it lands.

The one CPython mechanism staticfield relies on beyond the language (writing a class's
namespace, for ``vars(obj)``) is checked here too, at the end.

Imports: JAX and the standard library only (it sits in ``_core`` so that every
layer may use it).
"""

from __future__ import annotations

import copyreg
import dataclasses
import gc
import importlib
import inspect
import sys
from typing import Any, Callable

import jax

JAX_VERSION: str = jax.__version__
TESTED = "jax 0.10.2 to 0.12.0.1"  # the floor and the newest release CI runs; see docs/support.md


@dataclasses.dataclass(frozen=True)
class Private:
    """One private name: where it lives, the parameters staticfield relies on, and
    which feature stops working without it.

    ``params`` are the names of the leading parameters staticfield passes or reads,
    in order (``*args`` for a variable positional one); ``None`` for a class or an
    attribute that is not called.
    """

    key: str
    module: str
    attr: str
    params: tuple[str, ...] | None
    feature: str

    @property
    def path(self) -> str:
        return f"{self.module}.{self.attr}"


# What each feature is, as a sentence's subject, and what is lost without it.
FEATURES = {
    "watch": "sf.watch cannot explain recompiles (it still counts and times them)",
    "watch_placement": "sf.watch cannot explain a recompile caused by a new sharding alone",
    "tracebacks": "staticfield's own frames stay in the tracebacks of errors raised through it",
    "cache_size": "cache_size() cannot count compiled programs (compile_count still counts compiles)",
    "store": "the program store stays off",
    "store_layout": ("the arrays a program loaded from the program store returns have avals that JAX's "
                     "trace cache has not seen, so a function called on them inside another "
                     "function's trace is traced again, once"),
    "store_random": ("the program store cannot keep programs whose PRNG keys use an implementation "
                     "defined outside JAX (jax.extend.random.define_prng_impl)"),
    "no_compiles": ("sf.no_compiles() cannot refuse the compiles of functions other than "
                    "staticfield's (sf.jit and jit_method are still refused)"),
    "no_compiles_cache": ("sf.no_compiles() also refuses a program that JAX's persistent compilation "
                          "cache holds (which compiles nothing)"),
    "host_check": ("the processes of a multi-process job do not check that they compile the "
                   "same programs (a mismatch hangs in the first collective)"),
    "fast_check": "",  # a faster construction check only: without it, isinstance does the work
    "bucket_lines": "sf.BucketError cannot name the source line of the operation that mixes rows",
    "bucket_rules": ("shape buckets refuse, as mixing rows, every primitive staticfield has no rule "
                     "of its own for (JAX's elementwise classification is not there to ask)"),
    "buckets": ("buckets= cannot see how a function uses its row count, so every bucketed call "
                "runs at its exact size (a program per size, as plain jax.jit)"),
    "hit_path": ("a cache hit of sf.jit, and of Cls.method(obj, ...), runs one Python frame of "
                 "staticfield's before JAX (results are the same; calls are a little slower)"),
}

PRIVATE: tuple[Private, ...] = (
    Private("trace_for_jit", "jax._src.pjit", "_trace_for_jit",
            ("fun", "ji", "ctx_mesh", "dbg", "avals", "args", "kwargs"), "watch"),
    Private("trace_state_clean", "jax._src.core", "trace_state_clean", (), "watch"),
    Private("debug_info_source", "jax._src.core", "DebugInfo.func_src_info", None, "watch"),
    Private("call_impl_python", "jax._src.pjit", "_pjit_call_impl_python",
            ("*args", "jaxpr"), "watch_placement"),
    Private("tb_register_exclusion", "jax._src.traceback_util", "register_exclusion", ("path",), "tracebacks"),
    Private("tb_filter", "jax._src.traceback_util", "filter_traceback", ("tb",), "tracebacks"),
    Private("tb_filtering_mode", "jax._src.traceback_util", "_filtering_mode", (), "tracebacks"),
    Private("tb_hide_frames", "jax._src.traceback_util", "_add_tracebackhide_to_hidden_frames",
            ("tb",), "tracebacks"),
    Private("source_register_exclusion", "jax._src.source_info_util", "register_exclusion",
            ("path",), "tracebacks"),
    Private("jitted_cache_size", "jaxlib", "PjitFunction._cache_size", None, "cache_size"),
    Private("array_impl", "jax._src.array", "ArrayImpl", None, "fast_check"),
    # The program store: programs keyed by the trace context, as jax.jit keys its own;
    # LAPACK kernels registered before a program that calls them is loaded (JAX does
    # it while lowering, which a loaded program skips; jax.export does the same).
    Private("trace_context", "jax._src.config", "trace_context", None, "store"),
    Private("trace_context_names", "jax._src.config", "trace_context_names", None, "store"),
    Private("initialize_lapack", "jax._src.lax.linalg", "initialize_lapack", (), "store"),
    # A typed key's element type (key<fry>) holds its PRNG implementation, whose functions
    # the random primitives lower; a user-defined one is digested by what they compute.
    Private("prng_key_type", "jax._src.random.prng", "KeyTy", None, "store_random"),
    # JAX's "no layout chosen" marker, a singleton that its executables' pickles (which the
    # store writes) would make a new object of: every output aval of a loaded program
    # would then be new to JAX's trace caches (avals hold it from JAX 0.12).
    Private("auto_layout", "jax._src.layout", "AutoLayout", None, "store_layout"),
    Private("source_summary", "jax._src.source_info_util", "summarize", ("source_info",), "bucket_lines"),
    # Shape buckets trace with a symbolic row count; every comparison and hash of it that
    # the user's code makes is recorded (a guard), through these two methods.
    Private("dim_expr", "jax._src.export.shape_poly", "_DimExpr", None, "buckets"),
    Private("dim_expr_evaluate", "jax._src.export.shape_poly", "_DimExpr._evaluate", ("self", "env"), "buckets"),
    # A primitive JAX batches as elementwise (its own classification) is row-wise: the rule
    # for primitives staticfield has no rule of its own for (new ones in a JAX release).
    Private("primitive_batchers", "jax._src.interpreters.batching", "fancy_primitive_batchers", None,
            "bucket_rules"),
    Private("broadcast_batcher", "jax._src.interpreters.batching", "broadcast_batcher",
            ("prim", "axis_data", "args", "dims"), "bucket_rules"),
    Private("vectorized_batcher", "jax._src.interpreters.batching", "vectorized_batcher",
            ("prim", "axis_data", "batched_args", "batch_dims"), "bucket_rules"),
    # A bucket's program run with its callbacks rewired keeps each equation's source line.
    Private("user_context", "jax._src.source_info_util", "user_context", None, "bucket_lines"),
    # sf.no_compiles(): every XLA compile of any JAX function passes through it, after
    # the trace and lowering, before XLA runs (the stance refuses there).
    Private("compile_or_get_cached", "jax._src.compiler", "compile_or_get_cached",
            ("backend", "computation", "devices", "compile_options"), "no_compiles"),
    # ... and inside it, the XLA compile itself, which a persistent-cache hit never reaches.
    Private("backend_compile_and_load", "jax._src.compiler", "backend_compile_and_load",
            ("backend", "module", "executable_devices", "options"), "no_compiles_cache"),
    # The C++ hit path (_jit/_front): a jit object of JAX's own kind whose miss handler is
    # staticfield's, which answers with what a variant's jax.jit answers from its own.
    Private("pjit_function", "jax._src.lib", "_jax.pjit",
            ("function_name", "fun", "cache_miss", "static_argnums", "static_argnames", "global_cache_key",
             "pytree_registry", "shard_arg_fallback", "cache"), "hit_path"),
    Private("pjit_function_cache", "jax._src.lib", "_jax.PjitFunctionCache", None, "hit_path"),
    Private("dispatch_registry", "jax._src.tree_util", "dispatch_registry", None, "hit_path"),
    Private("cc_shard_arg", "jax._src.interpreters.pxla", "cc_shard_arg", None, "hit_path"),
    Private("jitted_cache_miss", "jaxlib", "PjitFunction._cache_miss", None, "hit_path"),
    Private("jitted_clear_cache", "jaxlib", "PjitFunction._clear_cache", None, "hit_path"),
    # Agreement between processes: jax.distributed's client, for its key-value store.
    Private("distributed_state", "jax._src.distributed", "global_state", None, "host_check"),
)


def _param_names(fn: Callable) -> tuple[str, ...]:
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        params = None
    if params is None or [p.kind for p in params] == [inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD]:
        documented = _documented_params(fn)  # a C++ function (nanobind) says them in its docstring
        if documented is not None:
            return documented
        if params is None:
            raise ValueError("no signature")
    return tuple(f"*{p.name}" if p.kind is p.VAR_POSITIONAL else p.name for p in params)


def _documented_params(fn: Callable) -> tuple[str, ...] | None:
    """The parameter names in a nanobind docstring's first line, ``name(a: T, b: U = ...) -> R``."""
    line = (getattr(fn, "__doc__", None) or "").split("\n", 1)[0]
    start = line.find("(")
    if start < 0:
        return None
    names, depth, part = [], 0, ""
    for ch in line[start + 1:]:
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            if depth == 0:
                break
            depth -= 1
        if ch == "," and depth == 0:
            names.append(part)
            part = ""
        else:
            part += ch
    names.append(part)
    out = tuple(n.split(":")[0].split("=")[0].strip() for n in names if n.strip())
    return out or None


def _resolve(p: Private) -> Any:
    """The object ``p`` names; raises if JAX lacks it."""
    if p.key.startswith("jitted_"):  # the C++ class of jax.jit's result, found without a call
        owner: Any = type(jax.jit(_identity))
        return getattr(owner, p.attr.rpartition(".")[2])
    owner = importlib.import_module(p.module)
    for part in p.attr.split("."):
        owner = getattr(owner, part)
    return owner


def _identity(x: Any) -> Any:
    return x


def check(p: Private) -> tuple[Any, str]:
    """``p``'s object and ``""``, or ``None`` and what is wrong with it on this JAX."""
    try:
        obj = _resolve(p)
    except Exception:
        return None, f"jax {JAX_VERSION} has no {p.path}"
    if p.params is not None:
        try:
            found = _param_names(obj)
        except (TypeError, ValueError):
            return None, f"jax {JAX_VERSION}'s {p.path} has no signature to check"
        if found[: len(p.params)] != p.params:
            return None, (
                f"jax {JAX_VERSION}'s {p.path} takes ({', '.join(found)}), "
                f"not ({', '.join(p.params)}, ...)"
            )
    return obj, ""


FOUND: dict[str, Any] = {}
PROBLEMS: dict[str, str] = {}  # key -> what is wrong, for the names that failed their check
for _p in PRIVATE:
    _obj, _problem = check(_p)
    if _problem:
        PROBLEMS[_p.key] = _problem
    else:
        FOUND[_p.key] = _obj
del _p, _obj, _problem

PRIVATE_BY_KEY = {p.key: p for p in PRIVATE}


def get(key: str) -> Any:
    """The checked object for ``key``; ``None`` when this JAX lacks or changed it."""
    return FOUND.get(key)


def module_of(key: str) -> Any:
    """The module that holds ``key`` (to patch a hook into it)."""
    return importlib.import_module(PRIVATE_BY_KEY[key].module)


def unavailable(feature: str) -> str:
    """One sentence saying why ``feature`` does not work on this JAX; ``""`` when it does."""
    problems = [PROBLEMS[p.key] for p in PRIVATE if p.feature == feature and p.key in PROBLEMS]
    if not problems or not FEATURES[feature]:
        return ""
    return (
        f"staticfield: on jax {JAX_VERSION}, {FEATURES[feature]}, because "
        f"{'; '.join(problems)} (staticfield is tested with {TESTED})."
    )


# --- the names themselves, for the modules that use them ---------------------------

def _tracer_class() -> type:
    cls = getattr(jax.core, "Tracer", None)
    if cls is None:  # pragma: no cover - a JAX that moved it out of jax.core
        from jax._src.core import Tracer as cls  # type: ignore[no-redef]
    return cls  # type: ignore[no-any-return]


Tracer: type = _tracer_class()  # jax.core.Tracer: whether a value is being traced


def cache_size(jitted: Any) -> int:
    """How many programs one ``jax.jit`` holds (JAX's private ``_cache_size``)."""
    size = FOUND.get("jitted_cache_size")
    if size is None:
        raise RuntimeError(unavailable("cache_size"))
    return int(size(jitted))


def key_impl(dtype: Any) -> Any:
    """The PRNG implementation of a key element type (``key<fry>``: JAX's ``KeyTy``, whose
    ``_impl`` it is); ``None`` for any other dtype, or where this JAX has no ``KeyTy``."""
    cls = FOUND.get("prng_key_type")
    if cls is None or type(dtype) is not cls:
        return None
    return getattr(dtype, "_impl", None)


def pickle_auto_layout_as_itself() -> None:
    """Make JAX's ``AutoLayout`` singleton pickle as a reference to itself, so that it comes
    back from a pickle as the same object (JAX pickles it as a new instance, which its
    interned avals tell apart). Idempotent; nothing where this JAX lacks it."""
    auto = FOUND.get("auto_layout")
    if auto is not None and copyreg.dispatch_table.get(type(auto)) is not _auto_layout_by_name:
        copyreg.pickle(type(auto), _auto_layout_by_name)


def _auto_layout_by_name(obj: Any) -> str:
    return "AutoLayout"  # pickle writes the module global jax._src.layout.AutoLayout


def jit_trace_locals(start: Any, depth: int | None = None) -> dict | None:
    """The locals of the frame of JAX's ``_trace_for_jit`` nearest above frame ``start``
    (within ``depth`` frames), where JAX holds the jitted call it is tracing; ``None``
    outside a trace or where this JAX has no such function."""
    original = get("trace_for_jit")
    if original is None:
        return None
    code, frame, steps = original.__code__, start, 0
    while frame is not None and frame.f_code is not code:
        if depth is not None and steps >= depth:
            return None
        frame, steps = frame.f_back, steps + 1
    return None if frame is None else frame.f_locals


def traced_call() -> tuple[Any, tuple, dict] | None:
    """The jitted call JAX is tracing now, as JAX received it: ``(function, args, kwargs)``
    (concrete arrays, Python scalars, or the ``ShapeDtypeStruct``s of ``.trace``/``.lower``),
    ``None`` outside a trace. Inside the trace only tracers are left, whose avals drop what
    a mesh's Auto axes say of a sharding."""
    found = jit_trace_locals(sys._getframe(1))
    if found is None:
        return None
    return found.get("fun"), tuple(found.get("args") or ()), dict(found.get("kwargs") or {})


# --- CPython: a class's own namespace ------------------------------------------------
# ``vars(obj)`` shows an instance's fields only (``_vars``): a decorated class's ``__dict__``
# attribute is a descriptor of staticfield's. CPython refuses ``setattr(cls, "__dict__",
# ...)``, so it is written into the class's namespace, the dict behind ``cls.__dict__``'s
# mappingproxy (its one referent, ``gc.get_referents``); a ``setattr`` on the class right
# after tells CPython the namespace changed. Checked here, once, on a class of our own.

CLASS_NAMESPACE_PROBLEM = ""


def _namespace(cls: type) -> dict | None:
    found = gc.get_referents(cls.__dict__)
    return found[0] if len(found) == 1 and type(found[0]) is dict else None


def _check_namespace() -> str:
    class Probe:
        pass

    class Shown:
        def __get__(self, obj: Any, owner: Any = None) -> Any:
            return {"shown": True} if obj is not None else self

    probe = Probe()
    probe.hidden = 1
    try:
        ns = _namespace(Probe)
        if ns is None or "__module__" not in ns:
            return "gc.get_referents(cls.__dict__) does not give the class's namespace"
        ns["__dict__"] = Shown()
        Probe.touched = True
        if vars(probe) != {"shown": True} or probe.hidden != 1:
            return "a __dict__ descriptor written into a class's namespace is not what vars() reads"
    except Exception as exc:  # noqa: BLE001 - any failure: the mechanism is not there
        return f"writing a class's namespace failed ({type(exc).__name__}: {exc})"
    return ""


def class_namespace(cls: type) -> dict | None:
    """The dict behind ``cls.__dict__`` (write it, then ``setattr`` on ``cls``); ``None``
    where this Python does not give it as checked at import."""
    return None if CLASS_NAMESPACE_PROBLEM else _namespace(cls)


_problem = _check_namespace()
if _problem:
    CLASS_NAMESPACE_PROBLEM = (
        f"staticfield: on Python {sys.version.split()[0]}, vars(obj) and obj.__dict__ also show "
        f"staticfield's cached entries beside an instance's fields, because {_problem}."
    )
del _problem
