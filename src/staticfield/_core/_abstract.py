"""Abstract bases as in equinox: abstract methods, ``AbstractVar[T]``, ``AbstractClassVar[T]``.

``sf.Struct`` has no ``ABCMeta``, so the decorator computes the abstract methods itself
(as ``abc.update_abstractmethods`` does). A class's ``__abstractmethods__`` (which makes
Python's ``object.__new__`` refuse it, and ``inspect.isabstract`` true) holds only the
methods it declares abstract itself: a subclass that merely inherits one is judged at
instantiation, since a hook may define the method after the class is decorated. ``AbstractVar[T]`` / ``AbstractClassVar[T]``
annotations (ours or equinox's, objects or strings) declare a variable that a subclass
must define: they make no dataclass field (so positional arguments are those of the
fields alone, as in equinox). Whether a class is abstract is decided at each
instantiation until one succeeds (then remembered), never only at class creation: a class
that looks abstract when it is made gets an ``__init__`` that judges the class being
instantiated again and refuses, naming what is left, while anything is (a class hook or
metaclass may define a class variable after the class is decorated; a wrapper such as
jaxtyping's may carry the base's ``__init__`` into a concrete subclass). Python's own
check in ``object.__new__`` is skipped by CPython 3.13's specialized call of a class
whose metaclass is ``type``, so it cannot be the only one. ``_decorator`` calls ``hide_annotations`` before
stdlib ``dataclass`` sees the class and ``install`` after the class is built.
"""

from __future__ import annotations

import contextlib
import inspect
import re
import sys
import weakref
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Generic, Iterator, TypeVar

from typing_extensions import Annotated, get_args, get_origin

from . import _errors

_T = TypeVar("_T")

if TYPE_CHECKING:
    AbstractVar = Annotated[_T, "AbstractVar"]
    from typing import ClassVar as AbstractClassVar
else:

    class AbstractVar(Generic[_T]):
        """``x: sf.AbstractVar[T]`` on an abstract base: every concrete subclass defines
        ``x``, as a field, a property or a class attribute. It makes no field, so it
        never changes ``__init__``'s positional parameters. Constructing a class that
        leaves it undefined is a ``TypeError`` naming it."""

    class AbstractClassVar(Generic[_T]):
        """``x: sf.AbstractClassVar[T]`` on an abstract base: every concrete subclass
        defines ``x`` as a class attribute (``x: ClassVar[T] = ...``). It makes no field.
        Constructing a class that leaves it undefined is a ``TypeError`` naming it."""


_KINDS = {"AbstractVar": "var", "AbstractClassVar": "classvar"}
_IN_STRING = re.compile(r"^\s*(?:[A-Za-z_][\w]*\.)*(AbstractVar|AbstractClassVar)\[")
_CLASSVAR_IN_STRING = re.compile(r"^\s*(?:[A-Za-z_][\w]*\.)*ClassVar\b")


def _kind_of_object(annotation: Any) -> str | None:
    origin = get_origin(annotation)
    if origin is Annotated:
        return _kind_of_object(get_args(annotation)[0])
    if origin is ClassVar or annotation is ClassVar:
        return "plain classvar"
    if isinstance(origin, type) and origin.__name__ in _KINDS and (
        origin.__module__ == __name__ or origin.__module__.split(".")[0] == "equinox"
    ):
        return _KINDS[origin.__name__]
    return None


def kind(annotation: Any, globalns: dict, localns: dict) -> str | None:
    """``"var"``, ``"classvar"`` (abstract), ``"plain classvar"`` or ``None`` (a field)."""
    if isinstance(annotation, str):
        found = _IN_STRING.match(annotation)
        if found:
            return _KINDS[found.group(1)]
        if _CLASSVAR_IN_STRING.match(annotation):
            return "plain classvar"
        try:  # an alias (`from staticfield import AbstractVar as AV`): read the object
            annotation = eval(annotation, globalns, localns)  # noqa: S307 - annotations only
        except Exception:  # noqa: BLE001 - a string we cannot read names a field, as stdlib's
            return None
    return _kind_of_object(annotation)


def _namespaces(cls: type) -> tuple[dict, dict]:
    module = sys.modules.get(cls.__module__)
    return (dict(vars(module)) if module else {}), {**vars(cls), cls.__name__: cls}


def _own_kinds(cls: type) -> dict[str, str | None]:
    globalns, localns = _namespaces(cls)
    return {
        name: kind(ann, globalns, localns)
        for name, ann in cls.__dict__.get("__annotations__", {}).items()
    }


@contextlib.contextmanager
def hide_annotations(cls: type) -> Iterator[None]:
    """While stdlib ``dataclass`` runs: the class's abstract annotations are out of its
    ``__annotations__`` (so they make no field), and put back after. An abstract variable
    given a value in the same class is refused, naming it."""
    own = cls.__dict__.get("__annotations__")
    abstract = {name for name, k in _own_kinds(cls).items() if k in ("var", "classvar")}
    for name in abstract:
        if name in cls.__dict__:
            raise TypeError(_errors.ABSTRACT_WITH_VALUE.format(cls=cls.__qualname__, field=name))
    if not abstract or own is None:
        yield
        return
    cls.__annotations__ = {k: v for k, v in own.items() if k not in abstract}
    try:
        yield
    finally:
        cls.__annotations__ = own


