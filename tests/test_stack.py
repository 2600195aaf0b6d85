"""sf.stack / sf.unstack, and stacked instances under jax.lax.scan and jax.vmap."""

from __future__ import annotations

import pathlib
import re
import sys
import textwrap
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import staticfield as sf

DOCS = pathlib.Path(__file__).resolve().parent.parent / "docs"


@sf.dataclass
class Params:
    w: jax.Array
    b: jax.Array
    a: int = sf.static(default=2)


@sf.dataclass
class Layer:
    w: jax.Array
    act: str = sf.static(default="relu")


@sf.dataclass
class Model:
    layers: list
    extras: dict
    config: tuple = sf.static(default=("x", 1))


def params(i: float, **kw) -> Params:
    return Params(w=jnp.full((3,), i, jnp.float32), b=jnp.float32(i), **kw)


def model(i: float, act: str = "relu") -> Model:
    return Model(
        layers=[Layer(jnp.full((2, 2), i)), Layer(jnp.full((3,), i), act=act)],
        extras={"scale": jnp.float32(i), "pair": (jnp.zeros(1), jnp.ones(2) * i)},
    )


# --- stack ---------------------------------------------------------------------------


def test_stack_adds_a_leading_axis_and_keeps_class_and_statics():
    """Every dynamic leaf gains a leading axis; the result is the same class with its static values."""
    s = sf.stack([params(0, a=7), params(1, a=7), params(2, a=7)])
    assert type(s) is Params
    assert s.a == 7 and sf.static_fields(s) == ("a",)
    assert s.w.shape == (3, 3) and s.b.shape == (3,)
    np.testing.assert_array_equal(s.w[:, 0], [0, 1, 2])
    np.testing.assert_array_equal(s.b, [0, 1, 2])


def test_stack_does_not_run_init_or_converters():
    """The result is built by tree_unflatten: no __init__, no converter, frozen statics intact."""
    calls = []

    @sf.dataclass
    class Scaled:
        x: jax.Array = sf.field(converter=lambda v: jnp.asarray(v) * 10)
        names: list = sf.static(default_factory=lambda: ["a", "b"])

        def __post_init__(self):
            calls.append(1)

    items = [Scaled(x=1.0), Scaled(x=2.0)]
    calls.clear()
    s = sf.stack(items)
    assert calls == []
    np.testing.assert_array_equal(s.x, [10.0, 20.0])  # converted once, at construction
    assert s.names == ("a", "b")
    with pytest.raises(Exception, match="Scaled.x"):
        s.x = 1  # still frozen


def test_stack_nested_instances_dicts_and_tuples():
    """Nested instances, dict and tuple fields are stacked leaf by leaf."""
    s = sf.stack([model(0), model(1)])
    assert type(s.layers[0]) is Layer and s.layers[1].act == "relu"
    assert s.layers[0].w.shape == (2, 2, 2)
    assert s.layers[1].w.shape == (2, 3)
    assert s.extras["scale"].shape == (2,)
    assert s.extras["pair"][1].shape == (2, 2)
    assert s.config == ("x", 1)


def test_stack_accepts_any_iterable():
    """A generator or tuple of instances works like a list."""
    s = sf.stack(params(i) for i in range(4))
    assert s.w.shape == (4, 3)
    assert sf.stack((params(0),)).w.shape == (1, 3)


def test_stack_numpy_and_python_scalar_leaves_become_jax_arrays():
    """Host leaves (NumPy arrays, Python scalars) are stacked into jax.Arrays with JAX's dtypes."""
    items = [Params(w=np.arange(3, dtype=np.float32) + i, b=float(i)) for i in range(3)]
    s = sf.stack(items)
    assert isinstance(s.w, jax.Array) and isinstance(s.b, jax.Array)
    assert s.w.dtype == jnp.float32 and s.b.dtype == jnp.float32
    np.testing.assert_array_equal(s.w[2], [2, 3, 4])


def test_stack_python_scalar_matches_its_jax_default_dtype():
    """A Python float stacks with a float32 array leaf (float32 is JAX's default float)."""
    s = sf.stack([Params(w=jnp.zeros(3), b=0.5), Params(w=jnp.zeros(3), b=jnp.float32(1.5))])
    np.testing.assert_array_equal(s.b, [0.5, 1.5])


