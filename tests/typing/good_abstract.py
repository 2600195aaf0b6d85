"""Abstract bases, leaves="any", static="auto" and identity_hashed as a type checker sees them."""

from __future__ import annotations

import abc
from typing import TYPE_CHECKING, Callable, ClassVar

import jax
import jax.numpy as jnp

import staticfield as sf

if TYPE_CHECKING:  # pyright reads ClassVar only under its own name (pyright#4965)
    from typing import ClassVar as AbstractClassVar
else:
    from staticfield import AbstractClassVar


class AbstractSolver(sf.Struct, strict=True):
    rtol: sf.AbstractVar[float]
    name: AbstractClassVar[str]

    @abc.abstractmethod
    def step(self, x: jax.Array) -> jax.Array: ...


class Halving(AbstractSolver, strict=True):
    rtol: float
    name: ClassVar[str] = "halving"
    fn: Callable[[jax.Array], jax.Array] = sf.field(default=jnp.sin, leaves="any")

    def step(self, x: jax.Array) -> jax.Array:
        return self.fn(x) / 2


@sf.identity_hashed
class Tag:
    pass


def run(x: jax.Array, n: int) -> jax.Array:
    return x * n


solver: AbstractSolver = Halving(1e-6)
tol: float = solver.rtol
out: jax.Array = solver.step(jnp.ones(2))
auto_out = sf.jit(run, static="auto")(jnp.ones(2), 3)
tag: Tag = Tag()
