"""The generated hit paths: the code that runs on every cache hit.

Each is generated per function, from explicit inputs (the wrapped function, the
variants dict, the miss handler), so that it takes exactly the wrapped function's
positional parameters when it can (a vectorcall, no *args packing): it reads each
instance argument's cached (children, static key), looks the variant up in one
dict, and calls JAX. Every one goes through ``_gen.compile_functions``, so its source
is in ``linecache``. This module writes into no one's state.
"""

from __future__ import annotations

import functools
import types
from typing import Any, Callable

from ._args import qualname, signature_parts
from .._deps._share import Abort
from .._core._gen import compile_functions
from .._core._spec import SPECS
from .._core._state import FLAT_ATTR
from .._core._traceback import hide

# Names the generated code uses: a parameter called one of these takes the *args path.
_GENERATED_NAMES = (
    "self", "obj", "jitted", "children", "key", "keys", "vkey", "dyn", "a", "args", "kwargs",
    "variants", "miss", "general", "SPECS", "_", "KeyError", "AttributeError", "tuple",
    "hide", "exc", "Exception",
)


def _hiding(lines: list[str]) -> list[str]:
    """``lines`` (a ``def`` and its body) with the body in ``try``; what it raises leaves
    without staticfield's frames (see ``_traceback``). Free on a call that does not raise."""
    return [lines[0], "    try:", *("    " + line for line in lines[1:]),
            "    except Exception as exc:", "        hide(exc)", "        raise"]


def plain_positional(fn: Callable, skip_self: bool = True, reserved: tuple = ()) -> list[str] | None:
    """The parameter names (after ``self`` for a method) when all are positional without
    defaults, so a generated hit path can take exactly those arguments."""
    positional, params, var_pos, var_kw = signature_parts(fn)
    if var_pos or var_kw or len(params) != len(positional) or (skip_self and not positional):
        return None
    rest = positional[1:] if skip_self else positional
    generated = {f"{p}{i}" for p in "ck" for i in range(len(rest))}
    if any(params[n].default is not params[n].empty for n in rest) or any(
        not n.isidentifier() or n.startswith("__") or n in _GENERATED_NAMES or n in generated or n in reserved
        for n in rest
    ):
        return None
    return rest


def general_call(prepare: Callable[[tuple, dict], tuple[Any, list, dict]]) -> Callable[..., Any]:
    """The path with static arguments: the variant depends on the call's arguments."""

    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            jitted, dyn, kwargs = prepare(args, kwargs)
            return jitted(*dyn, **kwargs)
        except Exception as exc:
            hide(exc)
            raise

    return call


def _plain_lines(params: list[str] | None) -> list[str]:
    if params is None or len(params) > 16:
        return [
            "def call(*args, **kwargs):",
            "    keys = []",
            "    dyn = []",
            "    for a in args:",
            "        if a.__class__ in SPECS:",
            f"            children, key = a.{FLAT_ATTR}",
            "            dyn.append(children)",
            "            keys.append(key)",
            "        else:",
            "            dyn.append(a)",
            "            keys.append(None)",
            "    vkey = tuple(keys)",
            "    try:",
            "        jitted, _ = variants[vkey]",
            "    except KeyError:",
            "        jitted, _ = miss(vkey, args, keys)",
            "    return jitted(*dyn, **kwargs)",
        ]
    lines = [f"def call({', '.join(params)}):"]
    for i, name in enumerate(params):
        lines += [
            f"    if {name}.__class__ in SPECS:",
            f"        c{i}, k{i} = {name}.{FLAT_ATTR}",
            "    else:",
            f"        c{i} = {name}; k{i} = None",
        ]
    keys = ", ".join(f"k{i}" for i in range(len(params)))
    return lines + [
        f"    vkey = ({keys},)",
        "    try:",
        "        jitted, _ = variants[vkey]",
        "    except KeyError:",
        f"        jitted, _ = miss(vkey, ({', '.join(params)},), [{keys}])",
        f"    return jitted({', '.join(f'c{i}' for i in range(len(params)))})",
    ]


class JitWrapper(functools.partial):
    """What ``sf.jit`` returns: a C-level ``partial`` of the generated hit path (so a call
    is a vectorcall), a method when stored on a class (like ``jax.jit``'s result), and
    picklable as ``sf.jit(fn, **options)``: compiled programs and counters stay behind."""

    __slots__ = ()

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        return self if obj is None else types.MethodType(self, obj)

    def __reduce__(self) -> Any:
        return self.__dict__["__sf_jit__"].reduce(self)

    def __repr__(self) -> str:
        return repr(self.__dict__["__sf_jit__"])


