"""``python -m staticfield store PATH [-v] [--clear | --clear-programs]``: what a program
store holds, or empty it (``--clear-programs`` keeps the records ``sf.warmup`` prepares from).

The listing reads JSON lines only (never a payload), one line per program of at most
100 columns: function, statics, the bucket or the leading avals, how it can be found
(``trace``: by its trace; ``both``: also without tracing, by ``trust="source"``), size
and age. Then the totals, the warm-up records per function, and on a last line the
functions whose programs the store refused. ``-v`` adds, under each program, every
aval with its sharding, the devices, process and JAX version, and the refusals' reasons.
"""

from __future__ import annotations

import collections
import os
import time
from typing import Any

from . import _entries, _records, _saying

WIDTH = 100
_SHORT = {"float": "f", "int": "i", "uint": "u", "complex": "c", "bfloat": "bf"}


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB"):
        if n < 1024:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return f"{n:.1f} GiB"


def _age(created: float) -> str:
    seconds = max(0.0, time.time() - created)
    for unit, span in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= span:
            return f"{seconds / span:.0f} {unit}"
    return f"{seconds:.0f} s"


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(width - 1, 0)] + "\u2026"


def _clip_left(text: str, width: int) -> str:
    """A qualified name clipped at its start: its end names the function."""
    return text if len(text) <= width else "\u2026" + text[len(text) - width + 1:]


def _short_aval(aval: str) -> str:
    """``float32[3] NamedSharding(...)`` as ``f32[3]`` (``weak`` kept)."""
    head = aval.split(" ", 1)[0]
    for long, short in _SHORT.items():
        if head.startswith(long) and head[len(long):len(long) + 1].isdigit():
            head = short + head[len(long):]
            break
    return head + (" weak" if " weak" in aval else "")


def _runs(avals: list[str]) -> str:
    """The avals, a run of equal ones written once with its count: ``f32[4] ×64``."""
    runs: list[list] = []
    for aval in avals:
        if runs and runs[-1][0] == aval:
            runs[-1][1] += 1
        else:
            runs.append([aval, 1])
    return ", ".join(aval if n == 1 else f"{aval} \u00d7{n}" for aval, n in runs)


def _linked(directory: str) -> set[str]:
    """The entries a ``trust="source"`` key points to (by file name, without suffix)."""
    return {str(entry) for entry in _entries.headers(directory, _entries.LINK, "entry")}


def _row(path: str, header: dict[str, Any], size: int, linked: set[str]) -> list[str]:
    """One program's columns: function, statics, bucket or avals, found by, size, age."""
    display: dict[str, Any] = header.get("display", {})
    key: dict[str, Any] = header.get("key", {})
    note = display.get("note") or {}
    what = (f"bucket {note['bucket']}" if isinstance(note, dict) and note.get("bucket") is not None
            else _runs([_short_aval(a) for a in key.get("avals", [])]) or "(no arguments)")
    name = os.path.basename(path)[: -len(_entries.SUFFIX)]
    return [str(display.get("function", "?")), str(display.get("statics", "?")), what,
            "both" if name in linked else "trace", _size(size), _age(header.get("created", 0))]


def _table(rows: list[list[str]]) -> list[str]:
    """Rows in aligned columns, each line at most ``WIDTH``: the function, statics and
    avals columns share what the others leave, and are clipped with ``…``."""
    if not rows:
        return []
    tail = [max(len(r[i]) for r in rows) for i in (3, 4, 5)]
    room = max(WIDTH - sum(tail) - 2 * 5, 24)
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    while sum(widths) > room:  # narrow the widest column first
        widest = widths.index(max(widths))
        widths[widest] -= max(1, min(sum(widths) - room, widths[widest] - sorted(widths)[-2] or 1))
    lines = []
    for r in rows:
        cells = [(_clip_left if i == 0 else _clip)(r[i], widths[i]).ljust(widths[i]) for i in range(3)]
        cells += [r[3].ljust(tail[0]), r[4].rjust(tail[1]), r[5].rjust(tail[2])]
        lines.append("  ".join(cells).rstrip()[:WIDTH])
    return lines


def _details(header: dict[str, Any]) -> list[str]:
    """``-v``: every aval, the devices and process, the JAX version and backend."""
    key: dict[str, Any] = header.get("key", {})
    env = key.get("environment", {})
    lines = [f"    avals: {a}" for a in key.get("avals", [])] or ["    avals: (none)"]
    devices = ", ".join(map(str, header.get("devices") or [])) or "?"
    lines.append(f"    devices {devices} of process {env.get('process_index', '?')} of "
                 f"{env.get('process_count', '?')}; jax {env.get('versions', {}).get('jax', '?')}, "
                 f"{env.get('backend', '?')}")
    return lines


def listing(directory: str, verbose: bool = False) -> str:
    """What the store holds (see the module docstring)."""
    found = list(_entries.entries(directory))
    linked = _linked(directory)
    rows, total, unreadable = [], 0, []
    for path, header, size in found:
        total += size
        if header is None:
            unreadable.append(_clip(f"? {os.path.basename(path)}: not a readable entry ({_size(size)})", WIDTH))
        else:
            rows.append((_row(path, header, size, linked), header))
    lines: list[str] = []
    for line, (_, header) in zip(_table([r for r, _ in rows]), rows):
        lines.append(line)
        if verbose:
            lines += _details(header)
    lines += unreadable
    lines.append(_clip(f"{len(found)} program(s), {_size(total)} in {directory}", WIDTH))
    records = collections.Counter(f"{r.module}.{r.qualname}" for r in _records.read(directory))
    per_function = ": " + ", ".join(f"{n} {c}" for n, c in sorted(records.items())) if records else ""
    lines.append(_clip(f"{sum(records.values())} record(s) for sf.warmup{per_function}", WIDTH))
    refused = _saying.refused(directory)
    if refused:
        if verbose:
            lines += [f"refused {function}: {why}" for function, why in refused]
        lines.append(_clip("refused: " + _refusals(refused), WIDTH))
    return "\n".join(lines)


def _refusals(refused: list[tuple[str, str]]) -> str:
    """``a.f, a.g (it calls back into Python); a.h (...)``: the functions by reason, each
    reason up to its details (``-v`` gives them)."""
    by_reason: dict[str, list[str]] = {}
    for function, why in refused:
        names = by_reason.setdefault(why.split(" (", 1)[0], [])
        if function not in names:
            names.append(function)
    return "; ".join(f"{', '.join(names)} ({why})" for why, names in by_reason.items())


def check(directory: str) -> str:
    """Why ``directory`` is not a store to list (``""``: it is one, or empty)."""
    if not os.path.exists(directory):
        return f"{directory} does not exist"
    if not os.path.isdir(directory):
        return f"{directory} is a file, not a program store directory"
    names = [n for n in os.listdir(directory) if not n.startswith(".")]
    suffixes = (_entries.SUFFIX, _entries.LINK, _entries.RECORD, _entries.REFUSED)
    if names and not any(n.endswith(suffixes) for n in names):
        return f"{directory} holds files but no program store entries"
    return ""


def command(directory: str, clear: bool, clear_programs: bool = False, verbose: bool = False) -> str:
    if clear:
        records = len(_records.read(directory))
        return f"removed {_entries.clear(directory)} program(s) and {records} record(s) from {directory}"
    if clear_programs:
        kept = len(_records.read(directory))
        return (f"removed {_entries.clear(directory, records=False)} program(s) from {directory}; "
                f"kept {kept} record(s) for sf.warmup")
    return listing(directory, verbose)
