"""``sf.Struct``, inherited ``__init__``, ``__check_init__``, and the conventions of peer libraries."""

import dataclasses

import jax
import jax.numpy as jnp
import pytest

import staticfield as sf


# ---------------------------------------------------------------- sf.Struct


class Params(sf.Struct):
    w: jax.Array
    depth: sf.Static[int] = 2


def test_struct_subclasses_are_decorated_automatically():
    """A subclass of sf.Struct is an @sf.dataclass: frozen, a keyed pytree, static key."""
    p = Params(jnp.ones(2), 3)
    assert sf.static_fields(Params) == ("depth",)
    assert jax.tree_util.keystr(jax.tree_util.tree_flatten_with_path(p)[0][0][0]) == ".w"
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.w = 1
    assert p.replace(depth=4).depth == 4 and sf.replace(p, depth=5).depth == 5


def test_struct_subclass_of_a_subclass_is_decorated_too():
    """Every level of a Struct hierarchy is decorated, so none can be forgotten."""

    class More(Params):
        b: jax.Array = 0.0

    m = More(jnp.ones(2), 2, jnp.zeros(3))
    assert sf.fields(More)[-1].name == "b"
    assert len(jax.tree_util.tree_leaves(m)) == 2


def test_struct_class_keywords_are_options():
    """Class keywords pass options: kw_only, eq, check."""

    class K(sf.Struct, kw_only=True):
        a: jax.Array
        b: sf.Static[int] = 1

    with pytest.raises(TypeError):
        K(1.0)
    assert K(a=1.0).b == 1

    class Unchecked(sf.Struct, check=False):
        a: object

    assert Unchecked("text").a == "text"

    with pytest.raises(TypeError, match=r"Bad: @sf.dataclass\(order=True\) is not supported"):

        class Bad(sf.Struct, order=True):
            a: jax.Array


def test_struct_itself_cannot_be_constructed():
    """sf.Struct() is a TypeError that says to subclass it."""
    with pytest.raises(TypeError, match="sf.Struct is a base class: subclass it"):
        sf.Struct()


# ---------------------------------------------------------------- inherited __init__, __check_init__


def test_custom_init_is_inherited_by_a_subclass_without_one():
    """A decorated subclass with no __init__ of its own uses its base's user-written one."""

    @sf.dataclass
    class Linear:
        w: jax.Array
        n_in: sf.Static[int]

        def __init__(self, n_in, n_out):
            self.w = jnp.zeros((n_in, n_out))
            self.n_in = n_in

    @sf.dataclass
    class Tagged(Linear):
        tag: sf.Static[str] = "t"

    t = Tagged(2, 3)
    assert t.w.shape == (2, 3) and t.n_in == 2 and t.tag == "t"

    @sf.dataclass
    class Untagged(Linear):
        extra: jax.Array

    with pytest.raises(TypeError, match=r"Untagged.__init__ returned without setting 'extra'"):
        Untagged(2, 3)


def test_check_init_runs_in_mro_order_after_construction_and_replace():
    """Each class's own __check_init__ runs, the class first, after __init__ and sf.replace."""
    calls = []

    @sf.dataclass
    class Base:
        x: jax.Array

        def __check_init__(self):
            calls.append("Base")
            if jnp.any(self.x < 0):
                raise ValueError("x must be non-negative")

    @sf.dataclass
    class Child(Base):
        n: sf.Static[int] = 1

        def __check_init__(self):
            calls.append("Child")

    c = Child(jnp.ones(2))
    assert calls == ["Child", "Base"]
    calls.clear()
    with pytest.raises(ValueError, match="non-negative"):
        c.replace(x=-jnp.ones(2))
    assert calls == ["Child", "Base"]


def test_check_init_never_runs_on_unflatten():
    """tree_map, vmap and placeholder leaves rebuild instances without __check_init__."""
    calls = []

    @sf.dataclass
    class Pos:
        x: jax.Array

        def __check_init__(self):
            calls.append(1)
            if self.x.ndim != 1:
                raise ValueError("x must be 1-d")

    p = Pos(jnp.ones(3))
    calls.clear()
    jax.tree_util.tree_map(lambda a: None, p)
    batched = jax.tree_util.tree_map(lambda a: jnp.stack([a, a]), p)  # x is 2-d here
    jax.vmap(lambda q: q.x.sum())(batched)
    jax.jit(lambda q: q)(p)
    assert calls == []


def test_check_init_first_error_stops_the_rest():
    """The first __check_init__ that raises stops the others."""
    calls = []

    @sf.dataclass
    class A:
        x: jax.Array

        def __check_init__(self):
            calls.append("A")

    @sf.dataclass
    class B(A):
        def __check_init__(self):
            calls.append("B")
            raise ValueError("B says no")

    with pytest.raises(ValueError, match="B says no"):
        B(1.0)
    assert calls == ["B"]


# ---------------------------------------------------------------- peer conventions


