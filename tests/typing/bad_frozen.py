"""Type checkers reject: assigning to a field of a frozen instance."""

import jax
import jax.numpy as jnp

import staticfield as sf


@sf.dataclass
class Params:
    w: jax.Array
    depth: sf.Static[int] = 2


p = Params(jnp.ones(3))
p.depth = 3  # expect-error
p.w = jnp.zeros(3)  # expect-error
