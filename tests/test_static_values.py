"""Static values: frozen, hashable, compared type-strictly, and safe inside JAX's caches."""

import collections
import pickle

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import staticfield as sf


@sf.dataclass
class Holder:
    x: jax.Array
    s: object = sf.static(default=None)


def treedef(s):
    return jax.tree_util.tree_structure(Holder(jnp.zeros(()), s))


# ---------------------------------------------------------------- freezing


def test_list_becomes_tuple():
    """A list static value is stored as a tuple."""
    h = Holder(jnp.zeros(()), [1, 2])
    assert h.s == (1, 2) and type(h.s) is tuple


def test_set_becomes_frozenset():
    """A set static value is stored as a frozenset."""
    h = Holder(jnp.zeros(()), {1, 2})
    assert h.s == frozenset({1, 2}) and type(h.s) is frozenset


def test_dict_becomes_frozendict():
    """A dict static value is stored as an sf.FrozenDict equal to it."""
    h = Holder(jnp.zeros(()), {"a": 1})
    assert isinstance(h.s, sf.FrozenDict) and h.s == {"a": 1}
    hash(h.s)


def test_freezing_is_recursive():
    """Containers inside containers are frozen too."""
    h = Holder(jnp.zeros(()), {"layers": [1, [2, 3]], "tags": {"a"}, "opt": {"lr": [0.1]}})
    assert h.s["layers"] == (1, (2, 3))
    assert h.s["tags"] == frozenset({"a"})
    assert isinstance(h.s["opt"], sf.FrozenDict) and h.s["opt"]["lr"] == (0.1,)
    hash(h.s)
    h2 = Holder(jnp.zeros(()), [{"a": [1]}])
    assert isinstance(h2.s[0], sf.FrozenDict) and h2.s[0]["a"] == (1,)


def test_namedtuple_keeps_its_type():
    """A namedtuple stays a namedtuple (its items frozen)."""
    Point = collections.namedtuple("Point", "x y")
    h = Holder(jnp.zeros(()), Point([1], 2))
    assert type(h.s) is Point and h.s.x == (1,)


def test_caller_list_mutation_does_not_leak():
    """Mutating the list passed in afterwards leaves the instance unchanged."""
    sizes = [1, 2]
    h = Holder(jnp.zeros(()), sizes)
    sizes.append(3)
    assert h.s == (1, 2)


def test_atomic_values_kept_as_is():
    """Hashable immutable values (int, str, None, bytes, functions, types) are stored as is."""

    def fn(x):
        return x

    for v in (1, 1.5, "relu", None, b"k", True, 2j, ..., fn, int, jnp.float32):
        assert Holder(jnp.zeros(()), v).s is v


# ---------------------------------------------------------------- NumPy arrays


def test_numpy_array_stored_as_read_only_copy():
    """A NumPy static value is copied and made read-only; reading it gives an ndarray."""
    a = np.arange(3.0)
    h = Holder(jnp.zeros(()), a)
    assert type(h.s) is np.ndarray and not h.s.flags.writeable
    assert h.s is not a
    a[0] = 100.0  # caller mutates its own array afterwards
    np.testing.assert_array_equal(h.s, [0.0, 1.0, 2.0])
    with pytest.raises(ValueError):
        h.s[0] = 5.0
    assert a.flags.writeable  # the caller's array is untouched


def test_numpy_array_keyed_by_value():
    """Static NumPy arrays with the same shape, dtype and bytes give the same key."""
    assert treedef(np.arange(3)) == treedef(np.arange(3))
    assert hash(treedef(np.arange(3))) == hash(treedef(np.arange(3)))
    assert treedef(np.arange(3)) != treedef(np.arange(1, 4))


def test_numpy_array_key_includes_dtype_and_shape():
    """Same bytes with a different dtype or shape is a different key."""
    a = np.zeros(4, np.int32)
    assert treedef(a) != treedef(a.view(np.float32))
    assert treedef(a) != treedef(a.reshape(2, 2))


def test_numpy_array_key_ignores_memory_layout():
    """A strided view and its contiguous copy are the same key."""
    base = np.arange(10)
    assert treedef(base[::2]) == treedef(np.ascontiguousarray(base[::2]))
    f = np.asfortranarray(np.arange(6).reshape(2, 3))
    assert treedef(f) == treedef(np.arange(6).reshape(2, 3))


