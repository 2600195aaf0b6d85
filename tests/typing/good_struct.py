"""Type checkers accept sf.Struct: the generated __init__, class keywords, and typed replace."""

import jax
import jax.numpy as jnp
from typing_extensions import assert_type

import staticfield as sf


class Params(sf.Struct):
    w: jax.Array
    depth: sf.Static[int] = 2

    @sf.jit_method
    def apply(self, x: jax.Array) -> jax.Array:
        for _ in range(self.depth):
            x = jnp.tanh(self.w * x)
        return x


class Options(sf.Struct, kw_only=True):
    lr: float
    steps: sf.Static[int] = 10


p = Params(jnp.ones(3), 3)
assert_type(p.depth, int)
q = p.replace(w=jnp.zeros(3))
assert_type(q, Params)
assert_type(q.apply(jnp.arange(3.0)), jax.Array)
o = Options(lr=0.1)
assert_type(o.replace(steps=5), Options)
assert_type(sf.replace(o, lr=0.2), Options)
