"""Type checkers accept: the generated __init__, Static[T], sf.field/sf.static, and sf.replace."""

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
from typing_extensions import assert_type

import staticfield as sf


@sf.dataclass
class Params:
    w: jax.Array
    depth: sf.Static[int]
    act: str = sf.static(default="tanh")
    scale: float = sf.field(default=1.0)
    tags: tuple[str, ...] = sf.field(static=True, default=())
    extra: dict[str, jax.Array] = dataclasses.field(default_factory=dict)


p = Params(jnp.ones(3), 2)
p = Params(w=jnp.ones(3), depth=2, act="relu", scale=0.5, tags=("a", "b"), extra={})
assert_type(p.w, jax.Array)
assert_type(p.depth, int)
assert_type(p.act, str)
assert_type(p.scale, float)
assert_type(p.tags, tuple[str, ...])

q = sf.replace(p, depth=3, w=jnp.zeros(3))
assert_type(q, Params)


@sf.dataclass(kw_only=True)
class Options:
    lr: float
    steps: sf.Static[int] = 10


o = Options(lr=0.1)
o = Options(lr=0.1, steps=20)
assert_type(o.steps, int)


@sf.dataclass
class Model:
    params: Params
    options: Options

    def loss(self, x: jax.Array) -> jax.Array:
        return jnp.sum(self.params.w * x) * self.options.lr


m = Model(p, o)
assert_type(m.params.depth, int)
assert_type(m.loss(jnp.ones(3)), jax.Array)

leaves: list[jax.Array] = jax.tree.leaves(m)
names: tuple[str, ...] = sf.static_fields(m)
dyn: tuple[str, ...] = sf.dynamic_fields(Model)
fields: tuple[dataclasses.Field[Any], ...] = sf.fields(m)


@sf.dataclass
class Base:
    w: jax.Array
    depth: sf.Static[int] = 1


@sf.dataclass
class Child(Base):
    b: jax.Array = dataclasses.field(default_factory=lambda: jnp.zeros(3))
    name: str = sf.static(default="child")


c = Child(jnp.ones(3), 2, jnp.zeros(3), name="c")
assert_type(c.depth, int)
assert_type(c.name, str)
assert_type(sf.replace(c, name="d"), Child)