def test_numpy_arrays_inside_containers_frozen():
    """NumPy arrays inside a tuple or dict static value are read-only copies too."""
    a = np.ones(2)
    h = Holder(jnp.zeros(()), {"w": [a]})
    assert not h.s["w"][0].flags.writeable
    a[0] = 7.0
    assert h.s["w"][0][0] == 1.0
    assert treedef({"w": [np.ones(2)]}) == jax.tree_util.tree_structure(h)


def test_numpy_static_under_jit_is_a_constant(counted_jit):
    """A static NumPy array is baked in; equal arrays reuse, a changed array recompiles."""
    f = counted_jit(lambda h: h.x + h.s.sum())
    assert float(f(Holder(jnp.zeros(()), np.array([1.0, 2.0])))) == 3.0
    assert float(f(Holder(jnp.ones(()), np.array([1.0, 2.0])))) == 4.0
    assert f.traces == 1
    assert float(f(Holder(jnp.zeros(()), np.array([1.0, 5.0])))) == 6.0
    assert f.traces == 2


# ---------------------------------------------------------------- refused values


def test_jax_array_refused():
    """A jax.Array static value is a TypeError naming class and field, saying to make it dynamic."""
    with pytest.raises(TypeError, match=r"Holder\.s: a jax\.Array .*Make `s` a dynamic field.*np\.asarray"):
        Holder(jnp.zeros(()), jnp.ones(2))


def test_jax_array_nested_in_container_refused():
    """A jax.Array inside a list static value is refused with its position."""
    with pytest.raises(TypeError, match=r"Holder\.s\[1\]: a jax\.Array.*`s`"):
        Holder(jnp.zeros(()), [1, jnp.ones(2)])


def test_tracer_refused_under_jit():
    """A tracer (a traced value put in a static field) is refused, naming class and field."""

    def f(x):
        return Holder(x, x)

    with pytest.raises(TypeError, match=r"Holder\.s: a tracer .*Make `s` a dynamic field"):
        jax.jit(f)(jnp.ones(2))


def test_tracer_refused_under_vmap_and_grad():
    """vmap and grad tracers are refused in static fields too."""
    with pytest.raises(TypeError, match=r"Holder\.s: a tracer"):
        jax.vmap(lambda x: Holder(x, x).x)(jnp.ones(2))
    with pytest.raises(TypeError, match=r"Holder\.s: a tracer"):
        jax.grad(lambda x: Holder(x, x).x)(1.0)


def test_unhashable_custom_type_refused():
    """An unhashable custom object is a TypeError naming class, field and type."""

    class Config:
        def __eq__(self, other):
            return True

    with pytest.raises(TypeError, match=r"Holder\.s: a static value of type Config is unhashable.*`s`"):
        Holder(jnp.zeros(()), Config())


def test_object_dtype_array_refused():
    """A NumPy array of dtype object is refused (its bytes are pointers)."""
    with pytest.raises(TypeError, match=r"Holder\.s.*dtype object.*`s`"):
        Holder(jnp.zeros(()), np.array([{}, []], dtype=object))


def test_refused_in_replace_too():
    """sf.replace applies the same checks to a changed static field."""
    h = Holder(jnp.zeros(()), 1)
    with pytest.raises(TypeError, match=r"Holder\.s: a jax\.Array"):
        sf.replace(h, s=jnp.ones(1))
    assert sf.replace(h, s=[1]).s == (1,)


# ---------------------------------------------------------------- type-strict keys


def test_one_onepointzero_true_npint_are_four_keys():
    """``1``, ``1.0``, ``True`` and ``np.int32(1)`` are four different static keys."""
    defs = [treedef(v) for v in (1, 1.0, True, np.int32(1))]
    for i in range(4):
        for j in range(4):
            assert (defs[i] == defs[j]) == (i == j)


def test_type_strict_keys_compile_separately_with_right_dtype():
    """Under jax.jit the four look-alike values trace separately and give their own dtype."""
    traces = 0

    def f(h):
        nonlocal traces
        traces += 1
        return jnp.asarray(h.s) + jnp.zeros((), jnp.int8)

    jf = jax.jit(f)
    out = {type(v).__name__: jf(Holder(jnp.zeros(()), v)) for v in (1, 1.0, True, np.int32(1))}
    assert traces == 4
    assert out["int"].dtype == jnp.int8  # weak Python int adopts int8
    assert out["float"].dtype == jnp.float32
    assert out["bool"].dtype == jnp.int8 and int(out["bool"]) == 1
    assert out["int32"].dtype == jnp.int32  # a NumPy scalar is strongly typed
    jf(Holder(jnp.ones(()), 1))  # equal statics reuse the program
    assert traces == 4


