"""The generated hit paths: the code that runs on every cache hit.

Each is generated per function so that it takes exactly the wrapped function's
positional parameters when it can (a vectorcall, no *args packing): it reads each
instance argument's cached (children, static key), looks the variant up in one dict,
and calls JAX. Misses go back to the engine in ``_jit.py``.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, Callable

from ._args import qualname, signature_parts
from ._spec import FLAT_ATTR, SPECS

if TYPE_CHECKING:
    from ._jit import JitFunction


# Names the generated code uses: a parameter called one of these takes the *args path.
_GENERATED_NAMES = (
    "self", "obj", "jitted", "children", "key", "keys", "vkey", "dyn",
    "variants", "miss", "general", "SPECS", "_",
)


def plain_positional(fn: Callable, skip_self: bool = True) -> list[str] | None:
    """The parameter names (after ``self`` for a method) when all are positional without
    defaults, so a generated hit path can take exactly those arguments."""
    positional, params, var_pos, var_kw = signature_parts(fn)
    if var_pos or var_kw or len(params) != len(positional) or (skip_self and not positional):
        return None
    rest = positional[1:] if skip_self else positional
    generated = {f"{p}{i}" for p in "ck" for i in range(len(rest))}
    if any(params[n].default is not params[n].empty for n in rest) or any(
        not n.isidentifier() or n in _GENERATED_NAMES or n in generated for n in rest
    ):
        return None
    return rest


def public_function(jf: JitFunction) -> Callable[..., Any]:
    """What ``sf.jit`` returns: a plain function (a vectorcall, and a method when stored
    on a class, like ``jax.jit``'s result) carrying the counters as attributes.

    Without static arguments its body is the hit path: each instance argument's cached
    (children, key), one dict lookup, then JAX. For a function of plain positional
    parameters it takes exactly those, with no *args packing.
    """
    has_static = bool(jf._static_pos or jf._static_names)
    params = None if has_static else plain_positional(jf.fn, skip_self=False)
    if has_static:
        lines = ["def call(*args, **kwargs):", "    return general(*args, **kwargs)"]
    elif params is None or len(params) > 16:
        lines = [
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
    else:
        lines = [f"def call({', '.join(params)}):"]
        for i, name in enumerate(params):
            lines += [
                f"    if {name}.__class__ in SPECS:",
                f"        c{i}, k{i} = {name}.{FLAT_ATTR}",
                "    else:",
                f"        c{i} = {name}; k{i} = None",
            ]
        keys = ", ".join(f"k{i}" for i in range(len(params)))
        lines += [
            f"    vkey = ({keys},)",
            "    try:",
            "        jitted, _ = variants[vkey]",
            "    except KeyError:",
            f"        jitted, _ = miss(vkey, ({', '.join(params)},), [{keys}])",
            f"    return jitted({', '.join(f'c{i}' for i in range(len(params)))})",
        ]
    source = "\n".join(lines) + "\n"
    ns = {"SPECS": SPECS, "variants": jf._variants, "miss": jf._general_miss, "general": jf._call_general}
    exec(compile(source, f"<staticfield jit {qualname(jf.fn)}>", "exec"), ns)  # noqa: S102
    call = ns["call"]
    functools.update_wrapper(call, jf.fn)
    call.__source__ = source
    call.__sf_jit__ = jf
    call.compile_count = jf.compile_count
    call.recompiles = jf.recompiles
    call.cache_size = jf.cache_size
    call.lower = jf.lower
    call.max_compiles = jf.max_compiles
    jf.public = call
    if not has_static:
        jf._call = call
    return call


def method_call(engine: JitFunction) -> Callable[..., Any]:
    """The hit path of a jit_method: one key lookup, then JAX with the children.

    When the method takes only plain positional parameters, the function has that
    exact signature, so both calls are vectorcalls with no *args/**kwargs packing.
    """
    params = plain_positional(engine.fn)
    if params is None:
        signature, forward = "obj, /, *args, **kwargs", "*args, **kwargs"
    else:
        signature = ", ".join(["obj", *params])
        forward = ", ".join(params)
    source = (
        f"def call({signature}):\n"
        "    try:\n"
        f"        children, key = obj.{FLAT_ATTR}\n"
        "        jitted = variants[key]\n"
        "    except (KeyError, AttributeError):\n"
        "        jitted, children = miss(obj)\n"
        f"    return jitted(children{', ' if forward else ''}{forward})\n"
    )
    ns = {"variants": engine._variants, "miss": engine._method_miss}
    exec(compile(source, f"<staticfield jit_method {qualname(engine.fn)}>", "exec"), ns)  # noqa: S102
    call = ns["call"]
    call.__source__ = source
    call.__sf_jit__ = engine  # type: ignore[attr-defined]
    return call
