"""A digest of what a trace produced: the closed jaxpr, structurally, with constants by value.

``trust="trace"`` keys a stored program by this digest, so an entry is loaded only
for a jaxpr equal to the one it was compiled from. The invariant: **two jaxprs with
one digest lower to the same program** (with the same jit options, trace context
and devices, which the key holds beside it). So the digest covers everything
lowering reads: each equation's primitive, parameters, operands and results (by
position, never by object identity), avals with weak types and shardings, effects,
the equation's context (compute type, mesh, XLA metadata), literals and constants by
their bytes, and every sub-jaxpr by recursion. Source locations and debug names are
left out: they change no result.

A value is written only by a rule that sees all of it: Python scalars and strings by
``repr`` (exact for floats), containers item by item, arrays by dtype, shape and a
hash of their bytes, shardings and meshes with their device ids in order, PRNG
implementations and key types (``key<fry>``) as ``_prng`` writes them (a built-in one by
name and JAX's own code; a user's by what its functions lowered in each equation
compute), Python objects by class and state. A value no rule covers (a C object with hidden state, a
Python callable, an array spread over other processes) makes the jaxpr
``Undigestible``: the program is compiled and not stored, never guessed at. The only
callables passed over are the differentiation rules of ``custom_jvp``/``custom_vjp``
calls: by the time a jaxpr is lowered, differentiation has happened, and lowering
uses the primal jaxpr alone. A function of JAX's own (a ``checkpoint`` policy) is
written by its qualified name, the entry's JAX version covering its code, and what it
closes over by value.

A plain walk, memoized per sub-jaxpr object (a layer function jitted once and called
256 times is hashed once), costs a small part of the trace it follows; hashing
``str(jaxpr)`` costs about half of one.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import hashlib
import types
from typing import Any

import jax
import numpy as np

from . import _prng

# Parameters that hold differentiation rules only, per primitive (see the docstring).
_RULES = {
    "custom_jvp_call": ("jvp_jaxpr_fun", "jvp_jaxpr_thunk", "jvp"),
    "custom_vjp_call": ("fwd_jaxpr_thunk", "bwd", "out_trees", "fwd"),
    "custom_vjp_call_jaxpr": ("fwd_jaxpr_thunk", "bwd", "out_trees", "fwd"),
    "custom_lin": ("bwd", "out_avals"),
}
_MAX_DEPTH = 12


class Undigestible(Exception):
    """A jaxpr holds a value the digest cannot tell apart from others by value."""


@dataclasses.dataclass
class Digest:
    """The digest, and per top-level equation its digest, primitive and source line
    (for the checking mode's "first differing equation"); consts the same way. The
    equations are written out on first use: a lookup needs the digest alone."""

    hexdigest: str
    top: list[tuple[str, Any]]  # per top-level equation: its text, and the equation
    consts: list[str]

    @functools.cached_property
    def equations(self) -> list[tuple[str, str, str]]:
        return [(_short(text), eqn.primitive.name, source_line(eqn)) for text, eqn in self.top]


def digest(closed: Any) -> Digest:
    """The digest of a ``ClosedJaxpr`` (see the module docstring)."""
    walker = _Walker()
    jaxpr, consts = closed.jaxpr, closed.consts
    const_parts = [walker.value(c, 0) for c in consts]
    equations: list[tuple[str, Any]] = []
    top = walker.jaxpr(jaxpr, equations)
    h = hashlib.sha256(top.encode())
    for part in const_parts:
        h.update(b"\0" + part.encode())
    return Digest(h.hexdigest(), equations, [_short(p) for p in const_parts])


def _short(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def source_line(eqn: Any) -> str:
    """Where the user's code made ``eqn``: ``file:line (function)``, or ``?``."""
    try:
        from jax._src import source_info_util

        return source_info_util.summarize(eqn.source_info)
    except Exception:
        return "?"


class _Walker:
    def __init__(self) -> None:
        self.memo: dict[int, tuple[Any, str]] = {}  # id(jaxpr) -> (jaxpr kept alive, digest)
        self.objects: dict[int, tuple[Any, str]] = {}  # id(value) -> (value kept alive, text)

    # ----- jaxprs ---------------------------------------------------------------------
    def jaxpr(self, jaxpr: Any, equations: list | None = None) -> str:
        known = self.memo.get(id(jaxpr))
        if known is not None and known[0] is jaxpr and equations is None:
            return known[1]
        names: dict[int, int] = {}

        def bind(var: Any) -> str:
            if type(var).__name__ == "DropVar":
                return "_:" + self.aval(var.aval)
            names[id(var)] = len(names)
            return f"v{names[id(var)]}:" + self.aval(var.aval)

        def use(var: Any) -> str:
            if hasattr(var, "val") and type(var).__name__ == "Literal":
                return "lit(" + self.value(var.val, 1) + ":" + self.aval(var.aval) + ")"
            try:
                return f"v{names[id(var)]}"
            except KeyError:
                raise Undigestible(f"a variable used before it is bound ({var})") from None

        parts = ["in[" + ",".join(map(bind, jaxpr.constvars)) + "|" + ",".join(map(bind, jaxpr.invars)) + "]"]
        for eqn in jaxpr.eqns:
            text = self.equation(eqn, use, bind)
            parts.append(text)
            if equations is not None:
                equations.append((text, eqn))
        parts.append("out[" + ",".join(map(use, jaxpr.outvars)) + "]")
        parts.append("fx[" + ",".join(sorted(self.value(e, 1) for e in jaxpr.effects)) + "]")
        text = _short("\n".join(parts))
        self.memo[id(jaxpr)] = (jaxpr, text)
        return text

    def equation(self, eqn: Any, use: Any, bind: Any) -> str:
        prim = eqn.primitive
        if "callback" in prim.name:  # a host callback: its executable cannot be kept
            raise Undigestible(f"it calls back into Python ({prim.name} at {source_line(eqn)})")
        skip = _RULES.get(prim.name, ())
        params = ",".join(f"{k}={self.value(v, 1)}" for k, v in sorted(eqn.params.items()) if k not in skip)
        ins = ",".join(map(use, eqn.invars))
        outs = ",".join(map(bind, eqn.outvars))
        effects = ",".join(sorted(self.value(e, 1) for e in eqn.effects))
        ctx = self.value(getattr(eqn, "ctx", None), 1)
        try:  # a user-defined PRNG implementation: what its function lowered here computes
            lowered = _prng.lowered(eqn)
        except _prng.Unwritable as exc:
            raise Undigestible(str(exc)) from None
        uses = "" if lowered is None else f" uses[{self.value(lowered, 1)}]"
        return f"{type(prim).__qualname__}:{prim.name}[{params}]({ins})->({outs}) fx[{effects}] ctx[{ctx}]{uses}"

    def aval(self, aval: Any) -> str:
        known = self.objects.get(id(aval))
        if known is not None and known[0] is aval:
            return known[1]
        text = self._aval(aval)
        self.objects[id(aval)] = (aval, text)
        return text

    def _aval(self, aval: Any) -> str:
        if type(aval).__name__ == "ShapedArray":
            dtype = aval.dtype if isinstance(aval.dtype, np.dtype) else self.value(aval.dtype, 1)  # key<fry>
            return (f"{dtype}{list(aval.shape)}w{int(aval.weak_type)}"
                    f"s{self.value(getattr(aval, 'sharding', None), 1)}"
                    f"m{self.value(getattr(aval, 'vma', None), 1)}"
                    f"a{self.value(getattr(aval, 'manual_axis_type', None), 1)}"
                    f"k{self.value(getattr(aval, 'memory_space', None), 1)}"
                    f"l{self.value(getattr(aval, 'layout', None), 1)}")
        return self.value(aval, 1)

    # ----- values ---------------------------------------------------------------------
    def value(self, v: Any, depth: int) -> str:
        if depth > _MAX_DEPTH:
            raise Undigestible(f"a value nested too deep ({type(v).__qualname__})")
        t = type(v)
        if v is None or t in (bool, int, float, complex, str, bytes):
            return f"{t.__name__}:{v!r}"
        if t is tuple or t is list or t is frozenset or t is set:
            items = [self.value(x, depth + 1) for x in v]
            if t in (frozenset, set):
                items.sort()
            return f"{t.__name__}(" + ",".join(items) + ")"
        if isinstance(v, dict):
            items = sorted(f"{self.value(k, depth + 1)}={self.value(x, depth + 1)}" for k, x in v.items())
            return f"{_name(t)}{{" + ",".join(items) + "}"
        if isinstance(v, np.dtype):
            return f"dtype:{v.str}:{v!r}"
        if isinstance(v, enum.Enum):
            return f"{_name(t)}.{v.name}"
        known = self.objects.get(id(v))  # many equations share one context, mesh, sharding
        if known is not None and known[0] is v:
            return known[1]
        text = self._object(v, t, depth)
        self.objects[id(v)] = (v, text)
        return text

    def _object(self, v: Any, t: type, depth: int) -> str:
        name = t.__name__
        if name in ("Jaxpr", "ClosedJaxpr"):
            if name == "ClosedJaxpr":
                consts = ",".join(self.value(c, depth + 1) for c in v.consts)
                return f"closed({self.jaxpr(v.jaxpr)}|{consts})"
            return f"jaxpr({self.jaxpr(v)})"
        if name == "ShapedArray":
            return self.aval(v)
        if _is_array(v):
            if _prng.is_key_dtype(v.dtype):  # a typed key array: its implementation, and its data
                return f"keys:{self.value(v.dtype, depth + 1)}:" + _array(jax.random.key_data(v))
            return _array(v)
        if _prng.is_impl(v):  # by name and JAX's own code, or by what its functions compute
            try:
                return _prng.impl_text(v)
            except _prng.Unwritable as exc:
                raise Undigestible(str(exc)) from None
        impl = _prng.impl_of(v)
        if impl is not None:  # a key element type, key<fry>
            return f"keytype({self.value(impl, depth + 1)})"
        if isinstance(v, tuple):  # a NamedTuple (dimension numbers) or PartitionSpec
            return f"{_name(t)}(" + ",".join(self.value(x, depth + 1) for x in v) + f"|{v!r})"
        device_text = _devices(v)
        if device_text is not None:
            return device_text
        if isinstance(v, type):
            return f"class:{_name(v)}"
        if isinstance(v, types.FunctionType) and v.__code__.co_filename.startswith(_prng.JAX_DIR):
            # JAX's own function (a checkpoint policy): its code is the entry's JAX version's,
            # what it closes over and its defaults are written by value
            try:
                carried = (tuple(c.cell_contents for c in v.__closure__ or ()), v.__defaults__, v.__kwdefaults__)
            except ValueError:  # an empty cell
                raise Undigestible(f"a function of JAX's with an empty closure cell ({_label(v)})") from None
            return f"jaxfn:{v.__module__}.{v.__qualname__}({self.value(carried, depth + 1)})"
        if _is_function(v):
            raise Undigestible(f"a Python function in the program ({_label(v)})")
        if dataclasses.is_dataclass(v):
            fields = ",".join(f"{f.name}={self.value(getattr(v, f.name), depth + 1)}"
                              for f in dataclasses.fields(v))
            return f"{_name(t)}({fields})"
        state = _state(v)
        if state is None:
            if _is_singleton(v):
                return f"{_name(t)}:{v!r}"
            raise Undigestible(f"a value of type {_name(t)} in the program")
        return f"{_name(t)}(" + ",".join(f"{k}={self.value(x, depth + 1)}" for k, x in state) + ")"


def _name(t: type) -> str:
    return f"{t.__module__}.{t.__qualname__}"


def _label(v: Any) -> str:
    return getattr(v, "__qualname__", None) or type(v).__qualname__


def _is_function(v: Any) -> bool:
    return isinstance(v, (types.FunctionType, types.MethodType, types.BuiltinFunctionType)) or type(v).__name__ in (
        "partial", "WrappedFun", "Partial")


def _is_array(v: Any) -> bool:
    return isinstance(v, (np.ndarray, np.generic)) or type(v).__name__ == "ArrayImpl" or (
        hasattr(v, "__jax_array__") and hasattr(v, "dtype") and hasattr(v, "shape"))


def _array(v: Any) -> str:
    if isinstance(v, jax.Array) and not v.is_fully_addressable:
        raise Undigestible("a constant spread over other processes")
    data = np.ascontiguousarray(np.asarray(v))
    if data.dtype == object:
        raise Undigestible("an array of Python objects in the program")
    return f"array:{data.dtype.str}{list(data.shape)}:{hashlib.sha256(data.tobytes()).hexdigest()}"


def _devices(v: Any) -> str | None:
    """A device, mesh or sharding, with its device ids in order (``repr`` leaves them out)."""
    name = type(v).__name__
    if name.endswith("Device") and hasattr(v, "id") and hasattr(v, "platform"):
        return f"device:{v.platform}:{v.id}"
    if name == "Mesh" and hasattr(v, "devices"):
        ids = [getattr(d, "id", None) for d in np.asarray(v.devices).flat]
        return f"mesh:{v!r}:{ids}"
    if name == "AbstractMesh":
        return f"abstract_mesh:{v!r}"
    if name == "NamedSharding":
        mesh = _devices(v.mesh) or f"?{v.mesh!r}"
        return f"sharding:{name}:{mesh}:{v.spec!r}:{getattr(v, 'memory_kind', None)}"
    if name.endswith("Sharding") and hasattr(v, "_device_assignment"):
        try:
            ids = [d.id for d in v._device_assignment]
        except Exception as exc:
            raise Undigestible(f"a sharding whose devices cannot be listed ({name})") from exc
        return f"sharding:{name}:{v!r}:{ids}:{getattr(v, 'memory_kind', None)}"
    return None


def _state(v: Any) -> list[tuple[str, Any]] | None:
    """A Python object's state, by attribute name; ``None`` for a C object."""
    t = type(v)
    if t.__module__ == "builtins" or not hasattr(t, "__mro__"):
        return None
    found: dict[str, Any] = {}
    for klass in t.__mro__:
        for slot in getattr(klass, "__dict__", {}).get("__slots__", ()) or ():
            if isinstance(slot, str) and slot not in ("__dict__", "__weakref__") and hasattr(v, slot):
                found[slot] = getattr(v, slot)
    own = getattr(v, "__dict__", None)
    if own is None and not found:
        return None if not _python_class(t) else []
    found.update(own or {})
    return sorted(found.items())


def _python_class(t: type) -> bool:
    """Whether ``t`` and its bases (but ``object``) are written in Python."""
    return all(hasattr(k, "__dict__") and "__module__" in k.__dict__ and not k.__module__.startswith("jaxlib")
               for k in t.__mro__[:-1]) and "__slots__" in t.__dict__


def _is_singleton(v: Any) -> bool:
    """JAX's markers with no state (``UNSPECIFIED``, ``AUTO``-like values) whose ``repr``
    names them whole."""
    return type(v).__name__ in ("UnspecifiedValue", "AUTO", "Layout", "DeviceLocalLayout", "Format")