def test_stack_inside_jit():
    """sf.stack works on tracers inside jax.jit."""

    @jax.jit
    def f(x, y):
        return sf.stack([x, y])

    s = f(params(1), params(2))
    assert type(s) is Params and s.w.shape == (2, 3)


def test_stack_of_one_instance():
    """A list of one instance gives a leading axis of length 1."""
    s = sf.stack([params(5)])
    assert s.w.shape == (1, 3)
    assert sf.unstack(s)[0] == params(5)


# --- stack errors --------------------------------------------------------------------


def test_stack_differing_static_names_class_field_values_positions():
    """A differing static value is a ValueError naming Params.a, both values and both positions."""
    with pytest.raises(ValueError, match=r"Params\.a differs: 2 at position 0 but 3 at position 2"):
        sf.stack([params(0), params(1), params(2, a=3)])


def test_stack_differing_static_type_strict():
    """1 and 1.0 are different static values, so they cannot be stacked together."""
    with pytest.raises(ValueError, match=r"Params\.a differs: 1 at position 0 but 1\.0 at position 1"):
        sf.stack([params(0, a=1), params(1, a=1.0)])


def test_stack_differing_nested_static_names_the_path():
    """A static value inside a nested instance in a list is named by its full path."""
    with pytest.raises(
        ValueError,
        match=r"Model\.layers\[1\]\.act differs: 'relu' at position 0 but 'tanh' at position 3",
    ):
        sf.stack([model(0), model(1), model(2), model(3, act="tanh")])


def test_stack_differing_leaf_shape_names_the_field():
    """Leaves of different shapes are a ValueError naming the leaf path, both shapes and positions."""
    odd = Params(w=jnp.zeros(4), b=jnp.float32(0))
    with pytest.raises(
        ValueError, match=r"leaf Params\.w is f32\[3\] at position 0 but f32\[4\] at position 1"
    ):
        sf.stack([params(0), odd])


def test_stack_differing_leaf_dtype_names_the_field():
    """Leaves of different dtypes are a ValueError naming the leaf path, both dtypes and positions."""
    odd = Params(w=jnp.zeros(3, jnp.int32), b=jnp.float32(0))
    with pytest.raises(
        ValueError, match=r"leaf Params\.w is f32\[3\] at position 0 but i32\[3\] at position 2"
    ):
        sf.stack([params(0), params(1), odd])


def test_stack_f32_and_f64_leaves_is_a_value_error():
    """An f32 leaf and an f64 (NumPy) leaf are different dtypes, even with x64 off: a
    ValueError naming the leaf, never a silent cast to f32."""
    odd = Params(w=np.zeros(3, np.float64), b=jnp.float32(0))
    with pytest.raises(ValueError, match=r"leaf Params\.w is f32\[3\] at position 0 but f64\[3\] at position 1"):
        sf.stack([params(0), odd])


def test_stack_differing_nested_leaf_names_the_path():
    """A shape mismatch deep inside a dict field names the whole path."""
    odd = model(1)
    odd = sf.replace(odd, extras={"scale": jnp.float32(1), "pair": (jnp.zeros(1), jnp.ones(5))})
    with pytest.raises(ValueError, match=r"leaf Model\.extras\['pair'\]\[1\] is f32\[2\] at position 0"):
        sf.stack([model(0), odd])


def test_stack_python_int_and_float_leaves_differ():
    """A Python int (int32) and a Python float (float32) in one leaf position do not stack."""
    with pytest.raises(ValueError, match=r"leaf Params\.b is the Python int 1 at position 0 but the Python float"):
        sf.stack([Params(w=jnp.zeros(3), b=1), Params(w=jnp.zeros(3), b=2.0)])


def test_stack_differing_list_length_names_the_field():
    """Different list lengths in a field are a ValueError naming Model.layers and the positions."""
    short = Model(layers=[Layer(jnp.zeros((2, 2)))], extras=model(0).extras)
    with pytest.raises(
        ValueError,
        match=r"Model\.layers is a list of length 2 at position 0 but a list of length 1 at position 1",
    ):
        sf.stack([model(0), short])


def test_stack_differing_dict_keys_names_the_field():
    """Different dict keys in a field are a ValueError naming Model.extras."""
    other = sf.replace(model(1), extras={"scale": jnp.float32(1)})
    with pytest.raises(ValueError, match=r"Model\.extras is a dict with keys 'pair', 'scale' at position 0"):
        sf.stack([model(0), other])


