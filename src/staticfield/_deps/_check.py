"""The checking mode of ``deps="read"``: ``STATICFIELD_CHECK_DEPS=1``.

Whenever a program is shared with a new static key, the method is traced once more the
slow, obviously right way: with an ordinary ``self`` (no recording) for the variant's
base key and for the new key, with the call's own arguments. The two jaxprs must be the
same: equations and their parameters (the text of the jaxpr), constants by value, and the
output's structure, shapes and dtypes; and so must the jaxprs of their gradients (a vjp
with respect to every float input), where a ``custom_vjp`` backward rule runs. The first
trace of each variant is compared the same way with a trace through a recording ``self``
(``check_first``): the recording ``self`` must compute what an ordinary one computes. A
read the recording cannot see (``dict.get(vars(self), ...)``, ``dict``'s own C methods
past the recording dict's overrides) sees the user's value, so it shows when the program
is shared with a key that differs there. If they differ, a read of a static escaped the
recording, and ``DepsCheckError`` names the method, the statics the keys differ in and
which of them were never recorded. The check traces (it never compiles or runs); the
user's function runs twice more per shared key, only in this mode.
"""

from __future__ import annotations

import os
from typing import Any, Callable

import jax
import numpy as np

from .._core._errors import DEPS_CHECK, DEPS_CHECK_FIRST, DepsCheckError
from .._core._keys import keyable
from .._core._deep import display, paths_of, rebuild, value_at

ENV = "STATICFIELD_CHECK_DEPS"


def enabled() -> bool:
    return os.environ.get(ENV, "") not in ("", "0")


def _traced(fn: Callable[..., Any], obj: Any, args: tuple, kwargs: dict,
            static_pos: frozenset, static_names: frozenset) -> tuple:
    """``make_jaxpr`` of ``fn(obj, *args, **kwargs)``, its static arguments kept static."""
    fixed = {i: a for i, a in enumerate(args, 1) if i in static_pos}
    fixed_kw = {k: v for k, v in kwargs.items() if k in static_names}

    def call(o: Any, *dyn: Any, **dyn_kw: Any) -> Any:
        rest = iter(dyn)
        full = [fixed[i] if i in fixed else next(rest) for i in range(1, len(args) + 1)]
        return fn(o, *full, **dyn_kw, **fixed_kw)

    # Named for what it is: sf.watch lists these traces apart from the method's own.
    call.__name__ = f"{getattr(fn, '__name__', 'method')} [deps check]"
    call.__qualname__ = f"{getattr(fn, '__qualname__', call.__name__)} [deps check]"
    dyn = [a for i, a in enumerate(args, 1) if i not in fixed]
    dyn_kw = {k: v for k, v in kwargs.items() if k not in fixed_kw}
    return jax.make_jaxpr(call, return_shape=True)(obj, *dyn, **dyn_kw)


def _gradient(fn: Callable[..., Any], obj: Any, args: tuple, kwargs: dict,
              static_pos: frozenset, static_names: frozenset) -> Any:
    """``make_jaxpr`` of the gradient of ``fn``: its vjp with respect to every float leaf
    (of ``obj``'s dynamic fields and of the arguments), pulled back from ones. A
    ``custom_vjp`` backward rule runs only here, so what it reads shows in this jaxpr.
    ``None`` where the method has no gradient (no float input or output, or JAX refuses)."""
    fixed = {i for i in range(1, len(args) + 1) if i in static_pos}
    dyn = (obj, [a for i, a in enumerate(args, 1) if i not in fixed],
           {k: v for k, v in kwargs.items() if k not in static_names})
    leaves, tree = jax.tree.flatten(dyn)
    where = [i for i, x in enumerate(leaves) if jax.dtypes.issubdtype(jax.numpy.result_type(x), jax.numpy.inexact)]
    if not where:
        return None

    def forward(*floats: Any) -> Any:
        full = list(leaves)
        for i, x in zip(where, floats):
            full[i] = x
        o, dyn_args, dyn_kw = jax.tree.unflatten(tree, full)
        rest = iter(dyn_args)
        call = [args[i - 1] if i in fixed else next(rest) for i in range(1, len(args) + 1)]
        return fn(o, *call, **dyn_kw, **{k: v for k, v in kwargs.items() if k in static_names})

    def pulled_back(*floats: Any) -> Any:
        out, back = jax.vjp(forward, *floats)
        ones = jax.tree.map(lambda y: np.ones(np.shape(y), jax.dtypes.float0)
                            if not jax.dtypes.issubdtype(y.dtype, jax.numpy.inexact)
                            else jax.numpy.ones_like(y), out)
        return back(ones)

    pulled_back.__qualname__ = f"{getattr(fn, '__qualname__', 'method')} [deps check]"
    try:
        return jax.make_jaxpr(pulled_back)(*(leaves[i] for i in where))
    except Exception:  # not differentiable (integer outputs, a callback without a rule)
        return None


