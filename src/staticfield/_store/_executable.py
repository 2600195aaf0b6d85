"""A compiled program as bytes, and back: where it runs and what it needs to load.

``serialize`` writes JAX's serialized executable, with the ids of the devices it was
compiled for (in order) and the custom calls it makes; ``deserialize`` loads it on
exactly those devices, after registering the LAPACK kernels JAX would have registered
while lowering (a loaded program skips lowering). The pytree structures are never read
from an entry: the caller passes the ones of its own trace.
"""

from __future__ import annotations

import pickle
import re
from typing import Any

import jax

from .._core import _compat
from . import _entries


class Unstorable(Exception):
    """A program that runs but cannot be kept (said once per function and reason)."""


def serialize(compiled: Any) -> tuple[bytes, dict[str, Any]]:
    """The program's bytes; and for its header the ids of the devices it runs on, in
    order, and the custom calls it makes (their kernels must be registered to load it)."""
    from jax.experimental.serialize_executable import serialize as to_bytes

    unloaded = compiled._executable._unloaded_executable
    if getattr(unloaded, "host_callbacks", None):
        raise Unstorable("it calls back into Python (jax.debug.print, pure_callback, ...)")
    devices = [d.id for d in unloaded.device_list]
    _compat.pickle_auto_layout_as_itself()  # loaded outputs' avals as a compile's (JAX 0.12)
    try:
        payload, _, _ = to_bytes(compiled)
    except (pickle.PicklingError, AttributeError, TypeError) as exc:
        raise Unstorable(f"its compiled program cannot be pickled ({exc}): a value it holds is "
                         "defined inside a function; define it at module level") from None
    try:
        calls = sorted(set(_CUSTOM_CALL.findall(compiled.as_text() or "")))
    except Exception:
        calls = ["?"]  # unknown: registered on load, as if it made one
    return payload, {"devices": devices, "custom_calls": calls}


_CUSTOM_CALL = re.compile(r'custom_call_target="([^"]+)"')


def deserialize(payload: bytes, header: dict[str, Any], in_tree: Any, out_tree: Any) -> Any:
    """The program loaded on the devices its header names, by id and in order, with the
    caller's trees; ``BadEntry`` when this process lacks one of those devices."""
    from jax.experimental.serialize_executable import deserialize_and_load

    by_id = {d.id: d for d in jax.devices()}
    try:
        execution = [by_id[i] for i in header.get("devices") or []]
    except KeyError:
        raise _entries.BadEntry("for devices this process does not have") from None
    if not execution:
        raise _entries.BadEntry("without devices")
    if execution[0].platform == "cpu" and header.get("custom_calls", ["?"]):
        # JAX registers LAPACK's kernels while lowering, which a loaded program skips
        _compat.get("initialize_lapack")()
    return deserialize_and_load(payload, in_tree, out_tree, backend=execution[0].client,
                                execution_devices=execution)
