"""Construction checks added for values that would silently break the cache or go stale."""

import enum
import functools
import re
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import staticfield as sf


@sf.dataclass
class Inner:
    w: jax.Array
    n: sf.Static[int] = 1


@sf.dataclass
class Holder:
    x: jax.Array
    cfg: sf.Static[object] = None


# ---------------------------------------------------------------- arrays hidden in static values


def test_jax_array_inside_an_instance_in_a_static_field_is_refused():
    """An @sf.dataclass instance with a jax.Array leaf, inside a static value, is a TypeError."""
    with pytest.raises(TypeError, match=r"Holder.cfg\[0\].w: a jax.Array cannot be a static field value"):
        Holder(1.0, (Inner(jnp.ones(2)),))


def test_jax_array_inside_a_partial_in_a_static_field_is_refused():
    """functools.partial arguments are checked too, however deep."""
    fn = functools.partial(jnp.add, {"b": [jnp.ones(2)]})
    with pytest.raises(TypeError, match=r"Holder.cfg<partial>.*a jax.Array cannot be a static field value"):
        Holder(1.0, fn)


def test_tracer_inside_a_static_value_never_leaks_out_of_jit():
    """A tracer nested in a static value is refused while tracing, naming the field."""

    def f(x):
        return Holder(x, (Inner(x),)).x

    with pytest.raises(TypeError, match=r"Holder.cfg\[0\].w: a tracer cannot be a static field value"):
        jax.jit(f)(1.0)


def test_numpy_leaves_inside_an_instance_in_a_static_field_are_fine():
    """An instance with NumPy leaves is a value: accepted as a static value."""
    h = Holder(1.0, Inner(np.ones(2)))
    assert h.cfg == Inner(np.ones(2))


# ---------------------------------------------------------------- bound methods


def test_bound_method_of_an_instance_in_a_static_field_is_refused():
    """self.foo = self.bar in __init__ is a TypeError naming the method."""

    @sf.dataclass
    class M:
        w: jax.Array
        act: sf.Static[object] = None

        def __init__(self, w):
            self.w = w
            self.act = self.double

        def double(self, x):
            return 2 * x

    with pytest.raises(TypeError, match=r"M.act: the bound method .*M.double cannot be stored in a field"):
        M(1.0)


class Counter(sf.Struct):
    """An instance without arrays (module level, so its qualified name is ``Counter``)."""

    n: sf.Static[int]

    def double(self, x):
        return 2 * x


def test_bound_method_of_an_instance_without_arrays_says_what_it_captures():
    """The refusal of an instance's bound method says it is an instance, not that it "holds arrays"."""
    msg = (
        "Holder.cfg: the bound method Counter.double cannot be stored in a field: it captures its "
        "instance, a Counter (an @sf.dataclass instance), which is half-built while __init__ runs "
        "and stale after sf.replace."
    )
    with pytest.raises(TypeError, match=re.escape(msg)):
        Holder(1.0, Counter(1).double)


def test_bound_method_of_an_array_holding_object_is_refused_in_any_field():
    """A bound method of any object holding arrays is refused, static or dynamic."""

    class Plain:
        def __init__(self):
            self.table = np.ones(3)

        def lookup(self, i):
            return self.table[i]

    with pytest.raises(TypeError, match=r"Holder.cfg: the bound method .*Plain.lookup cannot be stored in a field: "
                       r"it captures its instance, a .*Plain that holds arrays, which"):
        Holder(1.0, Plain().lookup)
    with pytest.raises(TypeError, match=r"Holder.x: the bound method .*Plain.lookup cannot be stored"):
        Holder(Plain().lookup)


def test_bound_method_of_an_object_without_arrays_is_fine():
    """A bound method of an object without arrays (e.g. a str method) is accepted."""
    assert Holder(1.0, "abc".upper).cfg() == "ABC"


# ---------------------------------------------------------------- identity-hashed objects


def test_identity_hashed_mutable_object_warns_once_per_class_and_field():
    """A plain object in a static field gets one StaticFieldWarning per class and field."""

    class Settings:
        def __init__(self):
            self.lr = 0.1

    @sf.dataclass
    class Opt:
        x: jax.Array
        settings: sf.Static[object] = None

    with pytest.warns(sf.StaticFieldWarning, match=r"Opt.settings: a .*Settings is hashed by identity"):
        Opt(1.0, Settings())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        Opt(1.0, Settings())  # once only


class Options:
    """A plain mutable class, at module level so that its qualified name is just ``Options``."""


def test_identity_hashed_warning_article():
    """The warning's article agrees with the class name ("an Options", not "a Options")."""

    @sf.dataclass
    class Opt2:
        x: jax.Array
        options: sf.Static[object] = None

    with pytest.warns(sf.StaticFieldWarning, match=r"Opt2.options: an Options is hashed by identity"):
        Opt2(1.0, Options())


def test_functions_classes_modules_and_enums_do_not_warn():
    """Functions, classes, modules and enum members are exempt from the warning."""

    class Color(enum.Enum):
        RED = 1

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for value in (jnp.tanh, lambda x: x, Color, Color.RED, np, functools.partial(jnp.add, 1)):
            Holder(1.0, value)


