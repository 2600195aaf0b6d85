"""One test per error message: each names the class and field and says why and how to fix it."""

import dataclasses
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec

import staticfield as sf


@sf.dataclass
class Net:
    w: jax.Array
    act: object = sf.static(default="relu")


# ---------------------------------------------------------------- dynamic leaves


@pytest.mark.parametrize(
    ("value", "what", "ann"),
    [
        ("relu", "a str", "str"),
        (b"raw", "a bytes", "bytes"),
        (lambda x: x, "a function", "Callable"),
        (object(), "an object", "object"),
    ],
    ids=["str", "bytes", "function", "object"],
)
def test_bad_dynamic_leaf(value, what, ann):
    """A non-array leaf in a dynamic field names class, field and type and suggests sf.static()."""
    msg = (
        f"Net.w: {what} is not an array, so it cannot be a dynamic (traced) field value. "
        f"Mark the field static: `w: {ann} = sf.static()` (or annotate it `sf.Static[{ann}]`), "
        "or decorate the class with @sf.dataclass(check=False) to skip this check."
    )
    with pytest.raises(TypeError, match=re.escape(msg)):
        Net(value)


def test_bad_dynamic_leaf_nested_path():
    """A bad leaf inside a container is reported with its path inside the field, and the hint
    is about the field (its annotation, leaves="any" or static), not the leaf's type."""
    msg = (
        "Net.w: the value holds a str at ['layers'][1], which is not an array, so `w` cannot be "
        "a plain dynamic (traced) field. If it holds arrays as well as other leaves, declare it "
        '`w: jax.Array = sf.field(leaves="any")`: its array leaves are traced and the others are '
        "static under jit. If it holds no arrays, mark it static: `w: jax.Array = sf.static()`."
    )
    with pytest.raises(TypeError, match=re.escape(msg)):
        Net({"layers": (jnp.ones(1), "oops")})


def test_bad_dynamic_leaf_in_custom_init():
    """The dynamic-leaf check also runs after a custom __init__."""

    @sf.dataclass
    class Layer:
        w: jax.Array

        def __init__(self):
            self.w = "weights"

    with pytest.raises(TypeError, match=r"Layer\.w: a str is not an array.*sf\.static\(\)"):
        Layer()


def test_bad_dynamic_leaf_in_replace():
    """sf.replace checks a changed dynamic field."""
    with pytest.raises(TypeError, match=r"Net\.w: a function is not an array"):
        sf.replace(Net(jnp.ones(1)), w=print)


def test_bad_dynamic_leaf_in_post_init():
    """A non-array value assigned in __post_init__ is caught too."""

    @sf.dataclass
    class P:
        w: jax.Array = sf.field(init=False)

        def __post_init__(self):
            self.w = "x"

    with pytest.raises(TypeError, match=r"P\.w: a str is not an array"):
        P()


def test_dynamic_array_like_leaves_accepted():
    """jax/NumPy arrays, NumPy scalars, Python numbers, None and nested pytrees are fine."""

    @sf.dataclass
    class Inner:
        v: jax.Array

    for ok in (
        jnp.ones(2),
        np.ones(2),
        np.float32(1),
        1,
        2.0,
        True,
        1j,
        None,
        (jnp.ones(1), [np.ones(1)]),
        {"a": None, "b": (1.0,)},
        Inner(jnp.ones(1)),
        jax.ShapeDtypeStruct((2,), jnp.float32),
    ):
        Net(ok)


def test_check_false_disables_dynamic_leaf_check():
    """check=False lets non-array leaves through construction and replace."""

    @sf.dataclass(check=False)
    class Loose:
        w: object

    assert Loose("s").w == "s"
    assert Loose(print).w is print
    assert sf.replace(Loose(1.0), w=b"b").w == b"b"


# ---------------------------------------------------------------- static values


def test_jax_array_in_static_field():
    """A jax.Array in a static field: names class and field, explains, suggests the fix."""
    msg = (
        "Net.act: a jax.Array cannot be a static field value (static values are part of the "
        "jit cache key and must be hashable and concrete). Make `act` a dynamic field, or "
        "pass np.asarray(...) / a Python value."
    )
    with pytest.raises(TypeError, match=re.escape(msg)):
        Net(jnp.ones(1), jnp.ones(1))


def test_tracer_in_static_field():
    """A tracer in a static field: same message, saying it is a tracer."""
    with pytest.raises(TypeError, match=re.escape("Net.act: a tracer cannot be a static field value")):
        jax.jit(lambda x: Net(x, x))(jnp.ones(1))


