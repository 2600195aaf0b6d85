"""The miss path: from a call's key to its variant, made on first sight.

A variant is one ``jax.jit`` per static key: the key of ``self`` for a method without
static arguments (``method_miss``), else a tuple with one part per argument (a static
argument's type-strict key, an instance's static key, or ``None``) and the static keywords
(``parts``, ``prepare``, ``general_miss``); ``variant`` makes one from a recorded key
alone (``sf.warmup``), ``auto_variant`` one of ``static="auto"``'s call shapes.
``Misses`` is a base of the engine (``_engine.JitFunction``). A new variant is made in
three named steps (``_make_jitted``): its ``jax.jit`` (``_variant``), wrapped for the
program store (``_store.stored``), behind a C++ front of its own (``_fronts``).

Imports: ``_core`` (keys, ``SPECS``, the cached flatten), ``_store`` (``stored``,
``StoredJit``), ``_deps`` (for types), ``_agreement``, ``_auto_plan``, ``_variant`` and
``_traced`` (the store's hooks, and the chain of explanations), ``_transformed`` (compiles
under a transformation applied outside). Called by the hit paths
on a miss (``_hitpath``, ``_bound``, ``_fronts``), by ``_programs`` and by ``sf.warmup``.
"""

from __future__ import annotations

import functools
import threading
from typing import Any, Callable

from .._core import _lowering
from .._core._keys import StaticArgKey
from .._core._registry import SPECS
from .._core._state import flat
from .._deps._share import Deps
from .._explain._describe import arg_name
from .._store import StoredJit, stored
from ._agreement import agreeing
from ._args import qualname
from ._auto_options import variant_options
from ._auto_plan import AutoKey, signature_of
from ._traced import VariantHooks, chain
from ._transformed import watching
from ._variant import Split, StaticArg, make_jitted


