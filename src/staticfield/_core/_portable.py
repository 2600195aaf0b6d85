"""The one identity of a static value (``_identity``), written for another process.

``write(value)`` is text that two processes running the same code produce alike for
values with one identity, whatever their ``PYTHONHASHSEED``, and that differs whenever a
part of the identity differs: no memory address, no ``repr`` that truncates, no order a
process does not iterate in. The program store's ``trust="source"`` keys and the
agreement digests between processes are made of it (``digest``).

The rules, recursively: ``bool``/``int``/``str``/``bytes`` by type and value; floats and
complex numbers by their bits; ``None``, ``Ellipsis``, ``slice`` and ``range``; NumPy
arrays by (shape, dtype, SHA-256 of their bytes), NumPy scalars and dtypes; tuples and
named tuples by class and items; lists, frozensets, sets, dicts and ``sf.FrozenDict`` by
class and items in their iteration order (order is part of the identity; a set's, which
depends on the hash seed, is sorted where processes must agree whatever their seeds); enum members
by class and name; classes by module and qualified name, modules by name; functions by
module, qualified name, code (bytecode, names and constants) and the identities of their
closure cells and defaults; ``functools.partial`` by function, arguments and keywords; a
bound method by its object and name; any other callable that its module and qualified
name find again (``jax.nn.relu``) by that name; ``sf`` instances and dataclasses by class
and fields; ``PartitionSpec``, ``Mesh`` and ``NamedSharding`` by their parts (device ids);
a value whose type defines ``__sf_identity__()`` by what that returns. Anything else (an
object hashed by identity, a type with its own ``__eq__`` only) has no identity across
processes: it is written by its type only and the result is ``partial`` (the store then
keys no program on it; agreement compares its type). A back-reference to a container or
function being written (a cycle) is written as the position of the object it refers to.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import hashlib
import struct
import sys
import types
import warnings
from typing import Any

import numpy as np

from ._errors import StaticFieldWarning
from ._frozendict import FrozenDict
from ._identity import _by_fields

_WARNED: set[type] = set()  # types that got the "no identity across processes" warning

NO_IDENTITY = (
    "{type}: a static value of this type has no identity across processes (it defines its own "
    "__eq__, or is hashed by identity), so the program store's trust=\"source\" keys no program "
    "on it and processes compare its type only. Define {type}.__sf_identity__() returning its "
    "settings as plain values (numbers, strings, tuples, arrays) to have it compared by value."
)


class Portable:
    """A value's cross-process form: ``text``, and ``partial`` when a part of it was written
    by its type only (no identity across processes)."""

    __slots__ = ("text", "partial")

    def __init__(self, text: str, partial: bool) -> None:
        self.text, self.partial = text, partial

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.text.encode("utf-8", "surrogatepass")).hexdigest()


def write(value: Any, warn: bool = True, set_order: bool = True) -> Portable:
    """``value``'s cross-process form (see the module docstring); ``warn``: one
    ``sf.StaticFieldWarning`` per type written by its type only (not an identity-hashed
    object, which was warned about where it became static). ``set_order=False`` writes a
    set's items sorted by their own forms instead of in the order they iterate: the same
    text whatever the process's ``PYTHONHASHSEED`` (agreement between the processes of a
    job, which may run with other seeds; the store keeps the order, for a load without a
    trace must run what was traced for that order)."""
    w = _Writer(warn, set_order)
    text = w.value(value)
    return Portable(text, w.partial)


def digest(value: Any, set_order: bool = True) -> str:
    """SHA-256 of ``write(value, set_order=set_order).text``."""
    return write(value, set_order=set_order).digest


def _qual(t: Any) -> str:
    return f"{getattr(t, '__module__', '?')}.{getattr(t, '__qualname__', getattr(t, '__name__', '?'))}"


def _bits(x: float) -> str:
    return struct.pack("<d", x).hex()


def _found_by_name(value: Any) -> str | None:
    """``module:qualname`` where that name finds ``value`` itself again, else ``None``."""
    module, name = getattr(value, "__module__", None), getattr(value, "__qualname__", None)
    if not isinstance(module, str) or not isinstance(name, str) or "<" in name:
        return None
    found = sys.modules.get(module)  # (the module of a live object is imported)
    for part in name.split("."):
        found = getattr(found, part, None)
        if found is None:
            return None
    return f"{module}:{name}" if found is value else None


class _Writer:
    def __init__(self, warn: bool, set_order: bool = True) -> None:
        self.warn = warn
        self.set_order = set_order
        self.partial = False
        self.open: dict[int, int] = {}  # id -> position, of the containers being written
        self.count = 0

    def value(self, v: Any) -> str:
        t = v.__class__
        if t is bool or t is int or t is str or t is bytes:
            return f"{t.__name__}:{v!r}"
        if t is float:
            return f"float:{_bits(v)}"
        if t is complex:
            return f"complex:{_bits(v.real)}:{_bits(v.imag)}"
        if v is None or v is Ellipsis:
            return repr(v)
        if isinstance(v, enum.Enum):
            return f"enum:{_qual(t)}.{v.name}"
        if isinstance(v, type):
            return f"class:{_qual(v)}"
        if isinstance(v, types.ModuleType):
            return f"module:{v.__name__}"
        if isinstance(v, np.ndarray):
            if v.dtype == object:
                return self.nested(v, "ndarray-object", [*v.shape], list(v.ravel()))
            data = hashlib.sha256(np.ascontiguousarray(v).tobytes()).hexdigest()
            return f"ndarray:{v.shape}:{v.dtype.str}:{data}"
        if isinstance(v, np.generic):
            return f"numpy:{v.dtype.str}:{v.tobytes().hex()}"
        if isinstance(v, np.dtype):
            return f"dtype:{v.str}:{v}"
        if isinstance(v, (slice, range)):
            return f"{t.__name__}({self.value(v.start)},{self.value(v.stop)},{self.value(v.step)})"
        if isinstance(v, (int, float, complex, str, bytes)):  # subclasses
            return f"{_qual(t)}:{self.value(t.__mro__[-2](v))}"
        ident = getattr(t, "__sf_identity__", None)
        if ident is not None:
            return self.nested(v, f"identity {_qual(t)}", [], [ident(v)])
        if isinstance(v, (tuple, list)):
            return self.nested(v, _qual(t), [], list(v))
        if isinstance(v, (frozenset, set)):
            # in the order it iterates; or sorted by form, whatever the hash seed
            return self.nested(v, _qual(t), [], list(v), sort=not self.set_order)
        if isinstance(v, (FrozenDict, dict)):
            return self.nested(v, _qual(t), [], [x for kv in v.items() for x in kv])
        if isinstance(v, functools.partial):
            return self.nested(v, "partial", [], [v.func, v.args, dict(v.keywords)])
        if isinstance(v, types.FunctionType):
            return self.function(v)
        if isinstance(v, types.MethodType):
            return self.nested(v, "method", [v.__func__.__name__], [v.__self__])
        if "__staticfield_spec__" in t.__dict__:
            children, key = v._staticfield_flat
            return self.nested(v, f"sf {_qual(t)}", list(key.names), [*key.values, *children])
        if dataclasses.is_dataclass(v) and _by_fields(t):
            fields = [f.name for f in dataclasses.fields(v)]
            return self.nested(v, f"dataclass {_qual(t)}", fields, [getattr(v, f) for f in fields])
        special = self.jax_value(v, t)
        if special is not None:
            return special
        name = _found_by_name(v)  # jax.nn.relu, a jitted function, a NumPy ufunc's module
        if name is not None:
            return f"named:{name}"
        return self.type_only(v, t)

    def nested(self, v: Any, head: str, names: list, items: list, sort: bool = False) -> str:
        me = id(v)
        if me in self.open:
            return f"@{self.open[me]}"
        self.open[me] = self.count
        self.count += 1
        try:
            written = [self.value(x) for x in items]
            inner = ",".join(sorted(written) if sort else written)
        finally:
            del self.open[me]
        return f"{head}{names if names else ''}({inner})"

    def function(self, fn: types.FunctionType) -> str:
        try:
            cells = [c.cell_contents for c in fn.__closure__ or ()]
        except ValueError:  # an empty cell (a name assigned after the def)
            cells = ["<empty cell>"]
        head = f"function {fn.__module__}.{fn.__qualname__} {self.code(fn.__code__)}"
        return self.nested(fn, head, [], [tuple(cells), fn.__defaults__, fn.__kwdefaults__])

    def code(self, code: types.CodeType) -> str:
        h = hashlib.sha256(code.co_code)
        h.update(repr((code.co_names, code.co_varnames, code.co_freevars, code.co_argcount,
                       code.co_kwonlyargcount, code.co_flags)).encode())
        for const in code.co_consts:
            if isinstance(const, types.CodeType):
                h.update(self.code(const).encode())
            elif isinstance(const, frozenset):  # `x in {"a", "b"}`: code of the same text
                h.update(repr(sorted(map(repr, const))).encode())
            else:
                h.update(repr(const).encode())
        return h.hexdigest()[:32]

    def jax_value(self, v: Any, t: type) -> str | None:
        """JAX's own values that have a cross-process form (``None`` for any other)."""
        module = getattr(t, "__module__", "") or ""
        if not module.startswith("jax"):
            return None
        name = t.__name__
        if name in ("PartitionSpec", "P"):
            return self.nested(v, "PartitionSpec", [], list(v))
        if name == "Mesh":
            ids = np.vectorize(lambda d: d.id)(v.devices).tolist() if v.devices.size else []
            types_ = self.value(tuple(getattr(v, "axis_types", None) or ()))  # Auto, Explicit, ...
            return f"Mesh({self.value(tuple(v.axis_names))},{v.devices.shape},{ids},{types_})"
        if name == "NamedSharding":
            return f"NamedSharding({self.value(v.mesh)},{self.value(v.spec)})"
        if name in ("Jaxpr", "ClosedJaxpr"):
            consts = list(getattr(v, "consts", ()))
            return self.nested(v, f"{name} {hashlib.sha256(str(v).encode()).hexdigest()}", [], consts)
        if hasattr(v, "shape") and hasattr(v, "dtype"):  # a jax.Array, a tracer: never static
            self.partial = True
            return f"array:{tuple(v.shape)}:{v.dtype}"
        return None

    def type_only(self, v: Any, t: type) -> str:
        self.partial = True
        if self.warn and t not in _WARNED and not (t.__hash__ is object.__hash__ and t.__eq__ is object.__eq__):
            _WARNED.add(t)
            warnings.warn(NO_IDENTITY.format(type=t.__qualname__), StaticFieldWarning, stacklevel=4)
        return f"object:{_qual(t)}"
