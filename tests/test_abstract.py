"""Abstract bases as in equinox: ``@abc.abstractmethod`` enforced, ``sf.AbstractVar[T]`` and
``sf.AbstractClassVar[T]`` declared on a base and defined by a subclass, ``strict=True``."""

from __future__ import annotations

import abc
import dataclasses
import inspect
from typing import ClassVar

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import staticfield as sf


class AbstractSolver(sf.Struct):
    rtol: float

    @abc.abstractmethod
    def step(self, x): ...

    @sf.jit_method
    def solve(self, x):
        return self.step(x)


class Halver(AbstractSolver):
    def step(self, x):
        return x / 2 * (1 + self.rtol)


def test_abstract_method_is_enforced():
    """A class with an abstract method left is refused, naming the class and the method; a
    subclass that defines it builds and runs."""
    with pytest.raises(TypeError, match=r"AbstractSolver.*\bstep\b"):
        AbstractSolver(1e-3)
    assert inspect.isabstract(AbstractSolver) and not inspect.isabstract(Halver)
    np.testing.assert_allclose(Halver(0.0).solve(jnp.ones(2)), np.full(2, 0.5))


def test_abstract_method_left_in_a_subclass_is_enforced():
    """A subclass that does not define the abstract method is refused too."""

    class StillAbstract(AbstractSolver):
        tol: float = 1.0

    with pytest.raises(TypeError, match=r"StillAbstract.*\bstep\b"):
        StillAbstract(1e-3)


def test_abstract_jit_method_is_enforced():
    """``@sf.jit_method`` over an ``@abc.abstractmethod`` stays abstract until overridden."""

    class Base(sf.Struct):
        w: jax.Array

        @sf.jit_method
        @abc.abstractmethod
        def apply(self, x): ...

    class Sub(Base):
        pass

    class Concrete(Base):
        @sf.jit_method
        def apply(self, x):
            return self.w * x

    for cls in (Base, Sub):
        with pytest.raises(TypeError, match=rf"{cls.__name__}.*\bapply\b"):
            cls(jnp.ones(2))
    np.testing.assert_allclose(Concrete(jnp.ones(2)).apply(3.0), np.full(2, 3.0))


def test_abstract_method_on_a_decorated_class():
    """``@sf.dataclass`` enforces abstract methods as ``sf.Struct`` does."""

    @sf.dataclass
    class Base:
        @abc.abstractmethod
        def f(self): ...

    with pytest.raises(TypeError, match=r"Base.*\bf\b"):
        Base()


class AbstractModel(sf.Struct):
    w: jax.Array
    size: sf.AbstractVar[int]
    kind: sf.AbstractClassVar[str]


class Model(AbstractModel):
    b: jax.Array
    size: sf.Static[int]
    kind: ClassVar[str] = "dense"


def test_abstract_var_is_not_a_field_and_keeps_positional_order():
    """``AbstractVar``/``AbstractClassVar`` make no field: the subclass's fields come after the
    base's, in the order they are written, as in equinox."""
    assert [f.name for f in dataclasses.fields(AbstractModel)] == ["w"]
    assert [f.name for f in dataclasses.fields(Model)] == ["w", "b", "size"]
    m = Model(jnp.ones(2), jnp.zeros(2), 3)
    assert m.size == 3 and m.kind == "dense" and sf.static_fields(Model) == ("size",)


def test_undefined_abstract_var_is_refused_naming_it():
    """A class that leaves an ``AbstractVar`` or ``AbstractClassVar`` undefined is refused on
    construction, naming the class, the variable and how to define it."""

    class NoKind(AbstractModel):
        size: int = 2

    class NoSize(AbstractModel):
        kind: ClassVar[str] = "x"

    with pytest.raises(TypeError, match=r"NoKind: .*abstract class variable `kind`.*ClassVar"):
        NoKind(jnp.ones(2))
    with pytest.raises(TypeError, match=r"NoSize: .*abstract variable `size`.*field, a property"):
        NoSize(jnp.ones(2))
    with pytest.raises(TypeError, match=r"AbstractModel: .*`kind`.*`size`|AbstractModel: .*`size`.*`kind`"):
        AbstractModel(jnp.ones(2))


def test_abstract_var_defined_by_a_property_or_class_attribute():
    """An ``AbstractVar`` may be defined as a property or a plain class attribute."""

    class ByProperty(AbstractModel):
        kind: ClassVar[str] = "p"

        @property
        def size(self):
            return self.w.shape[0]

    class ByAttribute(AbstractModel):
        kind: ClassVar[str] = "a"
        size = 5

    assert ByProperty(jnp.ones(4)).size == 4
    assert ByAttribute(jnp.ones(4)).size == 5