def test_unhashable_static_value():
    """An unhashable static value names class, field and type, and the ways out."""

    class Cfg:
        __hash__ = None  # type: ignore[assignment]

    msg = (
        "Net.act: a static value of type Cfg is unhashable, so it cannot be part of the jit "
        "cache key. Give Cfg value-based __eq__ and __hash__"
    )
    with pytest.raises(TypeError, match=re.escape(msg) + r".*make `act` a dynamic field"):
        Net(jnp.ones(1), Cfg())


def test_unhashable_nested_static_value():
    """An unhashable value inside a container is reported with its position."""

    class Cfg:
        __hash__ = None  # type: ignore[assignment]

    with pytest.raises(TypeError, match=re.escape("Net.act[0]: a static value of type Cfg")):
        Net(jnp.ones(1), [Cfg()])


def test_object_array_static_value():
    """A NumPy object array in a static field names class and field."""
    with pytest.raises(TypeError, match=r"Net\.act: a NumPy array of dtype object.*make `act` dynamic"):
        Net(jnp.ones(1), np.array([None], dtype=object))


# ---------------------------------------------------------------- frozen


def test_frozen_assign_message():
    """Assignment names class and field and shows the replace call."""
    msg = (
        "Net.w: cannot assign to a field of a frozen staticfield dataclass (instances are "
        "pytrees and may be shared by compiled programs). Make a changed copy instead: "
        "sf.replace(obj, w=...) or obj.replace(w=...)."
    )
    with pytest.raises(dataclasses.FrozenInstanceError, match=re.escape(msg)):
        Net(jnp.ones(1)).w = jnp.zeros(1)


def test_frozen_delete_message():
    """Deletion names class and field and shows the replace call."""
    with pytest.raises(
        dataclasses.FrozenInstanceError,
        match=re.escape("Net.act: cannot delete a field of a frozen staticfield dataclass. Make a changed copy instead: sf.replace(obj, act=...)."),
    ):
        del Net(jnp.ones(1)).act


# ---------------------------------------------------------------- custom __init__


def test_missing_after_custom_init():
    """A custom __init__ that leaves fields unset: names the class and each missing field."""

    @sf.dataclass
    class Lin:
        w: jax.Array
        b: jax.Array

        def __init__(self):
            pass

    with pytest.raises(TypeError, match=r"Lin\.__init__ returned without setting 'w', 'b'\. Every field must be set"):
        Lin()


def test_non_field_attribute_in_custom_init():
    """Setting an attribute that is not a field is refused: it would be lost on unflatten."""

    @sf.dataclass
    class Lin:
        w: jax.Array

        def __init__(self):
            self.w = jnp.ones(1)
            self.cache = {}

    with pytest.raises(TypeError, match=r"Lin\.__init__ set `cache`, which is not a field.*`cache: T = sf\.static\(\)`"):
        Lin()


def test_undecorated_subclass_message():
    """An undecorated subclass is named, with its decorated base, and told to decorate."""

    class Sub(Net):
        pass

    msg = (
        "test_undecorated_subclass_message.<locals>.Sub subclasses the staticfield dataclass Net "
        "but is not decorated itself, so JAX does not know how to flatten it. Decorate it with "
        "@sf.dataclass."
    )
    with pytest.raises(TypeError, match=re.escape(msg)):
        Sub(jnp.ones(1))


# ---------------------------------------------------------------- replace and ==


def test_unknown_replace_name():
    """An unknown replace name lists the bad names and the valid ones."""
    with pytest.raises(TypeError, match=re.escape("Net has no field(s) 'b', 'c' to replace. Valid field names: w, act.")):
        sf.replace(Net(jnp.ones(1)), b=1, c=2)


def test_traced_eq_message():
    """== on traced fields names class and field, says why, and shows the alternative."""

    def f(a, b):
        return a == b

    msg = (
        "Net.__eq__: cannot compare instances whose field `w` holds a traced value"
    )
    with pytest.raises(TypeError, match=re.escape(msg) + r".*jnp\.array_equal\(a\.w, b\.w\)"):
        jax.jit(f)(Net(jnp.ones(1)), Net(jnp.ones(1)))


# ---------------------------------------------------------------- decoration-time errors


def test_non_default_after_default():
    """A required field after a defaulted one names both and offers kw_only."""
    with pytest.raises(
        TypeError,
        match=r"Bad: non-default field 'y' follows default field 'x'\..*kw_only=True",
    ):

        @sf.dataclass
        class Bad:
            x: jax.Array = sf.field(default=0.0)
            y: jax.Array


def test_init_false_without_default_or_post_init():
    """An init=False field with no default and no __post_init__ is named."""
    with pytest.raises(TypeError, match=r"Bad: field\(s\) 'n' have init=False and no default.*__post_init__"):

        @sf.dataclass
        class Bad:
            n: int = sf.static(init=False)


