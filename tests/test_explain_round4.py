"""Each compile is explained by its true cause, in the user's words (round 4 of the ports)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import staticfield as sf


def jitted(w: sf.watch) -> list:
    return [f for f in w.functions if not f.eager and not f.padding]


def test_a_change_of_committed_device_is_kind_committed():
    """The same array, placed with jax.device_put (committed) then made by jnp (not): JAX
    compiles again; the watch names `x` and kind "committed", not "no argument differs"."""
    f = jax.jit(lambda x: x + 1)
    g = sf.jit(lambda x: x * 2)
    made, placed = jnp.ones(3), jax.device_put(jnp.ones(3), jax.devices()[0])
    device = jax.devices()[0]
    with sf.watch() as w:
        f(placed)
        f(made)
        g(made)
        g(placed)
    (fn, sf_fn) = jitted(w)
    (change,) = fn.compiles[1].changes
    assert [str(c).splitlines()[0] for c in sf_fn.compiles[1].changes] == [
        f"x: uncommitted → committed to {device.platform}:{device.id} (committed)"]
    assert (change.path, change.kind) == ("x", "committed")
    assert (change.old, change.new) == (f"committed to {device.platform}:{device.id}", "uncommitted")
    assert "device_put" in change.hint
    assert "no argument differs" not in w.report()


def test_a_positional_static_argument_is_named_by_its_parameter():
    """static_argnums into `*rest`: `rest[0]`, never `args[1]`; a named one by its name."""

    def scale(x, k):
        return x * k

    def spread(x, *rest):
        return x * rest[0]

    named, starred = sf.jit(scale, static_argnums=1), sf.jit(spread, static_argnums=1)
    for k in (2, 3):
        named(jnp.ones(2), k)
        starred(jnp.ones(2), k)
    assert [c.path for c in named.recompiles[0].changes] == ["k"]
    assert [c.path for c in starred.recompiles[0].changes] == ["rest[0]"]
    with pytest.raises(TypeError, match="`rest\\[0\\]` is an unhashable list"):
        starred(jnp.ones(2), [1])
