"""The check itself: publish this process's digest of a new program, wait for the others'.

Each process publishes, in ``jax.distributed``'s key-value store, the digest (and the
description) of the k-th program of a function it runs (``_order``) under
``staticfield/agree/<function>/<k>/<process>``, then reads every other process's k-th:

- the same digest: they agree;
- another digest, and that process has not published this program at any index (the set
  comparison): the difference is certain, and it raises at once (``ORDER``; the processes
  not read yet get ``GRACE`` seconds to publish theirs), naming every process whose k-th
  differs and what differs;
- nothing within ``STATICFIELD_HOST_CHECK_TIMEOUT`` seconds (a process that has not
  published at all, or only late): it raises (``MISMATCH``) naming the difference against
  that process's latest program of the function, unless it published this program at
  another index meanwhile.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from typing import Any

import jax

from .._core import _compat, _portable
from .._core._errors import HostMismatchError
from . import _order

ENV = "STATICFIELD_HOST_CHECK"
TIMEOUT_ENV = "STATICFIELD_HOST_CHECK_TIMEOUT"
DEFAULT_TIMEOUT = 60.0
GRACE = 1.0  # seconds the others get to publish once a difference is certain (for the message)
_PREFIX = "staticfield/agree"

ORDER = (
    "{function}: process {me} of {count} is about to run another program than process(es) "
    "{others}: the {nth} program of {function} that spans processes differs between them, so the "
    "job would hang in its first collective. It differs in: {difference}. Make every process call "
    "{function} with the same static values and argument shapes, in the same order (a static read "
    "from jax.process_index(), a host-local file or the clock differs between processes)."
)
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


def digest(function: str, description: dict[str, tuple]) -> str:
    """The digest of a program of ``function`` described by ``description`` (paths to
    entries, as ``_explain._describe`` gives them)."""
    return _digest(function, _entries(description))


def _identity(entry: tuple, text: str) -> str:
    """What an entry is compared by between processes: a static value by the cross-process
    form of its one identity (``_core._portable``: a function by its module, name and code,
    an array by its bytes, never an address or a truncated ``repr``; a set's items sorted, so
    that processes with other ``PYTHONHASHSEED``s agree), anything else by its text (avals,
    shardings and classes carry no address)."""
    if entry[0] in ("static", "static_arg"):
        return _portable.digest(entry[1], set_order=False)[:24]
    return text


def _entries(description: dict[str, tuple]) -> dict[str, list[str]]:
    """Each path's ``[text, identity]``: the text for messages, the identity compared."""
    out = {}
    for path, entry in description.items():
        text = _text(entry)
        out[path] = [text, _identity(entry, text)]
    return out


def _digest(function: str, entries: dict[str, list[str]]) -> str:
    ids = sorted((path, entry[1]) for path, entry in entries.items())
    return hashlib.sha256(json.dumps([function, ids]).encode()).hexdigest()[:24]


def _shown(entry: Any, other: Any = None) -> str:
    """An entry's text in a message; with its identity when ``other``'s text is the same
    (two arrays whose ``repr`` elides the elements that differ)."""
    if not isinstance(entry, list):
        return "(absent)"
    if isinstance(other, list) and other[0] == entry[0] and other[1] != entry[1]:
        return f"{entry[0]} (identity {entry[1][:12]})"
    return entry[0]


def agree(function: str, description: dict[str, tuple] | None) -> None:
    """Publish this program's digest for ``function`` as the next program this process runs
    of it, and wait for every other process's; ``HostMismatchError`` when another's differs,
    or has not come within the timeout. Nothing for a program that agreed before. The
    caller checked that the program spans processes (``spans_processes``)."""
    state = _compat.get("distributed_state")
    client = getattr(state, "client", None)
    if client is None or description is None:
        return
    entries = _entries(description)
    mine = _digest(function, entries)
    k = _order.claim(function, mine)
    if k is None:
        return
    try:
        _wait(client, function, entries, mine, k)
    except BaseException:
        _order.failed(function, mine)
        raise
    _order.agreed(function, mine)


