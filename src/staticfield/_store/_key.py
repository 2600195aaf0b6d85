"""What an entry of the program store is keyed by, as JSON-ready data.

An entry is found by a digest of its *key*: the environment that compiled it (JAX
and jaxlib versions, Python, backend, devices, the JAX options and ``XLA_FLAGS``
that change a program, staticfield's version), the function, its static key and
its arguments' avals (shapes, dtypes, weak types, shardings). The source files
whose code ran while the program was traced are only known after a trace, so
they are kept in the entry and checked when it is read (``_sources``).

Static values, and the values a function carries, are told apart by the cross-process
form of their one identity (``_core._portable``).
"""

from __future__ import annotations

import functools
import hashlib
import os
import pickle
import sys
import types
from typing import Any, Callable

import jax
import numpy as np

from .._core import _lowering, _portable
from .._core._deep import DeepKey
from .._core._keys import StaticArgKey, StaticKey
from . import _prng

FORMAT = 2

# JAX options that change nothing a program computes: where caches and logs go.
_NOT_IN_KEY = (
    "jax_log_compiles", "jax_explain_cache_misses", "jax_logging_level", "jax_debug_log_modules",
    "jax_pprint_use_color", "jax_traceback_filtering", "jax_tracer_error_num_traceback_frames",
    "jax_enable_compilation_cache", "jax_compilation_cache_dir", "jax_raise_persistent_cache_errors",
    "jax_include_debug_info_in_dumps", "jax_dump_ir_to", "jax_dump_ir_modes",
    "jax_compilation_cache_max_size", "jax_compilation_cache_check_contents",
)
_NOT_IN_KEY_PREFIXES = ("jax_persistent_cache_", "jax_compilation_cache_")


def _versions() -> dict[str, str]:
    import jaxlib

    staticfield = sys.modules.get(__name__.split(".")[0])  # the package root, imported by now
    return {"jax": jax.__version__, "jaxlib": getattr(jaxlib, "__version__", "?"),
            "python": sys.version, "staticfield": getattr(staticfield, "__version__", "?")}


def environment() -> dict[str, Any]:
    """The part of the key that is the same for every program of this process's setup."""
    devices = jax.devices()
    backend = devices[0].client if devices else None
    config = {
        name: repr(value) for name, value in sorted(_config_values().items())
        if name not in _NOT_IN_KEY and not name.startswith(_NOT_IN_KEY_PREFIXES)
    }
    processes = jax.process_count()
    several = {"locations": _lowering.LOCATIONS} if processes > 1 else {}
    return {
        **several,
        "versions": _versions(),
        "backend": jax.default_backend(),
        "platform_version": str(getattr(backend, "platform_version", "")),
        "host": _host(),
        "devices": [f"{getattr(d, 'device_kind', type(d).__name__)} id={d.id} process={d.process_index}"
                    for d in devices],
        "process_index": jax.process_index(),
        "process_count": processes,
        "xla_flags": os.environ.get("XLA_FLAGS", ""),
        "config": config,
    }


def context() -> str | None:
    """JAX's trace context as text (x64, default device, promotion, matmul precision,
    the mesh with its device ids, ...): what ``jax.jit`` keys its own programs by.
    ``None`` when a part of it cannot be written by value."""
    from .._core import _compat
    from ._digest import Undigestible, _Walker

    names, values = _compat.get("trace_context_names")(), _compat.get("trace_context")()
    walker = _Walker()
    try:
        return ";".join(f"{n}={walker.value(v, 1)}" for n, v in zip(names, values))
    except Undigestible:
        return None


def options(jit_kwargs: dict[str, Any]) -> str | None:
    """The ``jax.jit`` options (donation, shardings with their device ids, ...) as text;
    ``None`` when one cannot be written by value."""
    from ._digest import Undigestible, _Walker

    try:
        return _Walker().value(dict(jit_kwargs), 1)
    except Undigestible:
        return None


@functools.lru_cache(maxsize=1)
def _host() -> str:
    """The machine's architecture and CPU features: XLA compiles CPU programs for the
    host's instruction set, so a store shared by machines keeps them apart."""
    import platform

    features = ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            features = next((line for line in f if line.startswith(("flags", "Features"))), "")
    except OSError:
        features = platform.processor()
    return f"{platform.machine()} {hashlib.sha256(features.encode()).hexdigest()[:16]}"


def _config_values() -> dict[str, Any]:
    values = getattr(jax.config, "values", None)
    if isinstance(values, dict):
        return values
    return {name: getattr(jax.config, name, None) for name in ("jax_enable_x64", "jax_default_matmul_precision")}


# ----- function and statics ------------------------------------------------------------
# Both are written in the cross-process form of the one identity of static values
# (``_core._portable``): no memory address, no order a process does not iterate in, so a
# set or dict static of another order is another key. A part with no identity across
# processes (an object hashed by identity, a type with its own ``__eq__`` only) makes the
# key ``None``: trust="source" keys no program on it (the trace's digest finds it).
def function_identity(fn: Callable) -> dict[str, str] | None:
    """Where the function is defined, and the values it carries: a closure's cells and
    its defaults (two closures of one ``def`` share a name but not their values). Any
    other callable (a ``functools.partial``) by its identity. ``None``: cannot be told apart."""
    code = getattr(fn, "__code__", None)
    if not isinstance(fn, types.FunctionType) or code is None:
        carried = _written(fn)
        return None if carried is None else {"callable": type(fn).__qualname__, "identity": carried}
    carried = None
    if fn.__closure__ or fn.__defaults__ or fn.__kwdefaults__:
        try:
            cells = tuple(c.cell_contents for c in fn.__closure__ or ())
        except ValueError:  # an empty cell (a name assigned after the def)
            return None
        carried = _written((cells, fn.__defaults__, fn.__kwdefaults__))
        if carried is None:
            return None
    return {
        "module": str(fn.__module__), "qualname": fn.__qualname__, "file": code.co_filename,
        "line": str(code.co_firstlineno), "carried": carried or "",
    }


