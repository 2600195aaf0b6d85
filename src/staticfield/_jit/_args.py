"""Resolving ``jax.jit``'s argument options against a function's signature.

``static_argnums``/``static_argnames`` and ``donate_argnames`` are resolved once, at
decoration, into positions and names, and checked, so that a wrong name fails
when the function is wrapped, with a message that lists the real parameters.
"""

from __future__ import annotations

import inspect
from typing import Any, Callable

import jax

from .._core._field import annotation_is_static
from .._core._gen import compile_functions


def qualname(fn: Any) -> str:
    return getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or repr(fn)


def signature_parts(
    fn: Callable, follow_wrapped: bool = True
) -> tuple[list[str], dict[str, inspect.Parameter], bool, bool]:
    """Positional names, all parameters, and whether it takes ``*args`` / ``**kwargs``.

    ``follow_wrapped=True`` reads the signature as ``jax.jit`` does (through
    ``__wrapped__``); ``False`` reads what ``fn`` accepts (see ``call_signature``),
    which is what a generated hit path must take.
    """
    try:
        sig = inspect.signature(fn) if follow_wrapped else call_signature(fn)
    except (TypeError, ValueError):
        return [], {}, True, True
    params = sig.parameters
    kinds = inspect.Parameter
    positional = [p.name for p in params.values() if p.kind in (kinds.POSITIONAL_ONLY, kinds.POSITIONAL_OR_KEYWORD)]
    var_pos = any(p.kind is kinds.VAR_POSITIONAL for p in params.values())
    var_kw = any(p.kind is kinds.VAR_KEYWORD for p in params.values())
    return positional, dict(params), var_pos, var_kw


def star_name(fn: Callable) -> str | None:
    """The name of ``fn``'s ``*args`` parameter (``rest`` in ``f(x, *rest)``), or ``None``."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return None
    return next((p.name for p in params if p.kind is inspect.Parameter.VAR_POSITIONAL), None)


def call_signature(fn: Callable) -> inspect.Signature:
    """The parameters a call of ``fn`` must match: ``fn``'s own, not those of a function
    it wraps (a ``functools.wraps`` wrapper may add parameters), except that a plain
    pass-through wrapper (``*args, **kwargs``) takes what the wrapped function takes."""
    own = inspect.signature(fn, follow_wrapped=False)
    kinds = inspect.Parameter
    if own.parameters and all(p.kind in (kinds.VAR_POSITIONAL, kinds.VAR_KEYWORD) for p in own.parameters.values()):
        return inspect.signature(fn)
    return own


def wrong_call(fn: Callable, args: tuple, kwargs: dict) -> None:
    """Raise the ``TypeError`` that ``fn`` itself raises for this wrong call (CPython's
    text, naming ``fn``): a stand-in with ``fn``'s parameters is called instead of it."""
    stand_in = _stand_in(fn)
    try:
        stand_in(*args, **kwargs)
    except TypeError as exc:
        raise exc.with_traceback(None) from None
    raise TypeError(f"{qualname(fn)}() got {len(args)} positional argument(s), more than it takes.")


def _stand_in(fn: Callable) -> Callable[..., None]:
    """A function with ``fn``'s parameter names, kinds and (placeholder) defaults, named
    as ``fn``, that does nothing: calling it checks a call's arity as ``fn`` would."""
    kinds = inspect.Parameter
    parts: list[str] = []
    star = False
    params = list(call_signature(fn).parameters.values())
    for i, p in enumerate(params):
        if p.kind is kinds.KEYWORD_ONLY and not star:
            parts.append("*")
        star = star or p.kind in (kinds.VAR_POSITIONAL, kinds.KEYWORD_ONLY)
        text = {kinds.VAR_POSITIONAL: f"*{p.name}", kinds.VAR_KEYWORD: f"**{p.name}"}.get(p.kind, p.name)
        parts.append(text if p.default is p.empty else f"{text}=None")
        following = params[i + 1].kind if i + 1 < len(params) else None
        if p.kind is kinds.POSITIONAL_ONLY and following is not kinds.POSITIONAL_ONLY:
            parts.append("/")
    lines = [f"def stand_in({', '.join(parts)}):", "    return None"]
    stand_in = compile_functions(lines, ["stand_in"], {}, what=f"arity check of {qualname(fn)}")["stand_in"]
    stand_in.__name__ = getattr(fn, "__name__", "function")
    stand_in.__qualname__ = qualname(fn)
    return stand_in