def test_abstract_var_with_a_value_is_refused():
    """An ``AbstractVar`` given a value in the class that declares it is refused, naming it."""
    with pytest.raises(TypeError, match=r"Bad\.n: .*AbstractVar.*no value"):

        class Bad(sf.Struct):
            n: sf.AbstractVar[int] = 3


def test_abstract_class_with_a_custom_init_is_inherited():
    """A user ``__init__`` on an abstract base is inherited by a concrete subclass."""

    class Base(sf.Struct):
        w: jax.Array
        n: sf.AbstractVar[int]

        def __init__(self, size):
            self.w = jnp.zeros(size)

    class Concrete(Base):
        n: ClassVar[int] = 1

    assert Concrete(3).w.shape == (3,)
    with pytest.raises(TypeError, match=r"Base: .*`n`"):
        Base(3)


def test_equinox_abstract_annotations_are_understood():
    """``eqx.AbstractVar``/``eqx.AbstractClassVar`` on an ``sf.Struct`` work as ours do."""
    eqx = pytest.importorskip("equinox")

    class Base(sf.Struct):
        w: jax.Array
        n: eqx.AbstractVar[int]
        k: eqx.AbstractClassVar[int]

    class Concrete(Base):
        n: int
        k: ClassVar[int] = 2

    assert [f.name for f in dataclasses.fields(Base)] == ["w"]
    assert Concrete(jnp.ones(1), 4).n == 4
    with pytest.raises(TypeError, match=r"Base: .*`k`"):
        Base(jnp.ones(1))


def test_strict_is_accepted():
    """``strict=True`` is accepted, as equinox 0.13 accepts it (its rules are not enforced)."""

    class AbstractThing(sf.Struct, strict=True):
        @abc.abstractmethod
        def f(self): ...

    class Thing(AbstractThing, strict=True):
        x: jax.Array

        def f(self):
            return self.x

    assert Thing(jnp.ones(1)).f().shape == (1,)


_WITHOUT_FUTURE = '''
from typing import ClassVar
import jax
import staticfield as sf

class Base(sf.Struct):
    w: jax.Array
    n: sf.AbstractVar[int]
    k: sf.AbstractClassVar[int]

class Concrete(Base):
    b: jax.Array
    n: int
    k: ClassVar[int] = 2
'''


def test_abstract_annotations_as_objects():
    """The same rules hold where annotations are objects (no ``from __future__ import
    annotations``)."""
    namespace: dict = {"__name__": "abstract_objects"}
    exec(compile(_WITHOUT_FUTURE, "<abstract_objects>", "exec", dont_inherit=True), namespace)
    Base, Concrete = namespace["Base"], namespace["Concrete"]
    assert [f.name for f in dataclasses.fields(Concrete)] == ["w", "b", "n"]
    assert Concrete(jnp.ones(1), jnp.ones(1), 3).n == 3
    with pytest.raises(TypeError, match=r"Base: .*`k`"):
        Base(jnp.ones(1))


def test_abstract_class_is_refused_on_every_call():
    """The refusal holds however often one call site constructs an abstract class (CPython
    3.13 specializes a warm class call and skips object.__new__'s own abstract check)."""

    class Base(sf.Struct):
        w: jax.Array

        @abc.abstractmethod
        def apply(self, x): ...

    class Sub(Base):
        pass

    built = []
    for _ in range(64):
        for cls in (Base, Sub):
            try:
                built.append(cls(jnp.ones(1)))
            except TypeError as err:
                assert cls.__name__ in str(err) and "apply" in str(err)
    assert built == []


# ----- abstractness decided at instantiation, never at class creation ------------------------
def test_a_class_variable_set_by_a_hook_after_super_makes_the_class_concrete():
    """A base whose __init_subclass__ sets the abstract class variable after
    super().__init_subclass__() (when the class is already decorated): its subclasses are
    concrete; the base itself is still refused."""

    class Base(sf.Struct):
        term_structure: sf.AbstractClassVar[str]
        w: jax.Array

        def __init_subclass__(cls, **kwargs):
            super().__init_subclass__(**kwargs)
            cls.term_structure = cls.__name__.lower()

    class Euler(Base):
        pass

    class Heun(Euler):
        order: int = sf.static(default=2)

    assert Euler(jnp.ones(1)).term_structure == "euler"
    assert Heun(jnp.ones(1)).order == 2
    with pytest.raises(TypeError, match=r"Base: .*`term_structure`"):
        Base(jnp.ones(1))


