"""Nested models on the hit path: a list or dict in a dynamic field, mutated in place, is
never served stale (DESIGN, "Large models").

The oracle is plain ``jax.jit`` over the same model as ``register_dataclass`` classes
that share the very same lists and dicts, so every in-place mutation reaches both; each
call form of staticfield must return what the oracle returns after every mutation.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import staticfield as sf


def _weighted(model: Any, x: jax.Array) -> jax.Array:
    """Every leaf, weighted by its position: a stale, dropped or reordered leaf shows."""
    out = x
    for i, leaf in enumerate(jax.tree.leaves(model)):
        out = out + (i + 1) * leaf
    return out


@sf.dataclass
class Node1:
    a: Any


@sf.dataclass
class Node2:
    a: Any
    b: Any


@sf.dataclass
class Model:
    a: Any
    b: Any

    # Every drawn model is a new structure, so a new compile: no warning about the count.
    @sf.jit_method(warn_compiles=None)
    def step(self, x):
        return _weighted(self, x)

    @sf.jit_method(deps="read", warn_compiles=None)
    def step_read(self, x):
        return _weighted(self, x)


free = sf.jit(_weighted, warn_compiles=None)


@dataclasses.dataclass(frozen=True)
class PlainNode1:
    a: Any


@dataclasses.dataclass(frozen=True)
class PlainNode2:
    a: Any
    b: Any


@dataclasses.dataclass(frozen=True)
class PlainModel:
    a: Any
    b: Any


for _cls in (PlainNode1, PlainNode2, PlainModel):
    jax.tree_util.register_dataclass(_cls, data_fields=[f.name for f in dataclasses.fields(_cls)],
                                     meta_fields=[])
oracle = jax.jit(_weighted)

# A model's shape, drawn: ("array", value) | ("list" | "tuple", [shapes]) | ("dict", {key: shape})
# | ("node", [one or two shapes]).
_arrays = st.integers(-3, 3).map(lambda v: ("array", v))
_shapes = st.recursive(
    _arrays,
    lambda inner: st.one_of(
        st.tuples(st.sampled_from(["list", "tuple"]), st.lists(inner, max_size=3)),
        st.tuples(st.just("dict"), st.dictionaries(st.sampled_from("pqrs"), inner, max_size=3)),
        st.tuples(st.just("node"), st.lists(inner, min_size=1, max_size=2)),
    ),
    max_leaves=8,
)


def _array(v: int) -> jax.Array:
    return jnp.full(2, float(v), jnp.float32)


def _build(shape: Any) -> tuple[Any, Any]:
    """The staticfield model part and its plain twin; lists and dicts are the same objects."""
    kind, body = shape
    if kind == "array":
        a = _array(body)
        return a, a
    if kind == "node":
        parts = [_build(s) for s in body]
        ours = (Node1, Node2)[len(parts) - 1](*(p[0] for p in parts))
        plain = (PlainNode1, PlainNode2)[len(parts) - 1](*(p[1] for p in parts))
        return ours, plain
    # A list or dict is one object in both models (so a mutation reaches both); a node
    # inside one is staticfield's, which the oracle flattens through JAX's registry.
    if kind == "dict":
        shared = {k: _build(s)[0] for k, s in body.items()}
        return shared, shared
    parts = [_build(s) for s in body]
    if kind == "list":
        shared = [p[0] for p in parts]
        return shared, shared
    return tuple(p[0] for p in parts), tuple(p[1] for p in parts)


def _containers(value: Any, found: list) -> list:
    """Every list and dict reachable from ``value``, through fields and containers."""
    if isinstance(value, (list, dict)):
        found.append(value)
    if isinstance(value, dict):
        items = list(value.values())
    elif isinstance(value, (list, tuple)):
        items = list(value)
    elif isinstance(value, (Node1, Node2, Model)):
        items = [getattr(value, f.name) for f in sf.fields(value)]
    else:
        items = []
    for item in items:
        _containers(item, found)
    return found


def _mutate(container: Any, op: int, value: int) -> None:
    """One in-place mutation: replace an entry's array (same shape: nothing but the value
    changes), add an entry, or remove one."""
    new = _array(value)
    if isinstance(container, list):
        if op == 0 and container:
            container[value % len(container)] = new
        elif op == 1 or not container:
            container.append(new)
        else:
            container.pop()
    else:
        keys = sorted(container)
        if op == 0 and keys:
            container[keys[value % len(keys)]] = new
        elif op == 1 or not keys:
            container["pqrs"[value % 4]] = new
        else:
            del container[keys[-1]]


def _check(model: Model, plain: PlainModel, x: jax.Array) -> None:
    want = np.asarray(oracle(plain, x))
    for got in (model.step(x), Model.step(model, x), free(model, x), model.step_read(x)):
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-6)


def _mutate_and_check(model: Model, plain: PlainModel, x: jax.Array, mutations: list) -> None:
    """Each random in-place mutation of one of the model's lists or dicts (shared with its
    plain twin), then every call form against plain jax.jit."""
    for pick, op, value in mutations:
        found = _containers(model, [])
        if not found:
            break
        _mutate(found[pick % len(found)], op, value)
        _check(model, plain, x)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(a=_shapes, b=_shapes,
       mutations=st.lists(st.tuples(st.integers(0, 99), st.integers(0, 2), st.integers(-3, 3)), max_size=5))
def test_in_place_mutations_are_never_served_stale(a, b, mutations):
    """Random nested models; after each random in-place mutation of one of their lists or
    dicts, obj.method, Cls.method, sf.jit(f) and a deps="read" method agree with plain
    jax.jit over register_dataclass twins sharing the same containers."""
    (oa, pa), (ob, pb) = _build(a), _build(b)
    model, plain = Model(oa, ob), PlainModel(pa, pb)
    x = jnp.arange(2, dtype=jnp.float32)
    _check(model, plain, x)
    _mutate_and_check(model, plain, x, mutations)


def test_a_mutated_list_deep_in_a_large_model_is_seen():
    """The same on a model of many layers: the hit after an in-place change of one deep
    layer's list returns the new value, on every call form."""
    layers = tuple(Node2(_array(i), [_array(i)]) for i in range(200))
    plain_layers = tuple(PlainNode2(layer.a, layer.b) for layer in layers)
    model = Model(layers, {"k": [_array(1)]})
    plain = PlainModel(plain_layers, model.b)
    x = jnp.ones(2, jnp.float32)
    _check(model, plain, x)
    layers[150].b[0] = _array(7)
    _check(model, plain, x)
    model.b["k"][0] = _array(-2)
    _check(model, plain, x)


