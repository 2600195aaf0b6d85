"""Type checkers reject: an argument of the wrong type for the generated __init__."""

import jax
import jax.numpy as jnp

import staticfield as sf


@sf.dataclass
class Params:
    w: jax.Array
    depth: sf.Static[int]
    act: str = sf.static(default="tanh")


Params(jnp.ones(3), "two")  # expect-error
Params(jnp.ones(3), 2, act=3)  # expect-error
Params(jnp.ones(3))  # expect-error
Params(jnp.ones(3), 2, colour="red")  # expect-error
