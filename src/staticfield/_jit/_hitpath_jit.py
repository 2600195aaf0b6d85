"""``sf.jit``'s hit path: what ``sf.jit(fn)`` returns, and the code it runs on a hit.

Without static arguments, ``public_function`` generates a hit path that takes the user's
positional parameters (``_plain_lines``): plain ``jax.Array`` arguments go straight to the
one variant's ``jax.jit``, whatever else reads each instance argument's cached (children,
key) and looks the tuple of keys up; JAX's C++ dispatch sits in front of it, with this
path under ``jax.disable_jit()``. The result is a ``JitWrapper``: a C-level ``partial`` (a
call is a vectorcall) whose ``__dict__`` is the tracker's, picklable as
``sf.jit(fn, **options)``.

Imports: ``_core`` (``compile_functions``, ``SPECS``, ``FLAT_ATTR``, ``hide``,
``_compat``) and ``_hitpath``. Called by ``_api`` (``sf.jit``).
"""

from __future__ import annotations

import functools
import types
import weakref
from typing import Any, Callable

from .._core import _compat
from .._core._gen import compile_functions
from .._core._registry import SPECS
from .._core._state import FLAT_ATTR
from .._core._traceback import hide
from ._args import qualname
from ._hitpath import as_user, front_miss, general_call, hiding, plain_positional
from ._hitpath_large import jit_large_path

ARRAY = _compat.get("array_impl")  # jax.Array's concrete class: never an sf instance


def _plain_lines(params: list[str] | None) -> tuple[list[str], list[str]]:
    """The hit path of ``sf.jit`` without static arguments (``call``), and more top-level
    code it uses."""
    # Each key is an instance's StaticKey (interned by the one identity, _core._identity.key:
    # equal keys are one object) or None: the tuple merges nothing the identity keeps apart.
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
        call = as_user(compile_functions(hiding(lines) + more, ["call"], namespace,
                                          what=f"sf.jit hit path of {qualname(fn)}")["call"], fn)
        if engine.bucket_spec is None:  # JAX's C++ dispatch in front; `call` under disable_jit
            front = engine.front = engine.make_front(call, front_miss(fn, params, engine.front_miss, skip_self=False),
                                                     wrapped=True)
    if engine.bucket_spec is not None:  # buckets=: pad, this hit path, slice
        call = engine.bucket_spec.front(as_user(call, fn), general_call(engine.prepare))
    wrapper = JitWrapper(front if front is not None else as_user(call, fn))
    if front is not None:  # past FRONT_VARIANTS variants, calls take the Python path
        home = weakref.ref(wrapper)

        def leave_front() -> None:
            public = home()
            if public is not None:
                public.__setstate__((call, (), {}, public.__dict__))

        engine.leave_front = leave_front
        jit_large_path(engine, fn, front, call, home)
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
