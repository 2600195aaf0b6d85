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
import inspect
import types
import weakref
from typing import Any, Callable

from ._args import _stand_in, call_signature, qualname, signature_parts, wrong_call
from .._deps._share import Abort
from .._core._gen import compile_functions
from .._core._registry import SPECS
from .._core._deep import rebuild
from .._core._state import DEEP_ATTR, FLAT_ATTR
from .._core._traceback import hide
from .._core import _compat

ARRAY = _compat.get("array_impl")  # jax.Array's concrete class: never an sf instance

# Names the fixed-arity generated code uses (besides c0.., k0.. and __sf_ names): a
# parameter called one of these takes the *args path, whose code names no parameter.
_GENERATED_NAMES = (
    "obj", "jitted", "children", "key", "vkey", "variants", "miss", "SPECS", "_", "KeyError",
    "AttributeError", "hide", "exc", "Exception", "out",
)


def _hiding(lines: list[str]) -> list[str]:
    """``lines`` (a ``def`` and its body) with the body in ``try``; what it raises leaves
    without staticfield's frames (see ``_traceback``). Free on a call that does not raise."""
    return [lines[0], "    try:", *("    " + line for line in lines[1:]),
            "    except Exception as exc:", "        hide(exc)", "        raise"]


def plain_positional(fn: Callable, skip_self: bool = True, reserved: tuple = ()) -> list[str] | None:
    """The parameter names (after ``self`` for a method) when all are positional without
    defaults, so a generated hit path can take exactly those arguments: those ``fn``
    itself takes, not those of a function it wraps."""
    positional, params, var_pos, var_kw = signature_parts(fn, follow_wrapped=False)
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


def _self_name(fn: Callable, reserved: tuple = ()) -> str:
    """The name of a method's first parameter (``self``), for the generated hit path, so
    that a call without it reports the user's name; ``obj`` if that name is taken."""
    positional = signature_parts(fn, follow_wrapped=False)[0]
    name = positional[0] if positional else "obj"
    taken = name in _GENERATED_NAMES or name in reserved or not name.isidentifier() or name.startswith("__")
    return "obj" if taken and name != "self" else name


def _as_user(call: Callable[..., Any], fn: Callable) -> Callable[..., Any]:
    """Name a generated hit path as the user's function: a call with a wrong number of
    arguments fails before it runs, with CPython's message naming ``__qualname__``."""
    call.__name__ = getattr(fn, "__name__", call.__name__)
    call.__qualname__ = qualname(fn)
    return call


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


