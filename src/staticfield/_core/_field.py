"""How a field is marked: ``field()``, ``static()`` and ``Static[T]``.

A field's ``metadata`` is the user's: ``sf.field`` adds exactly one key, ``"static"``
(the key ``jax.tree_util.register_dataclass`` reads), and metadata given through
``dataclasses.field`` is kept exactly. staticfield's own facts about a field (the marks
as written, the converter, the sharding, which leaves it takes) live on the ``Field``
object itself: ``sf.field`` returns a ``Field``, a ``dataclasses.Field`` with a few more
slots, and the decorator gives one to a field that another mark (``Static[T]``) made
static.
"""

from __future__ import annotations

import dataclasses
import re
from typing import TYPE_CHECKING, Any, Callable, TypeVar

from typing_extensions import Annotated, get_args, get_origin

if TYPE_CHECKING:
    from jax.sharding import PartitionSpec

T = TypeVar("T")

STATIC = "static"  # jax.tree_util.register_dataclass's convention
PYTREE_NODE = "pytree_node"  # flax.struct's and penzai's: pytree_node=False means static
LEAVES = ("arrays", "any")  # what a dynamic field's leaves may be: sf.field(leaves=...)


class Field(dataclasses.Field):  # type: ignore[type-arg]
    """A ``dataclasses.Field`` that also carries staticfield's facts, out of ``metadata``.

    ``sf_marks``: the static/dynamic marks as written (checked by the decorator);
    ``sf_static``: whether the field is static, once an annotation says so (else None:
    the metadata says); ``sf_converter``, ``sf_sharding``, ``sf_leaves``.
    """

    __slots__ = ("sf_marks", "sf_static", "sf_converter", "sf_sharding", "sf_leaves")

    @classmethod
    def of(cls, base: dataclasses.Field, **facts: Any) -> Field:
        """A ``Field`` with every stdlib slot of ``base`` and ``facts`` (the rest defaulted)."""
        new = cls.__new__(cls)
        for slot in dataclasses.Field.__slots__:
            if hasattr(base, slot):
                setattr(new, slot, getattr(base, slot))
        new.sf_marks = getattr(base, "sf_marks", None)
        new.sf_static = getattr(base, "sf_static", None)
        new.sf_converter = getattr(base, "sf_converter", None)
        new.sf_sharding = getattr(base, "sf_sharding", None)
        new.sf_leaves = getattr(base, "sf_leaves", "arrays")
        for name, value in facts.items():
            setattr(new, f"sf_{name}", value)
        return new


