"""``@sf.dataclass``: a frozen stdlib dataclass registered as a keyed pytree."""

import dataclasses
import inspect

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.tree_util import GetAttrKey

import staticfield as sf


@sf.dataclass
class Params:
    x: jax.Array
    a: int = sf.static(default=2)
    y: jax.Array = sf.field(default=0.0)


def make() -> Params:
    return Params(jnp.array([1.0, 2.0]), 3, jnp.array(5.0))


# ---------------------------------------------------------------- stdlib dataclass


def test_is_a_stdlib_dataclass():
    """dataclasses.is_dataclass/fields/asdict see the decorated class and its instances."""
    p = make()
    assert dataclasses.is_dataclass(Params) and dataclasses.is_dataclass(p)
    assert [f.name for f in dataclasses.fields(p)] == ["x", "a", "y"]
    d = dataclasses.asdict(p)
    assert set(d) == {"x", "a", "y"} and d["a"] == 3


def test_decorator_with_and_without_parentheses():
    """Both ``@sf.dataclass`` and ``@sf.dataclass()`` decorate and return the class itself."""

    class A:
        x: jax.Array

    class B:
        x: jax.Array

    assert sf.dataclass(A) is A
    assert sf.dataclass()(B) is B
    assert A(1.0).x == 1.0 and B(1.0).x == 1.0


def test_generated_init_signature():
    """The generated __init__ takes the fields in order, with their defaults."""
    sig = inspect.signature(Params)
    assert list(sig.parameters) == ["x", "a", "y"]
    assert sig.parameters["a"].default == 2


def test_generated_source_is_inspectable():
    """The generated functions keep their source (``__source__`` and inspect.getsource)."""
    src = Params.__init__.__source__
    assert "def __init__" in src and "def unflatten" in src
    assert "def __init__" in inspect.getsource(Params.__init__)


def test_positional_and_keyword_construction():
    """Fields can be passed by position or by name, defaults fill the rest."""
    p = Params(jnp.ones(2), a=4)
    assert p.a == 4 and p.y == 0.0
    q = Params(x=jnp.ones(2))
    assert q.a == 2


def test_missing_argument_is_a_type_error():
    """Leaving out a required field is a TypeError naming it, like any Python function."""
    with pytest.raises(TypeError, match="x"):
        Params()


def test_match_args():
    """``match`` statements destructure instances positionally."""
    match make():
        case Params(x, a, y):
            assert a == 3 and float(y) == 5.0
        case _:
            pytest.fail("no match")


# ---------------------------------------------------------------- pytree registration


def test_children_are_dynamic_fields_in_declaration_order():
    """Flattening gives the dynamic fields' leaves in declaration order; statics stay out."""
    p = make()
    leaves = jax.tree_util.tree_leaves(p)
    assert len(leaves) == 2
    assert leaves[0] is p.x and leaves[1] is p.y


def test_flatten_with_path_uses_getattr_keys():
    """Paths are ``GetAttrKey(field_name)``, so keystr gives ``.x``."""
    paths = [path for path, _ in jax.tree_util.tree_flatten_with_path(make())[0]]
    assert paths == [(GetAttrKey("x"),), (GetAttrKey("y"),)]
    assert [jax.tree_util.keystr(p) for p in paths] == [".x", ".y"]


def test_nested_paths_name_every_level():
    """Nested instances and containers give paths like ``.inner.x`` and ``.xs[1]``."""

    @sf.dataclass
    class Outer:
        inner: Params
        xs: tuple

    o = Outer(make(), (jnp.zeros(1), jnp.ones(1)))
    keys = [jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_flatten_with_path(o)[0]]
    assert keys == [".inner.x", ".inner.y", ".xs[0]", ".xs[1]"]


def test_aux_data_is_hashable_and_compared_by_value():
    """The treedef (with aux_data) is hashable and equal for equal static values."""
    t1 = jax.tree_util.tree_structure(make())
    t2 = jax.tree_util.tree_structure(Params(jnp.zeros(2), 3, jnp.zeros(())))
    t3 = jax.tree_util.tree_structure(Params(jnp.zeros(2), 4, jnp.zeros(())))
    assert hash(t1) == hash(t2) and t1 == t2
    assert t1 != t3
    node_type, aux = t1.node_data()
    assert node_type is Params
    hash(aux)
    assert aux == t2.node_data()[1] and aux != t3.node_data()[1]