def public_function(engine: Any) -> Callable[..., Any]:
    """What ``sf.jit`` returns: a ``JitWrapper`` whose ``__dict__`` is its tracker's, so
    ``f.compile_count`` is read from, and ``f.max_compiles = 1`` written to, one home.

    Without static arguments its body is the hit path: each instance argument's cached
    (children, key), one dict lookup, then JAX.
    """
    fn = engine.fn
    if engine.has_static:
        lines = ["def call(*args, **kwargs):", "    return general(*args, **kwargs)"]
    else:
        lines = _plain_lines(plain_positional(fn, skip_self=False))
    lines = _hiding(lines)
    namespace = {"SPECS": SPECS, "variants": engine.variants, "miss": engine.general_miss, "general": engine.call,
                 "hide": hide}
    call = compile_functions(lines, ["call"], namespace, what=f"sf.jit hit path of {qualname(fn)}")["call"]
    wrapper = JitWrapper(call)
    state = engine.tracker.__dict__
    state.update({k: v for k, v in getattr(fn, "__dict__", {}).items() if not k.startswith("__staticfield")})
    state.update(
        __wrapped__=fn, __sf_jit__=engine, cache_size=engine.cache_size, lower=engine.lower,
        trace=engine.trace, eval_shape=engine.eval_shape, clear_cache=engine.clear_cache,
        precompile=engine.precompile,
    )
    state["__source__"] = call.__source__  # type: ignore[attr-defined]
    wrapper.__dict__ = state
    for name in ("__module__", "__name__", "__qualname__", "__doc__"):
        if hasattr(fn, name):
            state[name] = getattr(fn, name)
    return wrapper


def method_call(fn: Callable, variants: dict, miss: Callable[[Any], tuple]) -> Callable[..., Any]:
    """The hit path of a jit_method: one key lookup, then JAX with the children.

    When the method takes only plain positional parameters, the function has that
    exact signature, so both calls are vectorcalls with no *args/**kwargs packing.
    """
    params = plain_positional(fn)
    if params is None:
        signature, forward = "obj, /, *args, **kwargs", "*args, **kwargs"
    else:
        signature = ", ".join(["obj", *params])
        forward = ", ".join(params)
    lines = _hiding([
        f"def call({signature}):",
        "    try:",
        f"        children, key = obj.{FLAT_ATTR}",
        "        jitted, _ = variants[key]",
        "    except (KeyError, AttributeError):",
        "        jitted, children = miss(obj)",
        f"    return jitted(children{', ' if forward else ''}{forward})",
    ])
    namespace = {"variants": variants, "miss": miss, "hide": hide}
    return compile_functions(lines, ["call"], namespace, what=f"jit_method hit path of {qualname(fn)}")["call"]


_DEPS_NAMES = ("retry", "Abort", "entry", "out", "get")  # more names the deps hit paths use


def _deps_tail(rest: str, again: str) -> list[str]:
    """Call the variant; after an abort, or if the key was moved off this program while
    the call ran (another thread), call again through ``retry``."""
    return [
        "    if entry is not None:",
        "        try:",
        f"            out = entry[0](children{rest})",
        "        except Abort:",  # calls again outside the handler: no internal exception in
        "            entry = None",  # the context of what the user sees
        "        if entry is not None and get(key) is entry:",
        "            return out",
        f"    return retry({again}{rest})",
    ]


def deps_method_call(fn: Callable, variants: dict, retry: Callable[..., Any]) -> Callable[..., Any]:
    """The hit path of a ``deps="read"`` jit_method (``Cls.method(obj, ...)``).

    As ``method_call``, plus: a trace aborted because its program is shared
    (``_deps.Abort``) is called again through ``retry``, and so is a call whose key
    was moved to another program meanwhile; a ``try`` costs nothing on a hit.
    """
    params = plain_positional(fn, reserved=_DEPS_NAMES)
    if params is None:
        signature, forward = "obj, /, *args, **kwargs", "*args, **kwargs"
    else:
        signature, forward = ", ".join(["obj", *params]), ", ".join(params)
    rest = f", {forward}" if forward else ""
    lines = _hiding([
        f"def call({signature}):",
        "    try:",
        f"        children, key = obj.{FLAT_ATTR}",
        "    except AttributeError:",
        "        children = key = entry = None",
        "    else:",
        "        entry = get(key)",
        *_deps_tail(rest, "obj"),
    ])
    namespace = {"variants": variants, "get": variants.get, "retry": retry, "Abort": Abort, "hide": hide}
    return compile_functions(lines, ["call"], namespace, what=f"deps hit path of {qualname(fn)}")["call"]


def deps_bound_call(fn: Callable, variants: dict, retry: Callable[..., Any]) -> Callable[..., Any]:
    """What ``obj.method`` of a ``deps="read"`` method calls: ``call(children, key, *args)``.

    The key's variant is looked up on each call (a key may be moved to another
    program); otherwise as ``deps_method_call``, with the instance rebuilt from its
    children and key when it must call again.
    """
    params = plain_positional(fn, reserved=_DEPS_NAMES)
    if params is None:
        signature, forward = "children, key, /, *args, **kwargs", "*args, **kwargs"
    else:
        signature, forward = ", ".join(["children", "key", *params]), ", ".join(params)
    rest = f", {forward}" if forward else ""
    again = "SPECS[key.cls].unflatten(key, children)"
    lines = _hiding([
        f"def call({signature}):",
        "    entry = get(key)",
        *_deps_tail(rest, again),
    ])
    namespace = {"variants": variants, "get": variants.get, "retry": retry, "Abort": Abort, "hide": hide,
                 "SPECS": SPECS}
    return compile_functions(lines, ["call"], namespace, what=f"deps bound method of {qualname(fn)}")["call"]
