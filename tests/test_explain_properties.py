"""An oracle for the explanations: one random change to a random call is named, alone.

A jitted function (plain ``jax.jit`` or ``sf.jit``, with static arguments), or a method
bound to an instance of a plain class, is called once, then again with exactly one thing
changed: a static value, a shape, a dtype, a weak type, a global setting, a new function
object with the same code (for a method: the method of another instance), another
factory-made function of the same code as a static argument, or the call made under
``jax.vmap``; with ``buckets=``, a row count in another bucket. ``sf.watch`` must explain the
second compile by that change and no other, and
name the factory-made functions and the instance as such. (Sharding and mesh changes need
several devices: tests/test_explain_causes.py checks them on 8 virtual devices.)
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
    "factory": [("act", "static_arg")],
    "bucket": [("x.shape[0]", "bucket")],
}
# what the changed value reads as, where the change is of a function (old, new)
SAID = {
    ("new function", "function"): ("an earlier function object", "a new function object, same code"),
    ("new function", "method"): ("Holder.f of an earlier Holder instance", "Holder.f of another Holder instance"),
    ("factory", "function"): ("relu", "softplus"),
    ("factory", "method"): ("relu", "softplus"),
}


def _factory(fn):
    """A library's factory (optimistix's ``_wrap``): one code object, renamed per function."""

    def made(v):
        return fn(v)

    made.__name__ = made.__qualname__ = fn.__name__
    return made


relu, softplus = _factory(jax.nn.relu), _factory(jax.nn.softplus)


class Holder:
    """A plain (non-pytree) class whose bound method is jitted."""

    def f(self, x, y, k, act=relu):
        return act(x * y + k)


def make(subject):
    if subject == "method":
        return Holder().f

    def f(x, y, k, act=relu):
        return act(x * y + k)

    return f


def call(wrap, fn):
    if wrap == "sf.jit buckets":
        return sf.jit(fn, static_argnames=("k", "act"), buckets={"x": 0}, warn_compiles=None)
    return (jax.jit if wrap == "jax.jit" else sf.jit)(fn, static_argnames=("k", "act"))


@settings(max_examples=60, deadline=None)
@given(
    change=st.sampled_from(sorted(k for k in EXPECTED if k != "bucket")),
    wrap=st.sampled_from(["jax.jit", "sf.jit", "sf.jit buckets"]),
    n=st.integers(1, 5),
    k=st.integers(0, 3),
    dtype=st.sampled_from(["float32", "bfloat16"]),
    subject=st.sampled_from(["function", "method"]),
)
def test_one_change_is_named_and_no_other(change, wrap, n, k, dtype, subject):
    """The second compile's explanation is exactly the one change made."""
    bucketed = wrap == "sf.jit buckets"
    if change == "shape" and bucketed:
        change = "bucket"  # a new row count: in its bucket, or a bucket change
    elif change == "bucket" and not bucketed:
        change = "shape"
    f = call(wrap, make(subject))
    x, y = jnp.ones(n, dtype), jnp.asarray(2.0, jnp.float32)
    with sf.watch() as w:
        f(x, y, k=k, act=relu)
        if change == "static":
            f(x, y, k=k + 1, act=relu)
        elif change == "shape":
            f(jnp.ones(n + 1, dtype), y, k=k, act=relu)
        elif change == "bucket":
            f(jnp.ones(2 * n + 3, dtype), y, k=k, act=relu)  # always the next bucket or further
        elif change == "dtype":
            f(x.astype(jnp.int32), y, k=k, act=relu)
        elif change == "weak_type":
            f(x, jnp.asarray(2.0), k=k, act=relu)
        elif change == "setting":
            with jax.default_matmul_precision("highest"):
                f(x, y, k=k, act=relu)
        elif change == "x64":
            with jax.enable_x64(True):
                f(x, y, k=k, act=relu)
        elif change == "new function":
            call(wrap, make(subject))(x, y, k=k, act=relu)
        elif change == "factory":
            f(x, y, k=k, act=softplus)
        elif change == "vmap":
            jax.vmap(functools.partial(f, y=y, k=k, act=relu))(x[None])
    entries = [e for e in w.functions if not e.eager and not e.padding]
    assert len(entries) == 1, w.report()
    (entry,) = entries
    assert entry.count == 2, w.report()
    got = [(c.path, c.kind) for c in entry.compiles[1].changes]
    assert got == EXPECTED[change], w.report()
    if (change, subject) in SAID:
        (named,) = entry.compiles[1].changes
        assert (named.old, named.new) == SAID[change, subject], w.report()