def test_bad_converter():
    """A converter that is not callable names class and field."""
    with pytest.raises(TypeError, match=r"Bad\.x: converter=int is not callable.*`x`"):

        @sf.dataclass
        class Bad:
            x: jax.Array = sf.field(converter=3)


def test_sharding_on_static_field():
    """A sharding on a static field (however it is marked static) names class and field."""
    msg = r"Bad\.n: a static field holds no arrays, so it cannot have a sharding\..*make `n` a dynamic field"
    with pytest.raises(TypeError, match=msg):

        @sf.dataclass
        class Bad:
            n: int = sf.static(sharding=PartitionSpec("x"))

    with pytest.raises(TypeError, match=msg):

        @sf.dataclass
        class Bad:  # noqa: F811
            n: sf.Static[int] = sf.field(sharding=PartitionSpec("x"))


_BOTH = (
    r"Bad\.n: the field is marked both static \({yes}\) and dynamic \({no}\)\. "
    r"A field is one or the other: keep the mark you mean and drop the other\."
)


@pytest.mark.parametrize(
    ("make", "yes", "no"),
    [
        (lambda: sf.field(static=False, metadata={"pytree_node": False}),
         re.escape('metadata={"pytree_node": False}'), re.escape("sf.field(static=False)")),
        (lambda: sf.field(static=False, metadata={"static": True}),
         re.escape('metadata={"static": True}'), re.escape("sf.field(static=False)")),
        (lambda: sf.field(static=True, metadata={"pytree_node": True}),
         re.escape("sf.field(static=True)"), re.escape('metadata={"pytree_node": True}')),
        (lambda: dataclasses.field(metadata={"static": False, "pytree_node": False}),
         re.escape('metadata={"pytree_node": False}'), re.escape('metadata={"static": False}')),
    ],
    ids=["static=False+pytree_node", "static=False+metadata", "static=True+pytree_node", "stdlib"],
)
def test_contradictory_field_marks_are_refused(make, yes, no):
    """A field marked both static and dynamic is refused, naming the field and the two marks."""
    with pytest.raises(TypeError, match=_BOTH.format(yes=yes, no=no)):

        @sf.dataclass
        class Bad:
            n: int = make()


def test_static_annotation_with_static_false_is_refused():
    """`n: sf.Static[int] = sf.field(static=False)` is refused, naming both marks."""
    msg = _BOTH.format(yes=re.escape("the annotation sf.Static[...]"), no=re.escape("sf.field(static=False)"))
    with pytest.raises(TypeError, match=msg):

        class Bad(sf.Struct):
            n: sf.Static[int] = sf.field(static=False, default=1)


def test_agreeing_marks_are_fine():
    """Marks that agree, or a field() without static=, are accepted."""

    class Fine(sf.Struct):
        a: sf.Static[int] = sf.field(static=True, default=1)
        b: sf.Static[int] = sf.field(default=2)
        c: int = sf.field(static=True, metadata={"pytree_node": False}, default=3)
        d: jax.Array = sf.field(static=False, metadata={"static": False}, default=0.0)

    assert sf.static_fields(Fine) == ("a", "b", "c")


def test_reserved_field_name():
    """The field name used for the cached key is reserved, and the class is named."""
    with pytest.raises(TypeError, match=r"Bad: the field name '_staticfield_key' is reserved"):

        @sf.dataclass
        class Bad:
            _staticfield_key: int


def test_decorating_twice():
    """Decorating a class twice is refused by name."""
    with pytest.raises(TypeError, match=r"Net is already an @sf\.dataclass; decorate it once"):
        sf.dataclass(Net)


def test_decorating_a_non_class():
    """Decorating a function is refused, naming what was passed."""
    with pytest.raises(TypeError, match=r"@sf\.dataclass decorates a class, got function"):
        sf.dataclass(lambda: None)


@pytest.mark.parametrize(
    ("option", "why"),
    [("order", "ordering"), ("unsafe_hash", "hash is already defined"), ("slots", "__dict__")],
)
def test_refused_option(option, why):
    """order/unsafe_hash/slots name the class, say why, and say to drop the option."""
    with pytest.raises(TypeError, match=rf"Bad: @sf\.dataclass\({option}=True\) is not supported: .*{why}.*Drop `{option}=True`"):

        @sf.dataclass(**{option: True})
        class Bad:
            x: jax.Array


def test_refused_option_false_is_fine():
    """Passing a refused option as False is accepted (it is the default)."""

    @sf.dataclass(order=False, unsafe_hash=False, slots=False)
    class Fine:
        x: jax.Array

    assert Fine(1.0).x == 1.0


