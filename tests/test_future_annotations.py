"""String annotations (``from __future__ import annotations``), ``Static[int]`` included."""

from __future__ import annotations

import dataclasses
from typing import ClassVar, Generic, TypeVar

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import staticfield as sf
from staticfield import Static

T = TypeVar("T")


@sf.dataclass
class Layer:
    w: jax.Array
    n: sf.Static[int]
    act: Static[str] = "relu"
    b: jax.Array = sf.field(default=0.0)
    scale: float = sf.static(default=1.0)
    count: ClassVar[int] = 0


def test_annotations_are_strings_here():
    """This module really stores annotations as strings."""
    assert Layer.__annotations__["n"] == "sf.Static[int]"
    assert Layer.__annotations__["act"] == "Static[str]"


def test_string_static_annotations_are_static():
    """``sf.Static[int]`` and ``Static[str]`` written as strings mark static fields."""
    assert sf.static_fields(Layer) == ("n", "act", "scale")
    assert sf.dynamic_fields(Layer) == ("w", "b")


def test_classvar_is_not_a_field():
    """A string ``ClassVar[int]`` stays a class variable, not a field."""
    assert "count" not in [f.name for f in sf.fields(Layer)]


def test_string_annotated_instance_behaves():
    """Construction, freezing, keys and leaves work as with object annotations."""
    layer = Layer(jnp.ones(2), 3)
    assert layer.act == "relu"
    keys = [jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_flatten_with_path(layer)[0]]
    assert keys == [".w", ".b"]
    with pytest.raises(TypeError, match=r"Layer\.n: a jax\.Array"):
        Layer(jnp.ones(2), jnp.ones(1))


def test_string_static_under_jit(counted_jit):
    """A string-annotated static field is part of the jit cache key."""
    f = counted_jit(lambda m: m.w * m.n)
    f(Layer(jnp.ones(2), 2))
    f(Layer(jnp.zeros(2), 2))
    assert f.traces == 1
    np.testing.assert_array_equal(f(Layer(jnp.ones(2), 3)), [3.0, 3.0])
    assert f.traces == 2


def test_local_class_with_unresolvable_annotation():
    """``Static[T]`` where T is local to a function (not resolvable) is still static."""

    class Local:
        pass

    @sf.dataclass
    class UsesLocal:
        x: jax.Array
        tag: Static[Local] = None  # type: ignore[assignment]
        other: sf.Static[Local] = None  # type: ignore[assignment]
        dyn: Local | None = None

    assert sf.static_fields(UsesLocal) == ("tag", "other")
    assert sf.dynamic_fields(UsesLocal) == ("x", "dyn")


def test_nested_static_in_string():
    """``Static[...]`` with a nested generic written as a string is static."""

    @sf.dataclass
    class Nested:
        sizes: Static[tuple[int, ...]] = (1,)
        table: sf.Static[dict[str, int]] = sf.field(default_factory=dict)

    assert sf.static_fields(Nested) == ("sizes", "table")
    assert isinstance(Nested(table={"a": 1}).table, sf.FrozenDict)


def test_unrelated_static_like_names_not_static():
    """Names that merely contain ``Static`` are not mistaken for the marker."""

    class NotStatic:
        pass

    class MyStatic(Generic[T]):
        pass

    @sf.dataclass(check=False)
    class Look:
        a: NotStatic | None = None
        b: list[NotStatic] | None = None
        c: MyStatic[int] | None = None

    assert sf.static_fields(Look) == ()


def test_initvar_and_kw_only_as_strings():
    """String ``InitVar`` and ``KW_ONLY`` behave as with object annotations."""

    @sf.dataclass
    class WithInitVar:
        x: jax.Array
        factor: dataclasses.InitVar[float]
        _: dataclasses.KW_ONLY
        n: Static[int] = 1
        y: jax.Array = sf.field(init=False)

        def __post_init__(self, factor):
            self.y = self.x * factor

    obj = WithInitVar(jnp.ones(2), 2.0, n=3)
    np.testing.assert_array_equal(obj.y, [2.0, 2.0])
    assert sf.static_fields(WithInitVar) == ("n",)
    assert [f.name for f in sf.fields(WithInitVar)] == ["x", "n", "y"]


def test_string_annotations_with_inheritance():
    """A decorated subclass keeps string-annotated static marks of its base."""

    @sf.dataclass
    class Deeper(Layer):
        depth: Static[int] = 2

    assert sf.static_fields(Deeper) == ("n", "act", "scale", "depth")
    d = Deeper(jnp.ones(1), 1)
    assert d.depth == 2 and jax.tree_util.tree_leaves(d)[0].shape == (1,)


def test_string_annotations_with_custom_init():
    """A custom __init__ works with string-annotated static fields."""

    @sf.dataclass
    class Lin:
        w: jax.Array
        size: Static[int]

        def __init__(self, size):
            self.size = size
            self.w = jnp.zeros(size)

    lin = Lin(3)
    assert sf.static_fields(Lin) == ("size",) and lin.w.shape == (3,)


def test_self_referencing_annotation():
    """An annotation naming the class itself (a tree of nodes) resolves and is dynamic."""

    @sf.dataclass
    class Node:
        value: jax.Array
        child: Node | None = None

    tree = Node(jnp.ones(1), Node(jnp.zeros(1)))
    assert len(jax.tree_util.tree_leaves(tree)) == 2
    assert sf.dynamic_fields(Node) == ("value", "child")