class _Counted:
    """A custom pytree node that counts its flattens."""

    flattens = 0

    def __init__(self, value: jax.Array) -> None:
        self.value = value


def _flatten_counted(node: _Counted) -> tuple[tuple, None]:
    _Counted.flattens += 1
    return (node.value,), None


jax.tree_util.register_pytree_node(_Counted, _flatten_counted, lambda _, children: _Counted(*children))


def test_building_or_replacing_a_model_does_not_walk_its_layers_again():
    """A tuple of layers is checked by its items: each layer's own leaves were checked when
    it was built, so neither constructing the model nor ``sf.replace`` of one layer flattens
    them again (which made a replace cost O(leaves) on a large model)."""
    layers = tuple(Node1(_Counted(_array(i))) for i in range(50))
    before = _Counted.flattens
    model = Model(layers, [layers[0]])
    new = sf.replace(model, a=layers[:10] + (sf.replace(layers[10], a=_Counted(_array(9))),) + layers[11:])
    assert _Counted.flattens == before + 1  # the one new layer's own check
    assert new.a[10].a.value[0] == 9
    x = jnp.ones(2, jnp.float32)
    np.testing.assert_allclose(np.asarray(new.step(x)), np.asarray(_weighted(new, x)))


# ----- large models: the hit passes the cached flat leaves (DESIGN, "Large models") --------

PAD = 24  # nested instances beyond which a model is large (more than _core._deep.LARGE_NODES)
USES = 5  # a call form takes a large model's flat leaves from its fourth use on (_core._deep.WARM_UPS)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(a=_shapes, b=_shapes, layer=st.integers(0, PAD - 1),
       mutations=st.lists(st.tuples(st.integers(0, 99), st.integers(0, 2), st.integers(-3, 3)), max_size=4))
