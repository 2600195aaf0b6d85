"""Case 15: large models, a cache hit against the number of array leaves.

The model is what a serving stack passes to its decode step: a top-level ``Model``
whose ``layers`` field is a tuple of ``Layer`` instances of ``LAYER_LEAVES``
distinct ``f32[2]`` arrays each; ``LEAVES`` sets the total (104 = 13 layers, 1,000,
7,600 = DESIGN's 950 layers, 10,000). The method is trivial (``x + the first
layer's first array``), so a figure is the cost of dispatch alone, which grows
with the leaves. Every contender runs in one process, in interleaved rounds
(``_harness.measure``; equinox and nnx in rounds of their own); the floor is plain ``jax.jit`` called with a flat tuple of
the same leaves, the form a hand-tuned server reaches by flattening once.

Beside the hits, on the largest model: construction, ``replace`` of one layer deep
in the tuple (the tuple rebuilt around it), and flatten/unflatten, each against
the same model as ``register_dataclass`` classes; and what staticfield's
per-instance caches hold, in bytes per instance (``results.extra``).

Where the time of a hit goes, at 7,600 leaves (jax 0.10.2, the 2-core machine loaded;
``perf record`` of a loop of hits, and the parts timed one by one, so indicative):

- JAX's C++ dispatch of 7,600 array arguments is the floor (about 1.9 ms per call
  for the flat tuple, loaded), most of it per leaf: ``PyArgSignatureOfValue`` and
  ``PyArray::layout`` (a lock per array in ``GetDefaultPjRtLayout``) are about 40% of
  ``PjitFunction::Call``, hashing and comparing the call signature about 15%. With
  all 7,600 leaves the *same* array object the flat call costs 0.7x itself.
- The difference is the flatten: ``tree_flatten`` of the flat tuple takes about
  0.2 ms, of staticfield's model or the ``register_dataclass`` model about 0.5 ms;
  in the C++ call's profile the flatten grows from about 11% to 23% (a third of it
  ``tupleiter_next``, iterating each node's children). It is not the Python flatten
  functions: 950 calls of staticfield's cached flatten take 20 µs, and a plain tuple
  of the 950 layers' cached children tuples (no custom node at all) flattens as
  slowly as the model. The cost is the 951 nested nodes (iterating each node's
  children, a treedef node built and hashed per layer, the treedef ``==`` of the
  signature: about 60 µs at 7,600 leaves, ``hash`` about 40 µs from Python).
- So the hit passes JAX's front a flat tuple of the leaves: an instance with no list or
  dict in a dynamic field anywhere below caches its leaves and one interned ``Shape``
  (``_core._deep.flat_leaves``), built from its layers' own caches (O(children): ``replace``
  of one layer reuses the others'), and a model with more than 16 nested nodes calls a
  front with ``(shape, leaves, x)``, the shape a static argument whose hash is its value
  and whose ``==`` is identity. ``obj.method`` binds to it (no Python on a hit);
  ``sf.jit(f)`` and ``Cls.method`` switch to a one-frame path once a miss sees a large
  model. An instance takes it from its fourth use on (building it costs about four
  calls' worth of what it saves), so a model made anew at each step and called once
  (case 6) never pays for it. Measured (jax 0.10.2, load average 3-4, one process per
  run): at 7,600 leaves ``obj.method(x)`` 0.99x the flat tuple, ``sf.jit(f)(model, x)``
  0.99-1.00x, ``Cls.method`` 0.99x, against 1.20x, 1.19x and 1.21x before;
  ``register_dataclass`` 1.19x. Construction, ``replace``, flatten and unflatten are
  unchanged (nothing is built at construction); the caches hold about twice the bytes
  (a tuple of every leaf on the model; a layer of arrays alone shares its children
  tuple, which ``cache_bytes`` counts twice). ``tests/test_large_models.py`` is the oracle.
"""

from __future__ import annotations

import dataclasses
import sys
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

import staticfield as sf

from ._harness import Config, Contender, Results, kinds, measure, optional

LARGE = "large model hit"
OPS = "large model ops"
MEMORY = "large model memory"
LEAVES = (104, 1000, 7600, 10000)
TARGET_LEAVES = 7600  # DESIGN's "Large models" bullet: 950 layers of 8
SMOKE_LEAVES = (16, 24)
LAYER_LEAVES = 8
BATCH_S = 0.03  # the least wall time of one batch of calls
NAMES = tuple(f"w{i}" for i in range(LAYER_LEAVES))

FLAT = "jax.jit, flat tuple"
DATACLASS = "jax.jit + register_dataclass"
FLAX = "jax.jit + flax.struct"
OBJ = "sf: obj.method(x)"
CLS = "sf: Cls.method(obj, x)"
FREE = "sf: sf.jit(f)(model, x)"
READ = 'sf: obj.method(x), deps="read"'
EQX = "eqx.filter_jit"
NNX_GRAPH = "nnx.jit, graph mode"
NNX_TREE = "nnx.jit, tree mode (graph=False)"