def test_frozen_false_message():
    """frozen=False names the class, says why and points to sf.replace."""
    with pytest.raises(TypeError, match=r"Bad: @sf\.dataclass\(frozen=False\) is not supported.*jit cache key.*sf\.replace"):

        @sf.dataclass(frozen=False)
        class Bad:
            x: jax.Array


def test_unknown_option_message():
    """An unknown option names the class and lists the accepted options."""
    with pytest.raises(TypeError, match=r"Bad: @sf\.dataclass got unknown option\(s\) weak; it takes check, eq, frozen, init, kw_only, mappable, match_args, repr, strict\."):

        @sf.dataclass(weak=True)
        class Bad:
            x: jax.Array


# ---------------------------------------------------------------- helpers


def test_static_helper_refuses_static_argument():
    """sf.static(static=...) is refused, pointing to sf.field."""
    with pytest.raises(TypeError, match=r"sf\.static\(\) takes no `static` argument; use sf\.field"):
        sf.static(static=False)


def test_is_static_refuses_non_field():
    """sf.is_static on a non-Field names the type it got."""
    with pytest.raises(TypeError, match=r"sf\.is_static expects a dataclasses\.Field, got int"):
        sf.is_static(3)  # type: ignore[arg-type]


@pytest.mark.parametrize("fn", [sf.fields, sf.static_fields, sf.dynamic_fields, sf.replace])
def test_not_a_staticfield_dataclass(fn):
    """The helpers name the function and the class they got, and say to decorate it."""

    @dataclasses.dataclass
    class Plain:
        x: int = 0

    name = fn.__name__
    with pytest.raises(TypeError, match=rf"sf\.{name} expects an @sf\.dataclass class or instance, got .*Plain\. Decorate"):
        fn(Plain())


def test_undecorated_subclass_that_skips_super_init_gets_the_decorate_error():
    """repr/==/hash of an undecorated subclass (own __init__, no super call) name it and the fix."""

    @sf.dataclass
    class Base:
        x: int = sf.static(default=1)

    class Sub(Base):
        def __init__(self):
            pass

    obj = Sub()
    for action in (repr, hash, lambda o: o == o.__class__()):
        with pytest.raises(TypeError, match=r"Sub subclasses the staticfield dataclass .*Base but is not decorated itself.*Decorate it with @sf\.dataclass"):
            action(obj)


def test_jaxpr_in_a_checked_field_gives_the_advice_that_works():
    """A closure-converted function's Jaxpr in a dynamic field of a checked class names the
    class and field and says check=False (a plain field the library's eqx.partition sees),
    not leaves="any" (which breaks jax.grad through an implicit adjoint)."""
    jaxpr = jax.make_jaxpr(jnp.sin)(1.0)

    @sf.dataclass
    class State:
        fn: object

    with pytest.raises(TypeError, match=r"State\.fn\S*: a (Closed)?Jaxpr \(a closure-converted function\) is not an "
                                        r"array.*`@sf\.dataclass\(check=False\)` \(or `class State\(sf\.Struct, "
                                        r"check=False\)`\).*Not sf\.field\(leaves=\"any\"\)"):
        State(jaxpr)
    with pytest.raises(TypeError, match=r"State\.fn\[1\]\S*: a (Closed)?Jaxpr"):
        State((jnp.ones(1), jaxpr))

    @sf.dataclass(check=False)
    class Fine:
        fn: object

    assert Fine(jaxpr).fn is jaxpr


def test_an_unhashable_object_that_is_not_a_pytree_gets_the_fix_that_works_first():
    """A frozen dataclass of NumPy arrays (unhashable, not a pytree: a solver's tableau) in
    a dynamic field: the first error says sf.field(leaves="any"), never sf.static() (which
    would refuse it as unhashable and point back); following it works."""

    @dataclasses.dataclass(frozen=True)
    class Tableau:
        a: np.ndarray
        b: np.ndarray

    tab = Tableau(np.ones(2), np.zeros(2))

    class Solver(sf.Struct):
        tableau: Tableau

    for value, where in ((tab, r"Solver\.tableau"), ((jnp.ones(1), tab), r"Solver\.tableau\[1\]")):
        with pytest.raises(TypeError) as info:
            Solver(value)
        text = str(info.value)
        assert re.search(where + ": a Tableau", text) and "unhashable" in text
        assert 'tableau: Tableau = sf.field(leaves="any")' in text and "sf.static()" not in text

    class Marked(sf.Struct):  # the other order: static first, then the fix that works
        tableau: Tableau = sf.static()

    with pytest.raises(TypeError, match=r"unhashable.*a dynamic field declared `sf\.field\(leaves=\"any\"\)`"):
        Marked(tab)

    class Fixed(sf.Struct):
        tableau: Tableau = sf.field(leaves="any")

    assert Fixed(tab).tableau is tab
