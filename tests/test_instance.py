"""Instance semantics: frozen, ``==``, ``hash``, ``repr``, ``replace``, pickling and copying."""

import copy
import dataclasses
import pickle

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import staticfield as sf


@sf.dataclass
class Params:
    x: jax.Array
    a: int = sf.static(default=2)


@sf.dataclass
class Twin:
    """Same layout as Params, different class."""

    x: jax.Array
    a: int = sf.static(default=2)


@sf.dataclass
class Model:
    w: jax.Array
    layers: tuple = sf.static(default=(1, 2))
    table: np.ndarray = sf.static(default_factory=lambda: np.arange(3))
    extra: dict = sf.field(default_factory=dict)


# ---------------------------------------------------------------- frozen


def test_assignment_raises_frozen_instance_error():
    """Assigning a field after construction is FrozenInstanceError naming class and field."""
    p = Params(jnp.ones(2))
    with pytest.raises(dataclasses.FrozenInstanceError, match=r"Params\.a: cannot assign.*sf\.replace\(obj, a="):
        p.a = 3
    with pytest.raises(dataclasses.FrozenInstanceError, match=r"Params\.x: .*replace\(x="):
        p.x = jnp.zeros(2)
    assert p.a == 2


def test_new_attribute_raises_frozen_instance_error():
    """Adding a new attribute is refused too."""
    with pytest.raises(dataclasses.FrozenInstanceError, match=r"Params\.extra"):
        Params(jnp.ones(2)).extra = 1


def test_deletion_raises_frozen_instance_error():
    """Deleting a field is FrozenInstanceError naming class and field and suggesting replace."""
    p = Params(jnp.ones(2))
    with pytest.raises(dataclasses.FrozenInstanceError, match=r"Params\.x: cannot delete.*sf\.replace"):
        del p.x
    assert hasattr(p, "x")


def test_frozen_instance_error_is_attribute_error():
    """The error is the stdlib FrozenInstanceError (an AttributeError), as with frozen dataclasses."""
    with pytest.raises(AttributeError):
        Params(jnp.ones(2)).a = 1


# ---------------------------------------------------------------- ==


def test_eq_returns_python_bool():
    """``==`` on instances with array fields returns a Python bool, never an array."""
    a, b, c = Params(jnp.ones(2)), Params(jnp.ones(2)), Params(jnp.zeros(2))
    assert (a == b) is True
    assert (a == c) is False
    assert (a != c) is True
    assert (a != b) is False


def test_eq_compares_static_values():
    """Instances with equal arrays but different statics are not equal."""
    assert Params(jnp.ones(2), 1) != Params(jnp.ones(2), 2)


def test_eq_compares_shape_and_dtype_without_raising():
    """Different shapes or dtypes are unequal, never a broadcasting error."""
    assert Params(jnp.ones(2)) != Params(jnp.ones(3))
    assert Params(jnp.ones(2)) != Params(jnp.ones((2, 1)))
    assert Params(jnp.ones(2)) != Params(jnp.ones(2, jnp.int32))


def test_eq_numpy_and_jax_leaves():
    """A NumPy leaf and a jax leaf with the same shape, dtype and values are equal, same hash."""
    a = Params(np.array([1.0, 2.0], np.float32))
    b = Params(jnp.array([1.0, 2.0]))
    assert a == b and b == a
    assert hash(a) == hash(b)


def test_eq_and_hash_tell_weak_types_apart():
    """A weak-typed leaf and a strong leaf of the same dtype and values are not equal (JAX
    computes differently with them); a NumPy leaf equals the strong one."""
    weak, strong = Params(jnp.asarray(2.0)), Params(jnp.float32(2.0))
    assert weak.x.weak_type and not strong.x.weak_type
    assert weak != strong and strong != weak
    assert hash(weak) != hash(strong)
    assert strong == Params(np.float32(2.0)) and hash(strong) == hash(Params(np.float32(2.0)))
    assert weak == Params(jnp.asarray(2.0)) and hash(weak) == hash(Params(jnp.asarray(2.0)))


def test_plain_jit_static_argnums_keeps_weak_and_strong_apart():
    """As a plain jax.jit static argument, a weak and a strong instance get their own
    programs: the strong one computes in f32, not in the f16 of the weak one's program."""
    scale = jax.jit(lambda p, y: p.x * y, static_argnums=0)
    assert scale(Params(jnp.asarray(2.0)), jnp.float16(2)).dtype == jnp.float16
    assert scale(Params(jnp.float32(2.0)), jnp.float16(2)).dtype == jnp.float32


