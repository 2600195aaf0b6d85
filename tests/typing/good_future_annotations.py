"""Type checkers accept string annotations: ``Static[int]`` written under ``from __future__ import annotations``."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from typing_extensions import assert_type

import staticfield as sf
from staticfield import Static


@sf.dataclass
class Layer:
    w: jax.Array
    width: sf.Static[int]
    act: Static[str] = "tanh"
    norm: bool = sf.static(default=False)


layer = Layer(jnp.ones((2, 3)), 3)
layer = Layer(w=jnp.ones((2, 3)), width=3, act="relu", norm=True)
assert_type(layer.width, int)
assert_type(layer.act, str)
assert_type(layer.norm, bool)
assert_type(sf.replace(layer, act="gelu"), Layer)