def _plain_lines(params: list[str] | None) -> tuple[list[str], list[str]]:
    """The hit path of ``sf.jit`` without static arguments (``call``), and more top-level
    code it uses."""
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
        ], []
    args = "".join(f"{p}, " for p in params)
    nones = "".join("None, " for _ in params)
    lines = [f"def call({', '.join(params)}):"]
    if params and ARRAY is not None:  # jax.Arrays only (the common step function): no key at all
        fast = " and ".join(f"__sf_type({p}) is __sf_Array" for p in params)
        lines += [f"    if {fast}:", f"        return __sf_plain({args})"]
    if params:  # any instance argument: look its variant up by the arguments' keys
        lines.append(f"    if {' or '.join(f'{p}.__class__ in SPECS' for p in params)}:")
        for i, name in enumerate(params):
            lines += [
                f"        if {name}.__class__ in SPECS:",
                f"            c{i}, k{i} = {name}.{FLAT_ATTR}",
                "        else:",
                f"            c{i} = {name}; k{i} = None",
            ]
        keys = "".join(f"k{i}, " for i in range(len(params)))
        lines += [
            f"        vkey = ({keys})",
            "        try:",
            "            jitted, _ = variants[vkey]",
            "        except KeyError:",
            f"            jitted, _ = miss(vkey, ({args}), [{keys}])",
            f"        return jitted({', '.join(f'c{i}' for i in range(len(params)))})",
        ]
    lines.append(f"    return __sf_plain({args})")
    # Only plain arguments: the variant is always the same one, so after its first
    # successful call (its trace succeeded: a compiled variant is never dropped) the hit
    # path calls its jax.jit directly, with no key to build or look up.
    return lines, [
        f"def __sf_first({', '.join(params)}):",
        "    nonlocal __sf_plain",
        f"    vkey = ({nones})",
        "    try:",
        "        jitted, _ = variants[vkey]",
        "    except KeyError:",
        f"        jitted, _ = miss(vkey, ({args}), [{nones}])",
        f"    out = jitted({args})",
        "    __sf_plain = jitted",
        "    return out",
        "__sf_plain = __sf_first",
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
    front = None
    if engine.has_static:  # the engine's own static-argument hit path, called directly
        call = engine.call
    else:
        params = plain_positional(fn, skip_self=False)
        lines, more = _plain_lines(params)
        namespace = {"SPECS": SPECS, "variants": engine.variants, "miss": engine.general_miss,
                     "hide": hide, "__sf_plain": None, "__sf_type": type, "__sf_Array": ARRAY}
        call = _as_user(compile_functions(_hiding(lines) + more, ["call"], namespace,
                                          what=f"sf.jit hit path of {qualname(fn)}")["call"], fn)
        if engine.bucket_spec is None:  # JAX's C++ dispatch in front; `call` under disable_jit
            front = engine.front = engine.make_front(call, front_miss(fn, params, engine.front_miss, skip_self=False),
                                                     wrapped=True)
    if engine.bucket_spec is not None:  # buckets=: pad, this hit path, slice
        call = engine.bucket_spec.front(_as_user(call, fn), general_call(engine.prepare))
    wrapper = JitWrapper(front if front is not None else _as_user(call, fn))
    if front is not None:  # past FRONT_VARIANTS variants, calls take the Python path
        home = weakref.ref(wrapper)

        def leave_front() -> None:
            public = home()
            if public is not None:
                public.__setstate__((call, (), {}, public.__dict__))

        engine.leave_front = leave_front
    state = engine.tracker.__dict__
    state.update({k: v for k, v in getattr(fn, "__dict__", {}).items() if not k.startswith("__staticfield")})
    state.update(
        __wrapped__=fn, __sf_jit__=engine, cache_size=engine.cache_size, lower=engine.lower,
        trace=engine.trace, eval_shape=engine.eval_shape, clear_cache=engine.clear_cache,
        precompile=engine.precompile, buckets=engine.buckets,
    )
    state["__source__"] = getattr(call, "__source__", None)
    wrapper.__dict__ = state
    for name in functools.WRAPPER_ASSIGNMENTS:  # as functools.wraps: __annotations__ too
        if hasattr(fn, name):
            state[name] = getattr(fn, name)
    return wrapper


def method_call(fn: Callable, variants: dict, miss: Callable[[Any], tuple]) -> Callable[..., Any]:
    """The hit path of a jit_method: one key lookup, then JAX with the children.

    When the method takes only plain positional parameters, the function has that
    exact signature, so both calls are vectorcalls with no *args/**kwargs packing. Its
    first parameter has the name of the user's ``self``, and the function the user's
    name, so a wrong call reads as the user's own function's.
    """
    params = plain_positional(fn)
    obj = _self_name(fn)
    if params is None:
        signature, forward = f"{obj}, /, *args, **kwargs", "*args, **kwargs"
    else:
        signature = ", ".join([obj, *params])
        forward = ", ".join(params)
    lines = _hiding([
        f"def call({signature}):",
        "    try:",
        f"        children, key = {obj}.{FLAT_ATTR}",
        "        jitted, _ = variants[key]",
        "    except (KeyError, AttributeError):",
        f"        jitted, children = miss({obj})",
        f"    return jitted(children{', ' if forward else ''}{forward})",
    ])
    namespace = {"variants": variants, "miss": miss, "hide": hide}
    call = compile_functions(lines, ["call"], namespace, what=f"jit_method hit path of {qualname(fn)}")["call"]
    return _as_user(call, fn)


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
    obj = _self_name(fn, _DEPS_NAMES)
    if params is None:
        signature, forward = f"{obj}, /, *args, **kwargs", "*args, **kwargs"
    else:
        signature, forward = ", ".join([obj, *params]), ", ".join(params)
    rest = f", {forward}" if forward else ""
    lines = _hiding([
        f"def call({signature}):",
        "    try:",
        f"        children, key = {obj}.{DEEP_ATTR}",
        "    except AttributeError:",
        "        children = key = entry = None",
        "    else:",
        "        entry = get(key)",
        *_deps_tail(rest, obj),
    ])
    namespace = {"variants": variants, "get": variants.get, "retry": retry, "Abort": Abort, "hide": hide}
    call = compile_functions(lines, ["call"], namespace, what=f"deps hit path of {qualname(fn)}")["call"]
    return _as_user(call, fn)


def deps_bound_call(fn: Callable, variants: dict, retry: Callable[..., Any]) -> Callable[..., Any]:
    """What ``obj.method`` of a ``deps="read"`` method calls: ``call(children, key, *args)``.

    The key's variant is looked up on each call (a key may be moved to another
    program); otherwise as ``deps_method_call``, with the instance rebuilt from its
    children and key when it must call again. Its two leading parameters are not the
    user's, so surplus arguments land in ``*extra`` and are reported as the user's
    function would report them (an empty ``*extra`` costs next to nothing).
    """
    params = plain_positional(fn, reserved=_DEPS_NAMES)
    check = []
    if params is None:
        signature, forward = "children, key, /, *args, **kwargs", "*args, **kwargs"
    else:
        # (user parameter names never start with "__": see plain_positional)
        signature, forward = ", ".join(["children", "key", *params, "*__sf_extra"]), ", ".join(params)
        check = ["    if __sf_extra:",
                 f"        __sf_wrong_call(__sf_fn, (None, {forward}{', ' if forward else ''}*__sf_extra), {{}})"]
    rest = f", {forward}" if forward else ""
    again = "rebuild(key, children)"
    lines = _hiding([
        f"def call({signature}):",
        *check,
        "    entry = get(key)",
        *_deps_tail(rest, again),
    ])
    namespace = {"variants": variants, "get": variants.get, "retry": retry, "Abort": Abort, "hide": hide,
                 "rebuild": rebuild, "__sf_wrong_call": wrong_call, "__sf_fn": fn}
    call = compile_functions(lines, ["call"], namespace, what=f"deps bound method of {qualname(fn)}")["call"]
    return _as_user(call, fn)


# Static values whose (type, value) pair is their type-strict key: equal pairs give equal
# StaticArgKeys (floats are not here: their key tells -0.0 from 0.0 and makes NaNs equal).
_ATOMIC = frozenset({int, str, bool, bytes, type(None)})


def static_parameters(fn: Callable, skip_self: bool) -> tuple[list[str], dict[str, Any]] | None:
    """The parameter names (``self`` included) and their defaults, when every parameter is
    positional-or-keyword, so that a generated static-argument hit path can take exactly
    the user's parameters; ``None`` otherwise (the general path serves such functions)."""
    try:
        params = call_signature(fn).parameters
    except (TypeError, ValueError):
        return None
    kinds = inspect.Parameter
    names = list(params)
    if any(p.kind is not kinds.POSITIONAL_OR_KEYWORD for p in params.values()) or (skip_self and not names):
        return None
    generated = {f"{p}{i}" for p in "ck" for i in range(len(names))}
    if any(not n.isidentifier() or n.startswith("__") or n in _GENERATED_NAMES or n in generated
           for n in names):
        return None
    return names, {n: p.default for n, p in params.items() if p.default is not p.empty}


def _static_head(fn: Callable, names: list[str], defaults: dict[str, Any],
                 bound: bool) -> tuple[list[str], str, dict[str, Any]]:
    """What both static-argument hit paths begin with: the ``def`` line, taking the user's
    parameters with their defaults (``bound``: after ``self``'s children and key, surplus
    arguments reported as the user's function reports them); the text of the user's
    arguments as a tuple, for the general path (``self`` rebuilt when bound); and the names
    those lines read."""
    user = names[1:] if bound else names
    params = [f"{n}=__sf_d_{n}" if n in defaults else n for n in user]
    lines = [f"def call({', '.join(['__sf_c', '__sf_k', *params, '*__sf_extra'] if bound else params)}):"]
    if bound:
        forward = ", ".join(user)
        lines += ["    if __sf_extra:",
                  f"        __sf_wrong_call(__sf_fn, (None, {forward}{', ' if forward else ''}*__sf_extra), {{}})"]
    args = ", ".join(["__sf_rebuild(__sf_k, __sf_c)" if bound and i == 0 else n for i, n in enumerate(names)])
    namespace = {"__sf_ATOMIC": _ATOMIC, "__sf_rebuild": rebuild, "__sf_wrong_call": wrong_call, "__sf_fn": fn,
                 "hide": hide, **{f"__sf_d_{n}": v for n, v in defaults.items()}}
    return lines, args, namespace


def static_call(fn: Callable, names: list[str], defaults: dict[str, Any], static: set[int],
                fast: dict, slow: Callable[[tuple, Any], Any], bound: bool = False) -> Callable[..., Any]:
    """The hit path of a function with static arguments: one type-strict lookup.

    Each static argument whose type is in ``_ATOMIC`` enters the lookup key as
    ``(type, value)``; each other argument as its instance key, or ``None``. ``fast`` maps
    such a key to the variant's ``jax.jit``, which takes each instance's children, ``None``
    at static positions and every other argument as it is. A static value of another type,
    or a key not yet in ``fast``, takes ``slow((args...), key)``: the general path, which
    fills ``fast`` after a call that worked. With ``bound`` (``obj.method`` of a jit_method)
    the first two parameters are ``self``'s children and key, as the binding carries them.
    """
    lines, args, namespace = _static_head(fn, names, defaults, bound)
    atomic = [f"{names[i]}.__class__ in __sf_ATOMIC" for i in sorted(static)]
    lines.append(f"    if {' and '.join(atomic) or 'True'}:")
    key: list[str] = []
    dyn: list[str] = []
    for i, name in enumerate(names):
        if i in static:
            key += [f"{name}.__class__", name]
            dyn.append("None")
        elif bound and i == 0:
            key.append("__sf_k")
            dyn.append("__sf_c")
        else:
            lines += [f"        if {name}.__class__ in SPECS:",
                      f"            c{i}, k{i} = {name}.{FLAT_ATTR}",
                      "        else:",
                      f"            c{i} = {name}; k{i} = None"]
            key.append(f"k{i}")
            dyn.append(f"c{i}")
    lines += [
        f"        __sf_key = ({', '.join(key)},)",
        "        try:",
        "            __sf_j = __sf_fast[__sf_key]",
        "        except KeyError:",
        f"            return __sf_slow(({args},), __sf_key)",
        f"        return __sf_j({', '.join(dyn)})",
        f"    return __sf_slow(({args},), None)",
    ]
    namespace.update({"SPECS": SPECS, "__sf_fast": fast, "__sf_slow": slow})
    what = f"{'bound ' if bound else ''}static-argument hit path of {qualname(fn)}"
    call = compile_functions(_hiding(lines), ["call"], namespace, what=what)["call"]
    return _as_user(call, fn)


def front_miss(fn: Callable, params: list[str] | None, miss: Callable[[tuple, dict], Any],
               skip_self: bool) -> Callable[..., Any]:
    """What JAX's C++ dispatch calls on a miss (see ``_core._front``): ``miss(args, kwargs)``
    with the call's arguments as they came. Keywords stay keywords: JAX's C++ flattens them
    in name order after the positional ones, so the variant must receive them the same way
    for its program to fit the front's signature. A call ``fn`` would refuse (a wrong
    number of arguments, an unknown keyword) fails first, as ``fn`` itself would, naming it."""
    check = _stand_in(fn) if params is not None else None

    def call(*args: Any, **kwargs: Any) -> Any:
        if check is not None:
            try:
                check(*args, **kwargs)
            except TypeError as exc:
                raise exc.with_traceback(None) from None
        return miss(args, kwargs)

    return _as_user(call, fn)


def static_front_call(fn: Callable, names: list[str], defaults: dict[str, Any], static: set[int],
                      fronts: dict, make: Callable[..., Any], slow: Callable[[tuple, Any], Any],
                      bound: bool = False, deps: bool = False) -> Callable[..., Any]:
    """The hit path of a function with static arguments, where JAX's C++ dispatch is
    available: one type-strict lookup of the static values, then a C++ jit object of
    their own (``fronts``, made by ``make(key, values)`` on first sight) that takes the
    other arguments as they are (instances flattened by JAX). With ``bound``
    (``obj.method``), the lookup key starts with ``self``'s key and the front takes
    ``self``'s children. With ``deps`` (a ``deps="read"`` method's ``obj.method``), the
    lookup key is the static values alone and the front takes ``self``'s children and key
    (a static argument of the front: which program a key runs is decided in its miss). A
    static value whose type is not in ``_ATOMIC`` takes ``slow``, the general path."""
    lines, args, namespace = _static_head(fn, names, defaults, bound)
    statics = [names[i] for i in sorted(static)]
    key = (["__sf_k"] if bound and not deps else []) + [part for n in statics for part in (f"{n}.__class__", n)]
    dyn = (["__sf_c", "__sf_k"] if deps else ["__sf_c"] if bound else []) + [
        n for i, n in enumerate(names) if i not in static and not (bound and i == 0)]
    lines += [
        f"    if {' and '.join(f'{n}.__class__ in __sf_ATOMIC' for n in statics)}:",
        f"        __sf_key = ({', '.join(key)},)",
        "        try:",
        "            __sf_f = __sf_fronts[__sf_key]",
        "        except KeyError:",
        f"            __sf_f = __sf_make(__sf_key, ({''.join(n + ', ' for n in statics)}))",
        f"        return __sf_f({', '.join(dyn)})",
        f"    return __sf_slow(({args},), None)",
    ]
    namespace.update({"__sf_fronts": fronts, "__sf_make": make, "__sf_slow": slow})
    what = f"{'bound ' if bound else ''}static-argument C++ hit path of {qualname(fn)}"
    call = compile_functions(_hiding(lines), ["call"], namespace, what=what)["call"]
    return _as_user(call, fn)
