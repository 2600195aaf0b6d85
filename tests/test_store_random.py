"""The program store keeps the programs of ``jax.random``: raw (``PRNGKey``) and typed
(``jax.random.key``) keys, as arguments, in instance fields, made inside from a seed, and
returned; every built-in implementation; a user-defined implementation by what its
functions compute. A fresh process loads them and gives the same bits."""

from __future__ import annotations

import functools
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _fresh_process import run

import staticfield as sf
from staticfield import _store


@pytest.fixture
def store(tmp_path):
    saved = dict(_store._state)
    sf.set_program_store(tmp_path / "store")
    yield tmp_path / "store"
    _store._state.update(saved)


def _bits(out):
    """Every output leaf's bytes (a typed key array by its key data)."""
    leaves = jax.tree.leaves(out)
    return [np.asarray(jax.random.key_data(x) if jnp.issubdtype(x.dtype, jax.dtypes.prng_key) else x).tobytes()
            for x in leaves]


def _noisy(key, x):
    k1, k2 = jax.random.split(key)
    return x + jax.random.normal(k1, x.shape), jax.random.fold_in(k2, 7), jax.random.bits(k2, (4,))


def _twice(fn, *args):
    """``fn`` (a new function object: sf.jit's cache belongs to the function) called, its
    programs dropped from memory, and called again (so its program comes from the store),
    with any warning an error: both outputs, and the sf.jit wrapper."""
    def call(*a):
        return fn(*a)

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        jitted = sf.jit(call)
        first = jitted(*args)
        jitted.clear_cache()
        return first, jitted(*args), jitted


def test_a_typed_key_argument_runs_with_a_store_and_loads(store):
    """A jax.random.key argument (what JAX recommends) works with a store set, and a second
    wrapper loads its program instead of compiling (it raised AttributeError: weak_type)."""
    a, b, again = _twice(_noisy, jax.random.key(3), jnp.ones(5))
    assert (again.compile_count, again.load_count) == (1, 1)
    assert _bits(a) == _bits(b)
    assert _bits(a) == _bits(jax.jit(_noisy)(jax.random.key(3), jnp.ones(5)))


@pytest.mark.parametrize("impl", ["threefry2x32", "rbg", "unsafe_rbg", "philox4x32"])
@pytest.mark.parametrize("kind", ["raw", "typed"])
def test_every_built_in_implementation_is_stored_and_loaded(store, impl, kind):
    """A program using jax.random is kept, whatever JAX implementation its keys use and
    whether they are raw or typed (each was refused: "a Python function in the program")."""
    default = jax.config.jax_default_prng_impl
    if kind == "raw":  # a raw key's implementation is the default one
        jax.config.update("jax_default_prng_impl", impl)
    try:
        key = jax.random.key(5, impl=impl) if kind == "typed" else jax.random.PRNGKey(5)
        a, b, again = _twice(_noisy, key, jnp.ones(3))
        expected = jax.jit(lambda *a: _noisy(*a))(key, jnp.ones(3))  # a new function: JAX's
        # cache of _noisy's trace does not tell raw keys of two implementations apart
    finally:
        jax.config.update("jax_default_prng_impl", default)
    assert (again.compile_count, again.load_count) == (1, 1)
    assert _bits(a) == _bits(b) == _bits(expected)


def test_a_key_made_inside_from_a_seed_is_stored(store):
    """random_seed in the program (a key made inside the function from an int)."""
    def draw(seed, x):
        return x * jax.random.uniform(jax.random.key(seed), x.shape), jax.random.PRNGKey(seed)

    a, b, again = _twice(draw, jnp.int32(4), jnp.ones(3))
    assert (again.compile_count, again.load_count) == (1, 1) and _bits(a) == _bits(b)


def _seed(s):
    return jnp.stack([s.astype(jnp.uint32), jnp.uint32(7)])


def _split(k, shape):
    count = int(np.prod(shape))
    return jnp.broadcast_to(k, (*shape, 2)) + jnp.arange(count, dtype=jnp.uint32).reshape((*shape, 1))


def _bits_3(k, bit_width, shape):
    return jnp.full(shape, k[0] * jnp.uint32(3) + k[1], jnp.uint32)


def _bits_5(k, bit_width, shape):
    return jnp.full(shape, k[0] * jnp.uint32(5) + k[1], jnp.uint32)


def _fold_in(k, m):
    return k + m.astype(jnp.uint32)