def test_eq_nested_pytrees_and_none():
    """Nested containers, None and Python scalars in dynamic fields compare structurally."""
    a = Model(jnp.ones(1), extra={"b": (jnp.ones(2), None), "s": 1.0})
    b = Model(jnp.ones(1), extra={"b": (jnp.ones(2), None), "s": 1.0})
    assert a == b and hash(a) == hash(b)
    assert a != Model(jnp.ones(1), extra={"b": (jnp.ones(2),), "s": 1.0})
    assert a != Model(jnp.ones(1), extra={"b": (jnp.ones(2), None), "s": 2.0})
    assert a != Model(jnp.ones(1), extra={"b": (jnp.ones(2), None), "s": 1})


def test_eq_nan_leaves_equal():
    """NaNs in the same places compare equal, so == is reflexive for copies."""
    a = Params(jnp.array([np.nan, 1.0]))
    b = Params(jnp.array([np.nan, 1.0]))
    assert a == b


def test_eq_other_type_is_not_implemented():
    """Against another type ``__eq__`` returns NotImplemented, so ``==`` is False."""
    p = Params(jnp.ones(2))
    assert p.__eq__(5) is NotImplemented
    assert p.__eq__((jnp.ones(2), 2)) is NotImplemented
    assert (p == 5) is False and (p != 5) is True
    assert (p == None) is False  # noqa: E711


def test_same_layout_different_class_never_equal():
    """Two classes with the same fields and values never compare equal."""
    p, t = Params(jnp.ones(2)), Twin(jnp.ones(2))
    assert p != t and t != p
    assert jax.tree_util.tree_structure(p) != jax.tree_util.tree_structure(t)


def test_same_layout_different_class_never_share_program(counted_jit):
    """jax.jit traces each class separately and returns each its own class."""
    f = counted_jit(lambda o: jax.tree_util.tree_map(lambda v: v + 1, o))
    out_p = f(Params(jnp.ones(2)))
    out_t = f(Twin(jnp.ones(2)))
    assert f.traces == 2
    assert type(out_p) is Params and type(out_t) is Twin


def test_eq_on_tracers_raises_explaining():
    """``==`` inside jit on traced fields is a TypeError naming class and field and saying why."""

    def f(a, b):
        return a == b

    with pytest.raises(TypeError, match=r"Params\.__eq__.*field `x` holds a traced value.*jnp\.array_equal"):
        jax.jit(f)(Params(jnp.ones(2)), Params(jnp.ones(2)))


def test_eq_on_tracers_with_different_statics_is_false():
    """Inside jit, instances whose static values differ are unequal without looking at tracers."""
    out = []

    def f(a, b):
        out.append(a == b)
        return a.x

    jax.jit(f)(Params(jnp.ones(2), 1), Params(jnp.ones(2), 2))
    assert out == [False]


# ---------------------------------------------------------------- hash


def test_hash_never_raises_for_arrays():
    """hash() works on instances holding jax and NumPy arrays."""
    for leaf in (jnp.ones(2), np.ones(2), jnp.ones((2, 3), jnp.bfloat16), 1.0, np.float32(2)):
        hash(Params(leaf))
    hash(Model(jnp.ones(1), extra={"a": [jnp.ones(1)]}))


def test_hash_consistent_with_eq():
    """Equal instances have equal hashes, across jax/NumPy leaves and rebuilt instances."""
    a = Model(jnp.ones(3))
    copies = [
        Model(jnp.ones(3)),
        Model(np.ones(3, np.float32)),
        jax.tree_util.tree_map(lambda v: v, a),
        copy.deepcopy(a),
        pickle.loads(pickle.dumps(a)),
    ]
    for c in copies:
        assert c == a and hash(c) == hash(a)


def test_hash_ignores_array_values():
    """hash uses shapes/dtypes, not values (no device sync); statics still change it."""
    assert hash(Params(jnp.ones(2))) == hash(Params(jnp.zeros(2)))
    assert Params(jnp.ones(2)) != Params(jnp.zeros(2))


def test_instances_usable_in_sets_and_dicts():
    """Instances can be set members and dict keys, deduplicated by value."""
    s = {Params(jnp.ones(2)), Params(np.ones(2, np.float32)), Params(jnp.zeros(2))}
    assert len(s) == 2
    d = {Params(jnp.ones(2)): "a"}
    assert d[Params(jnp.ones(2))] == "a"


