"""optax trains sf.dataclass models under sf.jit with one compile, and takes instances as masks."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import staticfield as sf

optax = pytest.importorskip("optax")


@sf.dataclass
class MLP:
    layers: tuple  # ((w, b), ...): dynamic
    sizes: sf.Static[tuple]
    activation: sf.Static[str] = "tanh"

    def __call__(self, x):
        act = getattr(jax.nn, self.activation)
        for w, b in self.layers[:-1]:
            x = act(x @ w + b)
        w, b = self.layers[-1]
        return x @ w + b


def init_mlp(sizes, key, activation="tanh") -> MLP:
    keys = jax.random.split(key, len(sizes) - 1)
    layers = tuple(
        (jax.random.normal(k, (m, n)) / np.sqrt(m), jnp.zeros(n))
        for k, m, n in zip(keys, sizes[:-1], sizes[1:])
    )
    return MLP(layers, sizes=sizes, activation=activation)


def _data():
    x = jax.random.normal(jax.random.key(1), (128, 2))
    y = jnp.sin(2 * x[:, :1]) * x[:, 1:]
    return x, y


def loss_fn(model, x, y):
    return jnp.mean((model(x) - y) ** 2)


def _weights_only(model: MLP) -> MLP:
    """A mask with the model's structure: True on the weight matrices, False on the biases."""
    mask = jax.tree.map(lambda _: False, model)
    return sf.replace(mask, layers=tuple((True, False) for _ in model.layers))


def _make_step(optimizer, counter: list[int]):
    def step(model, opt_state, x, y):
        counter[0] += 1  # runs only while tracing
        loss, grads = jax.value_and_grad(loss_fn)(model, x, y)
        updates, opt_state = optimizer.update(grads, opt_state, model)
        return optax.apply_updates(model, updates), opt_state, loss

    return sf.jit(step)


def test_adam_training_loss_goes_down_with_one_compile():
    """50 adam steps of an MLP with static sizes and activation: the loss falls, and it compiles exactly once."""
    model = init_mlp((2, 32, 32, 1), jax.random.key(0))
    x, y = _data()
    decay = optax.masked(optax.add_decayed_weights(1e-4), _weights_only(model))
    optimizer = optax.chain(decay, optax.adam(1e-2))
    opt_state = optimizer.init(model)
    traces = 0

    def step(model, opt_state, x, y):
        nonlocal traces
        traces += 1
        loss, grads = jax.value_and_grad(loss_fn)(model, x, y)
        updates, opt_state = optimizer.update(grads, opt_state, model)
        return optax.apply_updates(model, updates), opt_state, loss

    step = sf.jit(step)
    losses = []
    for _ in range(50):
        model, opt_state, loss = step(model, opt_state, x, y)
        losses.append(float(loss))

    assert losses[-1] < 0.5 * losses[0]
    assert traces == 1
    assert step.compile_count == 1
    assert step.recompiles == []
    assert isinstance(model, MLP) and model.sizes == (2, 32, 32, 1) and model.activation == "tanh"
    assert model.layers[0][0].dtype == jnp.float32


def test_changing_a_static_field_recompiles_once_and_says_why():
    """Switching the static activation compiles one new program, explained in field paths (adam's mu and nu are models too)."""
    counter = [0]
    optimizer = optax.adam(1e-2)
    step = _make_step(optimizer, counter)
    x, y = _data()
    tanh = init_mlp((2, 8, 1), jax.random.key(0))
    relu = sf.replace(tanh, activation="relu")
    for model in (tanh, relu, tanh, relu):
        step(model, optimizer.init(model), x, y)
    assert counter[0] == 2 and step.compile_count == 2
    changes = [(c.path, c.kind, c.old, c.new) for c in step.recompiles[0].changes]
    assert changes == [
        ("model.activation", "static", "'tanh'", "'relu'"),
        ("opt_state[0].mu.activation", "static", "'tanh'", "'relu'"),
        ("opt_state[0].nu.activation", "static", "'tanh'", "'relu'"),
    ]


def test_masked_with_an_instance_mask():
    """optax.masked takes a mask that is an instance of the model (one bool per leaf) and applies it per field."""
    model = init_mlp((2, 4, 1), jax.random.key(0))
    mask = _weights_only(model)
    assert isinstance(mask, MLP) and mask.layers[0] == (True, False) and mask.sizes == model.sizes

    decay = optax.masked(optax.add_decayed_weights(0.5), mask)
    zero_grads = jax.tree.map(jnp.zeros_like, model)
    updates, _ = decay.update(zero_grads, decay.init(model), model)
    for (w, b), (uw, ub) in zip(model.layers, updates.layers):
        np.testing.assert_allclose(uw, 0.5 * w)
        np.testing.assert_array_equal(ub, jnp.zeros_like(b))


def test_masked_with_a_callable_mask_inside_jit():
    """A mask built by a function of the params works under sf.jit, and training still compiles once."""
    counter = [0]
    optimizer = optax.chain(optax.masked(optax.add_decayed_weights(1e-3), _weights_only), optax.sgd(1e-1))
    step = _make_step(optimizer, counter)
    model = init_mlp((2, 8, 1), jax.random.key(0))
    opt_state = optimizer.init(model)
    x, y = _data()
    first = float(loss_fn(model, x, y))
    for _ in range(20):
        model, opt_state, loss = step(model, opt_state, x, y)
    assert float(loss) < first
    assert counter[0] == 1 and step.compile_count == 1


@sf.dataclass
class Linear:
    w: jax.Array
    b: jax.Array


def test_multi_transform_with_instance_labels():
    """optax.multi_transform takes labels that are an instance of the model with str leaves (unflatten never checks leaves)."""
    model = Linear(jnp.ones((2, 3)), jnp.ones(3))
    labels = jax.tree.map(lambda leaf: "train" if leaf.ndim == 2 else "frozen", model)
    assert isinstance(labels, Linear) and (labels.w, labels.b) == ("train", "frozen")
    optimizer = optax.multi_transform({"train": optax.sgd(1.0), "frozen": optax.set_to_zero()}, labels)
    updates, _ = optimizer.update(jax.tree.map(jnp.ones_like, model), optimizer.init(model), model)
    np.testing.assert_array_equal(updates.w, -jnp.ones((2, 3)))
    np.testing.assert_array_equal(updates.b, jnp.zeros(3))


def test_multi_transform_labels_for_a_callable_model():
    """multi_transform calls labels that are callable, so labels for a model with __call__ go through a function."""
    model = init_mlp((2, 4, 1), jax.random.key(0))

    def labels(params):
        return jax.tree.map(lambda leaf: "train" if leaf.ndim == 2 else "frozen", params)

    optimizer = optax.multi_transform({"train": optax.sgd(1.0), "frozen": optax.set_to_zero()}, labels)
    updates, _ = optimizer.update(jax.tree.map(jnp.ones_like, model), optimizer.init(model), model)
    for uw, ub in updates.layers:
        np.testing.assert_array_equal(uw, -jnp.ones_like(uw))
        np.testing.assert_array_equal(ub, jnp.zeros_like(ub))
