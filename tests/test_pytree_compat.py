"""Instances work with JAX's transformations: tree_map, jit, vmap, grad, scan."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import staticfield as sf


@sf.dataclass
class MLP:
    w: jax.Array
    b: jax.Array
    act: str = sf.static(default="tanh")
    sizes: tuple = sf.static(default=(2, 2))

    def __call__(self, x):
        y = self.w @ x + self.b
        return jnp.tanh(y) if self.act == "tanh" else jax.nn.relu(y)


def mlp(seed=0, **kw) -> MLP:
    k1, k2 = jax.random.split(jax.random.PRNGKey(seed))
    return MLP(jax.random.normal(k1, (2, 2)), jax.random.normal(k2, (2,)), **kw)


# ---------------------------------------------------------------- tree utilities


def test_tree_map_keeps_class_and_statics():
    """tree_map over an instance returns the same class with the same static values."""
    m = mlp(act="relu")
    z = jax.tree_util.tree_map(jnp.zeros_like, m)
    assert type(z) is MLP and z.act == "relu" and z.sizes == (2, 2)
    assert float(jnp.abs(z.w).sum()) == 0.0


def test_tree_map_multiple_trees():
    """tree_map over two instances with the same statics combines them leaf by leaf."""
    a, b = mlp(0), mlp(1)
    s = jax.tree_util.tree_map(lambda x, y: x + y, a, b)
    np.testing.assert_allclose(s.w, a.w + b.w)


def test_tree_map_with_path_names_fields():
    """tree_map_with_path sees ``.w`` and ``.b``."""
    names = []
    jax.tree_util.tree_map_with_path(lambda p, v: names.append(jax.tree_util.keystr(p)), mlp())
    assert names == [".w", ".b"]


def test_tree_map_mismatched_statics_refused():
    """tree_map over instances whose statics differ is a structure error, like JAX's own."""
    with pytest.raises(ValueError):
        jax.tree_util.tree_map(lambda x, y: x + y, mlp(act="tanh"), mlp(act="relu"))


def test_leaves_of_nested_instances():
    """Nested instances contribute their own dynamic leaves, in order."""

    @sf.dataclass
    class Stack:
        layers: tuple
        name: str = sf.static(default="s")

    s = Stack((mlp(0), mlp(1)))
    paths = [jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_flatten_with_path(s)[0]]
    assert paths == [".layers[0].w", ".layers[0].b", ".layers[1].w", ".layers[1].b"]


# ---------------------------------------------------------------- jit


def test_jit_new_values_do_not_recompile(counted_jit):
    """jit over an instance: new array values with the same statics reuse the program."""
    f = counted_jit(lambda m, x: m(x))
    x = jnp.ones(2)
    for seed in range(4):
        m = mlp(seed)
        np.testing.assert_allclose(f(m, x), m(x), rtol=1e-6)
    assert f.traces == 1


def test_jit_changed_static_recompiles(counted_jit):
    """A changed static field recompiles and gives the new behaviour."""
    f = counted_jit(lambda m, x: m(x))
    m = mlp()
    x = -10 * jnp.ones(2)
    np.testing.assert_allclose(f(m, x), m(x), rtol=1e-6)
    relu = sf.replace(m, act="relu")
    np.testing.assert_allclose(f(relu, x), relu(x), rtol=1e-6)
    assert f.traces == 2
    f(sf.replace(relu, act="tanh"), x)
    assert f.traces == 2  # back to an already-compiled static value


def test_jit_changed_shape_recompiles(counted_jit):
    """A changed leaf shape recompiles (JAX's usual rule)."""
    f = counted_jit(lambda m: m.w.sum())
    f(mlp())
    f(MLP(jnp.ones((3, 3)), jnp.ones(3)))
    assert f.traces == 2


def test_jit_returns_instances(counted_jit):
    """A jitted function can build and return an instance (via unflatten)."""
    f = counted_jit(lambda m: sf.replace(m, w=m.w * 2))
    m = mlp()
    out = f(m)
    assert type(out) is MLP and out.act == m.act
    np.testing.assert_allclose(out.w, 2 * m.w)


def test_jit_construct_inside():
    """Constructing an instance inside jit (with tracer leaves and static Python values) works."""

    def f(w, b):
        return MLP(w, b, act="relu")(jnp.ones(2))

    out = jax.jit(f)(jnp.eye(2), jnp.zeros(2))
    np.testing.assert_allclose(out, [1.0, 1.0])


def test_jit_closure_over_instance():
    """An instance closed over by a jitted function is a constant, like any pytree."""
    m = mlp()
    np.testing.assert_allclose(jax.jit(lambda x: m(x))(jnp.ones(2)), m(jnp.ones(2)), rtol=1e-6)


