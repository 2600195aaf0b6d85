"""Case 5: ``sf.stack`` of many instances against the hand-written ``tree.map``.

Both stack ``cfg.stack_size`` instances of a class with two ``f32[4]`` arrays
and a static int into one instance with ``f32[N, 4]`` leaves. The hand-written
version is the usual one-liner, ``jax.tree.map(lambda *xs: jnp.stack(xs), *xs)``,
which checks nothing; ``sf.stack`` also checks that static values, shapes and
dtypes agree.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

import staticfield as sf

from ._harness import Config, Contender, Results, kinds, measure

STACK = "stack"
OURS = "sf.stack"
BY_HAND = "jax.tree.map(jnp.stack)"


def has_stack() -> bool:
    return hasattr(sf, "stack")


def run(cfg: Config, results: Results) -> None:
    n = cfg.stack_size
    print(f"case 5: stacking {n} instances", flush=True)
    if not has_stack():
        results.note("sf.stack does not exist yet: the stacking case is skipped")
        return

    @sf.dataclass
    class Params:
        a: jax.Array
        b: jax.Array
        n: int = sf.static()

    items = [Params(jnp.full(4, i, jnp.float32), jnp.ones(4, jnp.float32), 3) for i in range(n)]

    def by_hand() -> Params:
        return jax.tree.map(lambda *xs: jnp.stack(xs), *items)

    expected, got = by_hand(), sf.stack(items)
    same = type(got) is Params and jax.tree.structure(got) == jax.tree.structure(expected)
    same = same and all(bool((x == y).all()) for x, y in zip(
        jax.tree.leaves(got), jax.tree.leaves(expected), strict=True))
    if not same:
        raise RuntimeError("sf.stack and the hand-written stack disagree")
    contenders = [
        Contender(OURS, lambda: sf.stack(items), "ours"),
        Contender(BY_HAND, by_hand, "baseline"),
    ]
    results.add(STACK, n, measure(contenders, cfg, results), kinds(contenders))
