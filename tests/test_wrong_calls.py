"""Wrong calls and JAX's errors read as the user's own function's, never as staticfield's."""

import functools
import re
import traceback

import jax
import jax.numpy as jnp
import pytest

import staticfield as sf


class Layer(sf.Struct):
    w: jax.Array

    @sf.jit_method
    def apply(self, x):
        return self.w * x

    @sf.jit_method(deps="read")
    def read_apply(self, x):
        return self.w * x

    @sf.jit_method
    def scaled(self, x, scale=2.0):
        return self.w * x * scale


LAYER = Layer(jnp.ones(2))
X = jnp.ones(2)


# ---------------------------------------------------------------- arity, as Python says it


@pytest.mark.parametrize("method", ["apply", "read_apply"])
@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda m, o: getattr(o, m)(), "Layer.{m}() missing 1 required positional argument: 'x'"),
        (lambda m, o: getattr(o, m)(X, X), "Layer.{m}() takes 2 positional arguments but 3 were given"),
        (lambda m, o: getattr(o, m)(X, y=X), "Layer.{m}() got an unexpected keyword argument 'y'"),
        (lambda m, o: getattr(Layer, m)(X), "Layer.{m}() missing 1 required positional argument: 'x'"),
        (lambda m, o: getattr(Layer, m)(), "Layer.{m}() missing 2 required positional arguments: 'self' and 'x'"),
        (lambda m, o: getattr(Layer, m)(o, X, X), "Layer.{m}() takes 2 positional arguments but 3 were given"),
    ],
    ids=["bound-missing", "bound-extra", "bound-unknown", "class-missing", "class-none", "class-extra"],
)
def test_wrong_arity_names_the_users_method(method, call, message):
    """Missing, extra and unknown arguments give CPython's message for the user's method, counted as its own."""
    with pytest.raises(TypeError, match=f"^{re.escape(message.format(m=method))}"):
        call(method, LAYER)


def test_wrong_arity_with_defaults_names_the_users_method():
    """A method with a default takes the general path; the message is still the user's."""
    with pytest.raises(TypeError, match=re.escape("Layer.scaled() takes from 2 to 3 positional arguments but 4 were given")):
        LAYER.scaled(X, 1.0, 2.0)


def test_wrong_arity_of_sf_jit_names_the_users_function():
    """sf.jit of a free function: the message names the function, not a generated one."""

    def step(a, b):
        return a + b

    f = sf.jit(step)
    with pytest.raises(TypeError, match=re.escape("step() missing 1 required positional argument: 'b'")):
        f(X)
    with pytest.raises(TypeError, match=re.escape("step() takes 2 positional arguments but 3 were given")):
        f(X, X, X)


@pytest.mark.parametrize("method", ["apply", "read_apply"])
def test_method_called_on_the_class_without_an_instance(method):
    """Cls.method(x, y) with a non-instance as self says so, not "decorate the class"."""
    expected = (
        f"Layer.{method}() takes an instance of Layer as `self`, got an ArrayImpl: it was called on the "
        f"class without an instance. Call it on an instance, `obj.{method}(...)`, or pass one first: "
        f"`Layer.{method}(obj, ...)`."
    )
    with pytest.raises(TypeError, match=f"^{re.escape(expected)}$"):
        getattr(Layer, method)(X, X)


def test_jit_method_on_an_undecorated_class_still_says_to_decorate():
    """On a class that is not a staticfield dataclass, the advice to decorate it stays."""

    class Plain:
        @sf.jit_method
        def apply(self, x):
            return x

    with pytest.raises(TypeError, match=r"Decorate the class with @sf\.dataclass"):
        Plain().apply(X)


def test_functools_wraps_wrapper_with_an_extra_parameter_is_callable():
    """A wraps-wrapper taking more than the function it wraps runs, as under jax.jit."""

    def add_scale(f):
        @functools.wraps(f)
        def wrapper(x, scale):
            return f(x) * scale

        return wrapper

    @add_scale
    def double(x):
        return 2 * x

    assert float(jax.jit(double)(1.0, 3.0)) == 6.0
    assert float(sf.jit(double)(1.0, 3.0)) == 6.0

    def add_method_scale(f):
        @functools.wraps(f)
        def wrapper(self, x, scale):
            return f(self, x) * scale

        return wrapper

    class Scaled(sf.Struct):
        w: jax.Array

        @sf.jit_method
        @add_method_scale
        def apply(self, x):
            return self.w * x

        @sf.jit_method(deps="read")
        @add_method_scale
        def read_apply(self, x):
            return self.w * x

    s = Scaled(jnp.ones(2))
    for name in ("apply", "read_apply"):
        assert jnp.array_equal(getattr(s, name)(X, 3.0), 3 * X)
        assert jnp.array_equal(getattr(Scaled, name)(s, X, 3.0), 3 * X)


