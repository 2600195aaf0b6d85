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
- cached bindings: ``obj.method`` of a descriptor that binds once per instance,
  stored under a name private to that descriptor (``cache_binding``), never under the
  method's name: the descriptor is consulted on every ``obj.method``, so what runs is
  what ``type(obj)`` resolves the name to now.

Derived entries are a pure function of the fields, so any of them may be dropped
and rebuilt at any time. Which path writes (W), copies (C) or clears (X) what:

==================================  ========  ======  ======  ========
path                                fields    key     flat    bindings
==================================  ========  ======  ======  ========
generated ``__init__``              W         W [1]   W [1]   --
``__init__`` again on a live one    X then W  X       X       X
custom ``__init__``/post_init+seal  W [2]     X, W[1] X       X
``replace`` (``derive``)            C, W      C [3]   --      --
``__copy__``                        C         --      --      --
``__setstate__`` (pickle, deepcopy) W [4]     --      --      --
unflatten (generated)               W         W       W       --
first flatten / ``make_key``        --        W       W       --
``cache_binding``                   --        --      --      W [5]
``object.__setattr__``, built       W [6]     X       X       X [7]
==================================  ========  ======  ======  ========

[1] only when the key is a constant (no static fields). [2] converters run on
assignment while building; ``seal`` fills defaults, freezes statics and checks
leaves. [3] only when no static field changed. [4] fields only: cached entries in
a pickled state are never trusted. [5] only on a sealed instance. [6] checked as
``replace`` checks, no converter; while building, ``FieldSlot`` writes it as is. [7]
bindings held elsewhere are re-pointed at the instance; instances that lifted its
statics into their own ``deps="read"`` flatten drop that flatten and their bindings.

