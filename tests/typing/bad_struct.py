"""Type checkers reject assignment to a frozen sf.Struct field and a wrong constructor call."""

import jax
import jax.numpy as jnp

import staticfield as sf


class Params(sf.Struct):
    w: jax.Array
    depth: sf.Static[int] = 2


p = Params(jnp.ones(3))
p.depth = 3  # expect-error
Params(jnp.ones(3), "deep")  # expect-error