def _wait(client: Any, function: str, entries: dict[str, list], mine: str, k: int) -> None:
    """Publish ``mine`` as this process's program ``k`` of ``function``, then read every
    other process's; raise on a certain difference or a missing process."""
    where = f"{_PREFIX}/{hashlib.sha256(function.encode()).hexdigest()[:24]}"
    me, count = jax.process_index(), jax.process_count()
    try:
        client.key_value_set(f"{where}/{k}/{me}", json.dumps({"digest": mine, "entries": entries}))
    except Exception:  # published before: a program that did not agree, made again
        pass
    timeout = _timeout()
    deadline = time.monotonic() + timeout
    read: dict[int, dict] = {}
    missing = []
    for other in range(count):
        if other == me:
            continue
        left = max(1, int((deadline - time.monotonic()) * 1000))
        try:
            read[other] = theirs = json.loads(client.blocking_key_value_get(f"{where}/{k}/{other}", left))
        except Exception:
            missing.append(other)
            continue
        if theirs.get("digest") != mine and not _has(_published(client, where), other, mine):
            # Certain: that process runs another program here. The others that have not
            # been read get a moment more, so that the error names every one that differs.
            deadline = min(deadline, time.monotonic() + GRACE)
    published = _published(client, where) if missing or any(
        data.get("digest") != mine for data in read.values()) else {}
    differ = {p: data.get("entries", {}) for p, data in read.items()
              if data.get("digest") != mine and not _has(published, p, mine)}
    if differ:
        raise HostMismatchError(ORDER.format(
            function=function, me=me, count=count, others=", ".join(map(str, differ)), nth=_nth(k + 1),
            difference=_grouped(entries, me, differ)))
    missing = [p for p in missing if not _has(published, p, mine)]
    if missing:
        raise HostMismatchError(MISMATCH.format(
            function=function, me=me, count=count, others=", ".join(map(str, missing)), timeout=timeout,
            difference=_difference(published, entries, me, missing), timeout_env=TIMEOUT_ENV))


def _published(client: Any, where: str) -> dict[tuple[int, int], dict]:
    """Every program published for the function: ``(index, process)`` to its data."""
    try:
        found = client.key_value_dir_get(where + "/")
    except Exception:
        return {}
    programs = {}
    for key, value in found:
        try:
            index, process = key[len(where) + 1:].split("/")
            programs[int(index), int(process)] = json.loads(value)
        except ValueError:
            continue
    return programs


def _has(published: dict[tuple[int, int], dict], process: int, digest: str) -> bool:
    """Whether ``process`` has published the program ``digest`` at any index (the set)."""
    return any(p == process and data.get("digest") == digest for (_, p), data in published.items())


def _nth(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _same(a: Any, b: Any) -> bool:
    """Whether two published entries are the same (by identity; ``None``: absent)."""
    if not isinstance(a, list) or not isinstance(b, list):
        return a is None and b is None
    return bool(a[1] == b[1])


def _grouped(mine: dict[str, list], me: int, others: dict[int, dict[str, list]]) -> str:
    """Each differing path: this process's value, then each other value with its processes
    (``self.n: 3 on process 3, 2 on processes 0, 1, 2``)."""
    lines = []
    for path in sorted(set(mine).union(*others.values())):
        values: dict[str, list[int]] = {}
        texts: dict[str, Any] = {}
        for process, theirs in sorted(others.items()):
            value = theirs.get(path)
            if not _same(value, mine.get(path)):
                ident = value[1] if isinstance(value, list) else ""
                values.setdefault(ident, []).append(process)
                texts[ident] = value
        if values:
            shown = [f"{_shown(mine.get(path), next(iter(texts.values())))} on process {me}"] + [
                f"{_shown(texts[ident], mine.get(path))} on process{'es' if len(ps) > 1 else ''} "
                f"{', '.join(map(str, ps))}" for ident, ps in values.items()]
            lines.append(f"{path}: {', '.join(shown)}")
    return "; ".join(lines) or "nothing this process can see (their avals' details)"


def _difference(published: dict[tuple[int, int], dict], mine: dict[str, list], me: int, missing: list[int]) -> str:
    """What differs from each missing process's latest program of the function, by path."""
    latest: dict[int, tuple[int, dict]] = {}
    for (index, process), data in published.items():
        if process in missing and index >= latest.get(process, (-1, {}))[0]:
            latest[process] = (index, data)
    lines = []
    for process in missing:
        if process not in latest:
            lines.append(f"process {process} has made no program of it yet")  # (one full stop, below)
            continue
        other = latest[process][1].get("entries", {})
        for path in sorted(set(mine) | set(other)):
            a, b = mine.get(path), other.get(path)
            if not _same(a, b):
                lines.append(f"{path}: {_shown(a, b)} on process {me}, {_shown(b, a)} on process {process}")
    return ("It differs in: " + "; ".join(lines) + ". ") if lines else ""
