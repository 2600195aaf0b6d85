"""Which classes are decorated, and their registration with JAX.

``SPECS`` maps every decorated class, by exact type, to its spec: the jit hit path's
one-lookup test (``obj.__class__ in SPECS``), and how ``vars(obj)`` finds the fields.
``register`` registers a class with JAX once, as a pytree with ``GetAttrKey`` keys, also a
class rebuilt by value in a new process (cloudpickle), whose real spec may arrive after
an empty class body (``is_skeleton``, ``take_over``). ``is_instance`` tells an instance
of a decorated class by the spec in its class's own ``__dict__`` (``SPEC_ATTR``).

Imports: JAX only (a spec is read by its attributes). Called by ``_spec`` (a spec
unpickled with its class), ``_decorator``, ``_vars`` and every room that tests for an
instance.
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any

import jax

if TYPE_CHECKING:
    from ._spec import Spec

SPEC_ATTR = "__staticfield_spec__"

_REGISTERED: weakref.WeakSet[type] = weakref.WeakSet()
# Every decorated class's spec by exact type: the jit hit path's one-lookup test.
SPECS: dict[type, Spec] = {}


def register(spec: Spec, generated: dict[str, Any]) -> None:
    """Register ``spec.cls`` with JAX as a pytree with ``GetAttrKey`` keys."""
    spec.flat = generated["flat"]
    spec.make_key = generated["make_key"]
    spec.flatten = generated["flatten"]
    spec.flatten_with_keys = generated["flatten_with_keys"]
    spec.unflatten = generated["unflatten"]
    ensure_registered(spec.cls)


# A class body with nothing but these is what cloudpickle builds before it sets the real
# class dict (and, for an ``sf.Struct`` subclass, ``__init_subclass__`` decorates it then).
_SKELETON = frozenset({"__module__", "__qualname__", "__doc__", "__dict__", "__weakref__"})


def is_skeleton(cls: type) -> bool:
    """An empty class body: its real spec may still arrive (see ``ensure_registered``)."""
    return set(cls.__dict__) <= _SKELETON


def ensure_registered(cls: type) -> None:
    """Register a class once; also for a class rebuilt by value (cloudpickle in a new process)."""
    spec: Spec = cls.__dict__[SPEC_ATTR]
    SPECS[cls] = spec
    if cls not in _REGISTERED:
        _register(spec)


def _register(spec: Spec) -> None:
    """JAX keeps the functions it is given, so a class that may still receive its real spec
    (an empty class body, as cloudpickle first builds one) is registered through functions
    that look its spec up on each call; every other class gets its own functions directly."""
    cls = spec.cls
    SPECS[cls] = spec
    flatten_with_keys, unflatten = spec.flatten_with_keys, spec.unflatten
    if spec.provisional:

        def flatten_with_keys(o: Any) -> Any:
            return cls.__dict__[SPEC_ATTR].flatten_with_keys(o)

        def unflatten(key: Any, children: Any) -> Any:
            return cls.__dict__[SPEC_ATTR].unflatten(key, children)

    jax.tree_util.register_pytree_with_keys(cls, flatten_with_keys, unflatten, flatten_func=spec.flatten)
    _REGISTERED.add(cls)


def take_over(spec: Spec) -> None:
    """A spec unpickled as part of its class (cloudpickle, by value): the class is
    registered with it, or it takes over from the spec of the empty class cloudpickle
    built first."""
    if spec.cls in _REGISTERED:
        SPECS[spec.cls] = spec
    else:  # the class dict may still be filling in: register with this spec itself
        _register(spec)


def is_instance(obj: Any) -> bool:
    return SPEC_ATTR in type(obj).__dict__
