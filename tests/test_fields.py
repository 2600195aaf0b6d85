"""Marking fields: ``sf.field``, ``sf.static``, ``sf.Static[T]``, stdlib metadata, introspection."""

import dataclasses
from typing import Annotated

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec

import staticfield as sf


def _leaf_names(obj) -> list[str]:
    return [jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_flatten_with_path(obj)[0]]


# ---------------------------------------------------------------- four ways to mark static


def test_static_helper_marks_static():
    """``sf.static()`` makes a static field, kept out of the leaves."""

    @sf.dataclass
    class A:
        x: jax.Array
        n: int = sf.static()

    assert sf.static_fields(A) == ("n",)
    assert _leaf_names(A(jnp.ones(1), 3)) == [".x"]


def test_field_static_true_marks_static():
    """``sf.field(static=True)`` is the same as ``sf.static()``."""

    @sf.dataclass
    class A:
        n: int = sf.field(static=True)
        x: jax.Array = sf.field(static=False, default=0.0)

    assert sf.static_fields(A) == ("n",)
    assert sf.dynamic_fields(A) == ("x",)


def test_static_annotation_marks_static():
    """``x: sf.Static[int]`` marks a static field, with or without a default."""

    @sf.dataclass
    class A:
        n: sf.Static[int]
        x: jax.Array
        m: sf.Static[str] = "relu"

    assert sf.static_fields(A) == ("n", "m")
    a = A(2, jnp.ones(1))
    assert a.m == "relu" and _leaf_names(a) == [".x"]


def test_static_annotation_with_field_options():
    """``Static[T]`` combines with ``sf.field(...)`` options such as a converter."""

    @sf.dataclass
    class A:
        sizes: sf.Static[tuple] = sf.field(converter=tuple, default=())

    assert A([1, 2]).sizes == (1, 2)
    assert sf.static_fields(A) == ("sizes",)


def test_static_annotation_nested_in_annotated():
    """The Static marker is found inside another ``Annotated`` layer."""

    @sf.dataclass
    class A:
        n: Annotated[sf.Static[int], "doc"]

    assert sf.static_fields(A) == ("n",)


def test_static_is_an_annotated_alias():
    """``sf.Static[int]`` is ``Annotated[int, <marker>]`` so type checkers see ``int``."""
    from typing import get_args, get_origin

    ann = sf.Static[int]
    assert get_origin(ann) is Annotated
    assert get_args(ann)[0] is int


def test_stdlib_field_metadata_static_honoured():
    """``dataclasses.field(metadata={"static": True})`` is static (register_dataclass convention)."""

    @sf.dataclass
    class A:
        x: jax.Array
        n: int = dataclasses.field(metadata={"static": True}, default=1)
        y: jax.Array = dataclasses.field(metadata={"static": False}, default=0.0)

    assert sf.static_fields(A) == ("n",)
    assert sf.dynamic_fields(A) == ("x", "y")
    a = A(jnp.ones(1), [1, 2])  # type: ignore[arg-type]
    assert a.n == (1, 2)  # frozen like any static


def test_field_metadata_static_true_via_sf_field():
    """``sf.field(metadata={"static": True})`` is static too."""

    @sf.dataclass
    class A:
        n: int = sf.field(metadata={"static": True})

    assert sf.static_fields(A) == ("n",)


def test_plain_annotation_is_dynamic():
    """Fields without a marker are dynamic, whatever their type annotation says."""

    @sf.dataclass
    class A:
        n: int
        x: float = 1.0

    assert sf.dynamic_fields(A) == ("n", "x")
    assert sf.static_fields(A) == ()


# ---------------------------------------------------------------- field options


