"""``mappable=True`` (DESIGN.md, "Inheritance and validation"): instances are
``collections.abc.Mapping``s over their fields, as ``chex.dataclass``'s are, so code
written for chex (``state["step"]``, ``**state``, dm-tree) works unchanged."""

from __future__ import annotations

import collections.abc
import pickle

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import staticfield as sf


class EnvState(sf.Struct, mappable=True):
    pos: jax.Array
    step: jax.Array
    grid: sf.Static[tuple] = (4, 4)


def _state(i: int = 0) -> EnvState:
    return EnvState(jnp.full(2, float(i)), jnp.asarray(i))


def test_an_instance_is_a_mapping_over_every_field():
    """Indexing, keys, items, values, get, len, in, bool and ** cover every field, static
    ones included, in declaration order; an unknown key is a KeyError."""
    s = _state(1)
    assert isinstance(s, collections.abc.Mapping)
    assert list(s) == list(s.keys()) == ["pos", "step", "grid"]
    assert s["grid"] == (4, 4) and s["step"] is s.step
    assert dict(s.items()) == {"pos": s.pos, "step": s.step, "grid": (4, 4)}
    assert list(s.values())[2] == (4, 4)
    assert (len(s), "pos" in s, "w" in s, bool(s)) == (3, True, False, True)
    assert s.get("missing", 7) == 7
    with pytest.raises(KeyError):
        s["missing"]

    def kw(pos, step, grid):
        return grid

    assert kw(**s) == (4, 4)


def test_eq_hash_and_repr_stay_staticfields():
    """== compares as staticfield does (type, statics, leaves), never as a dict; hash and
    repr are staticfield's."""
    s = _state(1)
    assert s == _state(1) and s != _state(2)
    assert s != {"pos": s.pos, "step": s.step, "grid": (4, 4)}
    assert hash(s) == hash(_state(1))
    assert repr(s) == "EnvState(pos=f32[2], step=i32[](1), grid=(4, 4))"


def test_built_from_a_mapping_or_from_pairs():
    """Cls(mapping) and Cls(iterable of (name, value) pairs), as chex and dm-tree build them;
    Cls(value) of an ordinary first field still works."""
    s = _state(1)
    assert EnvState(dict(s)) == s
    assert EnvState(s) == s
    assert EnvState((k, s[k]) for k in s) == s
    assert EnvState(pos=s.pos, step=s.step).grid == (4, 4)

    class One(sf.Struct, mappable=True):
        xs: tuple

    assert One((1, 2)).xs == (1, 2)


def test_it_is_still_a_pytree_and_jits():
    """JAX flattens it by its fields (not as a dict): jit, tree_map, pickle work."""
    s = _state(1)
    assert jax.tree.structure(s) == jax.tree.structure(_state(2))
    doubled = jax.tree.map(lambda x: x * 2, s)
    assert isinstance(doubled, EnvState) and int(doubled.step) == 2

    @sf.jit
    def advance(state):
        return state.replace(step=state["step"] + 1)

    assert int(advance(s)["step"]) == 2
    assert pickle.loads(pickle.dumps(s)) == s


def test_walkers_of_mappings_descend_into_it():
    """Code that walks collections.abc.Mapping (as dm-tree and tf.nest do) finds the fields
    and rebuilds the instance from pairs."""

    def walk(x, fn):
        if isinstance(x, collections.abc.Mapping):
            return type(x)((k, walk(x[k], fn)) for k in sorted(x))
        if isinstance(x, tuple):
            return tuple(walk(v, fn) for v in x)
        return fn(x)

    s = _state(1)
    out = walk(s, lambda v: v * 10 if isinstance(v, jax.Array) else v)
    assert isinstance(out, EnvState) and int(out.step) == 10 and out.grid == (4, 4)


def test_dm_tree_walks_it():
    """dm-tree (where installed) flattens an instance as a mapping and rebuilds it."""
    tree = pytest.importorskip("tree")
    s = _state(1)
    leaves = tree.flatten(s)
    assert len(leaves) == 4  # pos, step, and the two ints of grid, in sorted key order
    out = tree.map_structure(lambda v: v + 1 if isinstance(v, jax.Array) else v, s)
    assert isinstance(out, EnvState) and np.asarray(out.pos).tolist() == [2.0, 2.0]
    assert tree.is_nested(s)


def test_subclasses_stay_mappable():
    """mappable is inherited, as check is; a subclass's own fields join the mapping."""

    class Wider(EnvState):
        extra: sf.Static[int] = 1

    w = Wider({"pos": jnp.zeros(2), "step": jnp.asarray(0)})
    assert list(w) == ["pos", "step", "grid", "extra"] and w["extra"] == 1