def test_tree_map_returns_same_class_and_statics():
    """tree_map maps the dynamic leaves and keeps the class and static values."""
    p = make()
    q = jax.tree_util.tree_map(lambda v: v * 2, p)
    assert type(q) is Params and q.a == 3
    np.testing.assert_array_equal(q.x, [2.0, 4.0])


def test_class_without_dynamic_fields_is_an_empty_pytree():
    """A class with only static fields has no leaves and round-trips."""

    @sf.dataclass
    class Config:
        n: int = sf.static()
        name: str = sf.static(default="a")

    c = Config(3)
    leaves, treedef = jax.tree_util.tree_flatten(c)
    assert leaves == []
    assert jax.tree_util.tree_unflatten(treedef, []) == c


def test_class_without_static_fields_round_trips():
    """A class with only dynamic fields round-trips through flatten/unflatten."""

    @sf.dataclass
    class Pair:
        a: jax.Array
        b: jax.Array

    p = Pair(jnp.ones(1), jnp.zeros(2))
    leaves, treedef = jax.tree_util.tree_flatten(p)
    assert jax.tree_util.tree_unflatten(treedef, leaves) == p


# ---------------------------------------------------------------- unflatten bypasses __init__


@pytest.fixture
def counted_class():
    """A class whose __init__, __post_init__ and converter each count their calls."""
    calls = {"post_init": 0, "convert": 0, "init": 0}

    def conv(v):
        calls["convert"] += 1
        return v

    @sf.dataclass
    class Counted:
        x: jax.Array = sf.field(converter=conv)
        n: int = sf.static(default=1)

        def __post_init__(self):
            calls["post_init"] += 1

    original_init = Counted.__init__

    def init(self, *a, **k):
        calls["init"] += 1
        original_init(self, *a, **k)

    Counted.__init__ = init
    return Counted, calls


def test_unflatten_runs_no_user_code(counted_class):
    """tree_unflatten never calls __init__, __post_init__ or converters."""
    Counted, calls = counted_class
    c = Counted(jnp.ones(2))
    assert calls == {"init": 1, "post_init": 1, "convert": 1}
    leaves, treedef = jax.tree_util.tree_flatten(c)
    d = jax.tree_util.tree_unflatten(treedef, leaves)
    jax.tree_util.tree_map(lambda v: v + 1, c)
    assert d == c
    assert calls == {"init": 1, "post_init": 1, "convert": 1}


def test_unflatten_accepts_none_and_sentinels(counted_class):
    """Unflatten takes None and object() leaves without checks (JAX does this internally)."""
    Counted, calls = counted_class
    treedef = jax.tree_util.tree_structure(Counted(jnp.ones(2), 5))
    calls.update(init=0, post_init=0, convert=0)
    none = jax.tree_util.tree_unflatten(treedef, [None])
    assert none.x is None and none.n == 5
    sentinel = object()
    s = jax.tree_util.tree_unflatten(treedef, [sentinel])
    assert s.x is sentinel and type(s) is Counted
    assert calls == {"init": 0, "post_init": 0, "convert": 0}


def test_unflatten_with_tracers_under_jit_and_vmap(counted_class):
    """Inside jit and vmap the instance holds tracers, built without running user code."""
    Counted, calls = counted_class
    c = Counted(jnp.ones((3, 2)), 2)
    calls.update(init=0, post_init=0, convert=0)
    seen = []

    def f(obj):
        seen.append((type(obj), type(obj.x), obj.n))
        return obj.x.sum() * obj.n

    jax.jit(f)(c)
    jax.vmap(f)(c)
    assert all(t is Counted and n == 2 for t, _, n in seen)
    assert all(issubclass(xt, jax.core.Tracer) for _, xt, _ in seen)
    assert calls == {"init": 0, "post_init": 0, "convert": 0}


def test_unflattened_instance_is_frozen_and_hashable():
    """An instance rebuilt by unflatten behaves like a constructed one."""
    p = make()
    leaves, treedef = jax.tree_util.tree_flatten(p)
    q = jax.tree_util.tree_unflatten(treedef, leaves)
    assert q == p and hash(q) == hash(p)
    with pytest.raises(dataclasses.FrozenInstanceError):
        q.a = 1