def test_stack_none_versus_array_names_the_field():
    """None in one instance and an array in another is a ValueError naming Params.b."""
    with pytest.raises(ValueError, match=r"Params\.b is f32\[\] at position 0 but None at position 1"):
        sf.stack([params(0), Params(w=jnp.zeros(3), b=None)])


def test_stack_different_classes_names_both():
    """Instances of different classes are a ValueError naming both classes."""

    @sf.dataclass
    class Other:
        w: jax.Array
        b: jax.Array
        a: int = sf.static(default=2)

    with pytest.raises(ValueError, match=r"Params is a Params at position 0 but a .*Other at position 1"):
        sf.stack([params(0), Other(jnp.zeros(3), jnp.float32(0))])


def test_stack_different_nested_classes_name_the_path():
    """A nested field holding another class is named by its path."""
    other = model(1)
    other = sf.replace(other, layers=[other.layers[0], {"w": jnp.zeros(3)}])
    with pytest.raises(ValueError, match=r"Model\.layers\[1\] is a Layer at position 0 but a dict"):
        sf.stack([model(0), other])


def test_stack_empty_list():
    """An empty list is a ValueError."""
    with pytest.raises(ValueError, match="sf.stack got an empty list"):
        sf.stack([])


def test_stack_non_instance_is_type_error():
    """A non-instance in the list is a TypeError naming its position and type."""
    with pytest.raises(TypeError, match="position 1 has type dict, not an @sf.dataclass"):
        sf.stack([params(0), {"w": jnp.zeros(3)}])


def test_stack_single_instance_is_type_error():
    """Passing one instance instead of a list is a TypeError naming the class."""
    with pytest.raises(TypeError, match="got a single Params"):
        sf.stack(params(0))


def test_stack_non_iterable_is_type_error():
    """A non-iterable argument is a TypeError."""
    with pytest.raises(TypeError, match="expects a list of @sf.dataclass instances, got int"):
        sf.stack(3)


def test_stack_undecorated_subclass_is_type_error():
    """An undecorated subclass in the list is a TypeError that names it and says to decorate it."""

    class Sub(Params):
        pass

    sub = object.__new__(Sub)
    sub.__dict__.update(params(1).__dict__)
    with pytest.raises(TypeError, match=r"Sub subclasses the staticfield dataclass Params"):
        sf.stack([params(0), sub])


def test_stack_non_array_leaf_names_the_field():
    """A leaf that is not an array (check=False class) cannot be stacked; the error names the field."""

    @sf.dataclass(check=False)
    class Loose:
        tag: object

    with pytest.raises(TypeError, match=r"leaf \S*Loose\.tag holds a str"):
        sf.stack([Loose("a"), Loose("b")])


# --- unstack -------------------------------------------------------------------------


def test_unstack_is_the_inverse_of_stack():
    """unstack(stack(xs)) == xs, for nested instances too."""
    items = [model(i) for i in range(4)]
    back = sf.unstack(sf.stack(items))
    assert len(back) == 4
    assert all(type(b) is Model for b in back)
    assert back == items


def test_stack_of_unstack_is_identity():
    """stack(unstack(s)) == s."""
    s = sf.stack([params(i) for i in range(3)])
    assert sf.stack(sf.unstack(s)) == s


def test_unstack_zero_length_axis():
    """A leading axis of length 0 unstacks to an empty list."""
    empty = Params(w=jnp.zeros((0, 3)), b=jnp.zeros((0,)))
    assert sf.unstack(empty) == []


def test_unstack_inside_jit():
    """sf.unstack works on tracers inside jax.jit."""

    @jax.jit
    def f(s):
        a, b = sf.unstack(s)
        return sf.replace(a, w=a.w + b.w)

    out = f(sf.stack([params(1), params(2)]))
    np.testing.assert_array_equal(out.w, [3, 3, 3])


def test_unstack_scalar_leaf_names_the_field():
    """A leaf with no leading axis is a ValueError naming Params.b."""
    with pytest.raises(ValueError, match=r"sf.unstack: leaf Params\.b is f32\[\], a scalar with no leading axis"):
        sf.unstack(Params(w=jnp.zeros((2, 3)), b=jnp.float32(0)))


def test_unstack_mismatched_leading_axis_names_the_field():
    """Leaves with different leading lengths are a ValueError naming the odd field and both lengths."""
    with pytest.raises(
        ValueError, match=r"leaf Params\.b is f32\[3\], whose leading axis has length 3, but earlier leaves have 2"
    ):
        sf.unstack(Params(w=jnp.zeros((2, 3)), b=jnp.zeros(3)))