_JAX_JIT_KWARGS = frozenset(inspect.signature(jax.jit).parameters) - {"fun"}


def check_jit_kwargs(fn: Callable, jit_kwargs: dict) -> None:
    """Refuse a keyword ``jax.jit`` does not take, when decorating (not at the first call)."""
    for name in jit_kwargs:
        if name not in _JAX_JIT_KWARGS:
            raise TypeError(
                f"{qualname(fn)}: unknown jax.jit keyword {name!r}. sf.jit and @sf.jit_method "
                f"take jax.jit's keywords ({', '.join(sorted(_JAX_JIT_KWARGS))}) and max_compiles, "
                "warn_compiles. Fix the spelling or drop it."
            )


def _as_tuple(value: Any, kind: type) -> tuple:
    if value is None:
        return ()
    return (value,) if isinstance(value, kind) else tuple(value)


def static_annotated(fn: Callable, params: dict[str, inspect.Parameter]) -> list[str]:
    """The parameters annotated ``sf.Static[T]`` (object or string annotation): static
    arguments, as if named in ``static_argnames`` (``jdc.jit``'s rule)."""
    target = inspect.unwrap(fn) if callable(fn) else fn
    target = getattr(target, "__func__", target)
    globalns = getattr(target, "__globals__", {})
    kinds = inspect.Parameter
    return [
        n for n, p in params.items()
        if p.annotation is not p.empty and p.kind not in (kinds.VAR_POSITIONAL, kinds.VAR_KEYWORD)
        and annotation_is_static(p.annotation, globalns, {})
    ]


def resolve_static(fn: Callable, jit_kwargs: dict) -> tuple[list[str], frozenset, frozenset]:
    """Both ways of naming static arguments, and ``sf.Static[T]`` annotations, resolved
    against the signature, checked."""
    name = qualname(fn)
    positional, params, var_pos, var_kw = signature_parts(fn)
    nums = []
    for n in _as_tuple(jit_kwargs.get("static_argnums"), int):
        if not isinstance(n, int):
            raise TypeError(f"{name}: static_argnums must be ints, got {n!r}.")
        if n < 0 and not var_pos:
            n += len(positional)
        if n < 0 or (n >= len(positional) and not var_pos):
            raise TypeError(
                f"{name}: static_argnums={n} is out of range: it takes {len(positional)} "
                f"positional argument(s) ({', '.join(positional) or 'none'})."
            )
        nums.append(n)
    names = list(_as_tuple(jit_kwargs.get("static_argnames"), str))
    for n in names:
        if n not in params and not var_kw:
            raise TypeError(
                f"{name}: static_argnames names {n!r}, which is not one of its parameters "
                f"({', '.join(params) or 'none'}). Fix the name, or add the parameter."
            )
    names += [n for n in static_annotated(fn, params) if n not in names]
    kinds = inspect.Parameter
    static_pos = set(nums) | {positional.index(n) for n in names if n in positional}
    static_names = set(names) | {
        positional[i] for i in nums
        if i < len(positional) and params[positional[i]].kind is kinds.POSITIONAL_OR_KEYWORD
    }
    return positional, frozenset(static_pos), frozenset(static_names)


def resolve_donation(fn: Callable, jit_kwargs: dict) -> dict:
    """``donate_argnames`` of positional parameters become positions (JAX sees ``*args``)."""
    names = _as_tuple(jit_kwargs.get("donate_argnames"), str)
    if not names:
        return {}
    positional = signature_parts(fn)[0]
    nums = set(_as_tuple(jit_kwargs.get("donate_argnums"), int))
    nums |= {positional.index(n) for n in names if n in positional}
    return {"donate_argnums": tuple(sorted(nums)), "donate_argnames": tuple(names)}
