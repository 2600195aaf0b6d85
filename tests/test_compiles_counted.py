"""Every compile of an sf function counts, whatever made it, and is explained as its own."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import staticfield as sf


def _model():
    class P(sf.Struct):
        w: jax.Array

        @sf.jit_method(warn_compiles=None)
        def f(self, x):
            return self.w * x

    return P, P(w=jnp.ones(3))


def test_an_eager_vmap_of_a_jit_method_counts_each_batch_size():
    """jax.vmap(obj.method)(xs) called eagerly compiles a batched program per batch size:
    each counts, explained as the batch size that changed; a size seen before is a hit."""
    P, p = _model()
    xs = {b: jnp.ones((b, 3)) for b in (2, 4, 8, 16)}
    for b in (2, 4, 8, 16, 8):
        jax.vmap(p.f)(xs[b])
    assert P.f.compile_count == 4
    assert [str(c) for c in P.f.recompiles[-1].changes][0].startswith("vmap: batch 8 → 16")
    assert [(c.path, c.old, c.new) for c in P.f.recompiles[0].changes] == [("vmap", "batch 2", "batch 4")]


def test_an_eager_vmap_of_an_sf_jit_counts_and_max_compiles_refuses():
    """max_compiles=1 refuses the second batched program, naming the batch sizes; the first
    one keeps working."""
    f = sf.jit(lambda x: x * 2, max_compiles=1)
    a, b = jnp.ones((2, 3)), jnp.ones((5, 3))
    jax.vmap(f)(a)
    with pytest.raises(sf.RecompileError, match="vmap: batch 2 → 5"):
        jax.vmap(f)(b)
    assert f.compile_count == 1
    assert jax.vmap(f)(a).shape == (2, 3)


def test_no_compiles_explains_an_eager_vmap_by_its_batch_size():
    """sf.no_compiles() refuses a new batch size with the batch change, not 'first compile'."""
    P, p = _model()
    a, b = jnp.ones((2, 3)), jnp.ones((6, 3))
    jax.vmap(p.f)(a)
    with sf.no_compiles():
        jax.vmap(p.f)(a)  # compiled before: runs
        with pytest.raises(sf.RecompileError) as info:
            jax.vmap(p.f)(b)
    assert "vmap: batch 2 → 6" in str(info.value)
    assert "first compile" not in str(info.value)
    assert P.f.compile_count == 1


def test_vmap_inside_jit_is_one_compile_of_the_outer_function():
    """Under an outer jit the batched program is inlined: nothing more is counted."""
    P, p = _model()
    g = jax.jit(jax.vmap(p.f))
    g(jnp.ones((2, 3)))
    g(jnp.ones((4, 3)))
    assert P.f.compile_count == 1


def test_two_bucketed_wrappers_of_one_function_explain_their_own_first_compiles():
    """sf.jit(f, buckets=...) with other bucket_sizes=: each wrapper's first compile is a
    first compile, in sf.watch too, never explained against the other wrapper's buckets."""

    def classify(x):
        return jnp.tanh(x) * 2

    pow2 = sf.jit(classify, buckets={"x": 0})
    listed = sf.jit(classify, buckets={"x": 0}, bucket_sizes=[16, 48])
    with sf.watch() as w:
        pow2(np.ones((10, 4), np.float32))
        listed(np.ones((12, 4), np.float32))
        listed(np.ones((20, 4), np.float32))
    assert (pow2.compile_count, listed.compile_count) == (1, 2)
    (watched,) = [f for f in w.functions if not f.eager and not f.padding]
    first, second, third = watched.compiles
    assert not second.changes
    assert "#2 at" in w.report() and "first compile of another wrapper" in w.report()
    assert "no argument differs" not in w.report()
    assert [str(c) for c in third.changes] == [str(c) for c in listed.recompiles[0].changes]
    assert "(was bucket 16)" in str(third.changes[0])
