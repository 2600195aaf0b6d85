"""Case 4: flatten, unflatten and construction against the number of fields.

For each field count, one class per library is built programmatically with
fields ``f0 ... f{k-1}``, all dynamic, each holding the same ``f32[4]`` array.
``flatten`` is ``jax.tree_util.tree_flatten(obj)``, ``unflatten`` is
``jax.tree_util.tree_unflatten(treedef, leaves)``, ``construction`` is
``Cls(*values)``. Everything is frozen, like ours: the native baseline is a
``dataclasses.dataclass(frozen=True)`` registered with
``jax.tree_util.register_dataclass`` (flattened in C++, unflattened through
``__init__``), and construction is also compared with the same plain frozen
stdlib dataclass, not registered at all.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import jax
import jax.numpy as jnp

import staticfield as sf

from ._harness import Config, Contender, Results, kinds, measure, optional

FLATTEN = "flatten"
UNFLATTEN = "unflatten"
CONSTRUCTION = "construction"

OURS = "sf.dataclass"
NATIVE = "register_dataclass (native)"
PLAIN = "plain frozen dataclass"
FLAX = "flax.struct"
EQX = "equinox"
JDC = "jax_dataclasses"


def _namespace(name: str, k: int) -> dict[str, Any]:
    return {
        "__annotations__": {f"f{i}": jax.Array for i in range(k)},
        "__module__": __name__,
        "__qualname__": name,
    }


def _plain(k: int) -> type:
    return dataclasses.dataclass(frozen=True)(type(f"Plain{k}", (), _namespace(f"Plain{k}", k)))


def _ours(k: int) -> type:
    return sf.dataclass(type(f"Ours{k}", (), _namespace(f"Ours{k}", k)))


def _native(k: int) -> type:
    cls = dataclasses.dataclass(frozen=True)(type(f"Native{k}", (), _namespace(f"Native{k}", k)))
    names = [f"f{i}" for i in range(k)]
    return jax.tree_util.register_dataclass(cls, data_fields=names, meta_fields=[])


def _flax(k: int) -> type:
    import flax.struct

    return flax.struct.dataclass(type(f"Flax{k}", (), _namespace(f"Flax{k}", k)))


def _equinox(k: int) -> type:
    import equinox as eqx

    return type(f"Eqx{k}", (eqx.Module,), _namespace(f"Eqx{k}", k))


def _jdc(k: int) -> type:
    import jax_dataclasses as jdc

    return jdc.pytree_dataclass(type(f"Jdc{k}", (), _namespace(f"Jdc{k}", k)))


BUILDERS: list[tuple[str, str, Callable[[int], type]]] = [
    (OURS, "ours", _ours),
    (NATIVE, "anchor", _native),
    (FLAX, "anchor", _flax),
    (EQX, "anchor", _equinox),
    (JDC, "anchor", _jdc),
]


def _ops(name: str, kind: str, cls: type, values: list[Any]) -> dict[str, Contender]:
    obj = cls(*values)
    leaves, treedef = jax.tree_util.tree_flatten(obj)
    if len(leaves) != len(values):
        raise RuntimeError(f"{name}: flattened to {len(leaves)} leaves, expected {len(values)}")
    flatten, unflatten = jax.tree_util.tree_flatten, jax.tree_util.tree_unflatten
    return {
        FLATTEN: Contender(name, lambda: flatten(obj), kind, block=False),
        UNFLATTEN: Contender(name, lambda: unflatten(treedef, leaves), kind, block=False),
        CONSTRUCTION: Contender(name, lambda: cls(*values), kind, block=False),
    }


def run(cfg: Config, results: Results) -> None:
    print("case 4: flatten, unflatten and construction against the number of fields", flush=True)
    leaf = jnp.zeros(4, jnp.float32)
    available = []
    for name, kind, build in BUILDERS:
        if optional(results, name, lambda build=build: build(1)) is not None:
            available.append((name, kind, build))
    for k in cfg.field_counts:
        values = [leaf] * k
        by_op: dict[str, list[Contender]] = {FLATTEN: [], UNFLATTEN: [], CONSTRUCTION: []}
        for name, kind, build in available:
            for op, contender in _ops(name, kind, build(k), values).items():
                by_op[op].append(contender)
        plain = _plain(k)
        by_op[CONSTRUCTION].append(
            Contender(PLAIN, lambda plain=plain, values=values: plain(*values), "baseline", block=False)
        )
        for op, contenders in by_op.items():
            measured = measure(contenders, cfg, results)
            results.add(op, k, measured, kinds(contenders))
        print(f"  {k} fields: " + ", ".join(
            f"{op} {results.get(op, k, OURS) or float('nan'):.2f} us" for op in by_op), flush=True)
