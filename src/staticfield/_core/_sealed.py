"""A sealed instance's fields as they change hands: ``sf.replace``, ``copy.copy``, pickling,
and ``object.__setattr__`` on a built instance (the frozen-dataclass escape hatch).

The rows of ``_state``'s table after construction, in code: ``derive`` (``replace``:
a new sealed instance, its key kept when no static changed), ``copy`` and ``getstate``
(the fields only), ``setstate`` (the fields, frozen and checked; derived entries found
in the state dropped), and ``reassign`` (checked, then every entry derived from the old
fields dropped, here and in every instance that lifted its statics into its own
``deps="read"`` flatten: ``hold_deep`` keeps those). ``_state`` holds the table and the
construction rows; nothing else writes these entries.

Imports: ``_checks``, ``_errors``, ``_slots`` (it answers ``object.__setattr__`` on a
field's slot), ``_spec`` and ``_state``. Called by ``_instance`` (``__copy__``,
``__getstate__``, ``__setstate__``, ``sf.replace``) and ``_deep`` (``hold_deep``).
"""

from __future__ import annotations

import weakref
from typing import Any

from . import _errors, _slots
from ._checks import store
from ._spec import Spec
from ._state import DEEP_ATTR, DERIVED, KEY_ATTR, LEAVES_ATTR, check_init, spec_of_type

# Instances whose cached deps="read" flatten lifted the statics of nested instances, or
# that cached their nested instances' leaves (``_deep``): what they cached depends on
# other instances' fields too. By id (an
# instance's == and hash are its fields', and may refuse under a trace), held weakly.
DEEP_HOLDERS: dict[int, weakref.ref] = {}


def hold_deep(obj: Any) -> bool:
    """Remember that ``obj`` cached what nested instances hold (see ``reassign``); ``False``
    where it takes no weak reference (then it must not keep such a cache)."""
    i = id(obj)

    def gone(ref: weakref.ref) -> None:
        if DEEP_HOLDERS.get(i) is ref:
            del DEEP_HOLDERS[i]

    try:
        DEEP_HOLDERS[i] = weakref.ref(obj, gone)
    except TypeError:
        return False
    return True


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
        hd.pop(LEAVES_ATTR, None)
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


_slots.FieldSlot.reassign = staticmethod(reassign)


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
