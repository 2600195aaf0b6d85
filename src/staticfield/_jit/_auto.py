"""``sf.jit(fn, static="auto")``: arguments and outputs partitioned as ``eqx.filter_jit`` does.

jax and NumPy arrays (and NumPy scalars) are traced; every other leaf of an argument (a
Python bool, int, float or str, a function, an object) is static, keyed by value where
it is hashable (type-strictly: ``1`` and ``1.0`` compile apart) and by identity
otherwise; an ``sf`` instance keeps its own static/dynamic split, except that every
non-array leaf below a field of a ``check=False`` class, however deep, is static too.
Outputs come back as the function returned them: arrays as arrays, every other leaf as
the very object. A keyword argument equal to its default keys as the default.

A hit is two Python frames: ``AutoJit.__call__`` and the hit function of the call shape
served last (``_auto_hit``): the call flattened with builtin containers only, one tuple
key (that shape, its static values by C-level getters, frozen objects by id:
``_auto_fast``) and the variant's C++ front with the traced leaves. A call of another
shape takes ``_general``: its own shape's lookup, or JAX's flatten and ``_auto_plan.Shape``'s
lookup. Everything else (binding to the signature, which leaves are static, the variant) is
decided on a miss, by ``_auto_plan``, and the engine counts, explains and stores the
variant's programs as for any ``sf.jit``.
"""

from __future__ import annotations

import functools
import inspect
import threading
import warnings
from typing import Any, Callable

import jax

from ._args import qualname, wrong_call
from ._auto_fast import Fast, bare_flatten as _bare, make_fast
from ._auto_hit import hit_function
from ._auto_plan import Restore, Shape, make_shape
from ._compiled import Lowered
from ._agreement import ahead
from ._programs import aot
from ._tracker import TRACKER_SETTINGS, check_positive
from .._core._errors import IDENTITY_ARGUMENT, StaticFieldWarning, article
from .._core._identity import identity_keyed
from .._core._traceback import hide

CHOICES = ("auto",)

_flatten = jax.tree_util.default_registry.flatten  # tree_flatten without its Python frame
_UNDECIDED = object()  # a bare shape no call has decided yet


def _signature(fn: Callable) -> inspect.Signature:
    try:
        return inspect.signature(fn)
    except (TypeError, ValueError):  # a callable without one: its call as it comes
        kinds = inspect.Parameter
        return inspect.Signature([kinds("args", kinds.VAR_POSITIONAL), kinds("kwargs", kinds.VAR_KEYWORD)])


def _restored(out: Any) -> Any:
    return out.value() if out.__class__ is Restore else out


