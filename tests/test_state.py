"""Per-instance state: construction paths, re-initialisation, pickling, and what is cached."""

import copy
import gc
import pickle
import sys
import uuid

import jax
import jax.numpy as jnp
import pytest

import staticfield as sf


@sf.dataclass
class Scaled:
    w: jax.Array
    k: sf.Static[int] = 1

    @sf.jit_method
    def apply(self, x):
        return self.w * x * self.k


# ---------------------------------------------------------------- __init__ again


def test_init_again_on_a_live_instance_rebuilds_its_state():
    """Calling __init__ again gives the new fields to flatten, the key and bound methods."""
    s = Scaled(jnp.float32(2.0), 3)
    assert float(s.apply(1.0)) == 6.0
    s.__init__(jnp.float32(5.0), 7)
    assert s.k == 7
    assert jax.tree_util.tree_leaves(s)[0] == 5.0
    assert jax.tree_util.tree_structure(s) == jax.tree_util.tree_structure(Scaled(jnp.float32(0.0), 7))
    assert float(s.apply(1.0)) == 35.0
    assert s == Scaled(jnp.float32(5.0), 7)


def test_custom_init_again_on_a_live_instance_rebuilds_its_state():
    """The same for a user-written __init__."""

    @sf.dataclass
    class C:
        w: jax.Array
        k: sf.Static[int]

        def __init__(self, k):
            self.w = jnp.float32(k)
            self.k = k

        @sf.jit_method
        def apply(self, x):
            return self.w * x + self.k

    c = C(2)
    assert float(c.apply(1.0)) == 4.0
    c.__init__(5)
    assert float(c.apply(1.0)) == 10.0


# ---------------------------------------------------------------- construction protocol


def test_custom_init_calling_super_init_on_a_base_with_post_init():
    """super().__init__ of a base whose generated __init__ runs __post_init__ seals only once,
    at the end of the outermost __init__."""

    @sf.dataclass
    class Base:
        a: int
        twice: int = sf.field(init=False)

        def __post_init__(self):
            self.twice = 2 * self.a

    @sf.dataclass
    class Child(Base):
        k: sf.Static[int] = sf.static(default=0)

        def __init__(self, a, k):
            super().__init__(a)
            self.k = k

    c = Child(3, 4)
    assert (c.a, c.twice, c.k) == (3, 6, 4)
    with pytest.raises(dataclasses_frozen()):
        c.a = 1


def dataclasses_frozen():
    import dataclasses

    return dataclasses.FrozenInstanceError


def test_converter_runs_on_a_value_assigned_in_post_init():
    """A field's converter applies to a value set in __post_init__ too."""

    @sf.dataclass
    class P:
        x: jax.Array = sf.field(converter=jnp.asarray)
        y: jax.Array = sf.field(converter=jnp.asarray, init=False)

        def __post_init__(self):
            self.y = [1.0, 2.0]

    p = P([3.0])
    assert isinstance(p.x, jax.Array) and isinstance(p.y, jax.Array)
    assert p.y.tolist() == [1.0, 2.0]


def test_converter_runs_on_assignment_in_custom_init():
    """In a custom __init__, reading a field back gives the converted value."""

    seen = []

    @sf.dataclass
    class P:
        x: jax.Array = sf.field(converter=jnp.asarray)

        def __init__(self, x):
            self.x = x
            seen.append(type(self.x))

    P([1.0])
    assert issubclass(seen[0], jax.Array)


def test_failed_init_leaves_no_half_built_instance_usable():
    """A custom __init__ that raises leaves the instance frozen, not half-writable."""

    @sf.dataclass
    class P:
        x: jax.Array

        def __init__(self, x):
            self.x = x
            raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        P(1.0)


# ---------------------------------------------------------------- generated code and user globals


def test_generated_code_ignores_shadowed_builtins_in_the_users_module(tmp_path, monkeypatch):
    """A module-level ``float = np.float64`` or ``len = 3`` does not change generated code."""
    src = tmp_path / "shadowing_module.py"
    src.write_text(
        "import numpy as np\n"
        "import jax\n"
        "import staticfield as sf\n"
        "float = np.float64\n"
        "len = 3\n"
        "tuple = list\n"
        "@sf.dataclass\n"
        "class P:\n"
        "    x: jax.Array\n"
        "    rate: sf.Static[object] = 0.5\n"
        "    name: sf.Static[str] = 'a'\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    import shadowing_module as m

    objs = [m.P(1.0, r, n) for r in (0.5, 0.25, 2.0) for n in ("a", "b")] * 3
    keys = {jax.tree_util.tree_structure(o) for o in objs}
    assert len(keys) == 6
    p = m.P(2.0)
    assert jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(p), [3.0]).x == 3.0
    sys.modules.pop("shadowing_module", None)


def test_generated_functions_say_what_generated_them():
    """Generated functions carry a __doc__ naming staticfield and their class."""
    assert "staticfield" in Scaled.__init__.__doc__ and "Scaled" in Scaled.__init__.__doc__


# ---------------------------------------------------------------- pickling


