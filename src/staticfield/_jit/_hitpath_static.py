"""The hit paths of functions with static arguments: one type-strict lookup, then JAX.

``static_parameters`` says whether a function's signature lets a generated path take the
user's parameters (else the engine's general path serves it). ``static_call`` looks the
static values (as ``(type, value)``) and the instance keys up in one dict of variants;
``static_front_call``, where JAX's C++ dispatch is available, looks the static values up
in a dict of C++ fronts, one per tuple of values, each of which takes the other
arguments as they are. Both start as ``_static_head`` writes them; a static value whose
type is not in ``_ATOMIC`` takes the general path.

Imports: ``_core`` (``compile_functions``, ``SPECS``, ``FLAT_ATTR``, ``rebuild``,
``hide``), ``_args`` and ``_hitpath``. Called by the engine's fronts (``_fronts``) and
``_deps_args`` (``deps="read"`` with static arguments).
"""

from __future__ import annotations

import inspect
from typing import Any, Callable

from .._core._deep import rebuild
from .._core._gen import compile_functions
from .._core._registry import SPECS
from .._core._state import FLAT_ATTR
from .._core._traceback import hide
from ._args import call_signature, qualname, wrong_call
from ._hitpath import GENERATED_NAMES, as_user, hiding

# Static values whose (type, value) pair is their identity (_core._identity: exact_eq): for
# these types ``==`` within the type is the identity, so equal pairs give equal StaticArgKeys
# and the fast key merges nothing the identity keeps apart (1/True/1.0 differ by their type
# in the pair). Not here: floats (-0.0 == 0.0, NaNs), tuples and frozensets (their items
# compare with ==, and a frozenset ignores order), which take the general path's StaticArgKey.
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
    if any(not n.isidentifier() or n.startswith("__") or n in GENERATED_NAMES or n in generated
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
    call = compile_functions(hiding(lines), ["call"], namespace, what=what)["call"]
    return as_user(call, fn)


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
    call = compile_functions(hiding(lines), ["call"], namespace, what=what)["call"]
    return as_user(call, fn)
