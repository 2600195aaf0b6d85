"""The ``sf.watch`` report: as text for people, as data for ``--json`` and tests.

Both read ``WatchedFunction``/``Compile`` records (from ``_watch``) by attribute and
never change them.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Sequence

import jax

_TIMES = ("trace_s", "lower_s", "compile_s")


def render(functions: Sequence[Any], notices: Sequence[str]) -> str:
    """Per function (most compiles first): compiles, seconds, and why each recompile."""
    jitted = [f for f in functions if not f.eager]
    eager = [f for f in functions if f.eager]
    compiles = sum(f.count for f in jitted)
    eager_note = f" (+{sum(f.count for f in eager)} eager op-by-op)" if eager else ""
    seconds = "  ".join(
        f"{label} {sum(f.seconds(t) for f in functions):.3f} s"
        for label, t in zip(("trace", "lower", "compile"), _TIMES)
    )
    lines = [
        f"staticfield watch: {len(jitted)} jitted function(s), {compiles} compile(s)"
        f"{eager_note}; {seconds}"
    ]
    for f in sorted(jitted, key=lambda f: -f.count):
        lines.append("")
        lines += _function_lines(f)
    if eager:
        counts = Counter({f.name: f.count for f in eager})
        shown = ", ".join(f"{n} ×{c}" if c > 1 else n for n, c in counts.most_common(8))
        more = "" if len(counts) <= 8 else f", and {len(counts) - 8} more"
        lines += [
            "",
            f"eager op-by-op compiles (operations outside jit): {sum(counts.values())} "
            f"({shown}{more})",
        ]
    if notices:
        lines += ["", *notices]
    return "\n".join(lines)


def _function_lines(f: Any) -> list[str]:
    where = f" ({f.location})" if f.location else ""
    times = "  ".join(f"{t[:-2]} {f.seconds(t):.3f} s" for t in _TIMES)
    plural = "compile" if f.count == 1 else "compiles"
    failed = f", and {f.failed_traces} trace(s) that raised" if f.failed_traces else ""
    if f.uncompiled:
        failed += f", and {f.uncompiled} trace(s) by .lower/.trace/.eval_shape"
    if f.loads:
        failed += f", {f.loads} loaded from the program store"
    lines = [f"{f.name}{where}: {f.count} {plural}{failed}  [{times}]"]
    compiled_before = False
    for c in f.compiles:
        at = f" at {c.call_site}" if c.call_site else ""
        if not c.compiled:
            lines.append(f"  #{c.number}{at}: traced by {c.via}, not compiled")
            continue
        first, compiled_before = not compiled_before, True
        if first and c.number == 1:
            lines.append(f"  #1{at}: first compile")
        elif first and not c.changes:
            lines.append(f"  #{c.number}{at}: first compile")
        elif not c.changes:
            lines.append(f"  #{c.number}{at}: {_no_change(f)}")
        else:
            lines.append(f"  #{c.number}{at}: {'compiled' if first else 'recompiled'} because")
            for i, ch in enumerate(c.changes):
                read = f"; {ch.read}" if ch.read else ""  # deps="read": where it was read
                lines.append(f"    {ch.path}: {ch.old} → {ch.new} ({ch.kind}{read})")
                if ch.hint and all(ch.hint != later.hint for later in c.changes[i + 1 :]):
                    lines.append(f"      fix: {ch.hint}")  # once, after its last change
    return lines


def _no_change(f: Any) -> str:
    if f.note:
        return f.note
    if not f.location:
        return (
            "compiled, not explained: no trace the watcher could see (a jitted function "
            "under jax.grad, jax.vmap, ..., or no trace hook in this JAX)"
        )
    return (
        "recompiled, but no argument differs from an earlier compile (a global setting "
        "such as jax_enable_x64 may have changed, or JAX's caches were cleared)"
    )


def to_dict(functions: Sequence[Any], notices: Sequence[str], explained: bool) -> dict:
    """The report as JSON-ready data (the ``--json`` file)."""
    return {
        "jax_version": jax.__version__,
        "explained": explained,
        "notices": list(notices),
        "functions": [
            {
                "name": f.name,
                "location": f.location,
                "eager": f.eager,
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
