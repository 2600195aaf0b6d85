"""Where a compile comes from, in the user's terms: which function, and the call's file:line.

``identify`` names a traced function by its code location (so a lambda made per
call is one function) and marks JAX's op-by-op helpers as eager; ``unwrap_library``
looks through equinox's ``filter_jit`` wrapper to the user's function and arguments;
``call_site`` finds the first frame outside JAX, the wrappers and this package.
"""

from __future__ import annotations

import functools
import os
import re
import sys
from typing import Any, Callable

import jax


def unwrap_library(fun: Callable, ji: Any, args: tuple, kwargs: dict) -> tuple:
    """The user's function and arguments behind a library's wrapper (equinox's filter_jit,
    filter_eval_shape, a jit JAX made itself), how to tell a leaf held static, and the
    static argument numbers and names that apply to the user's arguments: ``ji``'s
    (``jax.jit``'s options) where nothing was unwrapped, else none (they were the wrapper's:
    equinox jits its wrapper with ``static_argnums=2``, which is not the user's third)."""
    found = _unwrap(fun, args, kwargs)
    if found is not None:
        return (*found, (), ())
    static_argnums = tuple(getattr(ji, "static_argnums", ()) or ())
    return fun, args, kwargs, None, static_argnums, tuple(getattr(ji, "static_argnames", ()) or ())


def _unwrap(fun: Callable, args: tuple, kwargs: dict) -> tuple | None:
    if getattr(fun, "__module__", "") == "equinox._jit" and len(args) == 3:
        from equinox._compile_utils import hashable_combine  # type: ignore[import-not-found]

        dynamic = {**args[0], **args[1]}
        static_fun, static_first, static_rest = args[2]
        user = hashable_combine(dynamic["fun"], static_fun)
        first = hashable_combine(dynamic["first"], static_first)
        rest, kw = hashable_combine(dynamic["rest"], static_rest)
        return user, (first, *rest)[:-1], kw, _not_an_array  # less the None equinox appends
    behind = _behind_eqx_eval_shape(fun, args, kwargs)
    if behind is not None:
        return (*behind, _not_an_array)
    inner = _behind_jax(fun, args, kwargs)
    return (*inner, None) if inner is not None else None


def is_eqx_eval_shape(fun: Callable) -> bool:
    """Whether ``fun`` is the function ``eqx.filter_eval_shape`` has JAX trace."""
    inner = getattr(fun, "func", None)
    return (
        isinstance(fun, functools.partial)
        and getattr(inner, "__qualname__", "") == "filter_eval_shape.<locals>._fn"
        and (getattr(inner, "__module__", "") or "").startswith("equinox")
    )


def _behind_eqx_eval_shape(fun: Callable, args: tuple, kwargs: dict) -> tuple | None:
    """The user's function and arguments behind ``eqx.filter_eval_shape(f, ...)``, which JAX
    traces as ``partial(_fn, static)(dynamic)``: so the trace is ``f``'s (ahead of time,
    compiling nothing), and a later call of ``f`` that reuses it compiles ``f``, not
    equinox's ``_fn``. None for any other function."""
    if not is_eqx_eval_shape(fun) or len(fun.args) != 1 or len(args) != 1 or kwargs:  # type: ignore[attr-defined]
        return None
    from equinox import combine  # type: ignore[import-not-found]

    user, user_args, user_kwargs = combine(fun.args[0], args[0])
    user = getattr(user, "__wrapped__", user)  # eqx.filter_jit's wrapper: the user's function
    return user, tuple(user_args), dict(user_kwargs)


def _behind_jax(fun: Callable, args: tuple, kwargs: dict) -> tuple | None:
    """The user's function and arguments behind a jit that JAX made itself (``jax.pmap``
    jits a wrapper that closes over the user's function, ``fun``, and the arguments'
    tree, ``in_tree``); None for any other function."""
    f = _user_function(fun)
    code = getattr(f, "__code__", None)
    if code is None or not code.co_filename.startswith(_JAX_DIR) or not f.__closure__:
        return None
    try:
        cells = {n: c.cell_contents for n, c in zip(code.co_freevars, f.__closure__)}
    except ValueError:  # an empty cell
        return None
    user = getattr(cells.get("fun"), "f", None)  # a linear_util.WrappedFun
    while isinstance(user, functools.partial):
        user = user.func
    if not callable(user):
        return None
    tree = cells.get("in_tree")
    if not kwargs and getattr(tree, "num_leaves", None) == len(args):
        args, kwargs = jax.tree_util.tree_unflatten(tree, args)
    return user, tuple(args), dict(kwargs)


def _not_an_array(x: Any) -> bool:
    import numpy as np

    return not isinstance(x, (jax.Array, np.ndarray, np.generic))


