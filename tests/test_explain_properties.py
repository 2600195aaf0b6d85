"""An oracle for the explanations: one random change to a random call is named, alone.

A jitted function (plain ``jax.jit`` or ``sf.jit``, with a static argument) is called once,
then again with exactly one thing changed: a static value, a shape, a dtype, a weak type, a
global setting, a new function object with the same code, or the call made under
``jax.vmap``. ``sf.watch`` must explain the second compile by that change and no other.
(Sharding and mesh changes need several devices: tests/test_explain_causes.py checks them
on 8 virtual devices.)
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import staticfield as sf

pytestmark = pytest.mark.usefixtures("check_deps")

EXPECTED = {
    "static": [("k", "static_arg")],
    "shape": [("x", "shape")],
    "dtype": [("x", "dtype")],
    "weak_type": [("y", "weak_type")],
    "setting": [("jax_default_matmul_precision", "context")],
    "x64": [("jax_enable_x64", "context")],
    "new function": [("(the function)", "new function")],
    "vmap": [("(the call)", "context")],
}


def make():
    def f(x, y, k):
        return x * y + k

    return f


def call(wrap, fn):
    return wrap(fn, static_argnames="k")


@settings(max_examples=40, deadline=None)
@given(
    change=st.sampled_from(sorted(EXPECTED)),
    wrap=st.sampled_from(["jax.jit", "sf.jit"]),
    n=st.integers(1, 5),
    k=st.integers(0, 3),
    dtype=st.sampled_from(["float32", "bfloat16"]),
)
def test_one_change_is_named_and_no_other(change, wrap, n, k, dtype):
    """The second compile's explanation is exactly the one change made."""
    jit = jax.jit if wrap == "jax.jit" else sf.jit
    f = call(jit, make())
    x, y = jnp.ones(n, dtype), jnp.asarray(2.0, jnp.float32)
    with sf.watch() as w:
        f(x, y, k=k)
        if change == "static":
            f(x, y, k=k + 1)
        elif change == "shape":
            f(jnp.ones(n + 1, dtype), y, k=k)
        elif change == "dtype":
            f(x.astype(jnp.int32), y, k=k)
        elif change == "weak_type":
            f(x, jnp.asarray(2.0), k=k)
        elif change == "setting":
            with jax.default_matmul_precision("highest"):
                f(x, y, k=k)
        elif change == "x64":
            with jax.enable_x64(True):
                f(x, y, k=k)
        elif change == "new function":
            call(jit, make())(x, y, k=k)
        elif change == "vmap":
            jax.vmap(functools.partial(f, y=y, k=k))(x[None])
    entries = [e for e in w.functions if not e.eager]
    assert len(entries) == 1, w.report()
    (entry,) = entries
    assert entry.count == 2, w.report()
    got = [(c.path, c.kind) for c in entry.compiles[1].changes]
    assert got == EXPECTED[change], w.report()
