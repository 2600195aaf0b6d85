"""``static="auto"``: the hit's lookup, without any library's Python flatten.

JAX flattens an equinox Module (and any class registered with Python functions) by
calling Python, per node, on every call; on a solver-sized call that is most of what a
hit costs beyond ``jax.jit``'s own. So a hit flattens the call with a *bare* registry,
which knows tuples, lists, dicts, named tuples and ``None`` only: every other object is
one leaf there, looked at by identity. ``Fast``, decided on a miss from the call's full
flatten (``_auto_plan.Shape``), says what each bare leaf is:

- an array (or NumPy scalar): one of the traced leaves, in the canonical order;
- a non-array leaf that JAX's flatten also leaves whole (a Python number, a str, a
  function, a plain object): a static, keyed by the identity's cheaper spellings, as
  ``Shape`` keys it (``==`` for the types where ``exact_eq`` holds, floats by their bits
  in one ``struct`` pack, the identity ``key`` for the rest);
- an object JAX flattens further (an equinox Module, a frozen dataclass, an ``sf``
  instance): only where the call at hand *proves* it cannot change — its class refuses
  attribute assignment (a frozen dataclass, ``eqx.Module``, an ``sf`` class), every
  attribute it holds, however deep, is an immutable value (numbers, strings, tuples,
  frozensets, such objects again) or one the identity keys by the object itself (a
  function, a class, an object whose ``==`` is ``is``), never an array, and every leaf
  of it is static: then its identity (``id``, the object held so the id is never reused
  while the key lives) stands for its whole content, as one key part. A list, a dict, a
  ``functools.partial`` (keyed by its keywords) or a rebindable object anywhere inside,
  in this call, keeps this call's key out (``Fast.learn`` decides per call: an object of
  the same class may hold a list next time), so a change made in place is always seen.
  An object is keyed so from its second call on (met once, it is held weakly): one made
  afresh for each call is never looked into again and again.

The first call of a bare shape decides its ``Fast``; where that call cannot be keyed this
way (``make_fast`` returns ``None``), the shape takes the full path: JAX's flatten of the
whole call and ``Shape``'s lookup, as before.

Imports: ``_core`` (the identity, the registry of ``sf`` classes, code generation), ``_auto_plan``.
"""

from __future__ import annotations

import dataclasses
import enum
import operator
import sys
import threading
import types
import weakref
from typing import Any

import jax

from .._core._frozendict import FrozenDict
from .._core._gen import compile_functions
from .._core._identity import exact_eq, keyed_by_object, leaf_key
from .._core._registry import SPECS
from ._auto_plan import TRACED, Shape, _getter, floats_key, traced_kind

# tuples, lists, dicts, named tuples and None, as JAX's own registry has them; nothing else
bare_flatten = type(jax.tree_util.default_registry)(
    enable_none=True, enable_tuple=True, enable_namedtuple=True, enable_list=True, enable_dict=True).flatten
_full_flatten = jax.tree_util.default_registry.flatten

HELD = 64  # objects keyed by identity per call shape; past that its fast keys start again

_ATOMS = frozenset({int, float, bool, complex, str, bytes, type(None), type(Ellipsis)})
_BY_ITSELF = (types.FunctionType, types.BuiltinFunctionType, type, types.ModuleType, enum.Enum)


# ----- what cannot change ----------------------------------------------------------------
def _setattr_owner(t: type) -> type | None:
    for base in t.__mro__:
        if "__setattr__" in base.__dict__:
            return base
    return None  # pragma: no cover - object defines it


def frozen_class(t: type) -> bool:
    """Whether instances of ``t`` refuse attribute assignment after construction: an
    ``sf`` class, a frozen dataclass whose generated ``__setattr__`` is the one in force,
    or an equinox Module that does not override ``eqx.Module``'s."""
    if t in SPECS:
        return True
    if not dataclasses.is_dataclass(t):
        return False
    owner = _setattr_owner(t)
    params = getattr(owner, "__dataclass_params__", None)
    if params is not None and params.frozen and "__dataclass_fields__" in owner.__dict__:
        return True
    eqx = sys.modules.get("equinox")
    return eqx is not None and owner is getattr(eqx, "Module", None)


