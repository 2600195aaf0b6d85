"""Where 0.1's flat modules live now, for pickles made by 0.1.

A pickle names a class or function by ``module.qualname``; objects pickled by
staticfield 0.1 (instances, ``FrozenDict``, classes with their generated methods sent
by value with cloudpickle, ``sf.jit`` functions) name modules like
``staticfield._frozendict``. Each such name is kept in ``sys.modules`` as an alias of
the module that holds the same code today. 0.1's ``_jit``, ``_explain`` and ``_deps``
are names of subpackages now, which re-export what pickles can name.
"""

from __future__ import annotations

import importlib
import sys

MOVED = {
    "_checks": "_core._checks", "_codegen": "_core._codegen", "_decorator": "_core._decorator",
    "_display": "_core._display", "_errors": "_core._errors", "_field": "_core._field",
    "_freeze": "_core._freeze", "_frozendict": "_core._frozendict", "_gen": "_core._gen",
    "_instance": "_core._instance", "_keys": "_core._keys", "_spec": "_core._spec",
    "_state": "_core._state", "_struct": "_core._struct", "_traceback": "_core._traceback",
    "_serialization": "_tree._serialization", "_sharding": "_tree._sharding", "_stack": "_tree._stack",
    "_describe": "_explain._describe", "_args": "_jit._args", "_bound": "_jit._bound",
    "_engine": "_jit._engine", "_hitpath": "_jit._hitpath", "_tracker": "_jit._tracker",
    "_types": "_jit._types", "_variant": "_jit._variant",
}


def install(package: str) -> None:
    """Alias each of 0.1's module names to its module today (all are imported already)."""
    for old, new in MOVED.items():
        sys.modules.setdefault(f"{package}.{old}", importlib.import_module(f"{package}.{new}"))