class Misses:
    """A function's variants by key, and how a new one is made (see the module docstring)."""

    # Set by the engine: what these methods read.
    fn: Callable[..., Any]
    variants: dict
    fast: bool
    method: bool
    names: list
    star: str | None
    static_pos: Any
    static_names: Any
    deps: Any  # deps="read" without static arguments: its Deps, or None
    rest_deps: Any  # deps="read" with static arguments: its RestDeps, or None
    bucket_spec: Any
    auto_signature: Any
    _jit_kwargs: dict
    _lock: threading.Lock
    _traced: Callable[..., Any]
    _remembered: Callable[..., Any]
    make_front: Callable[..., Any]
    _variant_added: Callable[[], None]
    _not_an_instance: Callable[[Any], None]

    def parts(self, args: tuple, kwargs: dict) -> tuple[list, dict]:
        """Per argument its key part (static key, instance key, or ``None``), then the static
        keywords as ``(name, key)``; and the keywords left for JAX."""
        static_pos = self.static_pos
        parts: list[Any] = []
        for i, a in enumerate(args):
            if i in static_pos:
                parts.append(self._static_key(a, self._arg_name(i)))
            elif a.__class__ in SPECS:
                parts.append(flat(a)[1])
            else:
                if self.method and i == 0:
                    self._not_an_instance(a)
                parts.append(None)
        if self.static_names and kwargs:
            kwargs = dict(kwargs)
            for name in sorted(self.static_names.intersection(kwargs)):
                parts.append((name, self._static_key(kwargs.pop(name), name)))
        return parts, kwargs

    def prepare(self, args: tuple, kwargs: dict) -> tuple[Any, list, dict]:
        """Pick the variant for these arguments; return it with what JAX should see."""
        static_pos = self.static_pos
        parts, kwargs = self.parts(args, kwargs)
        vkey = tuple(parts)
        try:
            jitted, split = self.variants[vkey]
        except KeyError:
            jitted, split = self.general_miss(vkey, args, parts)
        dyn = list(args)
        for i in static_pos:
            if i < len(dyn):
                dyn[i] = None
        for i in split:
            dyn[i] = flat(args[i])[0]
        return jitted, dyn, kwargs

    def method_miss(self, obj: Any) -> tuple[Any, tuple]:
        """The variant's jit for ``obj``'s static key (made on first sight), and ``obj``'s children."""
        if obj.__class__ not in SPECS:
            self._not_an_instance(obj)
        if self.deps is not None:
            return self.deps.miss(obj)
        children, key = flat(obj)
        entry = self.variants.get(key)
        if entry is None:
            with self._lock:
                entry = self.variants.get(key)
                if entry is None:
                    entry = self.variants[key] = (self._make_method_jitted(key), (0,))
                    self._variant_added()
        return entry[0], children

    def general_miss(self, vkey: tuple, args: tuple, parts: list) -> tuple[Any, tuple]:
        with self._lock:
            if vkey in self.variants:
                return self.variants[vkey]
            layout: dict[int, Any] = {}
            for i, a in enumerate(args):
                if i in self.static_pos:
                    layout[i] = StaticArg(a)
                elif parts[i] is not None:
                    layout[i] = Split(SPECS[a.__class__], parts[i])
            split = tuple(i for i, entry in layout.items() if isinstance(entry, Split))
            static_kwargs = tuple((name, key.raw) for name, key in parts[len(args):])
            entry = self.variants[vkey] = (self._make_jitted(vkey, layout, static_kwargs), split)
            self._variant_added()
            return entry

    def variant(self, vkey: Any) -> Any:
        """The ``jax.jit`` of variant ``vkey``, made from the key alone when it is new (for
        ``sf.warmup``, which has a recorded key and no arguments; under ``deps="read"``,
        the variant of that base key, whose trace or stored key says what it reads)."""
        if self.deps is not None:
            return self.deps.made(vkey)[0]
        if isinstance(vkey, AutoKey):
            return self.auto_variant(vkey)
        if self.rest_deps is not None:
            return self.rest_deps.made(vkey)
        entry = self.variants.get(vkey)
        if entry is not None:
            return entry[0]
        with self._lock:
            entry = self.variants.get(vkey)
            if entry is None and self.fast:
                entry = self.variants[vkey] = (self._make_method_jitted(vkey), (0,))
            elif entry is None:
                parts = vkey if isinstance(vkey, tuple) else (vkey,)
                positional = [p for p in parts if not isinstance(p, tuple)]
                layout: dict[int, Any] = {}
                for i, part in enumerate(positional):
                    if i in self.static_pos:
                        layout[i] = StaticArg(part.raw)
                    elif part is not None:
                        layout[i] = Split(SPECS[part.cls], part)
                split = tuple(i for i, e in layout.items() if isinstance(e, Split))
                static_kwargs = tuple((name, key.raw) for name, key in parts[len(positional):])
                entry = self.variants[vkey] = (self._make_jitted(vkey, layout, static_kwargs), split)
        return entry[0]

    def auto_variant(self, vkey: AutoKey) -> Any:
        """``static="auto"``: the front of variant ``vkey`` (made on first sight), which takes
        the call's traced leaves (see ``_auto_plan``)."""
        entry = self.variants.get(vkey)
        if entry is None:
            with self._lock:
                entry = self.variants.get(vkey)
                if entry is None:
                    entry = self.variants[vkey] = (self._make_jitted(vkey, {}, ()), ())
        return entry[0]

    def _make_method_jitted(self, key: Any) -> Any:
        """The variant of a method called with only ``self``'s key as static (``key.cls``'s)."""
        return self._make_jitted(key, {0: Split(SPECS[key.cls], key)}, ())

    def _make_jitted(self, vkey: Any, layout: dict[int, Any], static_kwargs: tuple) -> Any:
        """A new variant, in three named steps:

        1. ``_variant_jit``: its ``jax.jit`` of a wrapper that rebuilds the instances from
           their children and the key while JAX traces it, and runs ``_traced``;
        2. ``stored``: with a program store, that ``jax.jit`` as a ``StoredJit``, which loads
           a stored program, or compiles and writes one (``_store``; else it is unchanged);
        3. ``_variant_front``: behind a C++ front of its own, which every call path calls
           (``_front.unwrap`` gives the ``jax.jit`` back).
        """
        deps, base = self._deps_of(vkey)
        jitted = self._variant_jit(vkey, layout, static_kwargs, deps)
        jitted = stored(jitted, self.fn, vkey, self._jit_kwargs, VariantHooks(self, vkey, deps, base))
        return self._variant_front(jitted, deps, base)

    def _variant_jit(self, vkey: Any, layout: dict[int, Any], static_kwargs: tuple, deps: Deps | None) -> Any:
        """The variant's ``jax.jit`` (see ``_variant``), its recompiles explained as
        ``deps="read"`` and buckets rewrite them."""
        auto = None
        if isinstance(vkey, AutoKey):
            donating = any(self._jit_kwargs.get(k) is not None for k in ("donate_argnums", "donate_argnames"))
            auto = signature_of(vkey, self.auto_signature, donating)
        spec = self.bucket_spec
        explain = chain(deps.explain if deps is not None else None,
                        chain(spec.explain, _without(spec.mask)) if spec is not None else None)
        auto_call = functools.partial(vkey.user_call, self.auto_signature) if auto is not None else None
        options = variant_options(vkey, self.auto_signature, self._jit_kwargs) if auto is not None else self._jit_kwargs
        return make_jitted(self.fn, layout, static_kwargs, functools.partial(self._traced, vkey), options,
                           self.static_pos, explain, auto, auto_call)

    def _variant_front(self, jitted: Any, deps: Deps | None, base: Any) -> Any:
        """``jitted`` behind a C++ front of its own (``jitted`` itself on a JAX without one)."""
        # With a store, the store chooses each signature's program (StoredJit.answer, counted
        # by the store); else JAX's own miss, whose program is remembered for cache_size.
        box: list = [jitted, None]
        miss = jitted.answer if isinstance(jitted, StoredJit) else functools.partial(self._remembered, box)
        # What it lowers is one program on every process of a job (_core._lowering).
        miss = _lowering.alike(miss)
        # Its first run of a program prepared ahead (sf.warmup, precompile) agrees between processes.
        # A call under a transformation applied outside (an eager jax.vmap) misses every time:
        # the programs JAX compiles of this variant meanwhile count (_transformed).
        front = self.make_front(jitted, agreeing(self, jitted, watching(self, jitted, miss), deps, base))
        if front is None:
            return jitted
        front.__sf_jit__ = jitted
        box[1] = front
        return front

    def _deps_of(self, vkey: Any) -> tuple[Deps | None, Any]:
        """The ``Deps`` that shares variant ``vkey``'s programs (``None`` for ``deps="all"``),
        and the base key it knows the variant by."""
        return (self.deps, vkey) if self.rest_deps is None else self.rest_deps.of(vkey)

    def _arg_name(self, i: int) -> str:
        return arg_name(self.names, i, self.star)

    def _static_key(self, value: Any, name: str) -> Any:
        try:
            hash(value)
            return StaticArgKey(value)
        except TypeError:
            raise TypeError(
                f"{qualname(self.fn)}: the static argument `{name}` is an unhashable "
                f"{type(value).__name__}, so it cannot be part of the jit cache key. Pass a "
                "tuple/frozenset or an @sf.dataclass instance, or make it a traced argument."
            ) from None


def _without(name: str | None) -> Callable[[list], list] | None:
    """``sf.watch``'s changes without those of the argument ``name`` (``mask="valid"``'s
    ``valid``, which staticfield passes: never a change of the user's)."""
    if not name:
        return None
    return lambda changes: [c for c in changes if c.path.split(".", 1)[0].split("[", 1)[0] != name]
