"""A small program that recompiles in every way JAX can; run it under ``watch``.

    python -m staticfield watch src/staticfield/examples/watch_demo.py

Each function below is plain ``jax.jit``; each is called so that it compiles
again for one reason: a new shape, a new dtype, a Python scalar instead of an
array (weak type), a new static field value, a new ``static_argnames`` value, a
new pytree structure, a new lambda per call (a new sharding needs 2+ devices).
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp

import staticfield as sf


@sf.dataclass
class Layer:
    w: jax.Array
    activation: sf.Static[str] = "relu"


class Batch(NamedTuple):
    x: jax.Array
    extras: dict


@jax.jit
def apply(layer, x):
    y = layer.w * x
    return jnp.tanh(y) if layer.activation == "tanh" else jax.nn.relu(y)


@jax.jit
def step(x, lr):
    return x - lr * x


@functools.partial(jax.jit, static_argnames=("n",))
def power(x, n):
    return x**n


@jax.jit
def total(batch):
    return batch.x.sum() + sum(v.sum() for v in batch.extras.values())


def main():
    x = jnp.ones(3)
    apply(Layer(jnp.ones(3)), x)
    apply(Layer(jnp.ones(3), "tanh"), x)  # static field: activation 'relu' → 'tanh'
    apply(Layer(jnp.ones(3, jnp.int32)), x)  # dtype: w float32 → int32
    apply(Layer(jnp.ones(4)), jnp.ones(4))  # shape: w and x [3] → [4]

    step(x, jnp.float32(0.1))
    step(x, 0.1)  # weak type: a Python float instead of a float32 array

    power(x, n=2)
    power(x, n=3)  # static argument: n 2 → 3

    total(Batch(x, {}))
    total(Batch(x, {"mask": x}))  # structure: a new dict key

    for _ in range(3):
        jax.jit(lambda v: v * 2)(x)  # a new function object on every call
    print("done")


if __name__ == "__main__":
    main()
