"""The one owner of per-instance state: what an instance's ``__dict__`` holds, and who writes it.

An instance is *building* while a custom ``__init__`` or a ``__post_init__`` runs
(its ``id`` is in ``BUILDING``: assignment is allowed and converts), then it is
*sealed* once, by ``seal``: every construction path ends there or in a generated
equivalent, and a sealed instance never changes. Its real ``__dict__``
(``obj._staticfield_dict``; ``vars(obj)`` shows the fields alone, see ``_vars``) holds:

- the field values (the user's data), and, derived from them,
- ``_staticfield_key``: the ``StaticKey`` (JAX's aux_data);
- ``_staticfield_flat``: ``(children, key)``, what JAX's flatten returns;
- ``_staticfield_deep``: ``deps="read"``'s flatten, nested statics lifted (``_deep``);
- ``_staticfield_leaves``: a large model's flat form, ``(leaves, Shape, large)``, or
  ``NOT_FLAT`` where a list or dict lies below (``_flatform.flat_leaves``, made from the nested
  instances' own, never at construction), or the count of the instance's first uses by a
  call form (``_flatform.used``, which makes it on a later use);
- cached bindings: ``obj.method`` of a descriptor that binds once per instance,
  stored under a name private to that descriptor (``cache_binding``), never under the
  method's name: the descriptor is consulted on every ``obj.method``, so what runs is
  what ``type(obj)`` resolves the name to now.

Derived entries are a pure function of the fields, so any of them may be dropped
and rebuilt at any time. Which path writes (W), copies (C) or clears (X) what:

==================================  ========  ======  ======  ======  ========
path                                fields    key     flat    deep,   bindings
                                                              leaves
==================================  ========  ======  ======  ======  ========
generated ``__init__``              W         W [1]   W [1]   --      --
``__init__`` again on a live one    X then W  X       X       X       X
custom ``__init__``/post_init+seal  W [2]     X, W[1] X       X       X
``replace`` (``derive``)            C, W      C [3]   --      --      --
``__copy__``                        C         --      --      --      --
``__setstate__`` (pickle, deepcopy) W [4]     --      --      --      --
unflatten (generated)               W         W       W       --      --
first flatten / ``make_key``        --        W       W       --      --
first ``deps="read"``, later uses   --        --      --      W [8]   --
``cache_binding``                   --        --      --      --      W [5]
``object.__setattr__``, built       W [6]     X       X       X [7]   X [7]
==================================  ========  ======  ======  ======  ========

[1] only when the key is a constant (no static fields). [2] converters run on
assignment while building; ``seal`` fills defaults, freezes statics and checks
leaves. [3] only when no static field changed. [4] fields only: cached entries in
a pickled state are never trusted. [5] only on a sealed instance. [6] checked as
``replace`` checks, no converter; while building, ``FieldSlot`` writes it as is. [7]
bindings held elsewhere are re-pointed at the instance; instances that lifted its
statics into their own ``deps="read"`` flatten, or cached its leaves in their flat form,
drop those and their bindings. [8] ``_deep`` (``DeepCache``) and ``_flatform``, from the
nested instances' own entries; an instance whose entry holds nested ones is registered
with ``_sealed.hold_deep`` (so [7] reaches it), or keeps no such entry.

This module writes the construction rows (and the flatten cache, and bindings);
``_sealed`` the rows after it (``replace``, ``__copy__``, ``__setstate__``,
``object.__setattr__`` on a built instance); ``_deep`` and ``_flatform`` the deep and leaves entries.
Nothing outside these modules and the code ``_codegen`` generates from them writes or
clears these entries.

Imports: ``_checks``, ``_errors``, ``_registry``, ``_slots``, ``_spec`` and ``_vars``.
Called by the generated ``__init__`` (``prepare``, ``finish_other``, ``build``,
``check_init``: pickles name them here), ``_decorator``, ``_instance``, ``_sealed``, and
every room that reads an instance's cached flatten (``flat``).
"""

from __future__ import annotations

import dataclasses
import operator
from typing import Any, Callable

from . import _errors, _slots, _vars
from ._checks import store
from ._spec import Spec, spec_of
from ._registry import SPEC_ATTR

KEY_ATTR = "_staticfield_key"
FLAT_ATTR = "_staticfield_flat"
DEEP_ATTR = "_staticfield_deep"  # deps="read": the flatten with nested statics lifted (_deep)
LEAVES_ATTR = "_staticfield_leaves"  # large models: every leaf, and one interned Shape (_flatform)
DERIVED = (KEY_ATTR, FLAT_ATTR, DEEP_ATTR, LEAVES_ATTR)
RESERVED = (*DERIVED, _vars.REAL_ATTR)  # names no field may take
flat = operator.attrgetter(FLAT_ATTR)  # an instance's cached (children, static key)

# ids of instances under construction (custom __init__ or __post_init__ running).
BUILDING: set[int] = set()

# prepare()'s answers to a generated __init__ that is not on its fast path.
FRESH, NESTED, OTHER = 0, 1, 2


def spec_of_type(cls: type) -> Spec:
    return spec_of(cls)


class FlatCache:
    """Non-data descriptor: ``obj._staticfield_flat`` computed once, then an instance-dict hit."""

    __slots__ = ("spec",)

    def __init__(self, spec: Spec) -> None:
        self.spec = spec

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        if obj is None:
            return self
        if obj.__class__ is self.spec.cls:
            return self.spec.flat(obj)
        return spec_of(obj).flat(obj)  # a decorated subclass, or the undecorated-subclass error


