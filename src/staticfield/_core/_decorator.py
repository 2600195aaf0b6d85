"""``@sf.dataclass``: build the spec, generate the methods, register with JAX."""

from __future__ import annotations

import copy
import dataclasses
import functools
import sys
import types
from typing import Any, Callable, TypeVar, overload

import jax
from typing_extensions import dataclass_transform

from . import _compat, _deep, _display, _errors, _instance, _state
from ._codegen import generate
from ._field import CONVERTER, MARKS, SHARDING, STATIC, annotation_is_static, field, given_marks, is_static, static
from ._freeze import freeze
from ._spec import SPEC_ATTR, Spec, is_skeleton, register

C = TypeVar("C", bound=type)

_REFUSED = {
    "order": "ordering compares arrays element-wise, which has no single bool answer",
    "unsafe_hash": "the hash is already defined, consistent with ==, and safe for arrays",
    "slots": "instances keep their fields in __dict__ so that unflatten is one update",
}


def _static_annotations(cls: type) -> frozenset[str]:
    """Names of the class's own fields annotated ``Static[T]`` (object or string annotation)."""
    module = sys.modules.get(cls.__module__)
    globalns = dict(vars(module)) if module else {}
    localns = {**vars(cls), cls.__name__: cls}
    return frozenset(
        name
        for name, ann in cls.__dict__.get("__annotations__", {}).items()
        if annotation_is_static(ann, globalns, localns)
    )


def _inherited_static_annotations(cls: type) -> frozenset[str]:
    """``Static[T]`` fields declared on undecorated (plain stdlib dataclass) bases, whose
    Field objects carry no static mark of their own."""
    names: set[str] = set()
    for base in cls.__mro__[1:]:
        if SPEC_ATTR not in base.__dict__ and "__dataclass_fields__" in base.__dict__:
            names |= _static_annotations(base)
    return frozenset(names)


def _mark_static_annotations(cls: type, static_names: frozenset[str]) -> None:
    """Record ``x: Static[T]`` as static metadata on the dataclass field (a copy, where the
    Field object is a base's)."""
    fields = cls.__dict__["__dataclass_fields__"]
    for name in static_names:
        f = fields.get(name)
        if f is None or f._field_type is not dataclasses._FIELD:  # type: ignore[attr-defined]
            continue
        if not f.metadata.get(STATIC, False):
            if name not in cls.__dict__.get("__annotations__", {}):
                f = fields[name] = copy.copy(f)
            f.metadata = types.MappingProxyType({**f.metadata, STATIC: True})