def test_instance_as_static_argnums(counted_jit):
    """As a static_argnums argument: equal instances reuse the program, a changed value recompiles."""
    f = counted_jit(lambda p, y: p.x * y + p.a, static_argnums=0)
    np.testing.assert_allclose(f(Params(jnp.array([1.0, 2.0])), 2.0), [4.0, 6.0])
    np.testing.assert_allclose(f(Params(jnp.array([1.0, 2.0])), 3.0), [5.0, 8.0])
    assert f.traces == 1
    np.testing.assert_allclose(f(Params(jnp.array([1.0, 3.0])), 2.0), [4.0, 8.0])  # not stale
    assert f.traces == 2
    np.testing.assert_allclose(f(Params(jnp.array([1.0, 3.0]), a=0), 2.0), [2.0, 6.0])
    assert f.traces == 3
    np.testing.assert_allclose(f(Params(np.array([1.0, 2.0], np.float32)), 2.0), [4.0, 6.0])
    assert f.traces == 3  # a NumPy leaf equal to the first jax leaf reuses


def test_static_argnums_weak_type_not_stale():
    """As sf.jit's static argument, a weak and a strong leaf (== though they are) get separate
    programs with the right dtypes: jit keys on the weak type, as JAX does for traced leaves."""
    traces = [0]

    def scale(p, y):
        traces[0] += 1
        return p.x * y

    f = sf.jit(scale, static_argnums=0)
    assert f(Params(jnp.asarray(1.0)), jnp.float16(2)).dtype == jnp.float16
    assert f(Params(jnp.float32(1.0)), jnp.float16(2)).dtype == jnp.float32
    assert f(Params(jnp.asarray(1.0)), jnp.float16(2)).dtype == jnp.float16
    assert traces[0] == 2 and f.compile_count == 2


# ---------------------------------------------------------------- repr


def test_repr_summarises_arrays():
    """repr shows arrays as dtype+shape and static values as their repr."""
    assert repr(Params(jnp.ones(2, jnp.float32), 2)) == "Params(x=f32[2], a=2)"
    assert repr(Params(jnp.ones((2, 3), jnp.int32), 5)) == "Params(x=i32[2,3], a=5)"
    assert repr(Params(jnp.ones((), jnp.bfloat16))) == "Params(x=bf16[](1.0), a=2)"
    assert repr(Params(np.ones(2, bool))) == "Params(x=bool[2], a=2)"


def test_repr_nested_containers_and_scalars():
    """Containers in dynamic fields show each leaf summarised; scalars show their value."""
    m = Model(jnp.ones(1), extra={"b": (jnp.zeros(3, jnp.uint8), None), "s": 1.5})
    assert repr(m) == (
        "Model(w=f32[1], layers=(1, 2), table=array([0, 1, 2]), "
        "extra={'b': (u8[3], None), 's': 1.5})"
    )


def test_repr_nested_instances():
    """A nested instance is shown with its own summarised repr."""

    @sf.dataclass
    class Outer:
        inner: Params
        name: str = sf.static(default="o")

    assert repr(Outer(Params(jnp.ones(2)))).endswith("Outer(inner=Params(x=f32[2], a=2), name='o')")


def test_repr_of_tracers_inside_jit():
    """repr works on instances holding tracers (shows dtype and shape)."""
    seen = []
    jax.jit(lambda p: seen.append(repr(p)) or p.x)(Params(jnp.ones(2)))
    assert seen == ["Params(x=f32[2], a=2)"]


# ---------------------------------------------------------------- replace


def test_sf_replace_returns_changed_copy():
    """sf.replace returns a new instance with the changes; the original is unchanged."""
    p = Params(jnp.ones(2), 2)
    q = sf.replace(p, a=3)
    assert q.a == 3 and p.a == 2 and q.x is p.x
    assert type(q) is Params


def test_replace_method_and_copy_replace_protocol():
    """``obj.replace`` and ``obj.__replace__`` (copy.replace in 3.13) do the same as sf.replace."""
    p = Params(jnp.ones(2))
    assert p.replace(a=4) == sf.replace(p, a=4)
    assert p.__replace__(a=4) == sf.replace(p, a=4)
    if hasattr(copy, "replace"):  # Python 3.13+
        assert copy.replace(p, a=4) == sf.replace(p, a=4)


def test_replace_does_not_run_init():
    """replace bypasses __init__ and __post_init__ (custom signatures keep working)."""
    calls = []

    @sf.dataclass
    class Layer:
        w: jax.Array
        n: int = sf.static()

        def __init__(self, n):
            calls.append(n)
            self.n = n
            self.w = jnp.zeros(n)

    layer = Layer(2)
    r = layer.replace(w=jnp.ones(2))
    assert calls == [2] and r.n == 2 and float(r.w[0]) == 1.0