def install(spec: Spec) -> None:
    """Give a decorated class the descriptor that fills its instances' flatten cache, and
    a ``FieldSlot`` under each field name (see ``_slots``)."""
    setattr(spec.cls, FLAT_ATTR, FlatCache(spec))
    _slots.install(spec.cls, list(spec.fields), SPEC_ATTR)
    _vars.install(spec.cls)


def key_of(spec: Spec, obj: Any) -> Any:
    """The instance's ``StaticKey``, built (and cached) on first use."""
    try:
        return obj._staticfield_dict[KEY_ATTR]
    except KeyError:
        return spec.make_key(obj)


def prepare(obj: Any, cls: type) -> int:
    """For a generated ``cls.__init__`` called on ``obj`` that is not a fresh ``cls``.

    ``NESTED``: a subclass's custom ``__init__`` called ``super().__init__`` (it seals);
    ``OTHER``: ``obj`` is an instance of a decorated subclass (seal by its own spec);
    ``FRESH``: ``__init__`` called again on a live instance, whose state is dropped.
    """
    if id(obj) in BUILDING:
        return NESTED
    if obj.__class__ is not cls:
        spec_of_type(obj.__class__)  # an undecorated subclass: say to decorate it
        obj._staticfield_dict.clear()
        return OTHER
    obj._staticfield_dict.clear()
    return FRESH


def finish_other(obj: Any, mode: int, initvars: tuple) -> None:
    """The end of a generated ``__init__`` in ``NESTED`` or ``OTHER`` mode."""
    post_init = getattr(obj, "__post_init__", None)
    if mode == NESTED:
        if post_init is not None:
            post_init(*initvars)
        return
    build(obj, post_init, initvars) if post_init is not None else seal(obj)


def build(obj: Any, fn: Callable[..., Any], args: tuple, kwargs: dict | None = None) -> None:
    """Run ``fn`` (a custom ``__init__`` or ``__post_init__``) with ``obj`` building, then seal.

    Nested calls (a subclass's ``__init__`` calling ``super().__init__``) just run:
    the outermost one seals.
    """
    i = id(obj)
    if i in BUILDING:
        fn(*args, **(kwargs or {}))
        return
    BUILDING.add(i)
    try:
        fn(*args, **(kwargs or {}))
    finally:
        BUILDING.discard(i)
    seal(obj)


def init_custom(cls: type, user_init: Callable[..., None], obj: Any, args: tuple, kwargs: dict) -> None:
    """A user-written ``__init__`` (of ``cls`` or inherited): building, then sealed."""
    if obj.__class__ is not cls:
        spec_of_type(obj.__class__)
    if id(obj) not in BUILDING and obj._staticfield_dict:
        obj._staticfield_dict.clear()  # __init__ again on a live instance: start over
    build(obj, user_init, (obj, *args), kwargs)


def setattr_building(obj: Any, name: str, value: Any) -> None:
    """``self.name = value`` while building: a field's converter runs now."""
    spec = spec_of_type(obj.__class__)
    conv = spec.converters.get(name)
    obj._staticfield_dict[name] = conv(value) if conv is not None else value


def _building(obj: Any) -> bool:
    return id(obj) in BUILDING


def _refuse_delete(obj: Any, name: str) -> None:
    raise _errors.frozen_error(spec_of_type(obj.__class__).cls, name, deleting=True)


_slots.FieldSlot.building = staticmethod(_building)
_slots.FieldSlot.refuse_delete = staticmethod(_refuse_delete)


def seal(obj: Any) -> None:
    """End construction: drop derived entries, fill defaults, freeze and check every field,
    set a constant key, run ``__check_init__``. Raises on missing or non-field attributes."""
    spec = spec_of_type(obj.__class__)
    d = obj._staticfield_dict
    for name in DERIVED:
        d.pop(name, None)
    extra = [n for n in d if n not in spec.name_set]
    if extra:
        d.clear()
        raise TypeError(_errors.NOT_A_FIELD_ATTR.format(cls=spec.cls.__qualname__, name=extra[0]))
    missing = []
    for f in spec.fields:
        if f.name in d:
            continue
        if f.default is not dataclasses.MISSING:
            d[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            d[f.name] = f.default_factory()
        else:
            missing.append(f.name)
            continue
        conv = spec.converters.get(f.name)
        if conv is not None:
            d[f.name] = conv(d[f.name])
    if missing:
        d.clear()
        names = ", ".join(repr(m) for m in missing)
        raise TypeError(_errors.MISSING_AFTER_INIT.format(cls=spec.cls.__qualname__, names=names))
    for name in spec.names:
        store(spec, obj, name, d[name], convert=False)
    if spec.constant_key is not None:
        d[KEY_ATTR] = spec.constant_key
    check_init(spec, obj)


def check_init(spec: Any, obj: Any) -> None:
    """Run each ``__check_init__`` of the MRO, the class's own first (equinox's order)."""
    for fn in spec.check_inits:
        fn(obj)


def cache_binding(obj: Any, slot: str, value: Any) -> Any:
    """Keep ``value`` under the descriptor's private ``slot`` when ``obj`` is sealed."""
    if id(obj) not in BUILDING:
        obj._staticfield_dict[slot] = value
    return value


