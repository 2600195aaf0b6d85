"""Everything staticfield takes from JAX's private modules, checked once, at import.

JAX's private names (``jax._src...``, attributes of its C++ objects) and the
``jax.core`` names that come and go are looked up here and nowhere else, from the table
of them in ``_private`` (each name, its parameters, the feature that needs it). Each is
checked for the parameters staticfield calls it with. One that is missing or
changed (in an older or newer JAX) disables only the feature that needs it, and
that feature says so once, in one sentence naming the JAX version (``unavailable``);
the rest of the library works. ``tests/test_compat.py`` pins every name against
the installed JAX, so a release that changes one fails CI on the day it lands.

The one CPython mechanism staticfield relies on beyond the language (writing a class's
namespace, for ``vars(obj)``) is checked here too, at the end.

Imports: JAX, the standard library and ``_private`` only (it sits in ``_core`` so that
every layer may use it).
"""

from __future__ import annotations

import copyreg
import gc
import importlib
import inspect
import sys
from typing import Any, Callable

import jax

from ._private import FEATURES, PRIVATE, Private

JAX_VERSION: str = jax.__version__
TESTED = "jax 0.10.2 to 0.12.1"  # the floor and the newest release CI runs; see docs/support.md


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