def test_a_field_named_like_a_mapping_method_is_refused():
    """A field called keys, items, values or get is a TypeError naming the class and field."""
    with pytest.raises(TypeError, match=r"Bad: a field named 'items' would hide the Mapping method items\(\)"):
        class Bad(sf.Struct, mappable=True):
            items: jax.Array


def test_off_by_default():
    """A Struct is not a dict unless asked."""

    class Plain(sf.Struct):
        x: jax.Array

    p = Plain(jnp.ones(1))
    assert not isinstance(p, collections.abc.Mapping)
    with pytest.raises(TypeError):
        p["x"]


def test_deps_read_records_an_item_read():
    """Under deps="read", state["mode"] reads that one static: another value of an unread
    static shares the program."""

    class S(sf.Struct, mappable=True):
        w: jax.Array
        mode: sf.Static[str] = "a"
        tag: sf.Static[str] = "t"

        @sf.jit_method(deps="read", warn_compiles=None)
        def f(self, x):
            return self.w * x * (2 if self["mode"] == "a" else 3)

    assert S(jnp.ones(1)).f(1.0).tolist() == [2.0]
    assert S(jnp.ones(1), tag="u").f(1.0).tolist() == [2.0]
    assert S(jnp.ones(1), mode="b").f(1.0).tolist() == [3.0]
    assert S.f.compile_count == 2


def test_a_mappable_instance_in_a_static_field_stays_itself():
    """A mappable instance (no arrays) stored in a static field is kept as the instance,
    not turned into a FrozenDict."""

    class Cfg(sf.Struct, mappable=True):
        n: sf.Static[int] = 1

    class Holder(sf.Struct):
        cfg: sf.Static[Cfg]

    assert type(Holder(Cfg()).cfg) is Cfg


# ----- positional arguments: a value or field names (DESIGN.md, mappable=True) -------------
class Inner(sf.Struct, mappable=True):
    step: jax.Array
    mode: sf.Static[str] = "a"


class Outer(sf.Struct, mappable=True):
    inner: Inner


class Twin(sf.Struct, mappable=True):
    """Its first field's value is a mapping whose keys are all Twin's field names."""

    first: "Pair"
    second: int = 0


class Pair(sf.Struct, mappable=True):
    first: jax.Array
    second: int = 1


def test_a_mappable_instance_as_the_first_field_is_its_value():
    """Outer(Inner(...)) sets Outer's one field (Inner's keys are not Outer's fields); a
    mapping whose keys are all field names but that is an instance of the first field's
    annotated type (a string annotation, resolved) is that field's value too."""
    inner = Inner(jnp.ones(2))
    assert Outer(inner).inner is inner
    assert jax.tree.map(lambda x: x + 1, Outer(inner)).inner.step.tolist() == [2.0, 2.0]
    pair = Pair(jnp.ones(1), 5)
    twin = Twin(pair)
    assert twin.first is pair and twin.second == 0
    assert Twin({"first": pair, "second": 3}).second == 3  # a plain dict: field names


def test_dm_tree_rebuilds_an_instance_with_a_user_written_init():
    """A user-written __init__ (taking other arguments) is kept; dm-tree's map_structure
    rebuilds instances through the field-wise constructor, never through it."""
    tree = pytest.importorskip("tree")

    class Model(sf.Struct, mappable=True):
        w: jax.Array
        size: sf.Static[int]

        def __init__(self, size, scale=1.0):
            self.w = jnp.full(size, scale)
            self.size = size

    m = Model(3, scale=2.0)
    assert m.w.tolist() == [2.0, 2.0, 2.0] and m.size == 3
    out = tree.map_structure(lambda v: v + 1 if isinstance(v, jax.Array) else v, m)
    assert isinstance(out, Model) and out.w.tolist() == [3.0, 3.0, 3.0] and out.size == 3
    assert Model({"w": jnp.zeros(2), "size": 2}).w.tolist() == [0.0, 0.0]


def test_another_fields_unresolvable_annotation_leaves_field_names_readable():
    """Only the first field's annotation decides: a later field annotated with a name that
    does not resolve here (imported under TYPE_CHECKING) does not turn Cls(mapping) into
    the first field's value."""

    class Cfg(sf.Struct, mappable=True):
        w: jax.Array
        extra: "NotDefinedAnywhere" = sf.static(default=None)  # noqa: F821

    c = Cfg({"w": jnp.ones(2), "extra": 3})
    assert c.extra == 3 and c.w.tolist() == [1.0, 1.0]
