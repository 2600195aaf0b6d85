"""One identity for static values: every site that keys a static value answers "the same"
exactly as the identity does (type-strict, order-strict, floats by bits), with no second
opinion on a hit, in the program store, or in an explanation."""

from __future__ import annotations

import dataclasses
import warnings

import jax.numpy as jnp
import numpy as np
import pytest

import staticfield as sf
from staticfield import _store


# ----- static="auto": the hit path's fast key ----------------------------------------------
def _first_is_bool(x, s):
    return x * (1.0 if type(next(iter(s))) is bool else 2.0)


def test_auto_hit_keeps_frozensets_of_equal_values_of_other_types_apart():
    """frozenset({1}) == frozenset({True}) for Python, not for the identity: a second program."""
    g = sf.jit(_first_is_bool, static="auto")
    assert float(g(jnp.ones(()), frozenset({1}))) == 2.0
    assert float(g(jnp.ones(()), frozenset({True}))) == 1.0
    assert float(g(jnp.ones(()), frozenset({1}))) == 2.0
    assert g.compile_count == 2


def test_auto_hit_keeps_equal_frozensets_that_iterate_differently_apart():
    """1 and 9 share a slot of a small set's table, so the order they were added in is the
    order they iterate in: two equal sets, two programs."""
    a, b = frozenset([1, 9]), frozenset([9, 1])
    assert a == b and list(a) != list(b)
    g = sf.jit(lambda x, s: x * next(iter(s)), static="auto")
    assert float(g(jnp.ones(()), a)) == float(next(iter(a)))
    assert float(g(jnp.ones(()), b)) == float(next(iter(b)))
    assert g.compile_count == 2


def test_auto_hit_keeps_complex_zeros_of_other_signs_apart():
    g = sf.jit(lambda x, c: x / c.real, static="auto")
    assert float(g(jnp.ones(()), 0j)) == float("inf")
    assert float(g(jnp.ones(()), complex(-0.0, 0.0))) == float("-inf")
    assert g.compile_count == 2


def test_auto_hit_keeps_frozen_dataclasses_of_equal_fields_of_other_types_apart():
    @dataclasses.dataclass(frozen=True)
    class Opt:
        flag: object

    g = sf.jit(lambda x, o: x * (1.0 if type(o.flag) is bool else 2.0), static="auto")
    assert float(g(jnp.ones(()), Opt(1))) == 2.0
    assert float(g(jnp.ones(()), Opt(True))) == 1.0
    assert g.compile_count == 2


def test_auto_hits_stay_hits_for_equal_frozensets():
    g = sf.jit(lambda x, s: x * len(s), static="auto")
    for _ in range(3):
        g(jnp.ones(()), frozenset({3}))
    assert g.compile_count == 1


# ----- static="auto": identity-keyed mutable values warn ------------------------------------
@dataclasses.dataclass
class _Config:  # eq=True and not frozen: unhashable, so keyed by identity
    n: int


def _scale(x, config):
    return x * config.n


def test_auto_warns_once_for_a_mutable_value_keyed_by_identity():
    g = sf.jit(_scale, static="auto")
    config = _Config(2)
    with pytest.warns(sf.StaticFieldWarning, match=r"config.*_Config.*identity"):
        g(jnp.ones(()), config)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        g(jnp.ones(()), config)
        g(jnp.ones(()), _Config(3))


def test_auto_warns_for_a_set_argument():
    g = sf.jit(lambda x, names: x * len(names), static="auto")
    with pytest.warns(sf.StaticFieldWarning, match=r"names.*set"):
        g(jnp.ones(()), {"a", "b"})


def test_auto_does_not_warn_for_hashable_values():
    g = sf.jit(lambda x, n, f, names: f(x) * n * len(names), static="auto")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        g(jnp.ones(()), 2, jnp.sin, frozenset({"a"}))


# ----- the program store, trust="source": order is part of the key ---------------------------
@pytest.fixture
def source_store(tmp_path):
    saved = dict(_store._state)
    sf.set_program_store(tmp_path / "store", trust="source")
    yield tmp_path / "store"
    _store._state.update(saved)


@sf.dataclass
class _Table:
    config: dict = sf.static()

    @sf.jit_method
    def values(self, x):
        return x * jnp.array(list(self.config.values()), jnp.float32)


def test_source_store_never_loads_a_dict_static_of_another_order(source_store):
    first = _Table(config={"a": 1, "b": 2}).values(jnp.ones(()))
    second = _Table(config={"b": 2, "a": 1}).values(jnp.ones(()))
    assert np.asarray(first).tolist() == [1.0, 2.0]
    assert np.asarray(second).tolist() == [2.0, 1.0]


# ----- explanations: equal value, another type -------------------------------------------------
@sf.dataclass
class _Params:
    max_steps: object = sf.static()


def test_an_equal_value_of_another_type_is_explained_as_such():
    @sf.jit
    def run(params, x):
        return x * params.max_steps

    run(_Params(100), jnp.ones(()))
    run(_Params(200), jnp.ones(()))
    run(_Params(np.int64(100)), jnp.ones(()))
    (change,) = run.recompiles[-1].changes
    assert "equal value, another type" in str(change), str(change)
    assert change.old.startswith("100") and "int" in change.old and "numpy.int64" in change.new


def test_leaves_any_warns_once_for_a_mutable_leaf_keyed_by_identity():
    @sf.dataclass
    class Solver:
        state: object = sf.field(leaves="any")

    with pytest.warns(sf.StaticFieldWarning, match=r"Solver.state: .*_Config.*keyed by identity"):
        import jax

        jax.tree_util.tree_structure(Solver(state=(jnp.ones(2), _Config(1))))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        import jax

        jax.tree_util.tree_structure(Solver(state=(jnp.ones(2), _Config(2))))


def test_a_function_closing_over_a_jax_array_is_refused_as_a_static():
    w = jnp.ones(2)

    def scale(x):
        return x * w

    with pytest.raises(TypeError, match=r"_Params.max_steps<closure .*scale>: a jax.Array cannot be a static"):
        _Params(scale)
    _Params(lambda x: x * np.ones(2))  # a NumPy array in a closure is a value: accepted


# ----- a user type with its own __eq__, across processes ----------------------------------
class _Opts:
    def __init__(self, n):
        self.n = n

    def __eq__(self, other):
        return type(other) is _Opts and other.n == self.n

    def __hash__(self):
        return hash(self.n)


class _Described(_Opts):
    def __sf_identity__(self):
        return ("n", self.n)


def test_a_type_with_its_own_eq_is_written_across_processes_by_sf_identity():
    from staticfield import _agree

    def digest(v):
        return _agree.digest("f", {"self.v": ("static", v)})

    assert digest(_Described(1)) == digest(_Described(1)) != digest(_Described(True))
    with pytest.warns(sf.StaticFieldWarning, match="_Opts: a static value of this type has no identity across"):
        assert digest(_Opts(1)) == digest(_Opts(2))  # its type only, said once


def test_shardings_and_dtypes_have_cross_process_forms():
    import jax
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    from staticfield._core import _portable

    mesh = jax.make_mesh((1,), ("x",))
    for value in (P("x", None), mesh, NamedSharding(mesh, P("x")), np.dtype("float32"), jnp.bfloat16):
        written = _portable.write(value)
        assert not written.partial and " at 0x" not in written.text, written.text
    assert _portable.digest(P("x", None)) != _portable.digest(P(None, "x"))
    assert _portable.digest(np.dtype("float32")) != _portable.digest(np.dtype("float16"))