def _unresolved(cls: type) -> tuple[frozenset[str], frozenset[str]]:
    """The abstract variables and class variables ``cls`` leaves undefined (equinox's rule:
    a later annotation or a name in a later class's namespace defines one)."""
    variables: set[str] = set()
    class_variables: set[str] = set()
    for klass in reversed(cls.__mro__):
        for name, k in _own_kinds(klass).items():
            if k == "classvar":
                variables.discard(name)
                class_variables.add(name)
            elif k == "var":
                if name not in class_variables:
                    variables.add(name)
            else:
                class_variables.discard(name)
                if k != "plain classvar":
                    variables.discard(name)
        for name in klass.__dict__:
            variables.discard(name)
            class_variables.discard(name)
    return frozenset(variables), frozenset(class_variables)


def _abstract_methods(cls: type) -> frozenset[str]:
    """What ``abc.update_abstractmethods`` computes, for a class without ``ABCMeta``; a
    name is looked up in the class dicts (so a descriptor's ``__get__`` never runs)."""
    names = {n for n, v in cls.__dict__.items() if getattr(v, "__isabstractmethod__", False)}
    for base in cls.__mro__[1:]:
        for name in getattr(base, "__abstractmethods__", ()):
            for klass in cls.__mro__:
                if name in klass.__dict__:
                    if getattr(klass.__dict__[name], "__isabstractmethod__", False):
                        names.add(name)
                    break
    return frozenset(names)


def install(cls: type) -> None:
    """Record what ``cls`` leaves abstract now; if anything, its ``__init__`` decides again
    at each instantiation (see ``_checking_init``)."""
    methods = _abstract_methods(cls)
    # Python's flag (object.__new__ refuses, inspect.isabstract) only for the methods the
    # class itself declares abstract: an inherited one may still be defined by a hook or a
    # metaclass after this, and object.__new__ runs before __init__ could judge again.
    own = frozenset(n for n in methods if n in cls.__dict__)
    if own or getattr(cls, "__abstractmethods__", None):
        cls.__abstractmethods__ = own  # type: ignore[misc] # Python refuses the class
    variables, class_variables = _unresolved(cls)
    cls.__abstractvars__ = variables  # type: ignore[attr-defined] # equinox's names
    cls.__abstractclassvars__ = class_variables  # type: ignore[attr-defined]
    if methods or variables or class_variables:
        # Python's own refusal (object.__new__) is skipped by CPython 3.13's specialized
        # class call for a class whose metaclass is plain `type`: refuse in __init__ too.
        cls.__init__ = _checking_init(cls, cls.__init__)  # type: ignore[misc]


# Classes found concrete at an instantiation: never looked at again.
_CONCRETE: weakref.WeakSet[type] = weakref.WeakSet()


def _judge(klass: type) -> None:
    """Refuse ``klass`` (the class being instantiated) if it is abstract now, naming what
    it leaves undefined; else remember it as concrete. Decided here, not when the class
    was made: a class hook may assign a class variable after ``super().__init_subclass__()``
    (when the class is already decorated), a metaclass after ``type.__new__``."""
    methods = _abstract_methods(klass)
    variables, class_variables = _unresolved(klass)
    if methods or variables or class_variables:
        raise TypeError(_message(klass, methods, variables, class_variables))
    if getattr(klass, "__abstractmethods__", None):
        klass.__abstractmethods__ = frozenset()  # type: ignore[misc]
    klass.__abstractvars__ = klass.__abstractclassvars__ = frozenset()  # type: ignore[attr-defined]
    _CONCRETE.add(klass)


def _message(cls: type, methods: frozenset[str], variables: frozenset[str], class_variables: frozenset[str]) -> str:
    what = [f"abstract method `{n}`" for n in sorted(methods)]
    what += [f"abstract class variable `{n}` (sf.AbstractClassVar)" for n in sorted(class_variables)]
    what += [f"abstract variable `{n}` (sf.AbstractVar)" for n in sorted(variables)]
    how = []
    if methods:
        how.append("each method")
    if class_variables:
        how.append("a class variable as `NAME: ClassVar[T] = value`")
    if variables:
        how.append("a variable as a field, a property or a class attribute")
    return _errors.ABSTRACT_UNDEFINED.format(cls=cls.__qualname__, what=", ".join(what), how=" and ".join(how))


def _checking_init(cls: type, init: Callable[..., None]) -> Callable[..., None]:
    """``cls.__init__`` for a class that looked abstract when it was made: it judges the
    class of the instance being built (``cls`` or a subclass that inherits this
    ``__init__``, also through a wrapper such as jaxtyping's) until one is concrete."""

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        __tracebackhide__ = True
        klass = self.__class__
        if klass not in _CONCRETE:
            _judge(klass)
        init(self, *args, **kwargs)

    # A subclass inherits what the class itself would run (see _decorator._user_init).
    if getattr(init, "__staticfield_custom_init__", False):
        __init__.__staticfield_custom_init__ = True  # type: ignore[attr-defined]
        __init__.__wrapped__ = init.__wrapped__  # type: ignore[attr-defined]
    else:
        __init__.__staticfield_generated__ = True  # type: ignore[attr-defined]
    __init__.__qualname__ = f"{cls.__qualname__}.__init__"
    __init__.__doc__ = init.__doc__
    try:  # inspect.signature(Cls) of a class found concrete later shows its fields
        __init__.__signature__ = inspect.signature(init)  # type: ignore[attr-defined]
    except (TypeError, ValueError):
        pass
    return __init__