def test_default_and_default_factory():
    """``default`` and ``default_factory`` fill missing arguments; the factory runs per instance."""
    made = []

    def factory():
        made.append(1)
        return jnp.zeros(2)

    @sf.dataclass
    class A:
        x: jax.Array = sf.field(default_factory=factory)
        n: int = sf.static(default=3)
        tags: tuple = sf.static(default_factory=lambda: ["a"])

    a, b = A(), A()
    assert len(made) == 2 and a.n == 3
    assert a.tags == ("a",)  # factory output is frozen
    np.testing.assert_array_equal(a.x, [0.0, 0.0])


def test_default_factory_not_called_when_value_given():
    """The default factory is not called when the argument is passed."""

    def boom():
        raise AssertionError("factory called")

    @sf.dataclass
    class A:
        x: jax.Array = sf.field(default_factory=boom)

    assert A(1.0).x == 1.0


def test_converter_runs_on_construction():
    """``converter`` turns the argument into the stored value on construction."""

    @sf.dataclass
    class A:
        x: jax.Array = sf.field(converter=jnp.asarray)
        n: int = sf.static(converter=int)

    a = A([1.0, 2.0], "3")  # type: ignore[arg-type]
    assert isinstance(a.x, jax.Array) and a.n == 3 and type(a.n) is int


def test_converter_runs_before_checks_and_freezing():
    """The converter's output is what gets checked and frozen."""

    @sf.dataclass
    class A:
        x: jax.Array = sf.field(converter=lambda s: jnp.asarray(float(s)))
        names: tuple = sf.static(converter=lambda s: s.split(","))

    a = A("2.5", "a,b")  # type: ignore[arg-type]
    assert float(a.x) == 2.5
    assert a.names == ("a", "b")


def test_converter_runs_on_default():
    """The converter also runs on a default value, like attrs."""

    @sf.dataclass
    class A:
        n: int = sf.static(converter=int, default="4")

    assert A().n == 4


def test_converter_runs_in_replace_not_unflatten():
    """``sf.replace`` runs the converter on changed fields; unflatten and tree_map never do."""
    calls = []

    def conv(v):
        calls.append(v)
        return jnp.asarray(v)

    @sf.dataclass
    class A:
        x: jax.Array = sf.field(converter=conv)
        y: jax.Array = sf.field(default=0.0)

    a = A([1.0])
    assert len(calls) == 1
    b = sf.replace(a, x=[2.0])
    assert len(calls) == 2 and isinstance(b.x, jax.Array)
    sf.replace(a, y=1.0)
    assert len(calls) == 2  # unchanged fields are not converted again
    leaves, treedef = jax.tree_util.tree_flatten(a)
    jax.tree_util.tree_unflatten(treedef, leaves)
    jax.tree_util.tree_map(lambda v: v + 1, a)
    jax.jit(lambda o: o)(a)
    assert len(calls) == 2


def test_init_false_field():
    """``init=False`` leaves the field out of __init__; it takes its default."""

    @sf.dataclass
    class A:
        x: jax.Array
        count: int = sf.static(init=False, default=0)

    assert "count" not in A.__init__.__code__.co_varnames[: A.__init__.__code__.co_argcount]
    assert A(jnp.ones(1)).count == 0
    with pytest.raises(TypeError):
        A(jnp.ones(1), 1)  # type: ignore[call-arg]


def test_repr_false_field_hidden():
    """``repr=False`` hides a field from the instance repr."""

    @sf.dataclass
    class A:
        x: jax.Array
        secret: str = sf.static(repr=False, default="k")

    assert repr(A(jnp.ones(2))).endswith("A(x=f32[2])")


def test_kw_only_field():
    """``kw_only=True`` on one field makes only that field keyword-only."""

    @sf.dataclass
    class A:
        n: int = sf.static(kw_only=True)
        x: jax.Array = sf.field(default=0.0)

    a = A(1.0, n=2)
    assert a.n == 2 and a.x == 1.0
    with pytest.raises(TypeError):
        A(1.0, 2)  # type: ignore[misc]