def test_a_metaclass_that_sets_a_class_variable_after_the_class_is_made():
    """A library's metaclass (deriving from type, as sf.Struct's metaclass is type) that
    defines the abstract class variable after type.__new__ (so after decoration)."""

    class Meta(type):
        def __new__(mcs, name, bases, ns, **kwargs):
            cls = super().__new__(mcs, name, bases, ns, **kwargs)
            if name != "Base":
                cls.tableau = (1, 2)
            return cls

    class Base(sf.Struct, metaclass=Meta):
        tableau: sf.AbstractClassVar[tuple]
        w: jax.Array

    class Concrete(Base):
        pass

    assert type(Concrete) is Meta and Concrete(jnp.ones(1)).tableau == (1, 2)
    with pytest.raises(TypeError, match=r"Base: .*`tableau`"):
        Base(jnp.ones(1))


def test_an_abstract_method_defined_by_a_hook_after_super_makes_the_class_concrete():
    """A base whose __init_subclass__ defines the abstract method after
    super().__init_subclass__() (when the class is already decorated), and a metaclass that
    defines it after type.__new__: the subclasses build and run; a subclass the hook skips
    and the base itself are still refused, naming the method."""

    class Base(sf.Struct):
        w: jax.Array

        @abc.abstractmethod
        def step(self, x): ...

        def __init_subclass__(cls, scale=None, **kwargs):
            super().__init_subclass__(**kwargs)
            if scale is not None:
                cls.step = lambda self, x: x * scale + self.w

    class Doubler(Base, scale=2.0):
        pass

    class Tripler(Doubler, scale=3.0):
        pass

    class Skipped(Base):
        pass

    np.testing.assert_allclose(Doubler(jnp.ones(1)).step(jnp.ones(1)), [3.0])
    np.testing.assert_allclose(Tripler(jnp.ones(1)).step(jnp.ones(1)), [4.0])
    for cls in (Base, Skipped):
        with pytest.raises(TypeError, match=rf"{cls.__name__}\b.*`?step"):
            cls(jnp.ones(1))

    class Meta(type):
        def __new__(mcs, name, bases, ns, **kwargs):
            cls = super().__new__(mcs, name, bases, ns, **kwargs)
            if name != "MBase":
                cls.apply = lambda self: self.w + 1
            return cls

    class MBase(sf.Struct, metaclass=Meta):
        w: jax.Array

        @abc.abstractmethod
        def apply(self): ...

    class MConcrete(MBase):
        pass

    np.testing.assert_allclose(MConcrete(jnp.ones(1)).apply(), [2.0])
    with pytest.raises(TypeError, match=r"MBase\b.*`?apply"):
        MBase(jnp.ones(1))


def _typechecked(cls):
    """A jaxtyping-style class decorator (its import hook applies one to every class): it
    wraps __init__ in a function of its own, which does not carry the wrapped one's marks."""
    init = cls.__init__

    def __init__(self, *args, **kwargs):
        __init__.calls += 1
        init(self, *args, **kwargs)

    __init__.calls = 0
    __init__.__wrapped__ = init
    cls.__init__ = __init__
    return cls


def test_an_init_wrapper_over_an_abstract_base_leaves_subclasses_concrete():
    """The abstract base's __init__ wrapped by a type-checking decorator: a concrete
    subclass that defines the abstract variable (as a field) and the method builds; the
    base is still refused."""

    @_typechecked
    class AbstractSRK(sf.Struct):
        c_mid: sf.AbstractVar[float]
        w: jax.Array

        @abc.abstractmethod
        def step(self, x): ...

    @_typechecked
    class ShARK(AbstractSRK):
        c_mid: float = sf.static(default=0.5)

        def step(self, x):
            return x * self.c_mid

    @_typechecked
    class SRA1(AbstractSRK):  # inherits the wrapped __init__, defines c_mid as a property
        @property
        def c_mid(self):
            return 0.25

        def step(self, x):
            return x

    s = ShARK(jnp.ones(1))
    assert s.c_mid == 0.5 and s.step(2.0) == 1.0
    assert SRA1(jnp.ones(1)).c_mid == 0.25
    for _ in range(3):
        with pytest.raises(TypeError, match=r"AbstractSRK\b.*\b(c_mid|step)\b"):
            AbstractSRK(jnp.ones(1))