class _StaticMarker:
    """The marker that ``Static[T]`` puts in ``Annotated[T, ...]``."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "staticfield.STATIC"

    def __reduce__(self) -> str:
        return "STATIC_MARKER"


STATIC_MARKER = _StaticMarker()

if TYPE_CHECKING:
    Static = Annotated[T, STATIC_MARKER]
else:
    Static = Annotated[T, STATIC_MARKER]
"""``x: sf.Static[int]`` marks ``x`` as a static field: part of the jit cache key, frozen,
hashable and compared by value and type. The same as ``x: int = sf.static()``."""

_STATIC_IN_STRING = re.compile(r"(^|[\s\[.,(])Static\[")


def field(
    *,
    static: bool | None = None,
    default: Any = dataclasses.MISSING,
    default_factory: Callable[[], Any] | Any = dataclasses.MISSING,
    converter: Callable[[Any], Any] | None = None,
    init: bool = True,
    repr: bool = True,
    kw_only: bool | Any = dataclasses.MISSING,
    metadata: dict[str, Any] | None = None,
    sharding: PartitionSpec | None = None,
    leaves: str = "arrays",
) -> Any:
    """Declare a field of an ``@sf.dataclass``.

    ``static=True`` puts the value in the jit cache key (it must be hashable and is
    frozen: list→tuple, set→frozenset, dict→FrozenDict); otherwise the field is a
    dynamic pytree child. Left out (``None``), the field is dynamic unless another mark
    (``metadata``, a ``sf.Static[T]`` annotation) says static; marks that contradict
    each other are refused when the class is decorated. ``converter`` runs on construction and in ``sf.replace``,
    never on unflatten. ``sharding`` is a ``PartitionSpec`` for ``sf.shardings``.
    ``leaves="any"`` lets a dynamic field hold any pytree leaves: its array leaves are
    traced, and the others (a function, a ``Jaxpr``, a sentinel) are static under jit,
    keyed by value where hashable and by identity otherwise.
    A non-callable converter, or a sharding on a static field, is refused when the
    class is decorated (so the error can name the class and field).
    """
    md = dict(metadata or {})
    marks = given_marks(md, static)
    md[STATIC] = bool(static) or is_static_metadata(md)
    base = dataclasses.field(
        default=default,
        default_factory=default_factory,
        init=init,
        repr=repr,
        kw_only=kw_only,
        metadata=md,
    )
    return Field.of(base, marks=marks, converter=converter, sharding=sharding, leaves=leaves)


def static(**kwargs: Any) -> Any:
    """``sf.static(**kw)`` is ``sf.field(static=True, **kw)``."""
    if "static" in kwargs:
        raise TypeError("sf.static() takes no `static` argument; use sf.field(static=...) instead.")
    return field(static=True, **kwargs)


def given_marks(metadata: Any, static: bool | None = None) -> tuple[tuple[str, bool], ...]:
    """The static/dynamic marks in ``metadata`` (and ``static=`` when given), as
    ``(how it was written, whether it says static)``."""
    marks = []
    if static is not None:
        marks.append((f"sf.field(static={bool(static)})", bool(static)))
    if STATIC in metadata:
        marks.append((f'metadata={{"static": {metadata[STATIC]!r}}}', bool(metadata[STATIC])))
    if PYTREE_NODE in metadata:
        marks.append((f'metadata={{"pytree_node": {metadata[PYTREE_NODE]!r}}}', metadata[PYTREE_NODE] is False))
    return tuple(marks)


def is_static_metadata(metadata: Any) -> bool:
    """What ``metadata`` says: static under register_dataclass's or flax.struct's convention."""
    return bool(metadata.get(STATIC, False)) or metadata.get(PYTREE_NODE, True) is False


def is_static(f: dataclasses.Field) -> bool:
    """True if the ``dataclasses.Field`` ``f`` is static (in the jit cache key)."""
    if not isinstance(f, dataclasses.Field):
        raise TypeError(f"sf.is_static expects a dataclasses.Field, got {type(f).__name__}.")
    said = getattr(f, "sf_static", None)
    return is_static_metadata(f.metadata) if said is None else said


def marks_of(f: dataclasses.Field) -> tuple[tuple[str, bool], ...]:
    """The static/dynamic marks written for ``f`` (``sf.field``'s, else its metadata's)."""
    marks = getattr(f, "sf_marks", None)
    return given_marks(f.metadata) if marks is None else marks


def annotation_is_static(annotation: Any, globalns: dict, localns: dict) -> bool:
    """Whether an annotation (object or string) carries the ``Static`` marker."""
    if isinstance(annotation, str):
        try:
            annotation = eval(annotation, globalns, localns)  # noqa: S307 - annotations only
        except Exception:
            return bool(_STATIC_IN_STRING.search(annotation))
        if isinstance(annotation, str):
            return bool(_STATIC_IN_STRING.search(annotation))
    return _has_marker(annotation)


def _has_marker(annotation: Any) -> bool:
    if get_origin(annotation) is Annotated:
        return any(m is STATIC_MARKER for m in annotation.__metadata__) or _has_marker(
            get_args(annotation)[0]
        )
    return False


def converter_of(f: dataclasses.Field) -> Callable[[Any], Any] | None:
    return getattr(f, "sf_converter", None)


SHARDING = "staticfield.sharding"  # also read from metadata given through dataclasses.field


def sharding_of(f: dataclasses.Field) -> Any:
    own = getattr(f, "sf_sharding", None)
    return f.metadata.get(SHARDING) if own is None else own


def leaves_of(f: dataclasses.Field) -> str:
    """``"any"`` for a field that takes any pytree leaves, else ``"arrays"``."""
    return getattr(f, "sf_leaves", "arrays")