# ---------------------------------------------------------------- clear errors


def test_self_referential_static_value_is_a_clear_error():
    """A list that contains itself is a TypeError naming the field, not a RecursionError."""
    loop = []
    loop.append(loop)
    with pytest.raises(TypeError, match=r"Holder.cfg.*refers to itself or is nested too deeply"):
        Holder(1.0, loop)


def test_numpy_str_object_and_datetime_arrays_refused_in_dynamic_fields():
    """Non-numeric NumPy arrays fail at construction, naming the field."""
    for bad in (np.array(["a", "b"]), np.array([object()]), np.array(["2020-01-01"], dtype="datetime64[D]")):
        with pytest.raises(TypeError, match=r"Holder.x: a NumPy array of dtype .* is not numeric"):
            Holder(bad)


def test_stack_of_python_ints_out_of_int32_range_raises():
    """sf.stack of Python ints beyond int32 raises OverflowError naming the field."""
    with pytest.raises(OverflowError, match=r"sf.stack: Holder.x: .*3000000000"):
        sf.stack([Holder(3_000_000_000), Holder(1)])


def test_stack_of_python_ints_in_range_still_works():
    """Ordinary Python scalars still stack."""
    assert sf.stack([Holder(1), Holder(2)]).x.tolist() == [1, 2]


# ---------------------------------------------------------------- from_state_dict


@sf.dataclass
class Saved:
    n: int
    flag: bool
    a: jax.Array
    f: jax.Array = jnp.zeros((), jnp.float32)


def _template():
    return Saved(1, True, jnp.zeros((), jnp.int32))


@pytest.mark.parametrize(
    "state, path",
    [
        ({"n": 1.7, "flag": True, "a": np.int32(0)}, "Saved.n"),
        ({"n": 3.0, "flag": True, "a": np.int32(0)}, "Saved.n"),
        ({"n": 1, "flag": "False", "a": np.int32(0)}, "Saved.flag"),
        ({"n": 1, "flag": 1, "a": np.int32(0)}, "Saved.flag"),
        ({"n": 1, "flag": True, "a": True}, "Saved.a"),
        ({"n": 1, "flag": True, "a": 2.5}, "Saved.a"),
        ({"n": 1, "flag": True, "a": 2**40}, "Saved.a"),
        ({"n": 1, "flag": True, "a": np.int32(0), "f": 1e40}, "Saved.f"),
        ({"n": 1, "flag": True, "a": np.int32(0), "f": np.float64(-1e40)}, "Saved.f"),
        ({"n": 1, "flag": True, "a": np.int32(0), "f": 10**40}, "Saved.f"),
    ],
)
def test_from_state_dict_refuses_values_that_would_change(state, path):
    """A value that would change on the way in is a ValueError naming the path."""
    with pytest.raises(ValueError, match=rf"sf.from_state_dict: {path}: the state holds"):
        sf.from_state_dict(_template(), state)


def test_from_state_dict_restores_exact_values():
    """Values of the right kind restore exactly."""
    out = sf.from_state_dict(_template(), {"n": np.int64(5), "flag": False, "a": 7, "f": 0.5})
    assert (out.n, out.flag, int(out.a)) == (5, False, 7)
    assert type(out.n) is int


def test_identity_hashed_by_intent_draws_no_warning():
    """A tag type declared with sf.identity_hashed (as a decorator or a call, and its
    subclasses) draws no StaticFieldWarning, and its singletons key programs by identity."""

    @sf.identity_hashed
    class Tag:
        def __init__(self, name):
            self.name = name

    class SubTag(Tag):
        pass

    class Registered:
        pass

    assert sf.identity_hashed(Registered) is Registered
    symmetric, diagonal, other = Tag("symmetric"), SubTag("diagonal"), Registered()

    class Op(sf.Struct):
        m: jax.Array
        tags: sf.Static[tuple] = ()

        @sf.jit_method
        def apply(self, x):
            return self.m @ x if symmetric in self.tags else x

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        Op(jnp.eye(2), (symmetric,)).apply(jnp.ones(2))
        Op(jnp.eye(2) * 2, (symmetric,)).apply(jnp.ones(2))
        Op(jnp.eye(2), (diagonal, other)).apply(jnp.ones(2))
    assert Op.apply.compile_count == 2


def test_identity_hashed_takes_a_class():
    """sf.identity_hashed of something that is not a class is refused, naming it."""
    with pytest.raises(TypeError, match=r"sf.identity_hashed takes a class, got an int \(3\)"):
        sf.identity_hashed(3)


def test_from_state_dict_reads_no_jax_leafs_value():
    """Restoring jax leaves reads their shape and dtype, never their values (no copy of every
    leaf to the host, which also fails for arrays spread over processes): it works under
    jax.jit, where the state's leaves are tracers."""
    template = Saved(1, True, jnp.zeros((), jnp.int32), jnp.ones((), jnp.float32))
    restore = jax.jit(lambda a, f: sf.from_state_dict(template, {"n": 1, "flag": True, "a": a, "f": f}))
    back = restore(jnp.int32(4), jnp.float32(2.5))
    assert (int(back.a), float(back.f)) == (4, 2.5)
