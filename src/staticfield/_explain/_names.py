"""Naming a function, a method or a class that changed, in the words the user wrote.

One table for ``sf.Recompile`` (``_diff``) and ``sf.watch`` (``_watch._diff``), so that
both say the same thing about the same change:

==============================================  ================================  ==========
two values                                      old → new                         hint
==============================================  ================================  ==========
functions, one code, one name (a closure or     an earlier function object →      NEW_CLOSURE
lambda made again)                              a new function object, same code
closures of one factory, with captured values   an earlier closure of make_step →  CLOSURE
(``make_step(env)``)                            another closure of make_step
                                                (captures env)
functions of different names (a library's       max_norm → rms_norm               CHOICE
factory: one code object, two names)
functions of one name, different code           <lambda> (m.py:3) →               CHOICE
                                                <lambda> (m.py:4)
one method bound to two instances of a plain    Env.step of an earlier Env        INSTANCE
class (``jax.jit(env2.step)`` after             instance → Env.step of another
``env.step``)                                   Env instance
two classes of one name                         snake.State → game.State          (none)
==============================================  ================================  ==========

Imports nothing of staticfield's.
"""

from __future__ import annotations

import functools
import types
from typing import Any

SAME_CODE = ("an earlier function object", "a new function object, same code")

NEW_CLOSURE = (
    "a new function object with the same code (a lambda or closure made on each call) "
    "compares by identity; define it once and reuse it, e.g. at module level"
)
CLOSURE = (
    "each function {factory} builds captures its values and compares by identity, so each one "
    "built compiles its own program; build it once per value and keep it (a dict by `{name}`, "
    "or functools.lru_cache on {factory}), or pass `{name}` to the jitted function as an argument"
)
CHOICE = (
    "each function is a static value of its own (compared by identity), so each one "
    "passed compiles once; expected for a choice among a few functions (a norm, an "
    "activation); a function cannot be traced"
)
INSTANCE = (
    "a bound method of a plain class is keyed by its instance (self is not traced), so "
    "each {cls} instance compiles its own program, by design; reuse one instance, or make "
    "{cls} a pytree (sf.Struct) and jit the method with self as an argument "
    "(@sf.jit_method), so that self's arrays are traced"
)


def is_function(value: Any) -> bool:
    """A function, a bound method or a builtin, or a wrapper of one (a ``jax.jit``
    function): named by ``function_change``."""
    if isinstance(value, (types.FunctionType, types.MethodType, types.BuiltinFunctionType)):
        return True
    return callable(value) and not isinstance(value, type) and hasattr(value, "__wrapped__") \
        and isinstance(getattr(value, "__qualname__", None), str)


def is_callable_value(value: Any) -> bool:
    """A function or a partial of one: a hint never tells it to become a traced value."""
    return is_function(value) or isinstance(value, functools.partial)


def function_change(old: Any, new: Any) -> tuple[str, str, str] | None:
    """(old text, new text, hint) for two different functions or bound methods, as the
    table above says; ``None`` when they are not both functions (or are the same one)."""
    if not (is_function(old) and is_function(new)) or old is new:
        return None
    if isinstance(old, types.MethodType) and isinstance(new, types.MethodType):
        if old.__func__ is new.__func__:
            return _instances(new.__func__, type(old.__self__), type(new.__self__))
        old, new = old.__func__, new.__func__
    elif isinstance(old, types.MethodType) or isinstance(new, types.MethodType):
        return _name(old), _name(new), CHOICE
    a, b = _name(old), _name(new)
    if a != b:  # by name, less the enclosing function's `f.<locals>.` where that tells them apart
        short = _local(a), _local(b)
        return (*(short if short[0] != short[1] else (a, b)), CHOICE)
    ma, mb = getattr(old, "__module__", None), getattr(new, "__module__", None)
    if ma != mb:  # one name in two modules
        return f"{ma}.{a}", f"{mb}.{b}", CHOICE
    if getattr(old, "__code__", None) is getattr(new, "__code__", None):
        return closure_change(old, new) or (*SAME_CODE, NEW_CLOSURE)
    return f"{_local(a)} ({_where(old)})", f"{_local(b)} ({_where(new)})", CHOICE  # where each was written