class _Constant:
    """A default_factory returning one immutable value (a jax.Array default)."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def __call__(self) -> Any:
        return self.value

    def __repr__(self) -> str:
        return f"<constant {_display.summary(self.value)}>"


def _prepare_defaults(cls: type, static_names: frozenset[str]) -> None:
    """Before stdlib sees the class: freeze static defaults (a list default becomes a
    tuple) and let a jax.Array be a default (it is immutable, so sharing it is safe)."""
    for name in cls.__dict__.get("__annotations__", {}):
        if name not in cls.__dict__:
            continue
        value = cls.__dict__[name]
        f = value if isinstance(value, dataclasses.Field) else None
        default = f.default if f is not None else value
        if default is dataclasses.MISSING:
            continue
        static = (f is not None and is_static(f)) or name in static_names
        if static:
            frozen = freeze(default, f"{cls.__qualname__}.{name}", name)
            if f is not None:
                f.default = frozen
            else:
                setattr(cls, name, frozen)
        elif isinstance(default, jax.Array) and not isinstance(default, _compat.Tracer):
            if f is None:
                setattr(cls, name, dataclasses.field(default_factory=_Constant(default)))
            else:
                f.default, f.default_factory = dataclasses.MISSING, _Constant(default)


def _check_marks(cls: type, annotated: frozenset[str]) -> None:
    """Refuse a field marked both static and dynamic (``sf.field(static=False)`` with
    ``metadata={"pytree_node": False}``, or under a ``sf.Static[T]`` annotation), naming
    the field and the two marks. Runs before the annotations are recorded as metadata."""
    for f in cls.__dict__["__dataclass_fields__"].values():
        if f._field_type is not dataclasses._FIELD:  # type: ignore[attr-defined]
            continue
        marks = list(f.metadata.get(MARKS, given_marks(f.metadata)))
        if f.name in annotated:
            marks.append(("the annotation sf.Static[...]", True))
        yes = [text for text, says in marks if says]
        no = [text for text, says in marks if not says]
        if yes and no:
            raise TypeError(_errors.CONTRADICTORY_MARKS.format(
                cls=cls.__qualname__, field=f.name, static=yes[0], dynamic=no[0]))


def _check_field_options(cls: type) -> None:
    """Refuse field options that cannot work, naming the class and field."""
    for f in cls.__dict__["__dataclass_fields__"].values():
        conv = f.metadata.get(CONVERTER)
        if conv is not None and not callable(conv):
            what = type(conv).__name__
            raise TypeError(_errors.BAD_CONVERTER.format(cls=cls.__qualname__, field=f.name, type=what))
        if is_static(f) and f.metadata.get(SHARDING) is not None:
            raise TypeError(_errors.STATIC_SHARDING.format(cls=cls.__qualname__, field=f.name))


def _wrap_custom_init(user_init: Callable[..., None], cls: type) -> Callable[..., None]:
    """``cls.__init__`` for a user-written ``__init__`` (the class's own, or inherited)."""
    init_custom = _state.init_custom

    @functools.wraps(user_init)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        init_custom(cls, user_init, self, args, kwargs)

    __init__.__staticfield_custom_init__ = True  # type: ignore[attr-defined]
    return __init__


def _is_generated_init(fn: Any, owner: type) -> bool:
    """Whether ``fn``, found on ``owner``, is a generated ``__init__`` (ours or stdlib's)."""
    if getattr(fn, "__staticfield_generated__", False) or fn is object.__init__:
        return True
    code = getattr(fn, "__code__", None)
    return (
        "__dataclass_fields__" in owner.__dict__
        and code is not None
        and code.co_filename.startswith("<")
    )


def _user_init(cls: type) -> Callable[..., None] | None:
    """The user-written ``__init__`` the class uses: its own, or (equinox's rule) the one it
    inherits when it defines none; ``None`` where a generated one is right."""
    for klass in cls.__mro__:
        fn = klass.__dict__.get("__init__")
        if fn is None:
            continue
        if getattr(fn, "__staticfield_custom_init__", False):
            return fn.__wrapped__  # type: ignore[no-any-return]
        return None if _is_generated_init(fn, klass) else fn
    return None


def _was_stdlib_dataclass(cls: type) -> bool:
    return "__dataclass_fields__" in cls.__dict__ and SPEC_ATTR not in cls.__dict__


def _restore_stdlib_fields(cls: type) -> None:
    """``@sf.dataclass`` over a stdlib dataclass: put its Field objects back in the class
    body, so that processing it again keeps their metadata (static marks, converters)."""
    for name, f in cls.__dict__["__dataclass_fields__"].items():
        if name in cls.__dict__.get("__annotations__", {}):
            setattr(cls, name, f)
    for name in ("__eq__", "__hash__", "__repr__", "__setattr__", "__delattr__", "__init__"):
        fn = cls.__dict__.get(name)
        if fn is not None and _is_generated_init(fn, cls):  # generated by stdlib, not the user
            delattr(cls, name)
    if cls.__dict__.get("__hash__", 0) is None:
        delattr(cls, "__hash__")


def _has_own_replace(cls: type) -> bool:
    """The class (or a decorated base) defines its own ``replace``: keep it. A stub on an
    undecorated base (``flax.struct.PyTreeNode`` style) does not count."""
    for klass in cls.__mro__:
        fn = klass.__dict__.get("replace")
        if fn is None:
            continue
        if klass is cls:
            return fn is not _instance._replace_method
        return SPEC_ATTR in klass.__dict__ and fn is not _instance._replace_method
    return False


def _build(cls: C, *, init: bool, repr: bool, eq: bool, kw_only: bool, match_args: bool, check: bool) -> C:
    if not isinstance(cls, type):
        raise TypeError(f"@sf.dataclass decorates a class, got {type(cls).__name__}.")
    if SPEC_ATTR in cls.__dict__:
        raise TypeError(f"{cls.__qualname__} is already an @sf.dataclass; decorate it once.")
    for reserved in _state.DERIVED:
        if reserved in cls.__dict__.get("__annotations__", {}):
            raise TypeError(f"{cls.__qualname__}: the field name {reserved!r} is reserved by staticfield.")
    if "__slots__" in cls.__dict__:
        raise TypeError(_errors.SLOTS.format(cls=cls.__qualname__))
    provisional = is_skeleton(cls)
    if _was_stdlib_dataclass(cls):
        _restore_stdlib_fields(cls)
    user_init = _user_init(cls)
    static_annotated = _static_annotations(cls)
    _prepare_defaults(cls, static_annotated)
    try:
        dataclasses.dataclass(
            cls, init=False, repr=False, eq=False, frozen=False, match_args=match_args, kw_only=kw_only
        )
    except ValueError as e:
        if "mutable default" not in str(e):
            raise
        raise ValueError(
            f"{cls.__qualname__}: {e} (a default is shared by every instance, so a mutable "
            "one would leak changes between them). Pass default_factory=..., or for a "
            "NumPy array default use a jax array or make the field static."
        ) from None
    annotated = static_annotated | _inherited_static_annotations(cls)
    _check_marks(cls, annotated)
    _mark_static_annotations(cls, annotated)
    _check_field_options(cls)
    all_fields = cls.__dict__["__dataclass_fields__"]
    initvars = [f for f in all_fields.values() if f._field_type is dataclasses._FIELD_INITVAR]  # type: ignore[attr-defined]
    spec = Spec(cls, check=check)
    spec.provisional = provisional
    make_init = init and user_init is None
    generated = generate(spec, initvars, make_init)
    setattr(cls, SPEC_ATTR, spec)
    if make_init:
        cls.__init__ = generated["__init__"]  # type: ignore[misc]
    elif user_init is not None:
        cls.__init__ = _wrap_custom_init(user_init, cls)  # type: ignore[misc]
    own = cls.__dict__
    methods = dict(_instance.METHODS)
    if repr:
        methods["__repr__"] = _display.__repr__
        if "__repr__" not in own:  # a class's own __repr__ is what IPython should show too
            methods["_repr_pretty_"] = _display._repr_pretty_
            methods["__treescope_repr__"] = _display.__treescope_repr__
    if eq:
        methods.update(_instance.EQ_METHODS)
    for name, fn in methods.items():
        if name not in own or (name == "__hash__" and own[name] is None):
            setattr(cls, name, fn)
    if not _has_own_replace(cls) and "replace" not in spec.name_set:
        cls.replace = _instance._replace_method  # type: ignore[attr-defined]
    _state.install(spec)
    _deep.install(cls)
    register(spec, generated)
    return cls


def _options(cls: Any, options: dict[str, Any]) -> dict[str, Any]:
    """Validate ``@sf.dataclass(**options)``; errors name the class being decorated."""
    who = getattr(cls, "__qualname__", type(cls).__name__)
    for name, why in _REFUSED.items():
        if options.pop(name, False):
            raise TypeError(
                f"{who}: @sf.dataclass({name}=True) is not supported: {why}. Drop `{name}=True`."
            )
    if options.pop("frozen", True) is not True:
        raise TypeError(
            f"{who}: @sf.dataclass(frozen=False) is not supported: static fields are part of "
            "the jit cache key and must not change. Drop `frozen=False`, and use "
            "sf.replace(obj, ...) to make changed copies."
        )
    known = {"init", "repr", "eq", "kw_only", "match_args", "check"}
    unknown = set(options) - known
    if unknown:
        raise TypeError(
            f"{who}: @sf.dataclass got unknown option(s) {', '.join(sorted(unknown))}; "
            f"it takes {', '.join(sorted(known | {'frozen'}))}."
        )
    opts = dict(init=True, repr=True, eq=True, kw_only=False, match_args=True, check=True)
    opts.update(options)
    return opts


@overload
def dataclass(cls: C, /) -> C: ...
@overload
def dataclass(
    *,
    init: bool = True,
    repr: bool = True,
    eq: bool = True,
    kw_only: bool = False,
    match_args: bool = True,
    check: bool = True,
    frozen: bool = True,
) -> Callable[[C], C]: ...


@dataclass_transform(
    eq_default=True,
    frozen_default=True,
    field_specifiers=(field, static, dataclasses.field),
)
def dataclass(cls: Any = None, /, **options: Any) -> Any:
    """Make a frozen dataclass that is a JAX pytree with static and dynamic fields.

    Dynamic fields are the pytree children (traced by jit); static fields
    (``sf.static()``, ``sf.Static[T]``, ``metadata={"static": True}``) are frozen,
    hashable and compared by value, and form the aux_data (the jit cache key).

    Options: ``init``, ``repr``, ``eq`` (default True), ``kw_only``, ``match_args``
    and ``check`` (default True: check dynamic leaves on construction).
    """
    def wrap(c: C) -> C:
        return _build(c, **_options(c, dict(options)))

    return wrap if cls is None else wrap(cls)
