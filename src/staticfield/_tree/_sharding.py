"""``shardings`` and ``shard``: per-field ``PartitionSpec`` annotations to ``NamedSharding``s.

A dynamic field declared with ``sf.field(sharding=PartitionSpec(...))`` gives that
spec to every leaf under it (a dict or tuple field, say); a nested instance's
own annotations take over below it, and unannotated leaves are replicated.
The result has the same pytree structure as the input (it is rebuilt with
``tree_unflatten``), so it can be passed straight to ``jax.device_put`` or to
``jax.jit(in_shardings=..., out_shardings=...)``. Everything else is JAX's own
SPMD machinery.

Meshes of both kinds work: automatic axes (``AxisType.Auto``) and explicit axes
(``AxisType.Explicit``, the default of ``jax.make_mesh``), where ``P.UNCONSTRAINED``
is refused with the field's name, as JAX refuses it there.
"""

from __future__ import annotations

import math
from typing import Any, TypeVar

import jax
import numpy as np
from jax.sharding import AbstractMesh, AxisType, Mesh, NamedSharding, PartitionSpec

from .._core._field import sharding_of
from .._core._spec import spec_of
from .._core._registry import is_instance

T = TypeVar("T")

NOT_A_SPEC = (
    "{path}: the sharding annotation {spec!r} is not a jax.sharding.PartitionSpec. "
    "Write sf.field(sharding=PartitionSpec('data', None)) (one entry per leading "
    "dimension: a mesh axis name, a tuple of names, or None)."
)
RANK_TOO_HIGH = (
    "{path}: {spec} has {n} entries but the leaf has shape {shape} (rank {rank}), on a "
    "mesh with axes {axes}. A PartitionSpec gives at most one entry per dimension; "
    "drop the extra entries, e.g. {fix}."
)
UNKNOWN_AXIS = (
    "{path}: {spec} names the mesh axis {axis!r}, which the mesh lacks (leaf shape "
    "{shape}, mesh axes {axes}). Use one of the mesh's axis names in the annotation, "
    "or build the mesh with an axis called {axis!r}."
)
NOT_DIVISIBLE = (
    "{path}: {spec} splits dimension {dim} of shape {shape} over {over} ({parts} "
    "parts, mesh axes {axes}), but {size} is not divisible by {parts}. Make that "
    "dimension a multiple of {parts} (pad it), shard it over other axes, or leave "
    "it unsharded (None)."
)
UNCONSTRAINED_NEEDS_AUTO = (
    "{path}: {spec} leaves dimension {dim} to JAX (P.UNCONSTRAINED), which needs a mesh "
    "axis of type AxisType.Auto, but the mesh's axes are ({types}) (jax.make_mesh makes "
    "Explicit axes unless told). Write None to replicate that dimension, or build the mesh "
    "with axis_types=({auto})."
)


def shardings(obj: T, mesh: Mesh | AbstractMesh) -> T:
    """A pytree like ``obj`` with a ``NamedSharding(mesh, spec)`` per leaf.

    ``spec`` is the ``sharding=`` annotation of the nearest enclosing field
    (``PartitionSpec()``, i.e. replicated, when there is none). Annotations are
    checked against each leaf's shape and the mesh: a ``ValueError`` names the field.
    """
    __tracebackhide__ = True
    if not hasattr(mesh, "shape") or not hasattr(mesh, "axis_names"):
        raise TypeError(
            f"sf.shardings expects a jax.sharding.Mesh as its second argument, got "
            f"{type(mesh).__name__}. Build one with jax.make_mesh((4, 2), ('data', 'model'))."
        )
    out: list[Any] = []
    cache: dict[Any, NamedSharding] = {}
    root = type(obj).__qualname__
    _collect(obj, PartitionSpec(), root, mesh, cache, out)
    return jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(obj), out)


def shard(obj: T, mesh: Mesh | AbstractMesh) -> T:
    """Place ``obj`` on ``mesh`` as annotated: ``jax.device_put(obj, sf.shardings(obj, mesh))``."""
    __tracebackhide__ = True
    return jax.device_put(obj, shardings(obj, mesh))


def _collect(
    x: Any, spec: Any, path: str, mesh: Any, cache: dict[Any, NamedSharding], out: list[Any]
) -> None:
    """Append one NamedSharding per leaf of ``x``, in ``tree_flatten`` order."""
    if is_instance(x):
        s = spec_of(x)
        d = x.__dict__
        for name in s.dynamic_names:
            own = sharding_of(s.by_name[name])
            _collect(d[name], spec if own is None else own, f"{path}.{name}", mesh, cache, out)
        return
    kids = jax.tree_util.tree_flatten_with_path(x, is_leaf=lambda y: y is not x)[0]
    if len(kids) == 1 and not kids[0][0]:  # a leaf is its own only child, at the empty path
        out.append(_sharding_for(x, spec, path, mesh, cache))
        return
    for key, child in kids:
        _collect(child, spec, path + jax.tree_util.keystr(key), mesh, cache, out)


def _sharding_for(
    leaf: Any, spec: Any, path: str, mesh: Any, cache: dict[Any, NamedSharding]
) -> NamedSharding:
    shape = tuple(leaf.shape) if hasattr(leaf, "shape") else np.shape(leaf)
    check_spec(spec, shape, path, mesh)
    try:
        return cache[spec]
    except KeyError:
        sharding = cache[spec] = NamedSharding(mesh, spec)
        return sharding


def check_spec(spec: Any, shape: tuple[int, ...], path: str, mesh: Any) -> None:
    """Raise if ``spec`` cannot lay out an array of ``shape`` on ``mesh``; name ``path``."""
    if not isinstance(spec, PartitionSpec):
        raise TypeError(NOT_A_SPEC.format(path=path, spec=spec))
    sizes = dict(mesh.shape)
    axes = ", ".join(f"{k}={v}" for k, v in sizes.items())
    axes = "{" + axes + "}"
    if len(spec) > len(shape):
        fix = PartitionSpec(*tuple(spec)[: len(shape)])
        raise ValueError(
            RANK_TOO_HIGH.format(
                path=path, spec=spec, n=len(spec), shape=shape, rank=len(shape), axes=axes, fix=fix
            )
        )
    for dim, entry in enumerate(spec):
        if entry is PartitionSpec.UNCONSTRAINED:
            _check_unconstrained(spec, dim, path, mesh)
            continue
        if entry is None:
            continue
        names = tuple(entry) if isinstance(entry, (tuple, list)) else (entry,)
        for name in names:
            if name not in sizes:
                raise ValueError(UNKNOWN_AXIS.format(path=path, spec=spec, axis=name, shape=shape, axes=axes))
        parts = math.prod(sizes[n] for n in names)
        if shape[dim] % parts:
            over = " x ".join(f"{n!r} (size {sizes[n]})" for n in names)
            raise ValueError(
                NOT_DIVISIBLE.format(
                    path=path, spec=spec, dim=dim, shape=shape, over=over, parts=parts,
                    size=shape[dim], axes=axes,
                )
            )


def _check_unconstrained(spec: PartitionSpec, dim: int, path: str, mesh: Any) -> None:
    """P.UNCONSTRAINED lets JAX choose, which only automatic axes allow (explicit axes,
    jax.make_mesh's default, put every sharding in the array types)."""
    types = tuple(getattr(mesh, "axis_types", ()) or ())
    if not types or AxisType.Auto in types:
        return
    raise ValueError(
        UNCONSTRAINED_NEEDS_AUTO.format(
            path=path, spec=spec, dim=dim, types=", ".join(t.name for t in types),
            auto=", ".join(["AxisType.Auto"] * len(types)),
        )
    )