def _impl(name, bits):
    """A user-defined PRNG implementation (a stored program's argument types are pickled,
    so its functions live at module level)."""
    return jax.extend.random.define_prng_impl(key_shape=(2,), seed=_seed, split=_split, random_bits=bits,
                                              fold_in=_fold_in, name=name, tag="mine")


def _uses(key, x):
    return x + jax.random.bits(jax.random.split(key)[1], x.shape)


def test_a_user_defined_implementation_is_kept_by_what_its_functions_compute(store):
    """A user's implementation is digested by the jaxprs of its functions: its programs
    load; another implementation of the same name, tag and key shape whose random_bits
    computes something else never gets them."""
    ones = jnp.ones(3, jnp.uint32)
    a, b, again = _twice(_uses, jax.random.key(1, impl=_impl("toy", _bits_3)), ones)
    assert (again.compile_count, again.load_count) == (1, 1) and _bits(a) == _bits(b)
    other = sf.jit(_uses)
    key = jax.random.key(1, impl=_impl("toy", _bits_5))
    np.testing.assert_array_equal(other(key, ones), jax.jit(_uses)(key, ones))
    assert (other.compile_count, other.load_count) == (1, 0)
    assert not np.array_equal(other(key, ones), a)


def test_a_user_defined_implementation_that_does_not_pickle_equal_is_refused_with_why(store):
    """An implementation whose functions do not come back from a pickle equal (a partial, a
    lambda, a closure) is refused with one warning saying how to fix it, and runs."""
    key = jax.random.key(1, impl=_impl("partial", functools.partial(_bits_3)))
    jitted = sf.jit(lambda k, x: _uses(k, x))
    with pytest.warns(sf.StaticFieldWarning, match=r"cannot keep the programs of .*<lambda>: the PRNG "
                      r"implementation 'partial' does not pickle to an equal one .*define them at module"):
        out = jitted(key, jnp.ones(3, jnp.uint32))
    np.testing.assert_array_equal(out, jax.jit(_uses)(key, jnp.ones(3, jnp.uint32)))


# ----- fresh processes ---------------------------------------------------------------------
MODEL = '''
import jax, jax.numpy as jnp, numpy as np
import staticfield as sf


@sf.jit
def noisy(key, x):
    k1, k2 = jax.random.split(key)
    return x + jax.random.normal(k1, x.shape), jax.random.fold_in(k2, 7), jax.random.bits(k2, (4,))


@sf.jit(static_argnames="n")
def from_seed(seed, n):
    return jax.random.uniform(jax.random.key(seed), (n,)), jax.random.split(jax.random.PRNGKey(seed))


@sf.dataclass
class Sampler:
    key: jax.Array  # a typed key in a field
    scale: float = sf.static(default=2.0)

    @sf.jit_method
    def draw(self, x):
        key, sub = jax.random.split(self.key)
        return sf.replace(self, key=key), x * self.scale + jax.random.normal(sub, x.shape)


def run():
    x = jnp.arange(4, dtype=jnp.float32)
    out = [noisy(jax.random.PRNGKey(0), x), noisy(jax.random.key(0), x), from_seed(jnp.int32(3), n=5)]
    sampler = Sampler(jax.random.key(9))
    for _ in range(2):
        sampler, y = sampler.draw(x)
        out.append((sampler, y))
    leaves = jax.tree.leaves(out)
    return [np.asarray(jax.random.key_data(v) if jnp.issubdtype(v.dtype, jax.dtypes.prng_key) else v).tobytes().hex()
            for v in leaves]
'''

SCRIPT = '''
import json
import model
out = model.run()
fs = (model.noisy, model.from_seed, model.Sampler.draw)
print(json.dumps({"out": out, "compiles": sum(f.compile_count for f in fs), "loads": sum(f.load_count for f in fs)}))
'''


@pytest.mark.parametrize("trust", ["trace", "source"])
def test_a_fresh_process_loads_raw_and_typed_key_programs_bit_identical(tmp_path, trust):
    """Second process: compile_count == 0, every program loaded, the same bits; with
    trust="source" the checking mode's trace finds the same digest too."""
    first = run(tmp_path, MODEL, SCRIPT, trust=trust)
    assert (first["compiles"], first["loads"]) == (4, 0)
    second = run(tmp_path, MODEL, SCRIPT, trust=trust)
    assert (second["compiles"], second["loads"]) == (0, 4)
    assert second["out"] == first["out"]
    if trust == "source":
        checked = run(tmp_path, MODEL, SCRIPT, trust=trust, env={"STATICFIELD_CHECK_STORE": "1"})
        assert (checked["compiles"], checked["loads"], checked["out"]) == (0, 4, first["out"])