# ---------------------------------------------------------------- inheritance


@sf.dataclass
class Base:
    w: jax.Array
    act: str = sf.static(default="relu")


@sf.dataclass
class Child(Base):
    b: jax.Array = sf.field(default=0.0)
    depth: int = sf.static(default=1)


def test_decorated_subclass_inherits_and_extends_fields():
    """A decorated subclass has the base's fields first, then its own, static marks kept."""
    assert [f.name for f in sf.fields(Child)] == ["w", "act", "b", "depth"]
    assert sf.static_fields(Child) == ("act", "depth")
    assert sf.dynamic_fields(Child) == ("w", "b")
    c = Child(jnp.ones(2), "tanh", jnp.ones(()), 3)
    assert [jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_flatten_with_path(c)[0]] == [
        ".w",
        ".b",
    ]
    assert isinstance(c, Base)


def test_subclass_static_values_are_frozen():
    """An inherited static field is frozen in the subclass too."""
    c = Child(jnp.ones(2), ["a", "b"])  # type: ignore[arg-type]
    assert c.act == ("a", "b")


def test_base_and_subclass_never_equal():
    """A base instance and a subclass instance with the same values are not equal."""

    @sf.dataclass
    class Same(Base):
        pass

    b, s = Base(jnp.ones(2)), Same(jnp.ones(2))
    assert b != s and s != b
    assert jax.tree_util.tree_structure(b) != jax.tree_util.tree_structure(s)


def test_subclass_can_turn_field_static():
    """A subclass may redeclare an inherited field as static."""

    @sf.dataclass
    class Frozen(Base):
        w: tuple = sf.static(default=(1, 2))

    assert sf.static_fields(Frozen) == ("w", "act")
    assert jax.tree_util.tree_leaves(Frozen()) == []


def test_undecorated_subclass_refused():
    """Constructing a subclass that was not decorated is a TypeError saying to decorate it."""

    class Plain(Base):
        pass

    with pytest.raises(TypeError, match=r"Plain.*Base.*@sf\.dataclass"):
        Plain(jnp.ones(2))


def test_undecorated_subclass_with_own_init_refused():
    """An undecorated subclass whose own __init__ sets a field is refused by name."""

    class Plain(Base):
        def __init__(self, w):
            self.w = w

    with pytest.raises(TypeError, match=r"Plain.*Base.*@sf\.dataclass"):
        Plain(jnp.ones(2))


def test_undecorated_subclass_of_custom_init_refused():
    """A subclass of a class with a custom __init__ must be decorated too."""

    @sf.dataclass
    class Layer:
        w: jax.Array

        def __init__(self, n):
            self.w = jnp.zeros(n)

    class Plain(Layer):
        pass

    with pytest.raises(TypeError, match=r"Plain.*Layer.*decorate"):
        Plain(2)


def test_post_init_of_base_runs_for_subclass():
    """__post_init__ defined in a base runs when a decorated subclass is constructed."""
    seen = []

    @sf.dataclass
    class B:
        x: jax.Array

        def __post_init__(self):
            seen.append(type(self).__name__)

    @sf.dataclass
    class C(B):
        y: jax.Array = sf.field(default=1.0)

    C(jnp.ones(1))
    assert seen == ["C"]


# ---------------------------------------------------------------- custom __init__


@sf.dataclass
class Linear:
    w: jax.Array
    b: jax.Array
    in_size: int = sf.static()
    out_size: int = sf.static()

    def __init__(self, in_size, out_size, key):
        self.in_size = in_size
        self.out_size = out_size
        self.w = jax.random.normal(key, (out_size, in_size))
        self.b = jnp.zeros(out_size)

    def __call__(self, x):
        return self.w @ x + self.b


def test_custom_init_assigns_fields():
    """A user-written __init__ with its own signature sets fields with ``self.f = v``."""
    lin = Linear(3, 2, jax.random.PRNGKey(0))
    assert lin.w.shape == (2, 3) and lin.in_size == 3
    assert lin(jnp.ones(3)).shape == (2,)