# ---------------------------------------------------------------- the day-one mistake


class Net(sf.Struct):
    w: jax.Array
    depth: int
    sizes: tuple
    on: sf.Static[bool] = True

    @sf.jit_method
    def loop(self, x):
        for _ in range(self.depth):
            x = x * self.w
        return x

    @sf.jit_method
    def zeros(self, x):
        return jnp.zeros(self.sizes[0]) + x


NET = Net(jnp.ones(2), 3, (2,))


def test_int_field_used_as_python_int_gets_the_static_hint():
    """range(self.depth) on a dynamic int field: JAX's error, plus "mark it `depth: sf.Static[int]`"."""
    with pytest.raises(jax.errors.TracerIntegerConversionError) as info:
        NET.loop(X)
    text = str(info.value)
    assert "depends on the value of the argument self.depth" in text  # JAX's own text stays
    assert text.endswith(
        "staticfield: `self.depth` is read from `depth`, a dynamic field of Net, so jax.jit traces it "
        "and its value is unknown while tracing. A value used as a Python int, bool, shape or in "
        "control flow must be static: mark it `depth: sf.Static[int]` (each distinct value then "
        "compiles once), or compute with it using jax.lax / jnp operations."
    )
    assert any(frame.name == "loop" for frame in traceback.extract_tb(info.tb))  # the user's line


def test_static_hint_through_a_container_and_through_sf_jit():
    """A shape read from a tuple field, and a free function of an instance, get the hint too."""
    with pytest.raises(TypeError, match=r"mark it `sizes: sf\.Static\[tuple\]`"):
        NET.zeros(X)

    def f(net, x):
        return x * net.depth if net.depth > 1 else x

    with pytest.raises(jax.errors.TracerBoolConversionError, match=r"mark it `depth: sf\.Static\[int\]`"):
        sf.jit(f)(NET, X)


def test_no_static_hint_for_a_plain_argument():
    """A traced value that is not read from a field of an instance gets JAX's error alone."""

    def g(x):
        return x if x[0] > 0 else -x

    with pytest.raises(jax.errors.TracerBoolConversionError) as info:
        sf.jit(g)(X)
    assert "staticfield:" not in str(info.value)


# ---------------------------------------------------------------- any parameter names, any arity


def test_sf_jit_of_a_function_without_arguments():
    """sf.jit of a function that takes no arguments compiles once and runs."""
    f = sf.jit(lambda: jnp.float32(1.0))
    assert float(f()) == 1.0 and float(f()) == 1.0
    assert f.compile_count == 1


@pytest.mark.parametrize("names", [("a", "b", "x"), ("args", "kwargs", "keys"), ("dyn", "general", "tuple"),
                                   ("vkey", "jitted", "miss"), ("SPECS", "variants", "out")])
def test_parameter_names_that_generated_code_might_use(names):
    """Parameters named like the hit path's own variables give right results, with an
    instance argument and without, and their errors still name the function."""
    source = f"def step({', '.join(names)}):\n    return {names[0]} * 1 + {names[1]} * 2 + {names[2]} * 3\n"
    scope: dict = {}
    exec(source, scope)  # noqa: S102 - a test function with the parameter names under test
    f = sf.jit(scope["step"])
    assert float(f(1.0, 2.0, 3.0)) == 14.0
    assert float(f(2.0, 2.0, 3.0)) == 15.0
    assert float(f(Wrapped(jnp.float32(1.0)), 2.0, 3.0).value) == 14.0
    assert f.compile_count == 2
    with pytest.raises(TypeError, match=re.escape("step() missing 1 required positional argument")):
        f(1.0, 2.0)


class Wrapped(sf.Struct):
    value: jax.Array

    def __mul__(self, k):
        return Wrapped(self.value * k)

    def __add__(self, other):
        return Wrapped(self.value + other)