def closure_change(old: Any, new: Any) -> tuple[str, str, str] | None:
    """(old text, new text, hint) for two closures a factory built (``make_rollout(env)``,
    one code, values captured): which factory, and the captured names whose values differ
    (all of them where ``old`` is ``None``); ``None`` for a function that captures nothing,
    or the very values ``old`` captured."""
    new = getattr(new, "__func__", new)
    cells, qualname = getattr(new, "__closure__", None), getattr(new, "__qualname__", "") or ""
    if not cells or ".<locals>." not in qualname:
        return None
    factory = _local(qualname.rpartition(".<locals>.")[0])
    names = new.__code__.co_freevars
    before = getattr(getattr(old, "__func__", old), "__closure__", None)
    differ = [n for n, a, b in zip(names, before, cells) if _cell(a) is not _cell(b)] if before else []
    if before and not differ:  # the same values captured again: a function made again (NEW_CLOSURE)
        return None
    captured = ", ".join(differ or names)
    return (f"an earlier closure of {factory}", f"another closure of {factory} (captures {captured})",
            CLOSURE.format(factory=factory, name=(differ or names)[0]))


def _cell(cell: Any) -> Any:
    try:
        return cell.cell_contents
    except ValueError:  # an empty cell
        return None


def _instances(func: Any, a: type, b: type) -> tuple[str, str, str]:
    """One method bound to two objects, of classes ``a`` and ``b``: name the method and
    each object's class."""
    method = _local(getattr(func, "__qualname__", "the method"))
    if a is b:
        cls = _local(a.__qualname__)
        return f"{method} of an earlier {cls} instance", f"{method} of another {cls} instance", \
            INSTANCE.format(cls=cls)
    an, bn = class_names(a, b)
    return f"{method} of a {an} instance", f"{method} of a {bn} instance", INSTANCE.format(cls=bn)


def _name(f: Any) -> str:
    f = getattr(f, "__func__", f)
    return getattr(f, "__qualname__", None) or getattr(f, "__name__", None) or type(f).__name__


def _local(qualname: str) -> str:
    return qualname.rpartition("<locals>.")[2]


def _where(f: Any) -> str:
    code = getattr(getattr(f, "__func__", f), "__code__", None)
    if code is None:
        return "?"
    file = code.co_filename.replace("\\", "/").rpartition("/")[2]
    return f"{file}:{code.co_firstlineno}"


def qualified(cls: type) -> str:
    """``module.Qualname`` (``Qualname`` for a builtin)."""
    module = getattr(cls, "__module__", "")
    return cls.__qualname__ if module == "builtins" else f"{module}.{cls.__qualname__}"


def class_names(a: type, b: type) -> tuple[str, str]:
    """Two classes' names as the user tells them apart: the qualified name, with the module
    where both have one name (``envs.cartpole.EnvState → envs.pendulum.EnvState``)."""
    if a.__qualname__ != b.__qualname__:
        return a.__qualname__, b.__qualname__
    return qualified(a), qualified(b)


def bound_to(fun: Any) -> tuple[Any, type] | None:
    """(function, class of the object) of a method bound to an object; else ``None``."""
    if isinstance(fun, types.MethodType) and not isinstance(fun.__self__, type):
        return fun.__func__, type(fun.__self__)
    return None


def another_instance(new: Any, earlier: list) -> tuple[str, str, str] | None:
    """(old text, new text, hint) when ``new`` is a method bound to an object other than the
    earlier compiles' (``earlier``: their ``bound_to`` pairs); ``None`` when ``new`` is not
    a bound method of an object, or no earlier compile was of that method."""
    now = bound_to(new)
    if now is None:
        return None
    classes = [cls for func, cls in earlier if func is now[0]]
    if not classes:
        return None
    before = now[1] if now[1] in classes else classes[-1]
    return _instances(now[0], before, now[1])


def tree_types(treedef: Any) -> tuple:
    """The node types of a pytree structure, in order (two classes of one name print alike
    in ``str(treedef)``; their types tell them apart)."""
    found, stack = [], [treedef]
    while stack:
        node = stack.pop()
        data = node.node_data()
        if data is None:
            continue
        found.append(data[0])
        stack.extend(reversed(node.children()))
    return tuple(found)


def types_apart(old: tuple, new: tuple) -> tuple[str, str] | None:
    """The first two node types of one name that differ, named apart by module; ``None``
    when no such pair is there."""
    for a, b in zip(old, new):
        if a is not b and getattr(a, "__qualname__", None) == getattr(b, "__qualname__", 0):
            return class_names(a, b)
    return None