def test_type_strict_recursively():
    """Type strictness holds inside tuples, frozensets and dicts."""
    assert treedef((1,)) != treedef((1.0,))
    assert treedef({"a": 1}) != treedef({"a": True})
    assert treedef({1}) != treedef({1.0})
    assert treedef([1, (2,)]) == treedef((1, [2]))  # list/tuple are both frozen to tuple


def test_numpy_scalar_types_distinct():
    """NumPy scalars of different dtype with equal value are different keys."""
    assert treedef(np.float32(1)) != treedef(np.float64(1))
    assert treedef(np.int32(1)) == treedef(np.int32(1))


def test_nan_static_is_one_key():
    """NaN as a static value equals itself, so it never forces a recompile."""
    assert treedef(float("nan")) == treedef(float("nan"))
    assert treedef(complex(float("nan"), 0)) == treedef(complex(float("nan"), 0))
    assert treedef(np.array([np.nan])) == treedef(np.array([np.nan]))


def test_negative_zero_is_its_own_key():
    """``-0.0`` and ``0.0`` are different statics: ``1/z`` tells them apart."""
    assert treedef(-0.0) != treedef(0.0)
    f = jax.jit(lambda h: 1.0 / jnp.asarray(h.s))
    assert float(f(Holder(jnp.zeros(()), 0.0))) == np.inf
    assert float(f(Holder(jnp.zeros(()), -0.0))) == -np.inf


def test_int_enum_keyed_by_type():
    """An IntEnum member and the equal int are different statics."""
    import enum

    class Mode(enum.IntEnum):
        A = 1

    assert treedef(Mode.A) != treedef(1)
    assert treedef(Mode.A) == treedef(Mode.A)


# ---------------------------------------------------------------- user __eq__ never poisons caches


class Recorder:
    """A hashable static value whose __eq__ records the types it is compared against."""

    calls: list = []

    def __init__(self, v):
        self.v = v

    def __hash__(self):
        return 0

    def __eq__(self, other):
        Recorder.calls.append(type(other))
        return isinstance(other, Recorder) and self.v == other.v


class Impostor:
    """Same hash as Recorder, different type."""

    def __hash__(self):
        return 0

    def __eq__(self, other):
        Recorder.calls.append(("impostor", type(other)))
        return True


def test_user_eq_only_called_against_same_type():
    """A static value's __eq__ is only called with a value of its own type."""
    Recorder.calls = []
    assert treedef(Recorder(1)) != treedef(Impostor())
    assert treedef(Impostor()) != treedef(Recorder(1))
    assert treedef(Recorder(1)) != treedef(0)  # hash(0) == 0 too
    assert all(c is Recorder for c in Recorder.calls)
    assert treedef(Recorder(1)) == treedef(Recorder(1))
    assert Recorder.calls and all(c is Recorder for c in Recorder.calls)


class Raises:
    """A hashable static value whose __eq__ always raises."""

    def __hash__(self):
        return 1

    def __eq__(self, other):
        raise RuntimeError("boom")


class ArrayEq:
    """A hashable static value whose __eq__ returns an array (like numpy-backed configs)."""

    def __init__(self, v):
        self.v = np.asarray(v)

    def __hash__(self):
        return 2

    def __eq__(self, other):
        return self.v == other.v


def test_raising_eq_never_makes_key_comparison_raise(counted_jit):
    """A static value whose __eq__ raises compares unequal instead of raising, even in jit."""
    a, b = treedef(Raises()), treedef(Raises())
    assert (a == b) is False
    f = counted_jit(lambda h: h.x + 1)
    f(Holder(jnp.zeros(()), Raises()))
    f(Holder(jnp.zeros(()), Raises()))
    assert f.traces == 2  # unequal, so a second trace, but no exception
    r = Raises()
    f(Holder(jnp.zeros(()), r))
    f(Holder(jnp.zeros(()), r))  # the same object is equal to itself
    assert f.traces == 3


def test_array_returning_eq_never_makes_key_comparison_raise(counted_jit):
    """A static value whose __eq__ returns an array compares without raising."""
    assert (treedef(ArrayEq([1, 2])) == treedef(ArrayEq([1, 3]))) is False
    assert (treedef(ArrayEq([1])) == treedef(ArrayEq([1]))) is True
    f = counted_jit(lambda h: h.x + 1)
    f(Holder(jnp.zeros(()), ArrayEq([1, 2])))
    f(Holder(jnp.zeros(()), ArrayEq([1, 2])))
    assert f.traces == 2  # bool() of a 2-element array raises inside, so: unequal
    f(Holder(jnp.zeros(()), ArrayEq([1])))
    f(Holder(jnp.zeros(()), ArrayEq([1])))
    assert f.traces == 3  # a 1-element True array is a usable answer: equal


