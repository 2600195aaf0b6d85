"""The ``sf.watch`` report: as text for people, as data for ``--json`` and tests.

Both read ``WatchedFunction``/``Compile`` records (from ``_watch``) by attribute and
never change them.
"""

from __future__ import annotations

import dataclasses
import re
import textwrap
from collections import Counter
from typing import Any, Sequence

import jax

from .._core import _compat

_TIMES = ("trace_s", "lower_s", "compile_s")


WIDTH = 100  # every report line fits in this many columns
SUMMARY_FROM = 4  # a compile with this many changes starts with a one-line summary
GROUP_FROM = 4  # this many changes alike but for their paths read as one line


def process() -> tuple[int, int] | None:
    """``(index, count)`` of this process in a ``jax.distributed`` job of several processes
    (read from JAX's distributed state, which starts no backend); ``None`` otherwise."""
    state = _compat.get("distributed_state")
    count = getattr(state, "num_processes", 1) or 1
    if not isinstance(count, int) or count < 2:
        return None
    return int(getattr(state, "process_id", 0) or 0), count


def render(functions: Sequence[Any], notices: Sequence[str]) -> str:
    """Per function (most compiles first): compiles, seconds, and why each recompile;
    buckets' pad and slice programs, then eager op-by-op compiles, summed on a line each.
    In a job of several processes the header names this one (``process 1/2``: index 1 of 2)."""
    jitted = [f for f in functions if not f.eager and not f.padding]
    eager = [f for f in functions if f.eager]
    padding = [f for f in functions if f.padding]
    here = process()
    lines = _fitted(
        f"staticfield watch{f' (process {here[0]}/{here[1]})' if here else ''}: {len(jitted)} jitted function(s), "
        f"{sum(f.count for f in jitted)} compile(s);", _seconds(jitted)
    )
    for f in sorted(jitted, key=lambda f: -f.count):
        lines.append("")
        lines += _function_lines(f)
    if padding:
        lines += ["", *wrap(
            f"bucket padding (buckets=: staticfield's pad and slice programs, not your functions): "
            f"{sum(f.count for f in padding)} compile(s) in "
            f"{sum(f.seconds(t) for f in padding for t in _TIMES):.3f} s", "  ")]
    if eager:
        counts = Counter({f.name: f.count for f in eager})
        shown = ", ".join(f"{n} ×{c}" if c > 1 else n for n, c in counts.most_common(6))
        more = "" if len(counts) <= 6 else f", and {len(counts) - 6} more"
        lines += ["", *wrap(
            f"eager op-by-op compiles (operations outside jit): {sum(counts.values())} in "
            f"{sum(f.seconds(t) for f in eager for t in _TIMES):.3f} s ({shown}{more})", "  ")]
    for notice in notices:
        lines += ["", *wrap(notice, "  ")]
    return "\n".join(lines)


def _seconds(functions: Sequence[Any]) -> str:
    return "  ".join(
        f"{label} {sum(f.seconds(t) for f in functions):.3f} s"
        for label, t in zip(("trace", "lower", "compile"), _TIMES)
    )


def _fitted(head: str, times: str) -> list[str]:
    """``head  times`` on one line if it fits, else the times on a line of their own."""
    if len(head) + 2 + len(times) <= WIDTH:
        return [f"{head}  {times}"]
    return [*wrap(head, "    "), f"  {times}"]


def wrap(text: str, indent: str, first: str = "") -> list[str]:
    """``text`` in lines of at most WIDTH columns; later lines indented by ``indent``."""
    return textwrap.wrap(text, WIDTH, initial_indent=first, subsequent_indent=indent,
                         break_long_words=True, break_on_hyphens=False) or [first]


def _function_lines(f: Any) -> list[str]:
    where = f" ({f.location})" if f.location else ""
    plural = "compile" if f.count == 1 else "compiles"
    failed = f", and {f.failed_traces} trace(s) that raised" if f.failed_traces else ""
    inline = f.inline
    if f.uncompiled > len(inline):
        failed += f", and {f.uncompiled - len(inline)} trace(s) by .lower/.trace/.eval_shape"
    if f.loads:
        failed += f", {f.loads} loaded from the program store"
    if inline:
        failed += _inline(inline)
    lines = _fitted(f"{f.name}{where}: {f.count} {plural}{failed}", f"[{_seconds([f])}]")
    compiled_before = False
    for c in f.compiles:
        at = f" at {c.call_site}" if c.call_site else ""
        if c in inline:
            continue
        if not c.compiled:
            lines += wrap(f"#{c.number}{at}: traced by {c.via}, not compiled", "    ", "  ")
            continue
        first, compiled_before = not compiled_before, True
        if c.first and not c.changes:
            lines += wrap(f"#{c.number}{at}: first compile of another wrapper of this function (its own "
                          "options, e.g. other bucket_sizes=)", "    ", "  ")
        elif first and not c.changes:
            lines += wrap(f"#{c.number}{at}: first compile", "    ", "  ")
        elif not c.changes:
            lines += wrap(f"#{c.number}{at}: {_no_change(f)}", "    ", "  ")
        else:
            verb = "compiled" if first else "recompiled"
            lines += wrap(f"#{c.number}{at}: {verb} because{_summary(c.changes)}", "    ", "  ")
            grouped = _grouped(c.changes)
            for i, ch in enumerate(grouped):
                lines += _change_lines(ch)
                if ch.hint and all(ch.hint != later.hint for later in grouped[i + 1 :]):
                    lines += wrap(f"fix: {ch.hint}", "        ", "      ")  # after its last
        if c.store:
            lines += wrap(f"({c.store})", "      ", "    ")
    return lines