def _consts_equal(a: list, b: list) -> bool:
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        x, y = np.asarray(x), np.asarray(y)
        if x.shape != y.shape or x.dtype != y.dtype or x.tobytes() != y.tobytes():
            return False
    return True


def difference(fn: Callable[..., Any], base_obj: Any, obj: Any, args: tuple, kwargs: dict,
               static_pos: frozenset = frozenset(), static_names: frozenset = frozenset(),
               fn_b: Callable[..., Any] | None = None) -> str:
    """What differs between tracing ``fn`` for ``base_obj`` and ``fn_b`` (else ``fn``) for
    ``obj`` ('' if nothing)."""
    fn_b = fn if fn_b is None else fn_b
    a, a_shape = _traced(fn, base_obj, args, kwargs, static_pos, static_names)
    b, b_shape = _traced(fn_b, obj, args, kwargs, static_pos, static_names)
    if jax.tree.structure(a_shape) != jax.tree.structure(b_shape) or jax.tree.leaves(a_shape) != jax.tree.leaves(b_shape):
        return "the output's structure, shapes or dtypes"
    if str(a.jaxpr) != str(b.jaxpr):
        return "the equations or their parameters"
    if not _consts_equal(a.consts, b.consts):
        return "the constants"
    ga = _gradient(fn, base_obj, args, kwargs, static_pos, static_names)
    gb = _gradient(fn_b, obj, args, kwargs, static_pos, static_names)
    if (ga is None) != (gb is None) or (ga is not None and (
            str(ga.jaxpr) != str(gb.jaxpr) or not _consts_equal(ga.consts, gb.consts))):
        return "the gradient: a custom_vjp backward rule"
    return ""


class _Quiet:
    """What a throwaway recording reports to: it notes each read, and shares nothing."""

    def __init__(self, self_name: str) -> None:
        self.self_name = self_name

    def extend(self, variant: Any, paths: tuple, how: str, in_trace: bool, warn: bool = True) -> None:
        for p in paths:
            variant.reads.setdefault(p, (None, how))


def recorded(fn: Callable[..., Any], self_name: str, key: Any) -> Callable[..., Any]:
    """``fn`` called with a recording self for ``key`` (as ``deps="read"`` traces it),
    reporting to a throwaway variant: what the first trace of a variant computes."""
    from ._read import Trace, Variant
    from ._trace import stand_in

    def call(o: Any, *args: Any, **kwargs: Any) -> Any:
        traced = stand_in(o, Trace(_Quiet(self_name), Variant((), key)), key)[0]
        return fn(traced, *args, **kwargs)

    call.__name__ = getattr(fn, "__name__", "method")
    call.__qualname__ = getattr(fn, "__qualname__", "method")
    return call


def check_first(function: str, self_name: str, fn: Callable[..., Any], obj: Any, args: tuple,
                kwargs: dict, static_pos: frozenset = frozenset(),
                static_names: frozenset = frozenset()) -> None:
    """Raise ``DepsCheckError`` if ``fn`` traces differently with a recording self than with
    an ordinary one, for ``obj``'s own key: a read the recording cannot see."""
    key = obj._staticfield_deep[1]
    what = difference(recorded(fn, self_name, key), obj, obj, args, kwargs, static_pos,
                      static_names, fn_b=fn)
    if not what:
        return
    paths = paths_of(key)
    raise DepsCheckError(DEPS_CHECK_FIRST.format(
        function=function, what=what,
        base=", ".join(f"{display(self_name, p)}={value_at(key, p)!r}" for p in paths),
        field=paths[0][-1] if paths else "name"))


def check(function: str, self_name: str, fn: Callable[..., Any], base: Any, reads: Any,
          obj: Any, args: tuple, kwargs: dict, static_pos: frozenset = frozenset(),
          static_names: frozenset = frozenset()) -> None:
    """Raise ``DepsCheckError`` if ``fn`` traces differently for ``base`` than for ``obj``'s key."""
    children, key = obj._staticfield_deep
    what = difference(fn, rebuild(base, children), obj, args, kwargs, static_pos, static_names)
    if not what:
        return
    differ = [p for p in paths_of(key) if keyable(value_at(key, p)) != keyable(value_at(base, p))]
    unread = [p for p in differ if p not in reads] or differ
    show = lambda k: ", ".join(f"{display(self_name, p)}={value_at(k, p)!r}" for p in differ)  # noqa: E731
    raise DepsCheckError(DEPS_CHECK.format(
        function=function, base=show(base), key=show(key), what=what,
        fields=" or ".join(display(self_name, p) for p in unread)))
