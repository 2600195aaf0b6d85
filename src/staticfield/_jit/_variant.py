"""One static variant's ``jax.jit``: the function JAX traces, and what JAX is told about it.

A variant is fixed by a *layout*: which arguments are instances passed to JAX as their
dynamic children (``Split``), and which are static (``StaticArg``, ``None`` for JAX).
``make_jitted`` wraps the user's function so that, while JAX traces it, the arguments
are rebuilt, the trace is described for explanations, and the tracker counts it.

JAX names the function and its arguments from what it is given: ``__wrapped__``
gives its file and line, and ``__signature__`` (the user's) gives argument names.
The signature's ``bind`` rebuilds each split instance, so JAX's paths read
``self.depth`` and ``params.w``, as with plain ``jax.jit``, not ``self[0]``. All of
this runs only when JAX traces or reports an error, never on a hit.
"""

from __future__ import annotations

import inspect
from typing import Any, Callable, NamedTuple

import jax

from ._args import qualname
from .._core._anyleaves import AnyLeaves
from .._core._deep import rebuild
from .._core._spec import Spec
from .._core._state import flat
from .._explain._describe import call_shardings


class Split:
    """Layout entry: argument ``i`` is an instance passed to JAX as its children."""

    __slots__ = ("spec", "key")

    def __init__(self, spec: Spec, key: Any) -> None:
        self.spec, self.key = spec, key

    def rebuild(self, children: tuple) -> Any:
        return rebuild(self.key, children)  # a StaticKey, or deps="read"'s DeepKey


class StaticArg:
    """Layout entry: argument ``i`` is static; JAX sees ``None`` in its place."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value


class UserCall(NamedTuple):
    """A variant's call as the user made it: instances rebuilt, static arguments back."""

    fn: Callable
    args: tuple
    kwargs: dict
    static_argnums: tuple
    static_argnames: tuple


class UserSignature(inspect.Signature):
    """The user's signature, binding JAX's arguments as the user's (instances rebuilt)."""

    __slots__ = ("_split",)

    def __init__(self, sig: inspect.Signature, split: dict[int, Split]) -> None:
        super().__init__(list(sig.parameters.values()), return_annotation=sig.return_annotation)
        self._split = split

    def bind(self, *args: Any, **kwargs: Any) -> inspect.BoundArguments:
        args = tuple(
            self._split[i].rebuild(a) if i in self._split and isinstance(a, tuple) else a
            for i, a in enumerate(args)
        )
        return super().bind(*args, **kwargs)


def user_signature(fn: Callable, layout: dict[int, Any]) -> UserSignature | None:
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return None
    return UserSignature(sig, {i: e for i, e in layout.items() if isinstance(e, Split)})


def make_jitted(
    fn: Callable,
    layout: dict[int, Any],
    static_kwargs: tuple,
    traced: Callable[[tuple, dict], Any],
    jit_kwargs: dict[str, Any],
    static_pos: frozenset,
    explain: Callable[[list], list] | None = None,
    signature: inspect.Signature | None = None,
    auto_call: Callable[[tuple], tuple[tuple, dict]] | None = None,
) -> Any:
    """``jax.jit`` of ``fn`` for one layout; ``traced(args, kwargs)`` runs the user's
    function with tracking, given the rebuilt arguments. ``explain`` (``deps="read"``)
    rewrites ``sf.watch``'s changes as the method's own explanations do."""

    def rebuild(dyn: tuple) -> tuple:
        args = list(dyn)
        for i, entry in layout.items():
            args[i] = entry.rebuild(dyn[i]) if isinstance(entry, Split) else entry.value
        return tuple(args)

    def inner(*dyn: Any, **kwargs: Any) -> Any:
        with call_shardings((dyn, kwargs)):
            kwargs.update(static_kwargs)
            return traced(rebuild(dyn), kwargs)

    def user_call(dyn: tuple, kwargs: dict) -> UserCall:
        """What the user called, for JAX's ``(dyn, kwargs)``: for ``sf.watch``'s explanations
        (``static="auto"``: each argument as its ``AnyLeaves``, non-array leaves static)."""
        if auto_call is not None:
            args, kw = auto_call(dyn)
            return UserCall(fn, tuple(_any(a) for a in args), {k: _any(v) for k, v in kw.items()}, (), ())
        statics = dict(static_kwargs)
        return UserCall(fn, rebuild(dyn), {**kwargs, **statics}, tuple(sorted(static_pos)), tuple(statics))

    inner.__name__ = getattr(fn, "__name__", "fn")
    inner.__qualname__ = qualname(fn)
    inner.__module__ = getattr(fn, "__module__", None)  # type: ignore[assignment]
    inner.__doc__ = getattr(fn, "__doc__", None)
    inner.__wrapped__ = fn  # type: ignore[attr-defined]
    inner.__sf_user_call__ = user_call  # type: ignore[attr-defined]
    inner.__sf_explain__ = explain  # type: ignore[attr-defined]
    tracker = getattr(getattr(getattr(traced, "func", None), "__self__", None), "tracker", None)
    if tracker is not None:  # sf.watch: why a compile it saw first was a recompile here
        inner.__sf_recompiles__ = lambda: tracker.recompiles  # type: ignore[attr-defined]
        # and which wrapper compiled (two wrappers of one function explain their own compiles)
        inner.__sf_wrapper__ = id(tracker)  # type: ignore[attr-defined]
    if signature is None:  # (static="auto" gives its own: see _auto_plan.signature_of)
        signature = user_signature(fn, layout)
    if signature is not None:
        inner.__signature__ = signature  # type: ignore[attr-defined]
    kwargs = dict(jit_kwargs)
    if "in_shardings" in kwargs:
        kwargs["in_shardings"] = split_in_shardings(kwargs["in_shardings"], layout, static_pos)
    return jax.jit(inner, **kwargs)


def _any(value: Any) -> AnyLeaves:
    """A ``static="auto"`` argument as ``sf.watch`` describes it: non-array leaves static."""
    return AnyLeaves(value, [], None)  # type: ignore[arg-type]


def split_in_shardings(in_shardings: Any, layout: dict[int, Any], static_pos: frozenset) -> Any:
    """Map the user's ``in_shardings`` (static arguments left out, as in ``jax.jit``) onto
    what JAX sees: ``None`` at static positions, children at split instances."""
    if not isinstance(in_shardings, (tuple, list)):
        return in_shardings
    given = list(in_shardings)
    out: list[Any] = []
    for i in range(len(given) + len(static_pos)):
        if i in static_pos:
            out.append(None)
            continue
        s = given.pop(0) if given else None
        entry = layout.get(i)
        if isinstance(entry, Split) and isinstance(s, entry.spec.cls):
            s = flat(s)[0]
        out.append(s)
    return tuple(out)