class AutoJit:
    """What ``sf.jit(fn, static="auto")`` returns. Counters and settings are its engine's
    (``compile_count``, ``recompiles``, ``max_compiles``, ``cache_size()``, ...)."""

    def __init__(self, engine: Any, fn: Callable) -> None:
        object.__setattr__(self, "_engine", engine)
        object.__setattr__(self, "_sig", _signature(fn))
        object.__setattr__(self, "_shapes", {})  # (treedef, leaf types) -> Shape
        object.__setattr__(self, "_fast", {})  # (bare treedef, leaf types) -> Fast, or None
        object.__setattr__(self, "_bare_on", False)  # whether any call shape has a Fast
        object.__setattr__(self, "_hit", AutoJit._general)  # (owner, args, kwargs) -> output
        object.__setattr__(self, "_lock", threading.Lock())
        for name in functools.WRAPPER_ASSIGNMENTS:
            if hasattr(fn, name):
                object.__setattr__(self, name, getattr(fn, name))
        object.__setattr__(self, "__wrapped__", fn)
        engine.auto_signature = self._sig

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return self._hit(self, args, kwargs)  # _auto_hit's for the shape served last, else _general
        except Exception as exc:
            hide(exc)
            raise

    def _general(self, args: tuple, kwargs: dict, bare: list | None = None, bare_treedef: Any = None) -> Any:
        """A call that the hit function of the shape served last did not serve: its own
        bare shape's lookup (which then serves the next hit), JAX's flatten and the full
        shape's lookup, or the miss."""
        fast = None
        if self._bare_on:  # some call shape of this function is keyed without JAX's flatten
            if bare is None:
                bare, bare_treedef = _bare((args, kwargs))  # C only: a library's pytree is one leaf here
            fast = self._fast.get((bare_treedef, *map(type, bare)), _UNDECIDED)
            if fast.__class__ is Fast:
                try:  # the identity's cheaper spellings (see _auto_fast)
                    front = fast.fronts.get(fast.lookup(bare))
                except Exception:  # noqa: BLE001 - an unhashable or odd static: the full path
                    front = None
                if front is not None:
                    if fast.hit:  # its generated hit serves the next call
                        object.__setattr__(self, "_hit", fast.hit)
                    out = front(*fast.dynamic(bare))
                    return out.value() if out.__class__ is Restore else out
            elif fast is _UNDECIDED:  # a new bare shape: the full path decides it
                return self._full(args, kwargs, bare, bare_treedef)
        leaves, treedef = _flatten((args, kwargs))
        try:
            shape = self._shapes[treedef, tuple(map(type, leaves))]
            front = shape.fronts[shape.lookup(leaves)]
        except Exception:  # noqa: BLE001 - a new shape or key, an unhashable or odd static: the miss
            front = None
        if front is None:  # (outside the except: the user's errors carry no lookup as context)
            return self._full(args, kwargs) if fast is None else self._full(args, kwargs, bare, bare_treedef)
        out = front(*shape.dynamic(leaves))
        if fast is not None:  # objects the bare lookup did not know: met twice, it keeps them
            self._keep(fast, shape, bare, leaves, front, args, kwargs)
        return out.value() if out.__class__ is Restore else out

    def _full(self, args: tuple, kwargs: dict, bare: list | None = None, bare_treedef: Any = None) -> Any:
        """A call the hit lookups did not serve: JAX's flatten of the whole call, its shape's
        lookup or the miss; then the bare lookup learns the call, where it can."""
        leaves, treedef = _flatten((args, kwargs))
        try:
            shape = self._shapes[treedef, tuple(map(type, leaves))]
            front = shape.fronts[shape.lookup(leaves)]
        except Exception:  # noqa: BLE001 - a new shape or key, an unhashable or odd static: the miss
            front = None
        if front is None:
            shape = self._shape(args, kwargs, leaves, treedef)
            front = self._engine.auto_variant(shape.vkey(leaves))
            out = front(*shape.dynamic(leaves))
            try:  # only after a call that worked; a key that cannot be hashed keeps taking this path
                key = shape.lookup(leaves)
                if key is not None:
                    shape.fronts.setdefault(key, front)
            except Exception:  # noqa: BLE001
                pass
        else:
            out = front(*shape.dynamic(leaves))
        self._learn(shape, leaves, args, kwargs, front, bare, bare_treedef)
        return out.value() if out.__class__ is Restore else out

    def _learn(self, shape: Shape, leaves: list, args: tuple, kwargs: dict, front: Any, bare: list | None,
               bare_treedef: Any) -> None:
        """The bare lookup keeps this call's front, where its bare shape can be keyed (a
        speed-up only: whatever goes wrong here leaves the call to the full path)."""
        try:
            if bare is None:
                bare, bare_treedef = _bare((args, kwargs))
            found = (bare_treedef, *map(type, bare))
            fast = self._fast.get(found, _UNDECIDED)
            if fast is _UNDECIDED:
                with self._lock:
                    fast = self._fast.setdefault(found, make_fast(shape, bare, leaves))  # None: the full path
            if fast is not None:
                self._keep(fast, shape, bare, leaves, front, args, kwargs)
                object.__setattr__(self, "_bare_on", True)
        except Exception:  # noqa: BLE001 - a key that cannot be hashed, an object that refuses a look
            return

    def _keep(self, fast: Fast, shape: Shape, bare: list, leaves: list, front: Any, args: tuple,
              kwargs: dict) -> None:
        """``fast`` keeps this call's front where it can (``Fast.learn``); once it holds
        one, its generated hit (made once, from this call) serves the next call."""
        fast.learn(shape, bare, leaves, front)
        if fast.fronts:
            if fast.hit is None:
                fast.hit = hit_function(fast, args, kwargs, bare, AutoJit._general) or False
            if fast.hit:
                object.__setattr__(self, "_hit", fast.hit)

    # ----- the miss ------------------------------------------------------------------------
    def _shape(self, args: tuple, kwargs: dict, leaves: list, treedef: Any) -> Shape:
        found = (treedef, tuple(map(type, leaves)))
        shape = self._shapes.get(found)
        if shape is None:
            try:
                shape = make_shape(self._sig, args, kwargs, leaves)
            except TypeError:
                if _binds(self._sig, args, kwargs):
                    raise
                wrong_call(self.__wrapped__, args, kwargs)  # the user's function's own TypeError
                raise
            with self._lock:
                shape = self._shapes.setdefault(found, shape)
            warn_identity_keyed(qualname(self.__wrapped__), shape, leaves)
        return shape

    def _prepare(self, args: tuple, kwargs: dict) -> tuple[Shape, Any, Any]:
        leaves, treedef = _flatten((args, kwargs))
        shape = self._shape(args, kwargs, leaves, treedef)
        return shape, self._engine.auto_variant(shape.vkey(leaves)), shape.dynamic(leaves)

    # ----- JAX's AOT and inspection methods -------------------------------------------------
    def _aot(self, what: str, args: tuple, kwargs: dict) -> Any:
        with ahead():  # runs no program: it agrees between processes on its first run
            _, front, dyn = self._prepare(args, kwargs)
            out = aot(front, what)(*dyn)
        if what == "lower":
            return Lowered(out, self._compiled_call, front, qualname(self.__wrapped__))
        return out.value() if out.__class__ is Restore else out

    def _compiled_call(self, args: tuple, kwargs: dict) -> tuple:
        """What ``.lower(...).compile()(*args, **kwargs)`` runs (``_compiled``): the
        variant these arguments select, its arrays, and the outputs' objects put back."""
        _, front, dyn = self._prepare(args, kwargs)
        return front, dyn, {}, _restored

    def lower(self, *args: Any, **kwargs: Any) -> Any:
        """``jax.jit(...).lower`` for this call's arguments."""
        return self._aot("lower", args, kwargs)

    def trace(self, *args: Any, **kwargs: Any) -> Any:
        """``jax.jit(...).trace`` for this call's arguments."""
        return self._aot("trace", args, kwargs)

    def eval_shape(self, *args: Any, **kwargs: Any) -> Any:
        """``jax.jit(...).eval_shape`` for this call's arguments (non-array outputs as they are)."""
        return self._aot("eval_shape", args, kwargs)

    def precompile(self, *args: Any, **kwargs: Any) -> None:
        """Trace and compile for these arguments without running (see ``sf.jit``)."""
        self._aot("precompile", args, kwargs)

    def clear_cache(self) -> None:
        """Drop every compiled program (counters stay)."""
        self._engine.clear_cache()

    def cache_size(self) -> int:
        """JAX's count of compiled executables over all variants."""
        return int(self._engine.cache_size())

    # ----- counters, settings, pickling ------------------------------------------------------
    def __getattr__(self, name: str) -> Any:  # compile_count, recompiles, buckets, ...
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self._engine, name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in TRACKER_SETTINGS:  # max_compiles, warn_compiles: the tracker's
            check_positive(qualname(self.__wrapped__), name, value)
            setattr(self._engine.tracker, name, value)
        else:
            object.__setattr__(self, name, value)

    def __reduce__(self) -> Any:
        return self._engine.reduce(self)

    def __repr__(self) -> str:
        return f"<sf.jit(static='auto') {qualname(self.__wrapped__)}: {self._engine.compile_count} compile(s)>"


# ----- identity-keyed statics ------------------------------------------------------------
_WARNED: set[tuple[str, str]] = set()  # (function, path) that got the identity-key warning


def warn_identity_keyed(function: str, shape: Shape, leaves: list) -> None:
    """One ``sf.StaticFieldWarning`` per function and argument path for a static leaf keyed
    by identity though it may change in place (a ``set``, a plain ``@dataclass``, a plain
    object), as a static field warns: a change inside it reuses the old program."""
    for src, m, path in zip(shape.sources, shape.mask, shape.paths):
        if not m:
            continue
        value = leaves[src] if src.__class__ is int else src.value
        if not identity_keyed(value) or (function, path) in _WARNED:
            continue
        _WARNED.add((function, path))
        t = type(value)
        why = "unhashable" if t.__hash__ is None else "hashed by identity"
        warnings.warn(IDENTITY_ARGUMENT.format(function=function, path=path, why=why, type=t.__qualname__,
                                               a_type=article(t.__qualname__)),
                      StaticFieldWarning, stacklevel=5)



def _binds(sig: inspect.Signature, args: tuple, kwargs: dict) -> bool:
    try:
        sig.bind(*args, **kwargs)
    except TypeError:
        return False
    return True