Nothing outside this module and the code it has ``_codegen`` generate writes or
clears these entries.
"""

from __future__ import annotations

import dataclasses
import operator
import weakref
from typing import Any, Callable

from . import _errors, _slots, _vars
from ._checks import store
from ._spec import Spec, spec_of
from ._registry import SPEC_ATTR

KEY_ATTR = "_staticfield_key"
FLAT_ATTR = "_staticfield_flat"
DEEP_ATTR = "_staticfield_deep"  # deps="read": the flatten with nested statics lifted (_deep)
DERIVED = (KEY_ATTR, FLAT_ATTR, DEEP_ATTR)
RESERVED = (*DERIVED, _vars.REAL_ATTR)  # names no field may take
flat = operator.attrgetter(FLAT_ATTR)  # an instance's cached (children, static key)

# Instances whose cached deps="read" flatten lifted the statics of nested instances
# (``_deep``): what they cached depends on other instances' fields too. By id (an
# instance's == and hash are its fields', and may refuse under a trace), held weakly.
DEEP_HOLDERS: dict[int, weakref.ref] = {}


def hold_deep(obj: Any) -> None:
    """Remember that ``obj`` cached what nested instances hold (see ``reassign``)."""
    i = id(obj)

    def gone(ref: weakref.ref) -> None:
        if DEEP_HOLDERS.get(i) is ref:
            del DEEP_HOLDERS[i]

    try:
        DEEP_HOLDERS[i] = weakref.ref(obj, gone)
    except TypeError:  # takes no weak references: it keeps no lifted flatten either
        obj._staticfield_dict.pop(DEEP_ATTR, None)

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


def reassign(obj: Any, name: str, value: Any) -> None:
    """``object.__setattr__(obj, name, value)`` on a built instance (the frozen-dataclass
    escape hatch): checked as ``sf.replace`` checks (no converter runs, as with any
    ``object.__setattr__``), then every entry derived from the old fields is dropped, to
    be derived again on first use. Refused (with the instance unchanged) where a check
    or ``__check_init__`` fails.

    Derived entries are everything in the dict that is not a field: the static key,
    cached children, bindings and cached properties. A binding someone still holds
    (``m = obj.method``) is told to follow the instance from now on (``_staticfield_rebind``).
    """
    _slots.used_whole(obj, "object.__setattr__")
    spec = spec_of_type(obj.__class__)
    d = obj._staticfield_dict
    trial = _fields_copy(spec, obj)
    td = trial._staticfield_dict
    store(spec, trial, name, value, convert=False)
    check_init(spec, trial)
    stale = [(k, v) for k, v in d.items() if k not in spec.name_set]
    for k, _ in stale:
        del d[k]
    d[name] = td[name]
    if spec.constant_key is not None:
        d[KEY_ATTR] = spec.constant_key
    for _, v in stale:
        _rebind(v, obj)
    # obj may be nested in instances that cached its statics and leaves (their lifted
    # flatten, and the deps="read" bindings made from it): they derive those again too.
    for ref in list(DEEP_HOLDERS.values()):
        holder = ref()
        if holder is None:
            continue
        hd = holder._staticfield_dict
        hd.pop(DEEP_ATTR, None)
        for k, v in list(hd.items()):
            if _rebind(v, holder):
                del hd[k]
    DEEP_HOLDERS.clear()


def _rebind(value: Any, obj: Any) -> bool:
    """Tell a binding of ``obj`` found in its dict to follow ``obj`` from now on."""
    rebind = getattr(value.__class__, "_staticfield_rebind", None)
    if rebind is None:
        return False
    rebind(value, obj)
    return True


def _building(obj: Any) -> bool:
    return id(obj) in BUILDING


def _refuse_delete(obj: Any, name: str) -> None:
    raise _errors.frozen_error(spec_of_type(obj.__class__).cls, name, deleting=True)


_slots.FieldSlot.building = staticmethod(_building)
_slots.FieldSlot.reassign = staticmethod(reassign)
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


def derive(obj: Any, changes: dict[str, Any]) -> Any:
    """``sf.replace``: a new sealed instance with ``changes``, without ``__init__``."""
    _slots.used_whole(obj, "replace")
    spec = spec_of_type(obj.__class__)
    new = _fields_copy(spec, obj)
    d, od = new._staticfield_dict, obj._staticfield_dict
    static_changed = False
    for name, value in changes.items():
        store(spec, new, name, value, convert=True)
        static_changed = static_changed or name in spec.static_set
    if not static_changed and KEY_ATTR in od:
        d[KEY_ATTR] = od[KEY_ATTR]
    check_init(spec, new)
    return new


def copy(obj: Any) -> Any:
    """``copy.copy``: the fields only. The key and children are derived again on first use,
    so a field the user then sets with ``object.__setattr__`` (the frozen-dataclass escape
    hatch) is what a flatten sees."""
    _slots.used_whole(obj, "copy")
    return _fields_copy(spec_of_type(obj.__class__), obj)


def _fields_copy(spec: Spec, obj: Any) -> Any:
    """A new instance of ``spec``'s class holding ``obj``'s fields and nothing derived."""
    new = object.__new__(spec.cls)
    d, od = new._staticfield_dict, obj._staticfield_dict
    for name in spec.names:
        d[name] = od[name]
    return new


def getstate(obj: Any) -> dict[str, Any]:
    """The pickled state: the fields only."""
    _slots.used_whole(obj, "pickle")
    spec = spec_of_type(obj.__class__)
    d = obj._staticfield_dict
    return {n: d[n] for n in spec.names}


def setstate(obj: Any, state: Any) -> None:
    """Unpickle: fields from ``state``, frozen and checked; derived entries found there are
    dropped (they are rebuilt from the fields), anything else is refused."""
    spec = spec_of_type(obj.__class__)
    cls = spec.cls.__qualname__
    if not isinstance(state, dict):
        raise TypeError(_errors.BAD_STATE.format(cls=cls, problem=f"a {type(state).__name__}, not a dict"))
    missing = [n for n in spec.names if n not in state]
    unknown = [n for n in state if n not in spec.name_set and n not in DERIVED]
    if missing or unknown:
        problem = (f"no value for field(s) {', '.join(map(repr, missing))}" if missing
                   else f"unknown entries {', '.join(map(repr, unknown))}")
        raise TypeError(_errors.BAD_STATE.format(cls=cls, problem=problem))
    d = obj._staticfield_dict
    d.clear()
    for name in spec.names:
        d[name] = state[name]
    for name in spec.names:
        store(spec, obj, name, d[name], convert=False)
    if spec.constant_key is not None:
        d[KEY_ATTR] = spec.constant_key