def test_replace_applies_converters_and_checks():
    """replace converts and freezes the changed static fields and checks dynamic leaves."""
    p = Model(jnp.ones(1))
    q = sf.replace(p, layers=[3, 4], table=np.ones(2))
    assert q.layers == (3, 4) and not q.table.flags.writeable
    with pytest.raises(TypeError, match=r"Model\.w.*str.*sf\.static"):
        sf.replace(p, w="oops")


def test_replace_changes_the_key():
    """Replacing a static value gives a new treedef; replacing a dynamic one keeps it."""
    p = Params(jnp.ones(2), 2)
    t = jax.tree_util.tree_structure
    assert t(sf.replace(p, a=3)) != t(p)
    assert t(sf.replace(p, x=jnp.zeros(2))) == t(p)
    assert sf.replace(p, a=3) == Params(jnp.ones(2), 3)


def test_replace_with_no_changes_is_equal_copy():
    """replace with no arguments returns an equal, distinct instance."""
    p = Params(jnp.ones(2))
    q = sf.replace(p)
    assert q == p and q is not p


def test_replace_unknown_name_lists_valid_ones():
    """An unknown name is a TypeError naming the class, the bad name and the valid names."""
    p = Params(jnp.ones(2))
    with pytest.raises(TypeError, match=r"Params has no field\(s\) 'b' to replace\. Valid field names: x, a\."):
        sf.replace(p, b=1)
    with pytest.raises(TypeError, match=r"Params has no field\(s\) 'b'"):
        p.replace(b=1)


def test_replace_refuses_non_instance():
    """sf.replace on something that is not an @sf.dataclass instance names its type."""
    with pytest.raises(TypeError, match=r"sf\.replace.*int.*@sf\.dataclass"):
        sf.replace(3, a=1)


def test_own_replace_method_kept():
    """The replace method is not added when the class defines its own."""

    @sf.dataclass
    class Own:
        x: jax.Array

        def replace(self, **kw):
            return "mine"

    o = Own(1.0)
    assert o.replace(x=2.0) == "mine"
    assert sf.replace(o, x=2.0).x == 2.0


def test_field_named_replace_allowed():
    """A field called ``replace`` is a plain field; sf.replace still works."""

    @sf.dataclass
    class R:
        replace: int = sf.static(default=1)

    r = R()
    assert r.replace == 1
    assert sf.replace(r, replace=2).replace == 2


def test_replaced_instance_is_frozen():
    """The result of replace is frozen too."""
    q = sf.replace(Params(jnp.ones(2)), a=5)
    with pytest.raises(dataclasses.FrozenInstanceError):
        q.a = 6


# ---------------------------------------------------------------- pickle and copy


@pytest.mark.parametrize(
    "roundtrip",
    [copy.copy, copy.deepcopy, lambda o: pickle.loads(pickle.dumps(o))],
    ids=["copy", "deepcopy", "pickle"],
)
def test_roundtrips_keep_value_and_frozen_statics(roundtrip):
    """copy, deepcopy and pickle round-trip; static NumPy arrays stay read-only."""
    m = Model(jnp.arange(3.0), layers=[1, [2]], table=np.arange(4), extra={"k": jnp.ones(2)})
    r = roundtrip(m)
    assert type(r) is Model and r == m and hash(r) == hash(m)
    assert r.layers == (1, (2,))
    assert not r.table.flags.writeable
    assert jax.tree_util.tree_structure(r) == jax.tree_util.tree_structure(m)
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.w = 1


def test_deepcopy_copies_leaves_copy_shares_them():
    """copy.copy shares the leaves; copy.deepcopy gives new ones."""
    m = Model(np.arange(3.0))
    assert copy.copy(m).w is m.w
    d = copy.deepcopy(m)
    assert d.w is not m.w and d == m


def test_pickled_instance_usable_in_jit(counted_jit):
    """An unpickled instance hits the same compiled program as the original."""
    f = counted_jit(lambda o: o.w.sum() + sum(o.layers))
    m = Model(jnp.ones(3))
    f(m)
    f(pickle.loads(pickle.dumps(m)))
    assert f.traces == 1


def test_negative_zero_leaf_is_a_different_value_for_static_use():
    """-0.0 and 0.0 leaves are unequal, so a static-argument instance never reuses the wrong program."""

    @sf.dataclass
    class D:
        z: jax.Array

    assert D(jnp.array(0.0)) != D(jnp.array(-0.0))
    assert D(jnp.array(np.nan)) == D(jnp.array(np.nan))
    f = jax.jit(lambda d, x: x / d.z, static_argnums=0)
    assert float(f(D(jnp.array(0.0)), 1.0)) == float("inf")
    assert float(f(D(jnp.array(-0.0)), 1.0)) == float("-inf")