def test_instance_as_static_value_compared_by_value():
    """An @sf.dataclass instance (with array leaves) works as a static value, compared by value."""

    @sf.dataclass
    class Inner:
        w: np.ndarray
        n: int = sf.static(default=1)

    assert treedef(Inner(np.ones(2))) == treedef(Inner(np.ones(2)))
    assert treedef(Inner(np.ones(2))) != treedef(Inner(np.zeros(2)))
    assert treedef(Inner(np.ones(2))) != treedef(Inner(np.ones(2), 2))


# ---------------------------------------------------------------- FrozenDict


def test_frozendict_is_immutable_and_hashable():
    """FrozenDict has no item assignment and hashes by its items."""
    d = sf.FrozenDict({"a": 1, "b": 2})
    with pytest.raises(TypeError):
        d["a"] = 3  # type: ignore[index]
    assert hash(d) == hash(sf.FrozenDict(b=2, a=1))
    assert not hasattr(d, "__dict__")


def test_frozendict_equals_mapping():
    """FrozenDict equals a dict with the same items, like dict does."""
    d = sf.FrozenDict(a=1)
    assert d == {"a": 1} and {"a": 1} == d
    assert d != {"a": 2}
    assert (d == 5) is False


def test_frozendict_helpers():
    """``copy(**changes)`` and ``|`` return new FrozenDicts; the original is unchanged."""
    d = sf.FrozenDict(a=1)
    assert d.copy(b=2) == {"a": 1, "b": 2}
    assert isinstance(d | {"c": 3}, sf.FrozenDict) and (d | {"c": 3})["c"] == 3
    assert d == {"a": 1}
    assert len(d) == 1 and list(d) == ["a"] and "a" in d
    assert repr(d) == "FrozenDict({'a': 1})"


def test_frozendict_pickles():
    """FrozenDict survives pickle."""
    d = sf.FrozenDict(a=(1, 2))
    assert pickle.loads(pickle.dumps(d)) == d


def test_frozendict_is_a_keyed_pytree():
    """FrozenDict is a pytree with DictKey paths, like dict."""
    d = sf.FrozenDict(b=jnp.ones(1), a=jnp.zeros(1))
    paths = [jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_flatten_with_path(d)[0]]
    assert paths == ["['a']", "['b']"]
    doubled = jax.tree_util.tree_map(lambda v: v + 1, d)
    assert isinstance(doubled, sf.FrozenDict) and float(doubled["a"][0]) == 1.0


def test_static_dicts_in_another_order_do_not_share_a_program():
    """{"a": 1, "b": 2} and {"b": 2, "a": 1} are different static values: a method that
    iterates the dict computes in that order (they shared a program and returned [1, 2])."""
    class Cfg(sf.Struct):
        w: jax.Array
        order: dict = sf.static()

        @sf.jit_method
        def values(self):
            return jnp.stack([self.w * v for v in self.order.values()])

    first = Cfg(jnp.ones(()), {"a": 1, "b": 2})
    second = Cfg(jnp.ones(()), {"b": 2, "a": 1})
    np.testing.assert_array_equal(first.values(), [1, 2])
    np.testing.assert_array_equal(second.values(), [2, 1])
    assert first != second and Cfg.values.compile_count == 2
    assert "the same items in another order" in str(Cfg.values.recompiles[-1])


class Tags(sf.Struct):
    w: jax.Array
    tags: frozenset = sf.static()


def test_equal_static_sets_iterate_alike_however_built_copied_or_unpickled():
    """A static set is frozen in one canonical order: equal sets built in any order, and an
    instance's copy, deepcopy and unpickled copy, iterate alike and compare equal (iteration
    order being part of a static value, they share one program)."""
    import copy
    import pickle

    items = [f"t{i}" for i in range(40)] + list(range(-20, 20))
    a = Tags(jnp.ones(()), set(items))
    b = Tags(jnp.ones(()), set(reversed(items)))
    assert list(a.tags) == list(b.tags) and a == b and hash(a) == hash(b)
    for c in (copy.copy(a), copy.deepcopy(a), pickle.loads(pickle.dumps(a))):
        assert list(c.tags) == list(a.tags) and c == a and hash(c) == hash(a)