def test_unpickling_ignores_injected_cached_entries():
    """A pickled state carrying a cached flatten result is rebuilt from the fields."""
    s = Scaled(jnp.float32(1.0), 2)
    state = s.__getstate__()
    forged = (jnp.float32(7.0),), jax.tree_util.tree_structure(s)
    state = {**state, "_staticfield_flat": forged, "_staticfield_key": "forged"}
    t = object.__new__(Scaled)
    t.__setstate__(state)
    assert float(t.w) == 1.0
    assert jax.tree_util.tree_leaves(t)[0] == 1.0
    assert float(t.apply(1.0)) == 2.0


def test_unpickling_a_state_with_a_missing_field_is_a_clear_error():
    """A state without a field fails at unpickling, naming the class and the field."""
    data = pickle.dumps(Scaled(jnp.float32(1.0), 2))
    t = object.__new__(Scaled)
    with pytest.raises(TypeError, match=r"Scaled: cannot restore .* no value for field\(s\) 'k'"):
        t.__setstate__({"w": 1.0})
    assert pickle.loads(data).k == 2


def test_unpickling_a_state_with_an_unknown_field_is_a_clear_error():
    """A state with an entry that is not a field fails, naming it."""
    t = object.__new__(Scaled)
    with pytest.raises(TypeError, match=r"Scaled: cannot restore .* unknown entries 'old'"):
        t.__setstate__({"w": 1.0, "k": 2, "old": 3})


def test_copy_and_deepcopy_round_trip_and_stay_usable():
    """copy/deepcopy give equal, working instances, whatever was cached on the original."""
    s = Scaled(jnp.float32(2.0), 3)
    s.apply(1.0)  # caches a binding, the key and the flatten result
    for c in (copy.copy(s), copy.deepcopy(s), pickle.loads(pickle.dumps(s))):
        assert c == s
        assert float(c.apply(1.0)) == 6.0


# ---------------------------------------------------------------- keys


def test_a_key_that_is_not_interned_is_freed_without_the_garbage_collector():
    """StaticKey holds no reference to itself, so dropping an instance frees its key."""
    gc.collect()
    gc.disable()
    try:
        marker = ("unique-marker-value", uuid.uuid4().hex)  # no other key in the process holds it
        s = Scaled(jnp.float32(1.0), 1)
        o = _Holder(s.w, marker)
        jax.tree_util.tree_structure(o)  # builds the key
        del o
        alive = [
            x for x in gc.get_objects()
            if type(x).__name__ == "StaticKey" and any(_is_marker(v, marker) for v in x.values)
        ]
        assert alive == []
    finally:
        gc.enable()


def _is_marker(value, marker) -> bool:
    # Other tests' keys may hold tuples with arrays in them: never compare those with ==.
    return (type(value) is tuple and len(value) == 2 and all(type(v) is str for v in value)
            and value == marker)


@sf.dataclass
class _Holder:
    w: jax.Array
    tag: sf.Static[tuple]


def test_static_key_hash_is_consistent_with_eq():
    """Equal keys hash alike, for interned and non-interned statics."""
    a = jax.tree_util.tree_structure(_Holder(1.0, ("a", 1)))
    b = jax.tree_util.tree_structure(_Holder(2.0, ("a", 1)))
    assert a == b and hash(a) == hash(b)


@sf.dataclass
class _Keyed:
    key: jax.Array


def test_typed_prng_key_leaves_compare_hash_and_print():
    """A typed PRNG key in a dynamic field works with ==, hash and repr."""
    a, b, c = _Keyed(jax.random.key(0)), _Keyed(jax.random.key(0)), _Keyed(jax.random.key(1))
    assert a == b and a != c and hash(a) == hash(b)
    assert repr(a) == "_Keyed(key=key<fry>[])"
    assert repr(_Keyed(jax.random.split(jax.random.key(0)))) == "_Keyed(key=key<fry>[2])"


def test_super_call_of_an_overridden_jit_method_never_caches_the_parents_binding():
    """A subclass override calling super().f(x) gives its own answer on every call."""

    @sf.dataclass
    class Base:
        w: jax.Array

        @sf.jit_method
        def f(self, x):
            return self.w * x

    @sf.dataclass
    class Child(Base):
        def f(self, x):  # a plain override
            return super().f(x) + 100.0

    @sf.dataclass
    class JitChild(Base):
        @sf.jit_method
        def f(self, x):
            return super().f(x) + 100.0

    for cls in (Child, JitChild):
        c = cls(jnp.float32(2.0))
        assert [float(c.f(1.0)) for _ in range(3)] == [102.0, 102.0, 102.0]
    assert float(Base(jnp.float32(2.0)).f(1.0)) == 2.0


def test_binding_made_while_building_is_not_kept():
    """A jit_method used inside a custom __init__ is not cached on the half-built instance."""

    @sf.dataclass
    class Norm:
        w: jax.Array
        total: jax.Array

        def __init__(self, w):
            self.w = w
            self.total = jnp.float32(0.0)
            self.total = self.sum()   # binds while building

        @sf.jit_method
        def sum(self):
            return self.w.sum() + self.total

    n = Norm(jnp.ones(3))
    assert float(n.total) == 3.0
    assert float(n.sum()) == 6.0   # the binding sees the final fields