def test_custom_init_instance_is_frozen_after():
    """After a custom __init__ returns, the instance is frozen."""
    lin = Linear(3, 2, jax.random.PRNGKey(0))
    with pytest.raises(dataclasses.FrozenInstanceError, match=r"Linear\.w"):
        lin.w = jnp.zeros((2, 3))


def test_custom_init_freezes_static_values():
    """Static values set in a custom __init__ are frozen and checked like generated ones."""

    @sf.dataclass
    class Net:
        sizes: tuple = sf.static()

        def __init__(self, sizes):
            self.sizes = sizes

    assert Net([1, 2]).sizes == (1, 2)
    with pytest.raises(TypeError, match=r"Net\.sizes"):
        Net(jnp.ones(2))


def test_custom_init_runs_converters_and_fills_defaults():
    """After a custom __init__, converters run and unset fields with defaults get them."""

    @sf.dataclass
    class M:
        x: jax.Array = sf.field(converter=jnp.asarray)
        scale: float = sf.static(default=1.0)

        def __init__(self, n):
            self.x = [0.0] * n

    m = M(3)
    assert isinstance(m.x, jax.Array) and m.x.shape == (3,)
    assert m.scale == 1.0


def test_custom_init_missing_fields_named():
    """A custom __init__ that leaves fields unset is a TypeError naming each one."""

    @sf.dataclass
    class Half:
        w: jax.Array
        b: jax.Array
        n: int = sf.static()

        def __init__(self):
            self.w = jnp.ones(1)

    with pytest.raises(TypeError, match=r"Half\.__init__.*'b', 'n'"):
        Half()


def test_custom_init_unflatten_and_jit():
    """An instance with a custom __init__ passes through jit without calling __init__."""
    lin = Linear(3, 2, jax.random.PRNGKey(0))
    out = jax.jit(lambda m, x: m(x))(lin, jnp.ones(3))
    np.testing.assert_allclose(out, lin(jnp.ones(3)), rtol=1e-6)
    doubled = jax.tree_util.tree_map(lambda v: 2 * v, lin)
    assert type(doubled) is Linear and doubled.in_size == 3


def test_custom_init_calling_super_init():
    """A decorated subclass's custom __init__ may call the base's generated __init__."""

    @sf.dataclass
    class Scaled(Base):
        s: float = sf.static(default=1.0)

        def __init__(self, n, s):
            super().__init__(jnp.ones(n))
            self.s = s

    obj = Scaled(2, 0.5)
    assert obj.s == 0.5 and obj.act == "relu" and obj.w.shape == (2,)
    assert sf.replace(obj, s=1.0).s == 1.0


def test_custom_init_exception_leaves_no_half_built_state():
    """If a custom __init__ raises, a later instance still is frozen after construction."""

    @sf.dataclass
    class Picky:
        x: jax.Array

        def __init__(self, x):
            self.x = x
            if x is None:
                raise ValueError("no x")

    with pytest.raises(ValueError):
        Picky(None)
    ok = Picky(jnp.ones(1))
    with pytest.raises(dataclasses.FrozenInstanceError):
        ok.x = 1


# ---------------------------------------------------------------- __post_init__, InitVar, init=False


def test_post_init_may_set_fields_then_frozen():
    """__post_init__ may assign (init=False) fields; afterwards the instance is frozen."""

    @sf.dataclass
    class Norm:
        x: jax.Array
        scale: dataclasses.InitVar[float]
        y: jax.Array = sf.field(init=False)
        tag: str = sf.static(init=False, default="n")

        def __post_init__(self, scale):
            self.y = self.x * scale
            self.tag = f"scaled{scale}"

    n = Norm(jnp.ones(2), 3.0)
    np.testing.assert_array_equal(n.y, [3.0, 3.0])
    assert n.tag == "scaled3.0"
    assert sf.dynamic_fields(Norm) == ("x", "y")
    with pytest.raises(dataclasses.FrozenInstanceError):
        n.y = 1


def test_post_init_values_are_frozen_and_keyed():
    """A static value assigned in __post_init__ is frozen and is part of the key."""

    @sf.dataclass
    class K:
        n: int = sf.static()
        sizes: tuple = sf.static(init=False, default=())

        def __post_init__(self):
            self.sizes = [self.n] * 2

    a, b = K(1), K(2)
    assert a.sizes == (1, 1)
    assert jax.tree_util.tree_structure(a) != jax.tree_util.tree_structure(b)


