"""flax's own serialization knows every ``sf`` class, whichever of flax and staticfield is
imported first.

``flax.serialization.to_state_dict``/``from_state_dict`` (and ``to_bytes``/``from_bytes``,
a flax checkpoint restore) look a target's type up in flax's registry and, for a type
they do not know, hand the target (or the raw state dict) back unchanged: a restore
silently returns a dict where an instance should be. Here flax's registry is replaced, once
``flax.serialization`` is loaded, by a ``dict`` that also answers for every decorated
class with ``sf.to_state_dict``/``sf.from_state_dict`` (dynamic fields restored, statics
kept from the target). Nothing is stored per class, so a class made later is known too,
and an explicit ``register_serialization_state`` of an ``sf`` class (what earlier docs
said to write) is still accepted and then used instead.

staticfield never imports flax: a finder on ``sys.meta_path`` waits for
``flax.serialization`` and installs the registry right after that module runs, on its
first import and on each ``importlib.reload`` (which makes a new plain registry); it
does nothing for any other import.

Why not flax's public ``register_serialization_state`` per class: a class made before
flax is loaded needs this hook anyway, and a registration of every ``sf`` class would
make the explicit registration earlier docs said to write raise "already registered";
the registry answers instead, and hides ``sf`` classes from that one check (the caller's
frame is ``register_serialization_state``'s own code).

Imports: ``_core`` (``SPECS``) and the standard library. Installed by ``staticfield``'s
``__init__``.
"""

from __future__ import annotations

import importlib.abc
import sys
import threading
from typing import Any

from .._core._registry import SPECS

_MODULE = "flax.serialization"


class _Registry(dict):
    """flax's registry, answering also for every ``sf`` class (see the module docstring)."""

    guard: Any = None  # register_serialization_state's code: it sees only what is stored

    def __contains__(self, ty: object) -> bool:
        if dict.__contains__(self, ty):
            return True
        return ty in SPECS and sys._getframe(1).f_code is not self.guard

    def __missing__(self, ty: Any) -> tuple:
        if ty in SPECS:
            from ._serialization import from_state_dict, to_state_dict

            return (to_state_dict, from_state_dict)
        raise KeyError(ty)


def install(module: Any) -> None:
    """Put the answering registry in ``module`` (``flax.serialization``), once."""
    found = getattr(module, "_STATE_DICT_REGISTRY", None)
    register = getattr(module, "register_serialization_state", None)
    if type(found) is not dict or register is None:  # ours already, or a flax that works otherwise
        return
    registry = _Registry(found)
    registry.guard = getattr(register, "__code__", None)
    module._STATE_DICT_REGISTRY = registry


class _Loader(importlib.abc.Loader):
    """``flax.serialization``'s own loader, then ``install``."""

    def __init__(self, loader: Any) -> None:
        self.loader = loader

    def create_module(self, spec: Any) -> Any:
        return self.loader.create_module(spec)

    def exec_module(self, module: Any) -> None:
        module.__loader__ = self.loader
        if module.__spec__ is not None:
            module.__spec__.loader = self.loader
        self.loader.exec_module(module)
        install(module)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.loader, name)


class _Finder(importlib.abc.MetaPathFinder):
    """Waits for ``flax.serialization`` (see the module docstring)."""

    _busy = threading.local()

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name != _MODULE or getattr(self._busy, "on", False):
            return None
        self._busy.on = True
        spec = None
        try:
            for finder in list(sys.meta_path):  # the finder that owns flax, whichever it is
                find = getattr(finder, "find_spec", None)
                if finder is self or find is None:
                    continue
                spec = find(name, path, target)
                if spec is not None:
                    break
        finally:
            self._busy.on = False
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        spec.loader = _Loader(spec.loader)
        return spec


def watch() -> None:
    """Install now if ``flax.serialization`` is loaded, and each time it is (re)loaded."""
    module = sys.modules.get(_MODULE)
    if module is not None:
        install(module)
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())
