"""The generated hit paths: the code that runs on every cache hit, and its helpers.

Each is generated per function, from explicit inputs (the wrapped function, the
variants dict, the miss handler), so that it takes exactly the wrapped function's
positional parameters when it can (a vectorcall, no *args packing): it reads each
instance argument's cached (children, static key), looks the variant up in one
dict, and calls JAX. Every one goes through ``_gen.compile_functions``, so its source
is in ``linecache``, and is named as the user's function (``as_user``), so a wrong call
reads as the user's own. This module writes into no one's state.

Here: the helpers every hit path uses, ``Cls.method(obj, ...)``'s hit path
(``method_call``) and ``deps="read"``'s (``deps_method_call``, ``deps_bound_call``), the
general path (``general_call``) and what JAX's C++ dispatch calls on a miss
(``front_miss``). ``sf.jit``'s own hit path is ``_hitpath_jit``'s; those of functions with
static arguments, ``_hitpath_static``'s; those that large models switch to,
``_hitpath_large``'s.

Imports: ``_core`` (``compile_functions``, ``FLAT_ATTR``/``DEEP_ATTR``, ``rebuild``,
``hide``), ``_deps`` (``Abort``) and ``_args``. Called by the engine, which chooses a
function's hit paths once (``_engine._choose_hit_paths``), and by its two siblings.
"""

from __future__ import annotations

from typing import Any, Callable

from .._core._deep import rebuild
from .._core._gen import compile_functions
from .._core._state import DEEP_ATTR, FLAT_ATTR
from .._core._traceback import hide
from .._deps._share import Abort
from ._args import _stand_in, qualname, signature_parts, wrong_call

# Names the fixed-arity generated code uses (besides c0.., k0.. and __sf_ names): a
# parameter called one of these takes the *args path, whose code names no parameter.
GENERATED_NAMES = (
    "obj", "jitted", "children", "key", "vkey", "variants", "miss", "SPECS", "_", "KeyError",
    "AttributeError", "hide", "exc", "Exception", "out",
)


def hiding(lines: list[str]) -> list[str]:
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
        not n.isidentifier() or n.startswith("__") or n in GENERATED_NAMES or n in generated or n in reserved
        for n in rest
    ):
        return None
    return rest


def _self_name(fn: Callable, reserved: tuple = ()) -> str:
    """The name of a method's first parameter (``self``), for the generated hit path, so
    that a call without it reports the user's name; ``obj`` if that name is taken."""
    positional = signature_parts(fn, follow_wrapped=False)[0]
    name = positional[0] if positional else "obj"
    taken = name in GENERATED_NAMES or name in reserved or not name.isidentifier() or name.startswith("__")
    return "obj" if taken and name != "self" else name


def as_user(call: Callable[..., Any], fn: Callable) -> Callable[..., Any]:
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

    return as_user(call, fn)


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
    # The fast key is the instance's StaticKey: interned by the one identity of its static
    # values (_core._identity.key), so equal keys are one object and the lookup compares no
    # value with Python's ==: it merges nothing the identity keeps apart.
    lines = hiding([
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
    return as_user(call, fn)


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
    lines = hiding([
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
    return as_user(call, fn)


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
    lines = hiding([
        f"def call({signature}):",
        *check,
        "    entry = get(key)",
        *_deps_tail(rest, again),
    ])
    namespace = {"variants": variants, "get": variants.get, "retry": retry, "Abort": Abort, "hide": hide,
                 "rebuild": rebuild, "__sf_wrong_call": wrong_call, "__sf_fn": fn}
    call = compile_functions(lines, ["call"], namespace, what=f"deps bound method of {qualname(fn)}")["call"]
    return as_user(call, fn)

