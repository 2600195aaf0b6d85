"""``deps="read"`` with static arguments (``static_argnums``/``static_argnames``).

The other arguments' key parts (their static values, and the static keys of other
instances passed) are compared exactly: for each distinct *rest* of them there is one
``Deps`` (``_deps/_share``), which shares programs among the keys of ``self`` that agree
on the statics read, as it does for a method without static arguments. So a program is
shared only by calls whose static arguments are type-strictly equal and whose ``self``
agrees on every static the method read; ``Deps``'s invariant holds per rest.

A variant's ``jax.jit`` is made by the engine from the layout the rest describes
(``StaticArg`` for static positions, ``Split`` for instances), with the vkey
``RestKey(rest, key)``, which the engine's trace wrapper maps back to this rest's
``Deps`` and its base key.
"""

from __future__ import annotations

import threading
from typing import Any, Callable, NamedTuple

from .._core import _front
from .._core._deep import rebuild
from .._core._registry import SPECS
from .._core._state import flat
from .._deps import _check
from .._deps._share import Abort, Deps
from ._hitpath_static import static_front_call
from ._programs import aot
from ._variant import Split, StaticArg


class RestKey(NamedTuple):
    """The vkey of a variant of a method with static arguments under ``deps="read"``."""

    rest: tuple
    key: Any


class RestDeps:
    """The ``Deps`` of each rest of one method's arguments, and its call path."""

    def __init__(self, engine: Any) -> None:
        self.engine = engine
        self.by_rest: dict[tuple, Deps] = {}
        self.lock = threading.Lock()

    def deps_for(self, rest: tuple) -> Deps:
        deps = self.by_rest.get(rest)
        if deps is None:
            with self.lock:
                deps = self.by_rest.get(rest)
                if deps is None:
                    e = self.engine
                    deps = self.by_rest[rest] = Deps(
                        {}, lambda key: self._make(rest, key), e.names[0], e._not_an_instance,
                        e.fn, e.tracker.function, static_pos=e.static_pos, static_names=e.static_names)
        return deps

    def _make(self, rest: tuple, key: Any) -> Any:
        positional, keywords = rest
        layout: dict[int, Any] = {0: Split(SPECS[key.cls], key)}
        for i, part in enumerate(positional, 1):
            if i in self.engine.static_pos:
                layout[i] = StaticArg(part.raw)
            elif part is not None:
                layout[i] = Split(SPECS[part.cls], part)
        static_kwargs = tuple((name, part.raw) for name, part in keywords)
        return self.engine._make_jitted(RestKey(rest, key), layout, static_kwargs)

    def made(self, vkey: Any) -> Any:
        """The ``jax.jit`` of variant ``vkey`` (a recorded ``RestKey``), made when it is new."""
        if not isinstance(vkey, RestKey):
            raise TypeError(f"a record of {self.engine.tracker.function} names no variant of it")
        return self.deps_for(vkey.rest).made(vkey.key)[0]

    def of(self, vkey: RestKey) -> tuple[Deps, Any]:
        """The ``Deps`` and base key of a variant made here."""
        return self.by_rest[vkey.rest], vkey.key

    def entries(self) -> list[tuple[Any, tuple]]:
        """Every group's variant entries."""
        return [entry for deps in list(self.by_rest.values()) for entry in list(deps.variants.values())]

    # ----- calls ---------------------------------------------------------------------------
    def parts_of(self, args: tuple, kwargs: dict) -> tuple[Deps, Any, list, dict]:
        """This call's ``Deps``, ``self``, and what a variant's ``jax.jit`` takes after
        ``self``'s children: the other arguments, and the keywords left for JAX."""
        e = self.engine
        if not args or args[0].__class__ not in SPECS:
            e._not_an_instance(args[0] if args else None)
        parts, jax_kwargs = e.parts(args, kwargs)
        n = len(args)
        deps = self.deps_for((tuple(parts[1:n]), tuple(parts[n:])))
        dyn = [None if i in e.static_pos else flat(a)[0] if parts[i] is not None else a
               for i, a in enumerate(args) if i]
        return deps, args[0], dyn, jax_kwargs

    def prepare(self, args: tuple, kwargs: dict) -> tuple[Deps, Any, Callable[[Any, tuple], Any]]:
        """This call's ``Deps``, ``self``, and how to call a variant's ``jax.jit`` with it."""
        deps, obj, dyn, jax_kwargs = self.parts_of(args, kwargs)
        return deps, obj, lambda jitted, children: jitted(children, *dyn, **jax_kwargs)

    def call(self, *args: Any, **kwargs: Any) -> Any:
        deps, obj, invoke = self.prepare(args, kwargs)
        children, key = obj._staticfield_deep
        entry = deps.variants.get(key)
        if entry is not None:  # the hit: no lock, as in the generated deps hit paths
            try:
                out = invoke(entry[0], children)
            except Abort:
                pass
            else:
                if deps.variants.get(key) is entry:
                    return out
        out = deps.call(obj, invoke)
        if _check.enabled():
            deps.check(obj, args[1:], kwargs)
        return out

    # ----- obj.method's hit path: one lookup of the static values, then a C++ front ------------
    def bound_path(self, params: tuple[list[str], dict[str, Any]], static: set[int]) -> Any:
        """``obj.method`` of the method: one type-strict lookup of the static values, then a
        C++ front of theirs that takes ``self``'s deps children and key (hashed into JAX's
        cache key, as the engine's ``deps_front`` takes them): one Python call per hit."""
        e = self.engine
        names, defaults = params
        fronts: dict[tuple, Any] = {}
        e.static_fronts.append(fronts)  # for clear_cache and the budget (Programs.fronts)
        positions = sorted(static)

        def make(key: tuple, values: tuple) -> Any:
            with e._lock:
                made = fronts.get(key)
                if made is None:
                    made = fronts[key] = self._front(positions, values)
            return made

        return static_front_call(e.fn, names, defaults, static, fronts, make,
                                 lambda args, _: self.call(*args), bound=True, deps=True)

    def _front(self, positions: list[int], values: tuple) -> Any:
        """The front of one tuple of static values: its miss answers as the engine's
        ``deps_front_miss`` does (the program the key is installed on at the end of the
        call, kept only then), for this rest of the arguments' ``Deps``."""
        def full(children: Any, key: Any, dyn: tuple) -> tuple:
            args = [rebuild(key, children), *dyn]
            for i, value in zip(positions, values):
                args.insert(i, value)
            return tuple(args)

        def miss(children: Any, key: Any, *dyn: Any) -> Any:
            args = full(children, key, dyn)
            deps, obj, call_dyn, jax_kwargs = self.parts_of(args, {})
            answer = deps.call(obj, lambda jitted, kids: _front.jax_miss(jitted, (kids, *call_dyn), jax_kwargs))
            if _check.enabled():  # after the call: its retraces have recorded what they read
                deps.check(obj, args[1:], {})
            return answer

        def python(children: Any, key: Any, *dyn: Any) -> Any:  # under jax.disable_jit()
            return self.call(*full(children, key, dyn))

        return self.engine.make_front(python, miss, (1,))

    def aot(self, what: str, args: tuple, kwargs: dict) -> Any:
        deps, obj, invoke = self.prepare(args, kwargs)
        return deps.call(obj, lambda jitted, children: invoke(aot(jitted, what), children))