# ---------------------------------------------------------------- options


def test_kw_only_option():
    """``kw_only=True`` makes every field keyword-only."""

    @sf.dataclass(kw_only=True)
    class K:
        x: jax.Array
        n: int = sf.static(default=1)
        y: jax.Array

    k = K(x=jnp.ones(1), y=jnp.zeros(1))
    assert k.n == 1
    with pytest.raises(TypeError):
        K(jnp.ones(1), 1, jnp.zeros(1))


def test_kw_only_sentinel():
    """``_: dataclasses.KW_ONLY`` makes the following fields keyword-only."""

    @sf.dataclass
    class K:
        x: jax.Array
        _: dataclasses.KW_ONLY
        n: int = sf.static(default=1)
        y: jax.Array

    k = K(jnp.ones(1), y=jnp.zeros(1))
    assert k.n == 1 and sf.fields(K)[1].name == "n"


def test_repr_false_keeps_object_repr():
    """``repr=False`` does not generate __repr__."""

    @sf.dataclass(repr=False)
    class R:
        x: jax.Array

    assert repr(R(jnp.ones(2))).startswith("<")


def test_user_repr_kept():
    """A __repr__ written in the class body is not replaced."""

    @sf.dataclass
    class R:
        x: jax.Array

        def __repr__(self):
            return "mine"

    assert repr(R(1.0)) == "mine"


def test_eq_false_uses_identity():
    """``eq=False`` keeps identity equality and identity hash."""

    @sf.dataclass(eq=False)
    class E:
        x: jax.Array

    a = E(jnp.ones(2))
    b = jax.tree_util.tree_map(lambda v: v, a)
    assert a == a and a != b
    assert hash(a) == object.__hash__(a)


def test_check_false_allows_non_array_dynamic_leaves():
    """``check=False`` skips the dynamic-leaf check (strings etc. pass through)."""

    @sf.dataclass(check=False)
    class Loose:
        x: object

    assert Loose("text").x == "text"
    assert sf.replace(Loose(1.0), x="t").x == "t"


def test_check_false_still_freezes_statics():
    """``check=False`` does not turn off freezing and checking of static values."""

    @sf.dataclass(check=False)
    class Loose:
        s: object = sf.static()

    assert Loose([1, [2]]).s == (1, (2,))
    with pytest.raises(TypeError, match=r"Loose\.s"):
        Loose(jnp.ones(1))


@pytest.mark.parametrize("option", ["order", "unsafe_hash", "slots"])
def test_refused_options(option):
    """``order``, ``unsafe_hash`` and ``slots`` are TypeErrors that say why."""
    with pytest.raises(TypeError, match=rf"Params.*{option}=True.*not supported"):

        @sf.dataclass(**{option: True})
        class Params:
            x: jax.Array


def test_frozen_false_refused():
    """``frozen=False`` is refused; ``frozen=True`` is accepted (it is the default)."""
    with pytest.raises(TypeError, match=r"M.*frozen=False.*sf\.replace"):

        @sf.dataclass(frozen=False)
        class M:
            x: jax.Array

    @sf.dataclass(frozen=True)
    class F:
        x: jax.Array

    assert F(1.0).x == 1.0


def test_unknown_option_refused():
    """An unknown option is a TypeError listing the accepted ones."""
    with pytest.raises(TypeError, match=r"Q.*colour.*kw_only"):

        @sf.dataclass(colour="red")
        class Q:
            x: jax.Array


def test_init_false_option_keeps_user_init_absent():
    """``init=False`` generates no __init__ for the class."""

    @sf.dataclass(init=False)
    class N:
        x: jax.Array = sf.field(default=1.0)

    assert "__init__" not in N.__dict__


def test_dataclass_transform_marker():
    """The decorator carries dataclass_transform so type checkers see the __init__."""
    transform = getattr(sf.dataclass, "__dataclass_transform__", None)
    assert transform is not None
    assert transform["frozen_default"] is True
    assert sf.field in transform["field_specifiers"]
    assert sf.static in transform["field_specifiers"]
