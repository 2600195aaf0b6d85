"""JAX's C++ dispatch in front of a function's variants, and what it calls on a miss.

A front (``_core._front``) is the C++ object ``jax.jit`` returns, given a miss handler of
ours: on a hit no Python runs; on a miss the handler chooses the variant as the Python
path would (``_miss``) and answers with what that variant's ``jax.jit`` answers from
JAX's own miss handler, so the front remembers the program. ``Fronts`` is a base of the
engine (``_engine.JitFunction``): ``make_front`` builds one, named as the user's function;
the ``*_front_miss`` methods are the handlers of ``sf.jit``'s front, of
``Cls.method(obj, ...)``'s and of a ``deps="read"`` method's; ``_static_path`` and
``_static_front`` give functions with static arguments a front per tuple of static
values; ``_variant_added`` sends calls back to the Python path past ``FRONT_VARIANTS``
variants.

Imports: ``_core`` (``_front``, ``_deep.rebuild``, ``_flatform``, ``SPECS``, ``hide``),
``_deps`` (the checking mode) and ``_hitpath_static`` (the static-argument hit paths it generates).
Called by the engine's constructor and by ``_hitpath_jit.public_function``; its handlers by
JAX's C++ dispatch.
"""

from __future__ import annotations

import threading
from typing import Any, Callable

import jax

from .._core import _front
from .._core._deep import rebuild
from .._core._flatform import flat_leaves as flat_form
from .._core._registry import SPECS
from .._core._traceback import hide
from .._deps._check import enabled as check_enabled
from ._hitpath_static import static_call, static_front_call

# How many static variants a C++ front serves (see Fronts._variant_added).
FRONT_VARIANTS = 16


