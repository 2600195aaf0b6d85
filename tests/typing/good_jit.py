"""Type checkers see sf.jit / sf.jit_method calls with the wrapped signature and the counters."""

import jax
import jax.numpy as jnp
from typing_extensions import assert_type

import staticfield as sf


@sf.dataclass
class Model:
    w: jax.Array
    depth: sf.Static[int] = 1

    @sf.jit_method
    def apply(self, x: jax.Array) -> jax.Array:
        return self.w * x

    @sf.jit_method(static_argnames="train")
    def loss(self, x: jax.Array, train: bool = False) -> jax.Array:
        return (self.w * x).sum()

    @sf.jit_method(deps="read")
    def scaled(self, x: jax.Array) -> jax.Array:
        return self.w * x * self.depth


@sf.jit
def step(model: Model, x: jax.Array) -> jax.Array:
    return model.apply(x)


@sf.jit(max_compiles=2)
def scale(x: jax.Array, k: float) -> jax.Array:
    return x * k


m = Model(jnp.ones(3))
assert_type(m.apply(jnp.ones(3)), jax.Array)
assert_type(m.loss(jnp.ones(3), train=True), jax.Array)
assert_type(Model.apply(m, jnp.ones(3)), jax.Array)
assert_type(m.scaled(jnp.ones(3)), jax.Array)
assert_type(step(m, jnp.ones(3)), jax.Array)
assert_type(scale(jnp.ones(3), 2.0), jax.Array)
n: int = Model.apply.compile_count + step.compile_count + scale.cache_size()
events: list[sf.Recompile] = Model.loss.recompiles + step.recompiles