CONSTRUCT = "construction"
REPLACE = "replace one layer"
FLATTEN = "flatten"
UNFLATTEN = "unflatten"
SF_OPS = "staticfield"
DC_OPS = "register_dataclass"


def leaf_counts(cfg: Config) -> tuple[int, ...]:
    return SMOKE_LEAVES if cfg.smoke else LEAVES


def _arrays(leaves: int) -> list[list[jax.Array]]:
    """``leaves // LAYER_LEAVES`` layers of distinct ``f32[2]`` arrays."""
    rng = np.random.default_rng(0)
    return [[jnp.asarray(rng.standard_normal(2), jnp.float32) for _ in NAMES]
            for _ in range(leaves // LAYER_LEAVES)]


def _body(model: Any, x: jax.Array) -> jax.Array:
    return x + model.layers[0].w0


def _sf_classes() -> tuple[type, type]:
    @sf.dataclass
    class Layer:
        w0: jax.Array
        w1: jax.Array
        w2: jax.Array
        w3: jax.Array
        w4: jax.Array
        w5: jax.Array
        w6: jax.Array
        w7: jax.Array

    @sf.dataclass
    class Model:
        layers: tuple

        @sf.jit_method
        def step(self, x):
            return _body(self, x)

        @sf.jit_method(deps="read")
        def step_read(self, x):
            return _body(self, x)

    return Layer, Model


def _dc_classes() -> tuple[type, type]:
    @dataclasses.dataclass(frozen=True)
    class Layer:
        w0: jax.Array
        w1: jax.Array
        w2: jax.Array
        w3: jax.Array
        w4: jax.Array
        w5: jax.Array
        w6: jax.Array
        w7: jax.Array

    @dataclasses.dataclass(frozen=True)
    class Model:
        layers: tuple

        @jax.jit
        def step(self, x):
            return _body(self, x)

    jax.tree_util.register_dataclass(Layer, data_fields=list(NAMES), meta_fields=[])
    jax.tree_util.register_dataclass(Model, data_fields=["layers"], meta_fields=[])
    return Layer, Model


def _build(classes: tuple[type, type], arrays: list[list[jax.Array]]) -> Any:
    layer, model = classes
    return model(tuple(layer(*row) for row in arrays))


def _baselines(arrays: list[list[jax.Array]], x: jax.Array) -> list[Contender]:
    leaves = tuple(a for row in arrays for a in row)
    flat = jax.jit(lambda leaves, x: x + leaves[0])
    model = _build(_dc_classes(), arrays)
    return [Contender(FLAT, lambda: flat(leaves, x), "baseline"),
            Contender(DATACLASS, lambda: model.step(x), "baseline")]


def _ours(arrays: list[list[jax.Array]], x: jax.Array) -> list[Contender]:
    cls = _sf_classes()
    model = _build(cls, arrays)
    free = sf.jit(_body)
    return [Contender(OBJ, lambda: model.step(x), "ours"),
            Contender(CLS, lambda: cls[1].step(model, x), "ours"),
            Contender(FREE, lambda: free(model, x), "ours"),
            Contender(READ, lambda: model.step_read(x), "ours")]


def _flax(arrays: list[list[jax.Array]], x: jax.Array) -> list[Contender]:
    import flax.struct

    @flax.struct.dataclass
    class Layer:
        w0: jax.Array
        w1: jax.Array
        w2: jax.Array
        w3: jax.Array
        w4: jax.Array
        w5: jax.Array
        w6: jax.Array
        w7: jax.Array

    @flax.struct.dataclass
    class Model:
        layers: tuple

        @jax.jit
        def step(self, x):
            return _body(self, x)

    model = _build((Layer, Model), arrays)
    return [Contender(FLAX, lambda: model.step(x), "anchor")]


def _eqx(arrays: list[list[jax.Array]], x: jax.Array) -> list[Contender]:
    import equinox as eqx

    class Layer(eqx.Module):
        w0: jax.Array
        w1: jax.Array
        w2: jax.Array
        w3: jax.Array
        w4: jax.Array
        w5: jax.Array
        w6: jax.Array
        w7: jax.Array

    class Model(eqx.Module):
        layers: tuple

    model = _build((Layer, Model), arrays)
    step = eqx.filter_jit(_body)
    return [Contender(EQX, lambda: step(model, x), "anchor")]


def _nnx(arrays: list[list[jax.Array]], x: jax.Array) -> list[Contender]:
    from flax import nnx

    class Layer(nnx.Module):
        def __init__(self, row: list[jax.Array]) -> None:
            for name, a in zip(NAMES, row, strict=True):
                setattr(self, name, nnx.Param(a))

    class Model(nnx.Module):
        def __init__(self, arrays: list[list[jax.Array]]) -> None:
            self.layers = nnx.List([Layer(row) for row in arrays])

    model = Model(arrays)
    graph = nnx.jit(lambda m, x: x + m.layers[0].w0[...])
    out = [Contender(NNX_GRAPH, lambda: graph(model, x), "anchor")]
    tree = nnx.jit(lambda m, x: x + m.layers[0].w0[...], graph=False)
    out.append(Contender(NNX_TREE, lambda: tree(model, x), "anchor"))
    return out


def _hits(cfg: Config, results: Results, leaves: int) -> None:
    """The hit of every contender. The fast ones are timed apart from equinox and nnx: a
    batch right after one of those (which allocate and walk the model in Python) ran on
    cold caches, which charged the flat tuple, timed next, up to 30%; and each batch
    holds several calls (``BATCH_S``), so that no figure is one cold call."""
    arrays = _arrays(leaves)
    x = jnp.ones(2, jnp.float32)
    fast = _baselines(arrays, x) + _ours(arrays, x) + (optional(results, FLAX, lambda: _flax(arrays, x)) or [])
    slow: list[Contender] = []
    for name, build in ((EQX, _eqx), ("nnx.jit", _nnx)):
        slow += optional(results, name, lambda build=build: build(arrays, x)) or []
    timing = cfg if cfg.smoke else dataclasses.replace(cfg, batch_s=max(cfg.batch_s, BATCH_S))
    for group in (fast, slow):
        results.add(LARGE, leaves, measure(group, timing, results), kinds(group))


def _ops(cfg: Config, results: Results, leaves: int) -> None:
    """Construction, replace of one deep layer, flatten, unflatten: staticfield against
    ``register_dataclass``, on the same arrays."""
    arrays = _arrays(leaves)
    deep = len(arrays) * 3 // 4
    contenders = []
    for who, classes, replace, kind in ((SF_OPS, _sf_classes(), sf.replace, "ours"),
                                        (DC_OPS, _dc_classes(), dataclasses.replace, "baseline")):
        model = _build(classes, arrays)
        leaves_, treedef = jax.tree_util.tree_flatten(model)
        new = jnp.zeros(2, jnp.float32)

        def one_layer(model: Any = model, replace: Callable[..., Any] = replace) -> Any:
            layers = model.layers
            return replace(model, layers=layers[:deep] + (replace(layers[deep], w0=new),) + layers[deep + 1:])

        contenders += [
            Contender(f"{who}: {CONSTRUCT}", lambda c=classes: _build(c, arrays), kind, block=False),
            Contender(f"{who}: {REPLACE}", one_layer, kind, block=False),
            Contender(f"{who}: {FLATTEN}", lambda m=model: jax.tree_util.tree_flatten(m), kind, block=False),
            Contender(f"{who}: {UNFLATTEN}", lambda t=treedef, v=leaves_: jax.tree_util.tree_unflatten(t, v),
                      kind, block=False),
        ]
    best = measure(contenders, cfg, results)
    for name, us in best.items():
        who, _, op = name.partition(": ")
        results.add(OPS, op, {who: us}, {who: "ours" if who == SF_OPS else "baseline"})


def cache_bytes(leaves: int) -> dict[str, float]:
    """What staticfield's per-instance caches hold on a model of ``leaves`` leaves, after a hit.

    The shallow size of every cached entry of every instance's ``__dict__`` (the
    flatten's tuples, keys, deep flattens, bindings), and of the tuples inside the
    cached flatten; the arrays and the shared static keys are not counted (they are
    the user's data, or one object per class).
    """
    cls = _sf_classes()
    model = _build(cls, _arrays(leaves))
    x = jnp.ones(2, jnp.float32)
    model.step(x), model.step_read(x), cls[1].step(model, x)
    instances = [model, *model.layers]
    total = 0
    for obj in instances:
        d = obj._staticfield_dict
        for name, value in d.items():
            if name in obj.__dataclass_fields__:
                continue
            total += sys.getsizeof(value)
            if isinstance(value, tuple):
                total += sum(sys.getsizeof(v) for v in value if isinstance(v, (tuple, list)))
    return {"leaves": leaves, "instances": len(instances), "bytes": total,
            "bytes per instance": round(total / len(instances), 1)}


def run(cfg: Config, results: Results) -> None:
    counts = leaf_counts(cfg)
    for leaves in counts:
        print(f"  large model: {leaves} leaves", flush=True)
        _hits(cfg, results, leaves)
    _ops(cfg, results, counts[-1])
    results.extra[MEMORY] = cache_bytes(counts[-1])