def test_unstack_no_leaves_names_the_class():
    """An instance without dynamic leaves cannot be unstacked; the error names the class."""

    @sf.dataclass
    class OnlyStatic:
        n: int = sf.static(default=1)

    with pytest.raises(ValueError, match=r"\S*OnlyStatic has no dynamic leaves"):
        sf.unstack(OnlyStatic())


def test_unstack_non_instance_is_type_error():
    """A non-instance is a TypeError naming sf.unstack and the type."""
    with pytest.raises(TypeError, match="sf.unstack expects an @sf.dataclass class or instance, got list"):
        sf.unstack([params(0)])


@settings(max_examples=25, deadline=None)
@given(
    n=st.integers(1, 5),
    shape=st.lists(st.integers(0, 3), max_size=2).map(tuple),
    a=st.integers(-3, 3),
)
def test_stack_unstack_round_trip_property(n, shape, a):
    """For any count and leaf shape, unstack(stack(xs)) == xs and stack(unstack(s)) == s."""
    rng = np.random.default_rng(n)
    items = [
        Params(w=rng.normal(size=shape).astype(np.float32), b=np.float32(i), a=a) for i in range(n)
    ]
    s = sf.stack(items)
    assert s.w.shape == (n, *shape)
    assert sf.unstack(s) == items
    assert sf.stack(sf.unstack(s)) == s


# --- scan and vmap -------------------------------------------------------------------


def test_scan_hands_the_body_one_instance_per_step():
    """lax.scan over a stacked instance gives the body one Params (unstacked shapes, statics) per step."""
    seen = []

    def body(carry, p):
        seen.append((type(p), p.w.shape, p.b.shape, p.a))
        return carry + p.a * jnp.sum(p.w) + p.b, p.b

    s = sf.stack([params(i, a=3) for i in range(4)])
    total, bs = jax.lax.scan(body, jnp.float32(0), s)
    assert seen == [(Params, (3,), (), 3)]  # traced once, one instance per step
    assert float(total) == sum(3 * 3 * i + i for i in range(4))
    np.testing.assert_array_equal(bs, [0, 1, 2, 3])


def test_scan_carry_is_an_instance():
    """An instance works as the scan carry, and sf.replace builds the next one."""

    def body(p, x):
        return sf.replace(p, w=p.w + x), p.b

    final, _ = jax.lax.scan(body, params(0, a=5), jnp.ones((4, 3)))
    assert type(final) is Params and final.a == 5
    np.testing.assert_array_equal(final.w, [4, 4, 4])


def test_scan_can_return_stacked_instances_as_ys():
    """Instances returned as ys come out stacked, like sf.stack of the per-step instances."""

    def body(c, x):
        return c, sf.replace(params(0), b=x)

    _, ys = jax.lax.scan(body, 0, jnp.arange(3.0))
    assert ys == sf.stack([sf.replace(params(0), b=jnp.float32(i)) for i in range(3)])


@pytest.mark.max_compiles(3)  # jax.jit twice (a new static), sf.jit once
def test_jitted_scan_over_stack_compiles_once_across_values():
    """New stacked values with equal shapes and statics reuse the compiled scan; a new static recompiles."""
    traces = 0

    def run(s):
        nonlocal traces
        traces += 1
        return jax.lax.scan(lambda c, p: (c + p.a * p.b, None), jnp.float32(0), s)[0]

    f = jax.jit(run)
    for k in range(3):
        assert float(f(sf.stack([params(i + k) for i in range(4)]))) == 2 * sum(i + k for i in range(4))
    assert traces == 1
    f(sf.stack([params(i, a=4) for i in range(4)]))
    assert traces == 2
    if hasattr(sf, "jit"):
        g = sf.jit(run)
        for k in range(3):
            g(sf.stack([params(i + k) for i in range(4)]))
        assert g.compile_count == 1


def test_vmap_over_stacked_instance():
    """jax.vmap with the default in_axes maps every leaf and sees one instance with its statics."""
    s = sf.stack([params(i, a=3) for i in range(4)])
    out = jax.vmap(lambda p: p.a * p.w.sum() + p.b)(s)
    np.testing.assert_array_equal(out, [3 * 3 * i + i for i in range(4)])