def test_large_models_agree_with_the_oracle(a, b, layer, mutations):
    """As above, on a drawn model padded with many layers, so that every drawn model
    without a list or dict takes the large-model hit once called a few times: after
    in-place mutations, after ``sf.replace`` of one layer and after ``object.__setattr__``
    on a nested layer."""
    (oa, pa), (ob, pb) = _build(a), _build(b)
    pad = tuple(Node1(_array(i % 5)) for i in range(PAD))
    plain_pad = tuple(PlainNode1(n.a) for n in pad)
    model, plain = Model((oa, pad), ob), PlainModel((pa, plain_pad), pb)
    x = jnp.arange(2, dtype=jnp.float32)
    for _ in range(USES):
        _check(model, plain, x)
    _mutate_and_check(model, plain, x, mutations)
    new_pad = pad[:layer] + (Node1(_array(9)),) + pad[layer + 1:]
    replaced = sf.replace(model, a=(oa, new_pad))
    for _ in range(USES):
        _check(replaced, PlainModel((pa, tuple(PlainNode1(n.a) for n in new_pad)), pb), x)
    object.__setattr__(pad[layer], "a", _array(-7))  # the escape hatch, on a nested layer
    _check(model, PlainModel((pa, tuple(PlainNode1(n.a) for n in pad)), pb), x)


def test_a_list_deep_in_an_otherwise_frozen_large_model_is_seen():
    """A large model of tuples and layers whose one deep layer holds a list: mutated in
    place, the hit sees it (the list keeps the model off the cached flat leaves)."""
    layers = tuple(Node2(_array(i), (_array(i),)) for i in range(60))
    inner = [_array(1)]
    layers = layers[:40] + (Node2(_array(3), (inner,)),) + layers[41:]
    model = Model(layers, None)
    plain = PlainModel(tuple(PlainNode2(n.a, n.b) for n in layers), None)
    x = jnp.ones(2, jnp.float32)
    for _ in range(USES):
        _check(model, plain, x)
    inner[0] = _array(-5)
    _check(model, plain, x)
    inner.append(_array(2))
    _check(model, plain, x)


@sf.dataclass
class Deep:
    w: jax.Array
    n: int = sf.static(default=1)


@sf.dataclass
class Big:
    layers: tuple

    @sf.jit_method
    def step(self, x):
        return x + self.layers[0].w * self.layers[0].n + self.layers[-1].w


