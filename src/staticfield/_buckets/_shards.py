"""A ``shard_map`` in a bucketed function: each device computes its shard of the rows.

Where a ``shard_map``'s specs replicate the rows, every device computes the whole batch and
the rows go through its body as through a call. Where its in_specs split the rows over
mesh axes (``P("d")``), the body is analysed like the primal on a device's shard (its row
count is the shard's, ``_symbolic.rows_as``), with no collective over those axes touching
rows (``across``: a ``psum``, ``all_gather``, ``ppermute``... combines rows of different
devices; ``axis_index`` and a row index within the shard depend on the row count), and
its out_specs must put the rows back on the same axes. Pad rows, copies of the last real
row at the end of the batch, land in the last shards and never reach a real row. Every
bucket is then a multiple of the device count (``Analysis.splits``, ``_sizes``); the
symbolic trace takes ``n`` a multiple of it (``split_counts``), as JAX splits no other count.

Each rule takes the analysis (``_analysis.Analysis``, duck-typed), the equation and its
inputs' states; nothing here imports the walk.
"""

from __future__ import annotations

import contextlib
from typing import Any

import numpy as np

from ._lattice import Counted, Mixing, Row, first_row
from ._symbolic import rows_as

# The parameters that name the mesh axes an equation works across (a collective's: psum,
# all_gather, ppermute, axis_index...), and the primitives that only retype their operands.
_MESH_PARAMS = ("axes", "axis_name")
_RETYPES = frozenset(("pvary", "pcast"))


def splits(eqn: Any) -> bool:
    """A ``shard_map`` whose specs split some axis over devices."""
    return eqn.primitive.name == "shard_map" and any(
        part is not None for spec in (*eqn.params.get("in_specs", ()), *eqn.params.get("out_specs", ()))
        for part in (spec or ()))


def mesh_axes(eqn: Any) -> frozenset:
    """The mesh axes an equation works across (a collective's), by name."""
    found: set = set()
    for key in _MESH_PARAMS:
        value = eqn.params.get(key)
        for name in value if isinstance(value, (tuple, list, frozenset, set)) else (value,):
            if isinstance(name, str):
                found.add(name)
    return frozenset(found)


def across(a: Any, eqn: Any, states: list) -> list | None:
    """An equation across the mesh axes that split the rows (inside such a ``shard_map``
    body): a retyping passes its operands' states on; the device's index is a value of
    the row count (which rows a device holds depends on it); a collective that takes
    rows mixes rows held by different devices. ``None``: the walk goes on as usual."""
    name = eqn.primitive.name
    axes = ", ".join(f"'{m}'" for m in sorted(mesh_axes(eqn) & a.shards[-1]))
    if name in _RETYPES and len(states) == len(eqn.outvars):
        return list(states)
    if name == "axis_index":
        return [Counted(eqn, f"`axis_index` along mesh axis {axes}, which splits the rows, is a device's "
                             "index: which rows that device holds depends on the row count", a.outer())]
    row = next((s for s in states if isinstance(s, Row)), None)
    if row is not None:
        raise Mixing(eqn, f"is a collective over mesh axis {axes}, which splits the rows: it combines "
                          "rows held by different devices", first_row(eqn, states))
    return None


def _spec_axes(spec: Any, axis: int) -> tuple | None:
    """The mesh axes a ``PartitionSpec`` splits array axis ``axis`` over (``()``: none);
    ``None`` for an entry staticfield cannot read."""
    parts = tuple(spec or ())
    part = parts[axis] if axis < len(parts) else None
    if part is None:
        return ()
    if isinstance(part, str):
        return (part,)
    if isinstance(part, tuple) and all(isinstance(a, str) for a in part):
        return part
    return None


def shard_map(a: Any, eqn: Any, states: list) -> list:
    """A ``shard_map``: its body analysed like the primal. Where the specs replicate the rows,
    every device computes the whole batch, so the rows go through the body as through a
    call. Where the in_specs split the rows of every operand that carries them over the same
    mesh axes, each device computes its shard of the rows, which the body must treat row by
    row on its own (its row count is the shard's: ``_symbolic.rows_as``), with no collective
    over those axes touching rows and no row index within the shard; the out_specs must put
    the rows back on those axes. The bucket sizes are then multiples of the device count
    (``Analysis.splits``)."""
    p = eqn.params
    jaxpr = getattr(p["jaxpr"], "jaxpr", p["jaxpr"])
    ins = states[-len(jaxpr.invars):] if jaxpr.invars else []
    split: tuple | None = None
    dim = None
    for s, spec, v in zip(ins, p.get("in_specs", ()), jaxpr.invars):
        if not isinstance(s, Row):
            continue
        axes = _spec_axes(spec, s.axis)
        if axes is None or (split is not None and axes != split):
            raise Mixing(eqn, "splits the rows of its operands over different mesh axes (in_specs must put the "
                              "rows of every operand that carries them on the same mesh axes, or on none)", s)
        split = axes
        if axes:
            dim = v.aval.shape[s.axis]
    if not split:
        return _body(a, eqn, jaxpr, ins, frozenset(), None, split or ())
    sizes = dict(p["mesh"].shape)
    a.splits.add(int(np.prod([sizes[name] for name in split], dtype=np.int64)))
    return _body(a, eqn, jaxpr, ins, frozenset(split), dim, split)


def _body(a: Any, eqn: Any, jaxpr: Any, ins: list, split: frozenset, dim: Any, axes: tuple) -> list:
    """The body's states, each output checked against its out_spec: rows back on ``axes``."""
    outer = a.shards[-1] if a.shards else frozenset()
    a.shards.append(outer | split)
    try:
        with rows_as(dim) if dim is not None else contextlib.nullcontext():
            outs = a.inside(eqn, jaxpr, [None] * len(jaxpr.constvars), ins)
    finally:
        a.shards.pop()
    for s, spec in zip(outs, eqn.params.get("out_specs", ())):
        if isinstance(s, Row) and _spec_axes(spec, s.axis) != axes:
            where = f"on mesh axes {axes}" if axes else "on every device (replicated)"
            raise Mixing(eqn, f"has out_specs that do not put the rows back where its in_specs put them ({where})", s)
    return outs


def split_counts(jaxpr: Any) -> int:
    """The least common multiple of the device counts each ``shard_map`` spec entry of
    ``jaxpr`` (and the jaxprs inside it) splits an axis over."""
    k = 1
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "shard_map":
            sizes = dict(eqn.params["mesh"].shape)
            for spec in eqn.params.get("in_specs", ()):
                for part in spec or ():
                    names = (part,) if isinstance(part, str) else tuple(part or ())
                    k = int(np.lcm(k, int(np.prod([sizes.get(a, 1) for a in names], dtype=np.int64))))
        for value in eqn.params.values():
            for inner in value if isinstance(value, (tuple, list)) else (value,):
                inner = getattr(inner, "jaxpr", inner)
                if hasattr(inner, "eqns"):
                    k = int(np.lcm(k, split_counts(inner)))
    return k
