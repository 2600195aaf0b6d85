"""Records: what the store knows of each program apart from the program itself.

A record (``<digest>.sfrec``) says how to make a program again: the function (module
and qualified name), its ``jax.jit`` options as the key writes them, the static variant
(the static keys, by value), and the arguments as ``jax.jit`` saw them (their tree, and
per leaf its kind, shape, dtype, weak type, and device when committed to one, or its
``NamedSharding``: the mesh's device ids, axis names and types, and the spec), with the
process and local devices it was made on, and the function's note (``buckets=``: the
bucket, and whether ``"auto"`` ran its size exactly). ``sf.warmup`` rebuilds abstract arguments
from it; ``--clear-programs`` removes the programs and keeps the records.

A record is written once per program, on a miss (never on a hit), by the entry format's
atomic write (``_entries``); one that cannot be written by value (a static that does not
pickle, a sharding of another kind than one device or a ``NamedSharding``) is simply not
written. A record whose mesh names devices this process lacks cannot be rebuilt
(``MissingDevices``): warm-up skips it and says why.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import pickle
from typing import Any, Callable

import jax
import numpy as np

from .._core._keys import StaticArgKey
from . import _entries, _key, _prng

SUFFIX = _entries.RECORD
_PYTHON = {"bool": False, "int": 0, "float": 0.0, "complex": 0j}


class _Arg:
    """A static argument's key in a record: its value (the key's hash is per process)."""

    def __init__(self, raw: Any) -> None:
        self.raw = raw


class _Named:
    """A named tuple of key parts in a record (``deps="read"`` with static arguments)."""

    def __init__(self, cls: type, parts: tuple) -> None:
        self.cls, self.parts = cls, parts


def _plain(vkey: Any) -> Any:
    if isinstance(vkey, StaticArgKey):
        return _Arg(vkey.raw)
    if type(vkey) is tuple:
        return tuple(_plain(p) for p in vkey)
    if isinstance(vkey, tuple) and hasattr(vkey, "_fields"):
        return _Named(type(vkey), tuple(_plain(p) for p in vkey))
    return vkey


def _keyed(plain: Any) -> Any:
    if isinstance(plain, _Arg):
        return StaticArgKey(plain.raw)
    if type(plain) is tuple:
        return tuple(_keyed(p) for p in plain)
    if isinstance(plain, _Named):
        return plain.cls(*(_keyed(p) for p in plain.parts))
    return plain


@functools.lru_cache(maxsize=4096)
def _leaf(sig: Any) -> list | None:
    """One argument leaf's signature (``_key.signature``) as JSON; ``None`` when it cannot
    be rebuilt (a sharding other than one device or a ``NamedSharding`` over a mesh).
    Remembered per signature (a model's leaves share a few), never changed by callers."""
    if isinstance(sig[0], tuple):
        shape, dtype, weak, sharding, committed = sig
        dtype = _prng.dtype_name(dtype)  # a key type by its implementation's registered name
        if dtype is None:
            return None
        device = None
        if committed and isinstance(sharding, jax.sharding.SingleDeviceSharding):
            device = int(next(iter(sharding.device_set)).id)  # type: ignore[attr-defined]
        elif committed:
            mesh = _mesh(sharding)
            return None if mesh is None else ["array", list(shape), dtype, bool(weak), None, mesh]
        return ["array", list(shape), dtype, bool(weak), device]
    if sig[0] == "numpy":
        return ["numpy", list(sig[1]), str(sig[2])]
    return ["python", sig[1]]


def _mesh(sharding: Any) -> dict[str, Any] | None:
    """A ``NamedSharding`` as JSON: its mesh's device ids (in the mesh's shape), axis names
    and types, its partition spec and memory kind; ``None`` for any other sharding."""
    if type(sharding) is not jax.sharding.NamedSharding:
        return None
    mesh, spec = sharding.mesh, sharding.spec
    if not isinstance(mesh, jax.sharding.Mesh) or getattr(spec, "unreduced", None) or getattr(spec, "reduced", None):
        return None
    parts: list[Any] = []
    for part in spec:
        if part is None or isinstance(part, str):
            parts.append(part)
        elif isinstance(part, tuple) and all(isinstance(a, str) for a in part):
            parts.append(list(part))
        else:  # PartitionSpec.UNCONSTRAINED, ...
            return None
    types = getattr(mesh, "axis_types", None)
    return {"devices": [int(d.id) for d in mesh.devices.flat], "shape": list(mesh.devices.shape),
            "axes": list(mesh.axis_names), "types": None if types is None else [t.name for t in types],
            "spec": parts, "memory_kind": sharding.memory_kind}


class MissingDevices(Exception):
    """A recorded mesh names devices this process does not have."""


def _sharding(mesh: dict[str, Any], devices: dict[int, Any]) -> Any:
    """The ``NamedSharding`` a record's ``_mesh`` describes, over this process's devices."""
    missing = sorted(set(mesh["devices"]) - set(devices))
    if missing:
        raise MissingDevices(f"its mesh is over device(s) {', '.join(map(str, missing))}, which this "
                             f"process does not have (it has {len(devices)})")
    grid = np.empty(len(mesh["devices"]), dtype=object)
    grid[:] = [devices[i] for i in mesh["devices"]]
    kwargs = {}
    if mesh["types"] is not None:
        kwargs["axis_types"] = tuple(jax.sharding.AxisType[t] for t in mesh["types"])
    built = jax.sharding.Mesh(grid.reshape(mesh["shape"]), tuple(mesh["axes"]), **kwargs)
    spec = jax.sharding.PartitionSpec(*(tuple(p) if isinstance(p, list) else p for p in mesh["spec"]))
    return jax.sharding.NamedSharding(built, spec, memory_kind=mesh["memory_kind"])


def _rebuilt_leaf(leaf: list, devices: dict[int, Any]) -> Any:
    if leaf[0] == "array":
        shape, dtype, weak, device = leaf[1:5]
        sharding = (_sharding(leaf[5], devices) if len(leaf) > 5
                    else None if device is None else jax.sharding.SingleDeviceSharding(devices[device]))
        return jax.ShapeDtypeStruct(tuple(shape), _prng.dtype_named(dtype), weak_type=weak, sharding=sharding)
    if leaf[0] == "numpy":
        return np.zeros(tuple(leaf[1]), jax.numpy.dtype(leaf[2]))
    return _PYTHON[leaf[1]]


def _machine() -> dict[str, Any]:
    return {"process_index": jax.process_index(), "devices": sorted(d.id for d in jax.local_devices())}


def write(directory: str, fn: Callable, vkey: Any, options: str | None, sig: Any,
          note: dict[str, Any] | None = None) -> None:
    """Keep the record of the program for ``sig`` of variant ``vkey`` (once); never raises
    for a record that cannot be written by value. ``note``: what the function keeps beside
    the arguments (``buckets=``: the bucket); it is not part of the record's name, so a
    program has one record, with the note of the call that first made it."""
    tree, leaves, _ = sig
    described = [_leaf(s) for s in leaves]
    if options is None or None in described:
        return
    try:
        statics = pickle.dumps(_plain(vkey), protocol=4).hex()
        trees = pickle.dumps(tree, protocol=4).hex()
    except Exception:
        return
    record = {"module": getattr(fn, "__module__", None) or "", "qualname": getattr(fn, "__qualname__", ""),
              "options": options, "statics": statics, "tree": trees, "leaves": described, **_machine()}
    path = _entries.entry_path(directory, _entries.key_digest(record), SUFFIX)
    if os.path.exists(path):
        return
    if note is not None:
        record["note"] = note
    _entries.write(path, {"record": record}, b"")


@dataclasses.dataclass
class Record:
    """One program's record, read back."""

    module: str
    qualname: str
    options: str
    fields: dict[str, Any]

    @property
    def here(self) -> bool:
        """Whether it was made on this process index and these local devices."""
        return all(self.fields.get(k) == v for k, v in _machine().items())

    @property
    def order(self) -> str:
        """The same for the records of one program made by every process of a job (its
        process and local devices left out): warm-up prepares in this order everywhere."""
        return _entries.key_digest({k: v for k, v in self.fields.items()
                                    if k not in ("process_index", "devices", "note")})

    @property
    def note(self) -> Any:
        """What the function kept beside the arguments (``buckets=``: the bucket), or ``None``."""
        return self.fields.get("note")

    def variant(self) -> Any:
        """The static variant's key, as the engine keys it."""
        return _keyed(pickle.loads(bytes.fromhex(self.fields["statics"])))  # noqa: S301 - trusted store

    def arguments(self) -> tuple[tuple, dict]:
        """The variant's ``jax.jit`` arguments: ``ShapeDtypeStruct``s (with their device when
        committed), NumPy zeros and Python scalars as the recorded call had them."""
        tree = pickle.loads(bytes.fromhex(self.fields["tree"]))  # noqa: S301 - trusted store
        devices = {d.id: d for d in jax.devices()}
        leaves = [_rebuilt_leaf(leaf, devices) for leaf in self.fields["leaves"]]
        dyn, kwargs = jax.tree_util.tree_unflatten(tree, leaves)
        return tuple(dyn), dict(kwargs)


def read(directory: str) -> list[Record]:
    """Every readable record in the store (an unreadable one is left out)."""
    found = []
    for record in _entries.headers(directory, SUFFIX, "record"):
        try:
            found.append(Record(record["module"], record["qualname"], record["options"], record))
        except (KeyError, TypeError):
            continue
    return found


def options_text(options: dict[str, Any]) -> str | None:
    """The ``jax.jit`` options as a record (and the key) writes them."""
    return _key.options(options)