def test_metadata_kept_and_visible_to_dataclasses():
    """User metadata is kept next to the static mark, readable through dataclasses.fields."""

    @sf.dataclass
    class A:
        x: jax.Array = sf.field(metadata={"units": "m"})
        n: int = sf.static(metadata={"help": "count"}, default=1)

    fx, fn = dataclasses.fields(A)
    assert fx.metadata["units"] == "m" and fx.metadata["static"] is False
    assert fn.metadata["help"] == "count" and fn.metadata["static"] is True


def test_sf_field_metadata_is_the_users_plus_the_static_key():
    """``sf.field``/``sf.static`` add exactly one key, "static" (register_dataclass's
    convention), whatever else they are given (converter, sharding)."""

    @sf.dataclass
    class A:
        a: jax.Array = sf.field(metadata={"baz": 9})
        b: jax.Array = sf.field(converter=jnp.asarray, sharding=PartitionSpec("data"), default=0.0)
        c: int = sf.static(metadata={"help": "count"}, default=1)
        d: int = sf.static(converter=int, default=2)
        e: sf.Static[int] = sf.field(default=3)

    assert [dict(f.metadata) for f in dataclasses.fields(A)] == [
        {"baz": 9, "static": False},
        {"static": False},
        {"help": "count", "static": True},
        {"static": True},
        {"static": True},
    ]


@pytest.mark.parametrize(("metadata", "static"), [
    ({"static": True}, True),  # jax.tree_util.register_dataclass
    ({"pytree_node": False}, True),  # flax.struct.field(pytree_node=False), penzai
    ({"pytree_node": True, "units": "m"}, False),
    ({"static": True, "converter": str}, True),  # equinox's eqx.field(static=True, converter=...)
], ids=["register_dataclass", "flax.struct", "flax.struct dynamic", "equinox"])
def test_stdlib_field_metadata_is_kept_exactly(metadata, static):
    """Metadata given through ``dataclasses.field`` reads back exactly as given, on the class
    and on a subclass, for each peer's convention."""
    given = dict(metadata)

    class A(sf.Struct):
        x: jax.Array
        n: int = dataclasses.field(default=1, metadata=metadata)

    class B(A):
        y: jax.Array = 0.0

    assert dict(dataclasses.fields(A)[1].metadata) == given
    assert dict(dataclasses.fields(B)[1].metadata) == given
    assert metadata == given  # the caller's dict is not changed either
    assert sf.is_static(dataclasses.fields(A)[1]) is static
    assert sf.static_fields(B) == (("n",) if static else ())


def test_static_annotation_keeps_stdlib_metadata_exactly():
    """``x: sf.Static[int] = dataclasses.field(metadata=...)`` is static, and its metadata is
    still exactly what the user gave."""

    class A(sf.Struct):
        n: sf.Static[int] = dataclasses.field(default=1, metadata={"units": "m"})
        k: sf.Static[int] = 2

    fn, fk = dataclasses.fields(A)
    assert dict(fn.metadata) == {"units": "m"} and dict(fk.metadata) == {}
    assert sf.is_static(fn) and sf.is_static(fk)
    assert sf.static_fields(A) == ("n", "k")


def test_metadata_dict_not_mutated():
    """Passing a metadata dict does not modify the caller's dict."""
    md = {"units": "m"}

    @sf.dataclass
    class A:
        n: int = sf.static(metadata=md)

    assert md == {"units": "m"}


def test_sharding_given_on_field_reaches_shardings():
    """``sharding=PartitionSpec(...)`` on a field is what ``sf.shardings`` gives that field."""
    spec = PartitionSpec(None)

    @sf.dataclass
    class A:
        w: jax.Array = sf.field(sharding=spec)
        b: jax.Array = sf.field(default=0.0)

    mesh = jax.sharding.Mesh(np.array(jax.devices()[:1]), ("data",))
    got = sf.shardings(A(jnp.ones(2)), mesh)
    assert got.w.spec == spec and got.b.spec == PartitionSpec()


# ---------------------------------------------------------------- introspection


