"""Type checkers reject calls that do not match the wrapped signature."""

import jax
import jax.numpy as jnp

import staticfield as sf


@sf.dataclass
class Model:
    w: jax.Array

    @sf.jit_method
    def apply(self, x: jax.Array) -> jax.Array:
        return self.w * x

    @sf.jit_method(deps="reads")  # expect-error
    def scaled(self, x: jax.Array) -> jax.Array:
        return self.w * x


@sf.jit
def step(model: Model, x: jax.Array) -> jax.Array:
    return model.apply(x)


m = Model(jnp.ones(3))
m.apply("not an array")  # expect-error
step(jnp.ones(3), jnp.ones(3))  # expect-error