# ---------------------------------------------------------------- vmap, grad, scan


def test_vmap_over_instances():
    """vmap over an instance with batched leaves gives the same as a Python loop."""
    ms = [mlp(s) for s in range(3)]
    batched = jax.tree_util.tree_map(lambda *xs: jnp.stack(xs), *ms)
    assert type(batched) is MLP and batched.w.shape == (3, 2, 2)
    out = jax.vmap(lambda m: m(jnp.ones(2)))(batched)
    np.testing.assert_allclose(out, jnp.stack([m(jnp.ones(2)) for m in ms]), rtol=1e-6)


def test_vmap_in_axes_with_instance_prefix():
    """An instance can be an in_axes prefix (None for the whole instance)."""
    m = mlp()
    xs = jnp.ones((4, 2))
    out = jax.vmap(lambda m, x: m(x), in_axes=(None, 0))(m, xs)
    assert out.shape == (4, 2)


def test_vmap_returns_instances():
    """vmap may return instances, built with batched leaves."""
    out = jax.vmap(lambda s: sf.replace(mlp(), b=jnp.full(2, s)))(jnp.arange(3.0))
    assert type(out) is MLP and out.b.shape == (3, 2) and out.w.shape == (3, 2, 2)


def test_grad_is_an_instance():
    """jax.grad with respect to an instance returns an instance of the same class."""
    m = mlp()

    def loss(m):
        return jnp.sum(m(jnp.ones(2)) ** 2)

    g = jax.grad(loss)(m)
    assert type(g) is MLP and g.act == m.act and g.sizes == m.sizes
    assert g.w.shape == m.w.shape
    eps = 1e-3
    bumped = sf.replace(m, b=m.b.at[0].add(eps))
    np.testing.assert_allclose((loss(bumped) - loss(m)) / eps, g.b[0], rtol=2e-2)


def test_value_and_grad_under_jit(counted_jit):
    """A jitted gradient step updates the instance and compiles once."""

    def step(m, x):
        loss, g = jax.value_and_grad(lambda m: jnp.sum(m(x) ** 2))(m)
        return jax.tree_util.tree_map(lambda p, d: p - 0.1 * d, m, g), loss

    f = counted_jit(step)
    m, x = mlp(), jnp.ones(2)
    losses = []
    for _ in range(5):
        m, loss = f(m, x)
        losses.append(float(loss))
    assert f.traces == 1 and type(m) is MLP
    assert losses[-1] < losses[0]


def test_scan_with_instance_as_carry():
    """lax.scan with an instance as the carry keeps the class and statics across steps."""

    @sf.dataclass
    class State:
        t: jax.Array
        total: jax.Array
        step: float = sf.static(default=0.5)

    def body(s, x):
        s = sf.replace(s, t=s.t + s.step, total=s.total + x)
        return s, s.t

    final, ts = lax.scan(body, State(jnp.zeros(()), jnp.zeros(())), jnp.arange(4.0))
    assert type(final) is State and final.step == 0.5
    assert float(final.t) == 2.0 and float(final.total) == 6.0
    np.testing.assert_allclose(ts, [0.5, 1.0, 1.5, 2.0])


def test_scan_with_instances_as_xs():
    """lax.scan over instances with a leading axis hands the body one instance per step."""
    ms = [mlp(s) for s in range(3)]
    stacked = jax.tree_util.tree_map(lambda *xs: jnp.stack(xs), *ms)
    seen = []

    def body(c, m):
        seen.append((type(m), m.w.shape))
        return c + m.b.sum(), None

    total, _ = lax.scan(body, 0.0, stacked)
    np.testing.assert_allclose(total, sum(float(m.b.sum()) for m in ms), rtol=1e-6)
    assert seen == [(MLP, (2, 2))]


def test_checkpoint_and_cond():
    """jax.checkpoint and lax.cond pass instances through."""
    m = mlp()
    out = jax.checkpoint(lambda m: m(jnp.ones(2)))(m)
    np.testing.assert_allclose(out, m(jnp.ones(2)), rtol=1e-6)
    picked = lax.cond(True, lambda a, b: a, lambda a, b: b, mlp(0), mlp(1))
    assert type(picked) is MLP
    np.testing.assert_allclose(picked.w, mlp(0).w)


def test_register_dataclass_style_metadata_under_jit(counted_jit):
    """A static field marked with stdlib metadata is part of the cache key under jit."""
    import dataclasses

    @sf.dataclass
    class Cfg:
        x: jax.Array
        n: int = dataclasses.field(default=1, metadata={"static": True})

    f = counted_jit(lambda c: c.x * c.n)
    assert float(f(Cfg(jnp.ones(()), 2))) == 2.0
    assert float(f(Cfg(jnp.ones(()), 3))) == 3.0
    assert f.traces == 2