def test_vmap_in_axes_given_as_an_instance():
    """in_axes as an instance (int or None per dynamic field) maps some fields and broadcasts others."""
    s = sf.replace(sf.stack([params(i) for i in range(4)]), b=jnp.float32(10))
    axes = Params(w=0, b=None)
    out = jax.vmap(lambda p: p.w.sum() + p.b, in_axes=(axes,))(s)
    np.testing.assert_array_equal(out, [3 * i + 10 for i in range(4)])


# JAX 0.12.1 matches an in_axes prefix by structure alone (node types and children), no
# longer by each node's metadata: plain register_dataclass classes behave the same.
IN_AXES_BY_STRUCTURE = tuple(int(p) for p in jax.__version__.split(".")[:3]) >= (0, 12, 1)


def test_vmap_in_axes_instance_with_other_statics_follows_jax():
    """An in_axes instance with other static values: before JAX 0.12.1 it does not match the
    argument's tree (JAX's ValueError); from 0.12.1 JAX matches by structure alone, and the
    function sees the argument's statics, never the in_axes instance's."""
    s = sf.stack([params(i) for i in range(4)])
    mapped = jax.vmap(lambda p: p.w * p.a, in_axes=(Params(w=0, b=0, a=99),))
    if not IN_AXES_BY_STRUCTURE:
        with pytest.raises(ValueError, match="in_axes"):
            mapped(s)
        return
    np.testing.assert_array_equal(mapped(s), [[2.0 * i] * 3 for i in range(4)])


def test_vmap_in_axes_prefix_over_a_dict_field():
    """An int in_axes for a dict field applies to every leaf under it (JAX's tree prefix rule)."""
    s = sf.stack([model(i) for i in range(3)])
    axes = Model(layers=0, extras=None)
    shared = sf.replace(s, extras={"scale": jnp.float32(2), "pair": (jnp.zeros(1), jnp.ones(2))})
    out = jax.vmap(lambda m: m.layers[0].w.sum() * m.extras["scale"], in_axes=(axes,))(shared)
    np.testing.assert_array_equal(out, [2 * 4 * i for i in range(3)])


def test_vmap_in_axes_built_with_tree_map_for_custom_init():
    """For a class whose __init__ does not take ints/None, axes built by tree_map_with_path work."""

    @sf.dataclass
    class Net:
        w: jax.Array
        b: jax.Array

        def __init__(self, n_in, key):
            self.w = jax.random.normal(key, (n_in,))
            self.b = jnp.zeros(())

    s = sf.stack([Net(3, jax.random.key(i)) for i in range(4)])
    s = sf.replace(s, b=jnp.float32(1))
    axes = jax.tree_util.tree_map_with_path(lambda path, _: None if path[0].name == "b" else 0, s)
    assert type(axes) is Net and axes.w == 0 and axes.b is None
    out = jax.vmap(lambda n: n.w.sum() + n.b, in_axes=(axes,))(s)
    np.testing.assert_allclose(out, s.w.sum(axis=1) + 1, rtol=1e-6)


def test_vmap_out_axes_given_as_an_instance():
    """out_axes as an instance returns a mapped field and an unmapped one."""
    s = sf.stack([params(i) for i in range(4)])
    out = jax.vmap(
        lambda p: sf.replace(p, b=jnp.float32(7)), in_axes=(0,), out_axes=Params(w=1, b=None)
    )(s)
    assert out.w.shape == (3, 4) and out.b.shape == ()


# --- docs ----------------------------------------------------------------------------


def python_blocks(page: pathlib.Path) -> list[str]:
    """The page's ```python blocks (plain ones, without a title), dedented, in order."""
    text = page.read_text()
    pattern = re.compile(r"^([ \t]*)```python[ \t]*\n(.*?)^\1```[ \t]*$", re.M | re.S)
    return [textwrap.dedent(m.group(2)) for m in pattern.finditer(text)]


def test_docs_scanning_page_runs():
    """Every python block of docs/scanning.md runs, in order, in one namespace."""
    blocks = python_blocks(DOCS / "scanning.md")
    assert len(blocks) >= 6
    module = types.ModuleType("docs_scanning")
    sys.modules[module.__name__] = module  # dataclasses look up the defining module
    try:
        for i, block in enumerate(blocks):
            code = compile(block, f"docs/scanning.md block {i}", "exec", dont_inherit=True)
            exec(code, module.__dict__)  # noqa: S102
    finally:
        del sys.modules[module.__name__]