def identify(fun: Callable, dbg: Any) -> tuple[Any, str, str, bool]:
    if getattr(fun, "_apply_primitive", False):
        name = getattr(fun, "__name__", "primitive")
        return ("eager", name), name, "", True
    f: Any = fun
    while isinstance(f, functools.partial) or type(f).__name__ == "HashablePartial":
        f = f.func if isinstance(f, functools.partial) else f.f  # JAX's own partial: .f
    f = _user_function(getattr(f, "__func__", f))  # a bound method: its function
    code = getattr(f, "__code__", None)
    name = getattr(f, "__qualname__", None) or getattr(f, "__name__", None) or type(f).__name__
    if code is not None and code.co_filename.startswith(_JAX_DIR):
        return ("eager", name), name, "", True  # jnp's own jitted helpers, called eagerly
    if code is not None:
        location = f"{relative(code.co_filename)}:{code.co_firstlineno}"
        return (code.co_filename, code.co_firstlineno, name), name, location, False
    src = str(getattr(dbg, "func_src_info", "") or "")
    location = src.split(" at ", 1)[1] if " at " in src else ""
    return ("src", src or name), name, location, False


def _user_function(f: Any) -> Any:
    """The function the user wrote, behind ``__wrapped__`` (staticfield's inner functions
    and ``functools.wraps`` wrappers set it)."""
    for _ in range(8):
        wrapped = getattr(f, "__wrapped__", None)
        if not callable(wrapped):
            break
        f = wrapped
    return f


def relative(path: str) -> str:
    """``path`` relative to the working directory when it lies below it."""
    return _relative(path, os.getcwd())


@functools.lru_cache(maxsize=1024)
def _relative(path: str, cwd: str) -> str:
    try:
        rel = os.path.relpath(path, cwd)
    except ValueError:
        return path
    return path if rel.startswith("..") else rel


_LIBRARIES = ("jax", "jaxlib", "equinox", "flax", "runpy", "functools", "contextlib")


def _library_dirs() -> tuple[str, ...]:
    return _dirs_of(tuple(name in sys.modules for name in _LIBRARIES))


# staticfield's own directory (this file is in its _watch/ subpackage), and its examples.
_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


@functools.lru_cache(maxsize=8)
def _dirs_of(loaded: tuple[bool, ...]) -> tuple[str, ...]:
    dirs = [_PACKAGE_DIR]
    for name in _LIBRARIES:
        module = sys.modules.get(name)
        file = getattr(module, "__file__", None)
        if file:
            base = os.path.dirname(file) if file.endswith("__init__.py") else file
            dirs.append(base + (os.sep if file.endswith("__init__.py") else ""))
    return tuple(dirs)


_JAX_DIR = os.path.dirname(os.path.abspath(jax.__file__ or "")) + os.sep
_OWN_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
_EXAMPLES_DIR = os.path.join(_PACKAGE_DIR, "examples") + os.sep


def call_site() -> str:
    """file:line of the first frame outside JAX, the wrappers and this package."""
    skip = _library_dirs()
    frame = sys._getframe(1)
    while frame is not None:
        file = frame.f_code.co_filename
        internal = file.startswith(skip) or file.startswith("<frozen")
        if file.startswith(_EXAMPLES_DIR) or not internal:
            return f"{relative(file)}:{frame.f_lineno}"
        frame = frame.f_back  # type: ignore[assignment]
    return ""


_VIA = {"jit_lower": ".lower", "jit_trace": ".trace", "jit_eval_shape": ".eval_shape"}


def via(depth: int = 24) -> str:
    """Which of JAX's ``.lower``/``.trace``/``.eval_shape`` made this trace, if one did."""
    frame, found = sys._getframe(2), ""
    for _ in range(depth):
        if frame is None:
            break
        via = _VIA.get(frame.f_code.co_name)
        if via and frame.f_code.co_filename.endswith("pjit.py"):
            found = via  # the outermost: .lower traces by way of .trace
        frame = frame.f_back  # type: ignore[assignment]
    return found


def in_jax(path: str) -> bool:
    """Whether ``path`` is a file of JAX itself (its jitted helpers are eager operations)."""
    return os.path.abspath(path).startswith(_JAX_DIR)


def transformed(depth: int = 32) -> bool:
    """Whether JAX runs a jitted function's program for a transformation of it (under
    ``jax.vmap``, ``jax.grad``, ``jax.jvp``, a transpose): one of JAX's interpreters
    (``batching``, ``ad``, ``partial_eval``) is on the stack before the user's code."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename.startswith(_OWN_DIR):
        frame = frame.f_back  # type: ignore[assignment]  # the watcher's own frames
    for _ in range(depth):
        if frame is None:
            return False
        file = frame.f_code.co_filename
        if not file.startswith(_JAX_DIR):
            return False  # the user's code (or a wrapper's): a direct call
        if os.sep + "interpreters" + os.sep in file:
            return True
        frame = frame.f_back  # type: ignore[assignment]
    return False


def eager(depth: int = 120) -> bool:
    """Whether JAX is compiling one operation run outside jit: a primitive applied
    (``apply_primitive``), or a jitted function of JAX's own (``jnp.add``) whose call
    missed (the function is in the frame of pjit's ``cache_miss``)."""
    frame = sys._getframe(1)
    for _ in range(depth):
        if frame is None:
            return False
        code = frame.f_code
        if code.co_filename.startswith(_JAX_DIR):
            if code.co_name == "apply_primitive":
                return True
            if code.co_name == "cache_miss" and callable(fun := frame.f_locals.get("fun")):
                return identify(fun, None)[3]
        frame = frame.f_back  # type: ignore[assignment]
    return False


@functools.lru_cache(maxsize=1024)
def squash(name: str) -> str:
    return re.sub(r"[^0-9A-Za-z]", "", name)