@sf.dataclass
class Mixed:
    a: jax.Array
    n: int = sf.static(default=1)
    b: jax.Array = sf.field(default=0.0)
    s: sf.Static[str] = "x"
    c: dataclasses.InitVar[int] = 0

    def __post_init__(self, c):
        pass


def test_fields_on_class_and_instance():
    """``sf.fields`` gives the dataclasses.Field objects in order, on class or instance."""
    names = [f.name for f in sf.fields(Mixed)]
    assert names == ["a", "n", "b", "s"]  # InitVar is not a field
    inst = Mixed(jnp.ones(1))
    assert sf.fields(inst) == sf.fields(Mixed)
    assert all(isinstance(f, dataclasses.Field) for f in sf.fields(Mixed))


def test_static_and_dynamic_field_names_in_order():
    """``sf.static_fields``/``sf.dynamic_fields`` return names in declaration order."""
    inst = Mixed(jnp.ones(1))
    assert sf.static_fields(Mixed) == sf.static_fields(inst) == ("n", "s")
    assert sf.dynamic_fields(Mixed) == sf.dynamic_fields(inst) == ("a", "b")


def test_is_static_on_fields():
    """``sf.is_static`` tells static fields from dynamic ones."""
    flags = {f.name: sf.is_static(f) for f in sf.fields(Mixed)}
    assert flags == {"a": False, "n": True, "b": False, "s": True}


def test_is_static_on_plain_stdlib_field():
    """``sf.is_static`` reads the ``static`` metadata of any dataclasses.Field."""

    @dataclasses.dataclass
    class Plain:
        a: int = dataclasses.field(metadata={"static": True})
        b: int = 0

    fa, fb = dataclasses.fields(Plain)
    assert sf.is_static(fa) and not sf.is_static(fb)


def test_introspection_refuses_undecorated():
    """The introspection functions refuse a class that is not an @sf.dataclass, naming it."""

    class NotOne:
        pass

    for fn in (sf.fields, sf.static_fields, sf.dynamic_fields):
        with pytest.raises(TypeError, match=r"NotOne.*@sf\.dataclass"):
            fn(NotOne)
        with pytest.raises(TypeError, match=r"NotOne.*@sf\.dataclass"):
            fn(NotOne())


def test_introspection_on_undecorated_subclass():
    """Introspecting an undecorated subclass says to decorate it."""

    class Sub(Mixed):
        pass

    with pytest.raises(TypeError, match=r"Sub.*Mixed.*@sf\.dataclass"):
        sf.fields(Sub)


def test_is_static_refuses_non_field():
    """``sf.is_static`` on something that is not a Field is a TypeError naming its type."""
    with pytest.raises(TypeError, match=r"dataclasses\.Field.*str"):
        sf.is_static("n")  # type: ignore[arg-type]


def test_static_defaults_are_frozen_not_refused():
    """A list/dict default of a static field is frozen (tuple/FrozenDict), as a passed value is."""

    @sf.dataclass
    class Cfg:
        sizes: tuple = sf.static(default=[1, 2])
        opts: sf.Static[dict] = {"a": [1]}

    c = Cfg()
    assert c.sizes == (1, 2) and type(c.sizes) is tuple
    assert c.opts == {"a": (1,)} and isinstance(c.opts, sf.FrozenDict)


def test_jax_array_default_is_allowed_and_shared_safely():
    """A jax.Array default works (it is immutable): each instance gets that array."""

    @sf.dataclass
    class Bias:
        b: jax.Array = jnp.zeros(2)

    assert Bias().b is Bias().b
    np.testing.assert_array_equal(Bias().b, np.zeros(2))


def test_mutable_numpy_default_error_names_class_and_field():
    """A NumPy array default of a dynamic field is refused, naming the class and the field."""
    with pytest.raises(ValueError, match=r"Holder: mutable default .*ndarray.* for field y .*default_factory"):

        @sf.dataclass
        class Holder:
            y: np.ndarray = np.zeros(2)
