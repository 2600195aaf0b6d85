"""``sf.Struct``: ``@sf.dataclass`` by inheritance.

Every subclass is decorated as it is created (class keywords are the decorator's
options: ``class P(sf.Struct, kw_only=True)``), so no subclass can be left
undecorated. The base carries ``dataclass_transform`` and a typed ``replace``,
so pyright and mypy see the generated ``__init__`` and ``params.replace(w=...)``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from typing_extensions import Self, dataclass_transform

from ._decorator import dataclass
from ._field import field, static
from ._instance import replace as _replace


@dataclass_transform(
    eq_default=True,
    frozen_default=True,
    field_specifiers=(field, static, dataclasses.field),
)
class Struct:
    """Base class of frozen pytree dataclasses: ``class Params(sf.Struct): ...``.

    The same as decorating each subclass with ``@sf.dataclass``; class keywords
    (``kw_only``, ``repr``, ``eq``, ``check``, ...) are its options.
    """

    def __init_subclass__(cls, **options: Any) -> None:
        super().__init_subclass__()
        if "__staticfield_recording__" in cls.__dict__:  # a deps="read" trace's recording self
            return
        dataclass(**options)(cls)

    def __init__(self) -> None:
        raise TypeError(
            "sf.Struct is a base class: subclass it with fields "
            "(class Params(sf.Struct): w: jax.Array) and construct the subclass."
        )

    __init__.__staticfield_generated__ = True  # type: ignore[attr-defined] # not a user __init__ to inherit

    def replace(self, **changes: Any) -> Self:
        """Return a copy with ``changes`` applied (``sf.replace(self, **changes)``)."""
        return _replace(self, **changes)
