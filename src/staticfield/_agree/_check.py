"""The check itself: publish this process's digest of a new program, wait for the others'."""

from __future__ import annotations

import hashlib
import json
import os
import time
from typing import Any

import jax

from .._core import _compat
from .._core._errors import HostMismatchError

ENV = "STATICFIELD_HOST_CHECK"
TIMEOUT_ENV = "STATICFIELD_HOST_CHECK_TIMEOUT"
DEFAULT_TIMEOUT = 60.0
_PREFIX = "staticfield/agree"

MISMATCH = (
    "{function}: process {me} of {count} is about to run a program that process(es) {others} "
    "did not make within {timeout:g} s, so the job would hang in its first collective. "
    "{difference}Make every process call {function} with the same static values and argument "
    "shapes (a static read from jax.process_index(), a host-local file or the clock differs "
    "between processes), or raise {timeout_env} if a process is only slow."
)


def enabled() -> bool:
    """Whether this process is one of several in a job and the check is on."""
    if os.environ.get(ENV, "").strip() == "0":
        return False
    try:
        return jax.process_count() > 1
    except Exception:
        return False


def _timeout() -> float:
    raw = os.environ.get(TIMEOUT_ENV, "").strip()
    try:
        return float(raw) if raw else DEFAULT_TIMEOUT
    except ValueError:
        return DEFAULT_TIMEOUT


def spans_processes(leaves: list) -> bool:
    """Whether a call's arguments (``leaves``) lie on another process's devices too
    (host-local programs, on this process's devices only, are not checked). A traced
    leaf belongs to an outer program, which is checked as a whole."""
    me = jax.process_index()
    for leaf in leaves:
        sharding = getattr(leaf, "sharding", None)
        if isinstance(leaf, jax.core.Tracer) or sharding is None:
            continue
        try:
            if any(d.process_index != me for d in sharding.device_set):
                return True
        except Exception:
            continue
    return False


def _text(entry: tuple) -> str:
    kind = entry[0]
    if kind == "leaf":
        _, shape, dtype, weak, sharding = entry
        text = f"{'weak ' if weak else ''}{jax.numpy.dtype(dtype).name}[{','.join(map(str, shape))}]"
        return text + (f" {sharding}" if sharding else "")
    if kind == "class":
        return getattr(entry[1], "__qualname__", str(entry[1]))
    if kind == "passing":
        return repr(sorted(entry[1]))
    return repr(entry[1]) if len(entry) == 2 else repr(entry[1:])


def agree(function: str, description: dict[str, tuple] | None) -> None:
    """Publish this program's digest for ``function`` and wait for every other process's;
    ``HostMismatchError`` when one has not published it within the timeout. The caller
    checked that the program spans processes (``spans_processes``)."""
    state = _compat.get("distributed_state")
    client = getattr(state, "client", None)
    if client is None or description is None:
        return
    entries = {path: _text(entry) for path, entry in description.items()}
    digest = hashlib.sha256(json.dumps([function, sorted(entries.items())]).encode()).hexdigest()[:24]
    where = f"{_PREFIX}/{hashlib.sha256(function.encode()).hexdigest()[:24]}"
    me, count = jax.process_index(), jax.process_count()
    try:
        client.key_value_set(f"{where}/{digest}/{me}", json.dumps({"entries": entries, "time": time.time()}))
    except Exception:  # published before (the same program traced again): already there
        pass
    timeout = _timeout()
    deadline = time.monotonic() + timeout
    missing = []
    for other in range(count):
        if other == me:
            continue
        left = max(1, int((deadline - time.monotonic()) * 1000))
        try:
            client.blocking_key_value_get(f"{where}/{digest}/{other}", left)
        except Exception:
            missing.append(other)
    if missing:
        raise HostMismatchError(MISMATCH.format(
            function=function, me=me, count=count, others=", ".join(map(str, missing)), timeout=timeout,
            difference=_difference(client, where, entries, me, missing), timeout_env=TIMEOUT_ENV))


def _difference(client: Any, where: str, mine: dict[str, str], me: int, missing: list[int]) -> str:
    """What differs from each missing process's latest program of the function, by path."""
    try:
        published = client.key_value_dir_get(where + "/")
    except Exception:
        return ""
    latest: dict[int, dict] = {}
    for key, value in published:
        try:
            process = int(key.rsplit("/", 1)[1])
            data = json.loads(value)
        except (ValueError, IndexError):
            continue
        if process in missing and data.get("time", 0) >= latest.get(process, {}).get("time", -1):
            latest[process] = data
    lines = []
    for process in missing:
        theirs = latest.get(process)
        if theirs is None:
            lines.append(f"process {process} has made no program of it yet.")
            continue
        other = theirs.get("entries", {})
        for path in sorted(set(mine) | set(other)):
            a, b = mine.get(path, "(absent)"), other.get(path, "(absent)")
            if a != b:
                lines.append(f"{path}: {a} on process {me}, {b} on process {process}")
    return ("It differs in: " + "; ".join(lines) + ". ") if lines else ""
