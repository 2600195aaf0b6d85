"""Properties over randomly generated classes: round-trips, ``==`` ⇒ equal hash, keyed paths."""

import copy
import dataclasses
import keyword

import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import staticfield as sf

SETTINGS = settings(max_examples=50, deadline=None)

# dtypes that jax keeps as they are (no 64-bit), so NumPy and jax leaves can be swapped.
DTYPES = [np.float32, np.int32, np.bool_, np.float16, np.uint8, np.int8, np.complex64]

np_arrays = st.sampled_from(DTYPES).flatmap(
    lambda dt: hnp.arrays(dt, hnp.array_shapes(min_dims=0, max_dims=2, min_side=0, max_side=3))
)
np_scalars = st.sampled_from(DTYPES).flatmap(lambda dt: hnp.from_dtype(np.dtype(dt))).map(
    lambda v: v if isinstance(v, np.generic) else np.asarray(v)[()]
)

dynamic_leaf = st.one_of(
    np_arrays,
    np_arrays.map(jnp.asarray),
    np_scalars,
    st.integers(-5, 5),
    st.floats(width=32),
    st.booleans(),
    st.none(),
)
dynamic_value = st.recursive(
    dynamic_leaf,
    lambda kids: st.one_of(
        st.tuples(kids, kids),
        st.lists(kids, max_size=2),
        st.dictionaries(st.sampled_from("abc"), kids, max_size=2),
    ),
    max_leaves=4,
)

static_atom = st.one_of(
    st.integers(),
    st.floats(),
    st.booleans(),
    st.text(max_size=3),
    st.none(),
    np_scalars,
    np_arrays,
)
static_value = st.recursive(
    static_atom,
    lambda kids: st.one_of(
        st.lists(kids, max_size=3),
        st.tuples(kids),
        st.frozensets(st.one_of(st.integers(), st.text(max_size=2)), max_size=3),
        st.dictionaries(st.text(max_size=2), kids, max_size=2),
    ),
    max_leaves=5,
)

field_names = st.from_regex(r"[a-z][a-z0-9_]{0,6}", fullmatch=True).filter(
    lambda n: not keyword.iskeyword(n)
)
# Five ways to declare a field: dynamic, and four ways to make it static.
KINDS = ("dynamic", "sf.static", "Static[T]", "metadata", "pytree_node")


@st.composite
def layouts(draw):
    """A list of (name, kind) with unique names, 1 to 5 fields."""
    names = draw(st.lists(field_names, min_size=1, max_size=5, unique=True))
    return [(n, draw(st.sampled_from(KINDS))) for n in names]


def make_class(layout):
    """Build and decorate a class with ``type()`` from a layout."""
    annotations, namespace = {}, {}
    for name, kind in layout:
        if kind == "dynamic":
            annotations[name] = jax.Array
        elif kind == "sf.static":
            annotations[name] = object
            namespace[name] = sf.static()
        elif kind == "Static[T]":
            annotations[name] = sf.Static[object]
        elif kind == "metadata":
            annotations[name] = object
            namespace[name] = dataclasses.field(metadata={"static": True})
        else:
            annotations[name] = object
            namespace[name] = dataclasses.field(metadata={"pytree_node": False})
    namespace["__annotations__"] = annotations
    namespace["__module__"] = __name__
    return sf.dataclass(type("Gen", (), namespace))


@st.composite
def instances(draw):
    """A freshly generated class and an instance of it with random values."""
    layout = draw(layouts())
    cls = make_class(layout)
    values = {
        name: draw(dynamic_value if kind == "dynamic" else static_value) for name, kind in layout
    }
    return cls, layout, values, cls(**values)


def equal_copy(value):
    """A distinct but equal value: NumPy leaves become jax leaves and vice versa."""

    def swap(leaf):
        if isinstance(leaf, jax.Array):
            return np.array(leaf)
        if isinstance(leaf, (np.ndarray, np.generic)):
            return jnp.asarray(leaf)
        return leaf

    return jax.tree_util.tree_map(swap, value)


# ---------------------------------------------------------------- properties