def frozen_value(value: Any, budget: list[int] | None = None) -> bool:
    """Whether the identity's key of ``value`` (of each leaf JAX's flatten finds in it, and
    of its structure) cannot change while it is the same object: immutable atoms, tuples,
    frozensets, ``FrozenDict`` and frozen objects (``frozen_class``) of such values, and
    leaves keyed by identity anyway (a function, a class, an object whose ``==`` is ``is``,
    an unhashable leaf: a change inside them is no part of their key). Not: a list, a dict,
    an object whose attributes may be rebound, an array (a traced leaf, never a static)."""
    budget = [10_000] if budget is None else budget
    budget[0] -= 1
    if budget[0] < 0:
        return False
    t = value.__class__
    if t in _ATOMS or isinstance(value, _BY_ITSELF):
        return True
    if isinstance(value, (tuple, frozenset)):
        return all(frozen_value(v, budget) for v in value)
    if isinstance(value, FrozenDict):
        return all(frozen_value(k, budget) and frozen_value(v, budget) for k, v in value.items())
    if frozen_class(t):
        try:
            held = [getattr(value, f.name) for f in dataclasses.fields(value)]
        except AttributeError:  # a field never set
            return False
        if t not in SPECS:  # (an sf instance's flatten reads its fields only)
            held += list(getattr(value, "__dict__", {}).values())  # what a flatten may read besides
        return all(frozen_value(v, budget) for v in held)
    if traced_kind(t):
        return False
    if not keyed_by_object(value):  # the identity's own key: by the object itself, or by what it holds
        return False  # keyed by what it holds (a partial's keywords, a dataclass's fields), which may change
    leaves = _full_flatten(value)[0]
    return len(leaves) == 1 and leaves[0] is value  # a leaf for JAX (an empty list is a node)


# ----- one bare call shape -----------------------------------------------------------------
class Fast:
    """The hit's lookup for one bare shape (bare treedef and leaf types): ``key`` (the
    statics ``==`` keys), ``floats`` (packed by ``pack``), ``strict`` (by the identity's
    ``leaf_key``), ``objects`` (by ``id``, held in ``held``), ``dynamic`` (the traced
    leaves in canonical order); ``fronts`` maps the key to the variant's C++ front."""

    __slots__ = ("plan", "simple", "key", "floats", "pack", "strict", "objects", "dynamic", "key_source", "keyof",
                 "fronts", "held", "seen", "lock", "hit")

    def lookup(self, leaves: list) -> Any:
        """The key ``fronts`` is looked up by: ``keyof``, compiled from ``key_source``, the
        one spelling the generated hit (``_auto_hit``) compiles too; ``None`` where it must
        not be kept: a NaN (its calls take the full path, keyed by the identity)."""
        if any(x != x for x in self.floats(leaves)):
            return None
        return self.keyof(leaves)

    def learn(self, shape: Shape, leaves: list, full: list, front: Any) -> None:
        """Keep ``front`` for this call's key, holding the objects its ids stand for (a key
        lives only while they do: ``fronts`` is emptied before ``held``); only where this
        very call (``shape``, its ``full`` leaves) is keyed as the first call of this bare
        shape was (an object of the same class may hold an array or a list), and only for
        objects met before (``seen``, weakly): an object made afresh for each call is never
        looked into again and again, nor kept alive. An object that refuses a weak
        reference is never keyed by identity."""
        try:
            self._learn(shape, leaves, full, front)
        except Exception:  # noqa: BLE001 - a speed-up only: the call keeps the full path
            return

    def _learn(self, shape: Shape, leaves: list, full: list, front: Any) -> None:
        objects = self.objects(leaves)
        met = True
        for obj in objects:  # met before: held weakly, so an object made afresh for each call dies as it would
            ref = self.seen.get(id(obj))
            if ref is None or ref() is not obj:
                met = False
                with self.lock:
                    if len(self.seen) >= HELD:
                        self.seen.clear()
                    self.seen[id(obj)] = weakref.ref(obj)
        if not met:
            return
        this = make_fast(shape, leaves, full)
        if this is None or this.plan != self.plan:
            return
        key = self.lookup(leaves)
        if key is None:
            return
        with self.lock:
            if len(self.held) + len(objects) > HELD:
                self.fronts.clear()
                self.held.clear()
            for obj in objects:
                self.held[id(obj)] = obj
            self.fronts[key] = front