class _CountingFlat:
    """Stands in for a class's cached-flatten descriptor, counting the flattens it computes."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.count = inner, 0

    def __get__(self, obj: Any, owner: Any = None) -> Any:
        if obj is None:
            return self
        self.count += 1
        return self.inner.__get__(obj, owner)


def test_a_hit_of_a_large_model_flattens_no_nested_instance_again(monkeypatch):
    """DESIGN: a hit never flattens an unchanged nested instance again. The layers' cached
    flattens are dropped after the first few calls; the hits of ``obj.method`` do not
    compute them again (JAX's flatten of the nested layers would)."""
    model = Big(tuple(Deep(_array(i)) for i in range(40)))
    x = jnp.ones(2, jnp.float32)
    for _ in range(USES):
        np.testing.assert_allclose(np.asarray(model.step(x)), [40.0, 40.0])
    counting = _CountingFlat(Deep.__dict__["_staticfield_flat"])
    monkeypatch.setattr(Deep, "_staticfield_flat", counting)
    for layer in model.layers:
        layer._staticfield_dict.pop("_staticfield_flat", None)
    for _ in range(3):
        np.testing.assert_allclose(np.asarray(model.step(x)), [40.0, 40.0])
    assert counting.count == 0


def test_a_large_model_keeps_compile_counts_explanations_and_its_binding():
    """The large-model hit changes no counter, explanation or binding: a nested static
    change compiles once more and is explained by its path; ``jax.disable_jit()`` runs the
    method in Python; the binding is the same pytree (leaves, key paths) as a small model's,
    and ``__self__`` is the instance."""
    Big.step.clear_cache()
    before = Big.step.compile_count
    model = Big(tuple(Deep(_array(i)) for i in range(40)))
    x = jnp.ones(2, jnp.float32)
    model.step(x)
    other = Big(tuple(Deep(_array(i)) for i in range(40)))  # an equal structure: no compile
    np.testing.assert_allclose(np.asarray(other.step(x)), [40.0, 40.0])
    assert Big.step.compile_count == before + 1
    changed = sf.replace(model, layers=(sf.replace(model.layers[0], n=3), *model.layers[1:]))
    np.testing.assert_allclose(np.asarray(changed.step(x)), [40.0, 40.0])
    assert Big.step.compile_count == before + 2
    assert "self.layers[0].n" in str(Big.step.recompiles[-1])
    with jax.disable_jit():
        np.testing.assert_allclose(np.asarray(changed.step(x)), [40.0, 40.0])
    bound = model.step
    assert bound.__self__ is model
    paths = [jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_flatten_with_path(bound)[0]]
    assert paths[:2] == [".layers[0].w", ".layers[1].w"] and len(paths) == 40
    again = jax.tree_util.tree_map(lambda a: a + 1, bound)
    np.testing.assert_allclose(np.asarray(again(x)), [42.0, 42.0])


def test_sf_jit_and_cls_method_switch_to_the_flat_leaves_once_a_large_model_comes():
    """``sf.jit(f)`` and ``Cls.method(obj, ...)`` see a large model on a miss and pass its
    flat leaves from then on: their hits flatten no nested instance again, small models and
    plain arguments still compute right through them, and nothing compiles again."""
    free = sf.jit(lambda m, x: x + m.layers[0].w * m.layers[0].n + m.layers[-1].w)
    small = Big((Deep(_array(2)),))
    x = jnp.ones(2, jnp.float32)
    np.testing.assert_allclose(np.asarray(free(small, x)), [5.0, 5.0])
    model = Big(tuple(Deep(_array(i)) for i in range(40)))
    for _ in range(USES):
        np.testing.assert_allclose(np.asarray(free(model, x)), [40.0, 40.0])
        np.testing.assert_allclose(np.asarray(Big.step(model, x)), [40.0, 40.0])
    counting = _CountingFlat(Deep.__dict__["_staticfield_flat"])
    compiles = free.compile_count, Big.step.compile_count
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Deep, "_staticfield_flat", counting)
        for layer in model.layers:
            layer._staticfield_dict.pop("_staticfield_flat", None)
        for _ in range(3):
            np.testing.assert_allclose(np.asarray(free(model, x)), [40.0, 40.0])
            np.testing.assert_allclose(np.asarray(Big.step(model, x)), [40.0, 40.0])
        assert counting.count == 0
    np.testing.assert_allclose(np.asarray(free(small, x)), [5.0, 5.0])
    np.testing.assert_allclose(np.asarray(Big.step(small, x)), [5.0, 5.0])
    assert (free.compile_count, Big.step.compile_count) == (compiles[0], compiles[1] + 1)  # small: Big.step's first
    with jax.disable_jit():
        np.testing.assert_allclose(np.asarray(free(model, x)), [40.0, 40.0])
        np.testing.assert_allclose(np.asarray(Big.step(model, x)), [40.0, 40.0])
    with pytest.raises(TypeError, match="takes an instance of Big"):
        Big.step(x, x)


def test_a_large_model_under_transformations():
    """A large model's hit paths inside ``jax.jit``, ``jax.grad`` and ``jax.vmap``, and a
    gradient with respect to the model itself (its traced copy is not large: tracers)."""
    model = Big(tuple(Deep(_array(i)) for i in range(40)))
    free = sf.jit(lambda m, x: x * m.layers[0].w + m.layers[-1].w)
    x = jnp.ones(2, jnp.float32)
    for _ in range(USES):
        model.step(x), free(model, x), Big.step(model, x)
    for call, value, slope in ((model.step, 40.0, 1.0), (lambda x: Big.step(model, x), 40.0, 1.0),
                               (lambda x: free(model, x), 39.0, 0.0)):
        np.testing.assert_allclose(np.asarray(jax.jit(lambda x: call(x) * 2)(x)), [2 * value] * 2)
        np.testing.assert_allclose(np.asarray(jax.grad(lambda x: call(x).sum())(x)), [slope] * 2)
        assert jax.vmap(call)(jnp.ones((3, 2), jnp.float32)).shape == (3, 2)
    grads = jax.grad(lambda m: free(m, x).sum())(model)
    np.testing.assert_allclose(np.asarray(grads.layers[-1].w), [1.0, 1.0])
    np.testing.assert_allclose(np.asarray(grads.layers[0].w), [1.0, 1.0])