class Fronts:
    """The C++ fronts of one jitted function and their misses (see the module docstring)."""

    # Set by the engine: what these methods read.
    fn: Callable[..., Any]
    variants: dict
    deps: Any  # deps="read" without static arguments: its Deps, or None
    leave_front: Callable[[], None] | None
    go_large: Callable[[], None] | None  # set by whoever calls the front: see _large_reached
    large_front: Any
    _fast: dict  # the static-argument Python hit path's variants by type-strict key
    static_fronts: list
    _lock: threading.Lock
    prepare: Callable[[tuple, dict], tuple[Any, list, dict]]
    method_miss: Callable[[Any], tuple[Any, tuple]]
    _not_an_instance: Callable[[Any], None]

    def make_front(self, fun: Callable[..., Any], miss: Callable[..., Any], static_argnums: tuple = (),
                   wrapped: bool = False) -> Any:
        """A C++ jit object in front of the variants, named as the user's function (``None``
        on a JAX without one); ``wrapped``: it takes the user's arguments, so it wraps the
        user's function (``__wrapped__``) as ``jax.jit``'s result does."""
        made = _front.front(getattr(self.fn, "__name__", "fn"), fun, _hidden(miss), static_argnums)
        if made is not None:
            for name in ("__module__", "__name__", "__qualname__", "__doc__"):
                try:
                    setattr(made, name, getattr(self.fn, name))
                except (AttributeError, TypeError):
                    pass
            if wrapped:
                made.__wrapped__ = self.fn
        return made

    def deps_front_miss(self, children: Any, key: Any, *args: Any, **kwargs: Any) -> Any:
        """``obj.method``'s front missed, for a ``deps="read"`` method (called with the
        instance's children and key, the key hashed into JAX's cache key): the program the
        key is installed on now, and its answer from JAX, kept only if the key was still
        installed on that program when the call ended (``Deps.call``; see ``_deps._share``:
        that program then computes for this key what it computes for its base, for good).
        A new key, an aborted trace and a key moved meanwhile are handled there, as on the
        Python path."""
        return self._deps_answer(rebuild(key, children), args, kwargs)

    def large_front_miss(self, shape: Any, leaves: tuple, *args: Any, **kwargs: Any) -> Any:
        """``obj.method``'s front for a large model missed (called with the instance's
        ``Shape``, hashed into JAX's cache key, and its flat leaves: ``_core._flatform``): the
        answer of the variant of the instance rebuilt from them, whose flat arguments are
        these very leaves, in this order, then the call's."""
        jitted, children = self.method_miss(rebuild(shape, leaves))
        return _front.jax_miss(jitted, (children, *args), kwargs)

    def large_python(self, shape: Any, leaves: tuple, *args: Any, **kwargs: Any) -> Any:
        """The same call under ``jax.disable_jit()``: the variant, called as usual."""
        jitted, children = self.method_miss(rebuild(shape, leaves))
        return jitted(children, *args, **kwargs)

    def _deps_answer(self, obj: Any, args: tuple, kwargs: dict) -> Any:
        """A ``deps="read"`` miss: JAX's answer from the program ``obj``'s key is installed
        on at the end of the call (``Deps.call``), then the checking mode's comparison."""
        deps = self.deps
        answer = deps.call(obj, lambda jitted, kids: _front.jax_miss(jitted, (kids, *args), kwargs))
        if check_enabled():  # after the call: its retraces have recorded what they read
            deps.check(obj, args, kwargs)
        return answer

    def _variant_added(self) -> None:
        """Under ``_lock``, after a new variant: past ``FRONT_VARIANTS`` of them, calls leave
        the front for the Python path, which finds the variant by its key in one hashed
        lookup (JAX's C++ cache does not hash pytree metadata, so it would compare every
        cached variant's key in turn on each hit)."""
        if self.leave_front is not None and len(self.variants) > FRONT_VARIANTS:
            leave, self.leave_front = self.leave_front, None
            self.go_large = None  # the Python path it leaves for serves large models too
            leave()  # (its entries stay until clear_cache: this may run inside its own miss)

    def _large_reached(self, args: tuple | list) -> None:
        """A miss of ``sf.jit``'s or ``Cls.method``'s front saw a large model (``_core._flatform``)
        among ``args``: from now on the function's hit path passes large models' flat leaves
        (``go_large``, once; decided here, never on a hit)."""
        if self.go_large is None:
            return
        if any(a.__class__ in SPECS and flat_form(a)[2] for a in args):
            with self._lock:
                go, self.go_large = self.go_large, None
            if go is not None:
                go()

    def front_miss(self, args: tuple, kwargs: dict) -> Any:
        """``sf.jit``'s front missed: choose the variant as the Python path would, and
        answer with what its ``jax.jit`` answers from JAX's miss handler."""
        jitted, dyn, kwargs = self.prepare(args, kwargs)
        answer = _front.jax_miss(jitted, dyn, kwargs)
        self._large_reached(args)
        return answer

    def large_jit_miss(self, *args: Any) -> Any:
        """``sf.jit``'s front for large models missed (``_hitpath_large.large_call``: each argument's
        ``Shape`` or ``None``, static, then its flat leaves or the argument itself): as
        ``front_miss`` for the arguments rebuilt, whose flat arguments are these."""
        return self.front_miss(_large_args(args), {})

    def large_jit_python(self, call: Callable[..., Any]) -> Callable[..., Any]:
        """What that front runs under ``jax.disable_jit()``: ``call`` (the Python hit path)."""
        return lambda *args: call(*_large_args(args))

    def method_front_miss(self, args: tuple, kwargs: dict) -> Any:
        """``Cls.method(obj, ...)``'s front missed: ``obj``'s variant's answer."""
        jitted, children = self.method_miss(args[0])
        answer = _front.jax_miss(jitted, (children, *args[1:]), kwargs)
        self._large_reached(args[:1])
        return answer

    def deps_method_front_miss(self, args: tuple, kwargs: dict) -> Any:
        """``Cls.method(obj, ...)``'s front missed, for a ``deps="read"`` method: as
        ``deps_front_miss`` (the program is kept only if ``obj``'s key was still installed on
        it at the end), and only where JAX flattens ``obj`` to the very leaves its deps
        children hold (else the answer is not kept, and the call is right but slower)."""
        obj = args[0]
        if obj.__class__ not in SPECS:
            self._not_an_instance(obj)
        answer = self._deps_answer(obj, args[1:], kwargs)
        flat_leaves = jax.tree_util.tree_leaves(obj)
        deep_leaves = jax.tree_util.tree_leaves(obj._staticfield_deep[0])
        if answer[1] is not None and (len(flat_leaves) != len(deep_leaves)
                                      or any(a is not b for a, b in zip(flat_leaves, deep_leaves))):
            answer = _front.served(answer[0])
        with self._lock:  # keys installed by Deps count as variants here
            self._variant_added()
        return answer

    def _static_path(self, params: tuple[list[str], dict[str, Any]], static: set[int], bound: bool) -> Any:
        """The static-argument hit path: a C++ front per type-strict static key where JAX's
        C++ dispatch is available, else one dict lookup and the variant."""
        names, defaults = params
        if not _front.available():
            return static_call(self.fn, names, defaults, static, self._fast, self.static_miss, bound=bound)
        fronts: dict[tuple, Any] = {}
        self.static_fronts.append(fronts)  # for clear_cache and the budget (Programs.fronts)
        positions = sorted(static)

        def make(key: tuple, values: tuple) -> Any:
            with self._lock:
                made = fronts.get(key)
                if made is None:
                    made = fronts[key] = self._static_front(positions, values, key[0] if bound else None)
            return made

        return static_front_call(self.fn, names, defaults, static, fronts, make, self.static_miss, bound=bound)

    def _static_front(self, positions: list[int], values: tuple, self_key: Any) -> Any:
        """A C++ front for one tuple of static values (at ``positions``): it takes the other
        arguments (with ``self_key``, ``obj.method``'s: ``self``'s children first); its miss
        puts ``self`` and the static values back and answers with the variant's program
        (see ``_core._front``)."""
        def full(dyn: tuple) -> tuple:
            args = list(dyn)
            if self_key is not None:
                args[0] = rebuild(self_key, args[0])
            for i, value in zip(positions, values):
                args.insert(i, value)
            return tuple(args)

        def miss(*dyn: Any) -> Any:
            jitted, call_dyn, kwargs = self.prepare(full(dyn), {})
            return _front.jax_miss(jitted, call_dyn, kwargs)

        def python(*dyn: Any) -> Any:  # under jax.disable_jit()
            jitted, call_dyn, kwargs = self.prepare(full(dyn), {})
            return jitted(*call_dyn, **kwargs)

        return self.make_front(python, miss)

    def static_miss(self, args: tuple, fast_key: tuple | None) -> Any:
        """The static-argument hit path's miss: the general path; then, where the call's
        static values allow a type-strict ``fast_key``, that key serves the next hit."""
        jitted, dyn, kwargs = self.prepare(args, {})
        out = jitted(*dyn, **kwargs)
        if fast_key is not None:  # only after a call that worked: its variant stays
            self._fast.setdefault(fast_key, jitted)
        return out


def _large_args(args: tuple) -> tuple:
    """The arguments of ``sf.jit``'s large-model front (shapes, then leaves or arguments) as
    the user passed them, each large model rebuilt (``_core._deep.rebuild``)."""
    n = len(args) // 2
    return tuple(a if s is None else rebuild(s, a) for s, a in zip(args[:n], args[n:]))


def _hidden(miss: Callable[..., Any]) -> Callable[..., Any]:
    """``miss`` as a front calls it: what it raises leaves without staticfield's frames."""

    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return miss(*args, **kwargs)
        except Exception as exc:
            hide(exc)
            raise

    return call