def _written(value: Any) -> str | None:
    """The digest of ``value``'s cross-process identity; ``None`` when a part has none."""
    portable = _portable.write(value)
    return None if portable.partial else portable.digest


def _plain(part: Any) -> Any:
    """A variant key's part as the static values it holds (each key class by its parts)."""
    if isinstance(part, StaticKey):
        return ("instance", part.cls, part.names, part.values)
    if isinstance(part, DeepKey):
        return ("deep", _plain(part.top), tuple((path, _plain(k)) for path, k in part.nested))
    if isinstance(part, StaticArgKey):
        return ("static", part.raw, part.part[1])
    if type(part).__name__ == "AutoKey":  # static="auto"'s (``_jit``, a room above)
        return ("auto", part.names, tree_digest(part.treedef), part.mask, part.statics, part.paths)
    if isinstance(part, tuple):
        return (type(part), tuple(_plain(p) for p in part))
    return part


def statics_digest(vkey: Any) -> str | None:
    """A digest telling static keys apart across processes, by the one identity; ``None``
    when a value has no identity across processes, so no program is keyed on it."""
    return _written(_plain(vkey))


# ----- avals ----------------------------------------------------------------------------
def _sharding(s: Any) -> str:
    mesh = getattr(s, "mesh", None)
    ids = getattr(mesh, "device_ids", None)
    if ids is None:
        try:
            ids = sorted(d.id for d in s.device_set)
        except Exception:
            ids = None
    return f"{s!r} devices={np.asarray(ids).tolist() if ids is not None else None}"


ARRAY_TYPES: set[type] = set()  # concrete jax.Array classes seen (never a tracer's)


def array_signature(leaf: Any) -> tuple:
    """A jax.Array's signature: (shape, dtype, weak type, sharding, committed)."""
    return (leaf.shape, leaf.dtype, leaf.weak_type, leaf.sharding, leaf.committed)


def leaf_signature(leaf: Any) -> Any:
    """A hashable description of what a compiled program requires of one argument leaf;
    ``None`` for a tracer (a call inside another function's trace) or anything that is not
    an array or a Python scalar, which go to ``jax.jit`` itself. It runs on every call
    while a store is set, so it keeps dtypes as objects (``str`` of one costs 5 µs), and
    ``signature`` takes the array classes seen here by a faster path."""
    if isinstance(leaf, jax.core.Tracer):
        return None
    if isinstance(leaf, jax.Array):
        if _prng.is_key_dtype(leaf.dtype):  # a typed key array (no weak type): not a fast-path class
            return _prng.key_signature(leaf)
        ARRAY_TYPES.add(type(leaf))
        return array_signature(leaf)
    if isinstance(leaf, (np.ndarray, np.generic)):
        return ("numpy", leaf.shape, leaf.dtype)
    if isinstance(leaf, (bool, int, float, complex)):
        return ("python", type(leaf).__name__)
    dtype, shape = getattr(leaf, "dtype", None), getattr(leaf, "shape", None)
    if dtype is not None and shape is not None:  # a ShapeDtypeStruct, for precompile
        sharding = getattr(leaf, "sharding", None)
        committed = sharding is not None
        if sharding is None:  # as an uncommitted array is: on the default device
            device = jax.config.jax_default_device or jax.devices()[0]
            sharding = jax.sharding.SingleDeviceSharding(device)
        dtype = dtype if _prng.is_key_dtype(dtype) else np.dtype(dtype)
        return (tuple(shape), dtype, bool(getattr(leaf, "weak_type", False)), sharding, committed)
    return None  # not an array JAX takes: jax.jit decides (and says what is wrong)


def signature(leaves: list) -> tuple:
    """Each leaf's signature (see ``leaf_signature``)."""
    array_types = ARRAY_TYPES
    return tuple([array_signature(leaf) if leaf.__class__ in array_types else leaf_signature(leaf)
                  for leaf in leaves])


@functools.lru_cache(maxsize=4096)
def describe_leaf(sig: Any) -> str:
    """One leaf's signature as text, for the key and for listings (many leaves share one)."""
    if isinstance(sig[0], tuple):
        shape, dtype, weak, sharding, committed = sig
        text = f"{_prng.dtype_text(dtype)}[{','.join(map(str, shape))}]" + (" weak" if weak else "")
        if sharding is not None:
            text += f" {_sharding(sharding)}" + ("" if committed else " uncommitted")
        return text
    kind = sig[0]
    if kind == "numpy":
        return f"numpy {sig[2]}[{','.join(map(str, sig[1]))}]"
    return f"python {sig[1]}"


def tree_digest(treedef: Any) -> str:
    """The arguments' pytree structure (containers, and instances' static keys inside)."""
    try:
        data = pickle.dumps(treedef, protocol=4)
    except Exception:
        data = str(treedef).encode()
    return hashlib.sha256(data).hexdigest()