def _inline(traces: Sequence[Any]) -> str:
    """``; traced 3 times inside the trace of solve (...)``: traces made while another
    function was traced (a primitive's rule evaluating its implementation), said once."""
    outers = list(dict.fromkeys(c.inside for c in traces))
    times = "once" if len(traces) == 1 else f"{len(traces)} times"
    return (f"; traced {times} inside the trace of {' and '.join(outers[:3])}"
            f"{' and others' if len(outers) > 3 else ''} (inlined into its program; nothing "
            "compiled on its own)")


def _grouped(changes: Sequence[Any]) -> list[Any]:
    """Runs of ``GROUP_FROM`` or more changes that differ only in their path, as one change
    whose path names the first and last and counts them (``xs[0] … xs[74] (75 paths)``)."""
    out: list[Any] = []
    i = 0
    while i < len(changes):
        same = lambda ch: (ch.kind, ch.old, ch.new, ch.hint, ch.read) == (  # noqa: E731
            changes[i].kind, changes[i].old, changes[i].new, changes[i].hint, changes[i].read)
        j = i
        while j < len(changes) and same(changes[j]):
            j += 1
        if j - i >= GROUP_FROM:
            path = f"{changes[i].path} … {changes[j - 1].path} ({j - i} paths)"
            out.append(dataclasses.replace(changes[i], path=path))
        else:
            out += changes[i:j]
        i = j
    return out


def _change_lines(ch: Any) -> list[str]:
    """``path: old → new (kind)`` on one line, or path and kind, then old → new, below;
    with deps="read", the kind says where the value was read (``static; read at m.py:4``)."""
    kind = f"{ch.kind}; {ch.read}" if ch.read else ch.kind
    line = f"    {ch}" if ch.kind == "bucket" else f"    {ch.path}: {ch.old} → {ch.new} ({kind})"
    if len(line) <= WIDTH:
        return [line]
    return [*wrap(f"{ch.path} ({kind}):", "      ", "    "),
            *wrap(f"{ch.old} → {ch.new}", "        ", "      ")]


def _summary(changes: Sequence[Any]) -> str:
    """`` 14 changes (13 shape, 1 static) in tree:`` before a long list of changes."""
    if len(changes) < SUMMARY_FROM:
        return ""
    kinds = Counter(ch.kind for ch in changes)
    counted = ", ".join(f"{n} {kind}" for kind, n in kinds.most_common())
    roots = {re.split(r"[.\[ ]", ch.path, maxsplit=1)[0] for ch in changes}
    under = f" in {roots.pop()}" if len(roots) == 1 else ""
    return f" {len(changes)} changes ({counted}){under}:"


def _no_change(f: Any) -> str:
    if f.note:
        return f.note
    if not f.location:
        return (
            "compiled, not explained: no trace the watcher could see (a jitted function "
            "under jax.grad, jax.vmap, ..., or no trace hook in this JAX)"
        )
    return (
        "recompiled, but no argument differs from an earlier compile (JAX's caches were "
        "cleared, or a setting staticfield does not watch changed)"
    )


def to_dict(functions: Sequence[Any], notices: Sequence[str], explained: bool) -> dict:
    """The report as JSON-ready data (the ``--json`` file)."""
    here = process()
    return {
        "jax_version": jax.__version__,
        **({"process": {"index": here[0], "count": here[1]}} if here else {}),
        "explained": explained,
        "notices": list(notices),
        "functions": [
            {
                "name": f.name,
                "location": f.location,
                "eager": f.eager,
                "padding": f.padding,
                "compiles": f.count,
                "failed_traces": f.failed_traces,
                "loads": f.loads,
                **{t: round(f.seconds(t), 6) for t in _TIMES},
                "events": [
                    {
                        "number": c.number,
                        "call_site": c.call_site,
                        "via": c.via,
                        "compiled": c.compiled,
                        "store": c.store,
                        "inside": c.inside,
                        **{t: round(getattr(c, t), 6) for t in _TIMES},
                        "changes": [
                            {"path": ch.path, "kind": ch.kind, "old": ch.old,
                             "new": ch.new, "hint": ch.hint}
                            for ch in c.changes
                        ],
                    }
                    for c in f.compiles
                ],
            }
            for f in functions
        ],
    }