@SETTINGS
@given(instances())
def test_flatten_unflatten_round_trip(case):
    """Unflattening the flattened leaves gives an equal instance with the same static values."""
    cls, layout, _, obj = case
    leaves, treedef = jax.tree_util.tree_flatten(obj)
    back = jax.tree_util.tree_unflatten(treedef, leaves)
    assert type(back) is cls
    assert back == obj and obj == back
    assert hash(back) == hash(obj)
    assert jax.tree_util.tree_structure(back) == treedef
    for name, kind in layout:
        if kind != "dynamic":
            assert type(getattr(back, name)) is type(getattr(obj, name))
    assert sf.static_fields(cls) == tuple(n for n, k in layout if k != "dynamic")
    assert sf.dynamic_fields(cls) == tuple(n for n, k in layout if k == "dynamic")


@SETTINGS
@given(instances(), st.data())
def test_eq_implies_equal_hash(case, data):
    """For any two instances, ``a == b`` implies ``hash(a) == hash(b)``; equal copies are equal."""
    cls, layout, values, a = case
    other = {}
    all_same = data.draw(st.booleans(), label="all fields equal")  # half the cases: a == b
    for name, kind in layout:
        if all_same or data.draw(st.booleans(), label=f"keep {name}"):
            other[name] = equal_copy(values[name]) if kind == "dynamic" else copy.deepcopy(values[name])
        else:
            other[name] = data.draw(dynamic_value if kind == "dynamic" else static_value, label=name)
    b = cls(**other)
    assert (a == b) == (b == a)
    assert (a != b) == (not (a == b))
    if all_same:
        assert a == b  # so the implication below is exercised, not vacuous
    if a == b:
        assert hash(a) == hash(b)
        assert jax.tree_util.tree_structure(a) == jax.tree_util.tree_structure(b)


@SETTINGS
@given(instances())
def test_paths_name_the_dynamic_fields(case):
    """Every leaf path starts with ``GetAttrKey`` of a dynamic field, in declaration order."""
    cls, layout, values, obj = case
    dynamic = [n for n, k in layout if k == "dynamic"]
    flat = jax.tree_util.tree_flatten_with_path(obj)[0]
    firsts = [path[0] for path, _ in flat]
    assert all(isinstance(k, jax.tree_util.GetAttrKey) for k in firsts)
    names = [k.name for k in firsts]
    assert names == sorted(names, key=dynamic.index)
    expected = [n for n in dynamic if jax.tree_util.tree_leaves(values[n])]
    assert list(dict.fromkeys(names)) == expected
    for path, _ in flat:
        assert jax.tree_util.keystr(path).startswith("." + path[0].name)


@SETTINGS
@given(instances())
def test_copies_are_equal_with_equal_hash(case):
    """copy, deepcopy and tree_map(identity) give equal instances with equal hashes."""
    _, _, _, obj = case
    for other in (copy.copy(obj), copy.deepcopy(obj), jax.tree_util.tree_map(lambda v: v, obj)):
        assert other == obj and hash(other) == hash(obj)


@settings(max_examples=15, deadline=None)
@given(instances())
def test_compile_count_under_value_and_static_changes(case):
    """Under jax.jit, new leaf values never retrace; a changed static value always does."""
    cls, layout, values, obj = case
    traces = 0

    def f(o):
        nonlocal traces
        traces += 1
        return jax.tree_util.tree_leaves(o)

    jf = jax.jit(f)
    jf(obj)
    fresh = {n: equal_copy(v) if k == "dynamic" else v for (n, k), v in zip(layout, values.values())}
    jf(cls(**fresh))
    assert traces == 1
    statics = [n for n, k in layout if k != "dynamic"]
    if statics:
        jf(sf.replace(obj, **{statics[0]: ("changed", values[statics[0]])}))
        assert traces == 2


@SETTINGS
@given(instances())
def test_every_construction_path_agrees(case):
    """__init__, __init__ again, sf.replace, copy, deepcopy (pickle's protocol) and unflatten
    all give an instance equal to a fresh one, with the same static key and the same leaves."""
    cls, _, values, obj = case
    fresh = cls(**values)
    again = cls(**values)
    again.__init__(**values)
    made = [
        again,
        sf.replace(obj),
        obj.replace(),
        copy.copy(obj),
        copy.deepcopy(obj),
        jax.tree_util.tree_unflatten(*reversed(jax.tree_util.tree_flatten(obj))),
    ]
    treedef = jax.tree_util.tree_structure(fresh)
    for other in made:
        assert type(other) is cls
        assert other == fresh and hash(other) == hash(fresh)
        assert jax.tree_util.tree_structure(other) == treedef
        assert len(jax.tree_util.tree_leaves(other)) == len(jax.tree_util.tree_leaves(fresh))