def make_fast(shape: Shape, leaves: list, full: list) -> Fast | None:
    """The bare shape's ``Fast``, from a call's bare ``leaves`` and its ``full`` leaves (JAX's
    flatten, which ``shape`` was decided from); ``None`` where a bare leaf is an object
    that may change, or holds an array or a traced leaf."""
    mask_of = {src: m for src, m in zip(shape.sources, shape.mask) if src.__class__ is int}
    bare_of: dict[int, int] = {}  # a full leaf's index -> its bare index (for the traced ones)
    plain, floats, strict, objects = [], [], [], []
    start = 0
    for j, leaf in enumerate(leaves):
        sub, treedef = _full_flatten(leaf)
        stop = start + len(sub)
        if stop > len(full) or any(a is not b for a, b in zip(sub, full[start:stop])):
            return None  # pragma: no cover - the two flattens walk the call differently
        if len(sub) == 1 and sub[0] is leaf:  # a leaf of JAX's flatten too
            m = mask_of.get(start)
            if m is None:
                return None  # pragma: no cover
            if m == TRACED:
                bare_of[start] = j
            elif traced_kind(type(leaf)):
                return None  # pragma: no cover - an array kept static
            elif type(leaf) is float:
                floats.append(j)
            elif exact_eq(type(leaf)):
                plain.append(j)
            else:
                strict.append(j)
        else:  # an object JAX flattens further: by identity, where it cannot change
            if any(mask_of.get(i) in (None, TRACED) for i in range(start, stop)) or not frozen_value(leaf):
                return None
            objects.append(j)
        start = stop
    if start != len(full):
        return None  # pragma: no cover
    traced = [src for src, m in zip(shape.sources, shape.mask) if not m]
    if any(src.__class__ is not int or src not in bare_of for src in traced):
        return None  # pragma: no cover
    fast = Fast()
    fast.plan = (tuple(plain), tuple(floats), tuple(strict), tuple(objects), tuple(bare_of[src] for src in traced))
    fast.simple = not floats and not strict  # the key: the == statics, then the ids
    fast.key = len if not plain else operator.itemgetter(*plain)
    fast.floats, fast.pack = _getter(floats), floats_key(len(floats))
    fast.strict, fast.objects = _getter(strict), _getter(objects)
    fast.dynamic = _getter([bare_of[src] for src in traced])
    fast.key_source = KEY_SIMPLE if fast.simple else KEY_KEYED
    fast.keyof = compile_functions(["def keyof(bare):", f"    return {fast.key_source}"], ["keyof"],
                                   key_namespace(fast), what="static=\"auto\" key")["keyof"]
    fast.fronts, fast.held, fast.seen, fast.lock = {}, {}, {}, threading.Lock()
    fast.hit = None  # the generated hit function of this shape (_auto_hit), once it has a front
    return fast


# The key of a bare call's leaves ``bare``, one flat tuple (the statics ``==`` keys, the
# floats' bits, the identity's keys, the objects' ids last), in the names of
# ``key_namespace``: ``Fast.keyof`` and the generated hit compile this one spelling.
KEY_SIMPLE = "(key(bare), *map(id, objects(bare)))"
KEY_KEYED = "(key(bare), pack(*floats(bare)), *map(leaf_key, strict(bare)), *map(id, objects(bare)))"


def key_namespace(fast: Fast) -> dict[str, Any]:
    """What ``KEY_SIMPLE`` and ``KEY_KEYED`` name, for ``fast``'s shape."""
    return {"key": fast.key, "pack": fast.pack, "floats": fast.floats, "strict": fast.strict,
            "objects": fast.objects, "leaf_key": leaf_key}
