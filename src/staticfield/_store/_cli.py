"""``python -m staticfield store PATH [--clear | --clear-programs]``: what a program store
holds, or empty it (``--clear-programs`` keeps the records ``sf.warmup`` prepares from)."""

from __future__ import annotations

import os
import textwrap
import time
from typing import Any

from . import _entries, _records


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


def _runs(avals: list[str]) -> str:
    """The avals, a run of equal ones written once with its count: ``f32[4] ×64``."""
    runs: list[list] = []
    for aval in avals:
        if runs and runs[-1][0] == aval:
            runs[-1][1] += 1
        else:
            runs.append([aval, 1])
    return ", ".join(aval if n == 1 else f"{aval} \u00d7{n}" for aval, n in runs)


WIDTH = 100


def _fit(text: str, indent: str = "    ") -> list[str]:
    """``text`` in lines of at most ``WIDTH`` columns."""
    return textwrap.wrap(text, WIDTH, initial_indent=indent, subsequent_indent=indent + "  ",
                         break_long_words=True, break_on_hyphens=False) or [indent]


def listing(directory: str) -> str:
    """One block per entry: function, statics, avals, devices, trust, size and age (JSON
    only, never unpickled), in lines of at most 100 columns."""
    lines: list[str] = []
    total = 0
    found = list(_entries.entries(directory))
    for path, header, size in found:
        total += size
        if header is None:
            lines += _fit(f"? {os.path.basename(path)}: not a readable entry ({_size(size)})", "")
            continue
        display: dict[str, Any] = header.get("display", {})
        key: dict[str, Any] = header.get("key", {})
        env = key.get("environment", {})
        versions = env.get("versions", {})
        lines += _fit(f"{display.get('function', '?')}  [{_size(size)}, {_age(header.get('created', 0))} old, "
                      f"jax {versions.get('jax', '?')}, {env.get('backend', '?')}, "
                      f"trust={key.get('trust', '?')}]", "")
        lines += _fit(f"statics: {display.get('statics', '?')}")
        lines += _fit(f"avals:   {_runs(key.get('avals', [])) or '(none)'}")
        devices = header.get("devices") or []
        lines += _fit(f"devices: {', '.join(map(str, devices)) or '?'} (process {env.get('process_index', '?')} "
                      f"of {env.get('process_count', '?')})")
    records = len(_records.read(directory))
    lines += _fit(f"{len(found)} program(s), {_size(total)} in {directory}", "")
    lines.append(f"{records} record(s) for sf.warmup")
    return "\n".join(lines)


def check(directory: str) -> str:
    """Why ``directory`` is not a store to list (``""``: it is one, or empty)."""
    if not os.path.exists(directory):
        return f"{directory} does not exist"
    if not os.path.isdir(directory):
        return f"{directory} is a file, not a program store directory"
    names = [n for n in os.listdir(directory) if not n.startswith(".")]
    if names and not any(n.endswith((_entries.SUFFIX, _entries.LINK, _entries.RECORD)) for n in names):
        return f"{directory} holds files but no program store entries"
    return ""


def command(directory: str, clear: bool, clear_programs: bool = False) -> str:
    if clear:
        records = len(_records.read(directory))
        return f"removed {_entries.clear(directory)} program(s) and {records} record(s) from {directory}"
    if clear_programs:
        kept = len(_records.read(directory))
        return (f"removed {_entries.clear(directory, records=False)} program(s) from {directory}; "
                f"kept {kept} record(s) for sf.warmup")
    return listing(directory)