def test_pytree_node_false_metadata_is_static():
    """flax.struct's field(pytree_node=False) convention marks a field static."""

    @sf.dataclass
    class P:
        w: jax.Array
        act: str = dataclasses.field(default="relu", metadata={"pytree_node": False})

    assert sf.static_fields(P) == ("act",)
    assert jax.tree_util.tree_leaves(P(1.0)) == [1.0]


def test_sf_dataclass_over_a_stdlib_dataclass_keeps_static_marks_and_eq():
    """Stacked on @dataclasses.dataclass, static marks survive and == returns a bool."""

    @sf.dataclass
    @dataclasses.dataclass
    class P:
        w: jax.Array
        n: int = dataclasses.field(default=2, metadata={"static": True})
        act: str = dataclasses.field(default="relu", metadata={"pytree_node": False})

    assert sf.static_fields(P) == ("n", "act")
    a, b = P(jnp.ones(3)), P(jnp.ones(3))
    assert (a == b) is True
    assert hash(a) == hash(b)
    assert P(jnp.ones(3), 3) != a
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.w = 1


def test_replace_stub_on_an_undecorated_base_does_not_win():
    """A base with a stub replace (flax.struct.PyTreeNode style) gets the real one."""

    class Node:
        def replace(self, **changes):
            raise NotImplementedError

    @sf.dataclass
    class P(Node):
        w: jax.Array
        n: sf.Static[int] = 1

    assert P(1.0).replace(n=2).n == 2


def test_own_replace_method_is_kept():
    """A class that defines replace itself keeps it, and so do its decorated subclasses."""

    @sf.dataclass
    class P:
        w: jax.Array

        def replace(self, **changes):
            return "mine"

    @sf.dataclass
    class Q(P):
        pass

    assert P(1.0).replace(w=2.0) == "mine" and Q(1.0).replace(w=2.0) == "mine"


def test_hand_written_slots_are_refused():
    """__slots__ is a TypeError naming the class (instances need a __dict__)."""
    with pytest.raises(TypeError, match=r"S defines __slots__.*Remove __slots__ from .*S\."):

        @sf.dataclass
        class S:
            __slots__ = ("w",)
            w: jax.Array


def test_replace_on_the_class_is_a_clear_error():
    """sf.replace(Class, ...) says to pass an instance, not KeyError."""
    with pytest.raises(TypeError, match=r"sf.replace expects an instance, got the class Params"):
        sf.replace(Params, w=1.0)


def test_static_marks_on_a_plain_stdlib_dataclass_base_are_honoured():
    """Static[T] on an undecorated stdlib dataclass base is static in a decorated subclass."""

    @dataclasses.dataclass
    class Config:
        depth: sf.Static[int] = 2

    @sf.dataclass
    class Model(Config):
        w: jax.Array = 0.0

    assert sf.static_fields(Model) == ("depth",)
    assert jax.tree_util.tree_leaves(Model(3, jnp.ones(2)))[0].shape == (2,)
    assert not sf.is_static(dataclasses.fields(Config)[0])  # the base's own Field is untouched


_MAIN_SCRIPT = '''
import sys, cloudpickle, jax, jax.numpy as jnp
import staticfield as sf

class P(sf.Struct):
    w: jax.Array
    n: sf.Static[int] = 2

    def __check_init__(self):
        if self.n <= 0:
            raise ValueError("n must be positive")

@sf.dataclass
class Q:
    w: jax.Array

    def __init__(self, k):
        self.w = jnp.ones(k)

sys.stdout.buffer.write(cloudpickle.dumps((P, P(jnp.ones(2), 3), Q, Q(2))))
'''

_LOAD_SCRIPT = '''
import pickle, sys, jax
P, p, Q, q = pickle.loads(sys.stdin.buffer.read())
assert p.replace(n=4).n == 4 and P(1.0).n == 2 and Q(3).w.shape == (3,)
for obj in (P(1.0), Q(3)):  # made in this process by the unpickled classes: keyed pytrees
    (path, leaf), = jax.tree_util.tree_flatten_with_path(obj)[0]
    assert jax.tree_util.keystr(path) == ".w"
    assert jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(obj), [leaf]) == obj
try:
    p.replace(n=-1)
except ValueError:
    print("checked", jax.tree_util.keystr(jax.tree_util.tree_flatten_with_path(p)[0][0][0]), q.w.shape)
'''


def test_classes_defined_in_main_cloudpickle_into_a_fresh_process():
    """sf.Struct and custom-__init__ classes defined in __main__ travel by value with cloudpickle
    and work in a fresh process: constructors, replace, __check_init__, pytree keys."""
    import subprocess
    import sys

    dumped = subprocess.run([sys.executable, "-c", _MAIN_SCRIPT], capture_output=True, timeout=120)
    assert dumped.returncode == 0, dumped.stderr.decode()
    loaded = subprocess.run([sys.executable, "-c", _LOAD_SCRIPT], input=dumped.stdout,
                            capture_output=True, timeout=120)
    assert loaded.returncode == 0, loaded.stderr.decode()
    assert loaded.stdout.decode().split() == ["checked", ".w", "(2,)"]
