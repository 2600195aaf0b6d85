"""Writing a run's figures: ``results.md``, ``results.json`` and the results block of the docs."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from typing import Any

from . import agree, buckets, deps, dispatch, fields, large, misses, nested, restart, stacking, variants, warmup, watch
from ._harness import Results, Row, fmt_us
from ._plots import plots
from ._targets import Target


def _x(ratio: float | None) -> str:
    return "" if ratio is None else f"{ratio:.2f}×"


def _best_anchor(rows: list[Row]) -> Row | None:
    anchors = [r for r in rows if r.kind == "anchor"]
    return min(anchors, key=lambda r: r.us) if anchors else None


def _restart_parts(results: Results) -> list[str]:
    """Case 10: where each store contender's time to first result went (seconds)."""
    parts = results.extra.get(restart.PARTS, {})
    models = [m for m in (*restart.MODELS, restart.JOB) if parts.get(m)]
    if not models:
        return []
    out = ["", f"Where the store's time to first result goes, on {parts.get('device', '?')} (s; the "
           "median of the processes): the trace and the first run are paid by JAX's cache too, "
           "and so is loading the executable (JAX's cache deserializes it as well).", "",
           "| model | store | trace | deserialize | first run | store's own work | agreement | own / total |",
           "|---|---|--:|--:|--:|--:|--:|--:|"]
    for model in models:
        for name, split in parts[model].items():
            total = results.get(restart.RESTART, model, name)
            if not split or not total:
                continue
            cells = [f"{split.get(p, 0) / 1e6:.3f}" for p in restart.PART_NAMES]
            share = split.get(restart.PART_NAMES[3], 0) / total
            out.append(f"| {model} | {name} | " + " | ".join(cells) + f" | {share:.1%} |")
    return out


def _table(rows: list[Row], reference: str) -> list[str]:
    """A contender table: µs per call, × the reference, × the best anchor."""
    ref = next((r for r in rows if r.name == reference), None)
    best = _best_anchor(rows)
    head = f"| contender | µs per call | × {reference} |"
    rule = "|---|--:|--:|"
    if best:
        head += f" × best anchor ({best.name}) |"
        rule += "--:|"
    lines = [head, rule]
    for r in sorted(rows, key=lambda r: r.us):
        name = f"**{r.name}**" if r.kind == "ours" else r.name
        line = f"| {name} | {fmt_us(r.us)} | {_x(r.us / ref.us if ref else None)} |"
        if best:
            line += f" {_x(r.us / best.us)} |"
        lines.append(line)
    return lines


def _matrix(results: Results, group: str, params: tuple[int, ...], reference: str | None = None,
            ref_group: str | None = None) -> list[str]:
    """Contenders × parameter values; each cell is µs (× its reference at that value).

    The reference is the contender ``reference`` of the same group, or, with
    ``ref_group``, the same contender's figure in that group.
    """
    names: list[str] = []
    kind: dict[str, str] = {}
    for r in results.select(group):
        if r.name not in names:
            names.append(r.name)
            kind[r.name] = r.kind
    head = " | ".join(str(p) for p in params)
    lines = [f"| contender | {head} | {params[-1]} / {params[0]} |",
             "|---|" + "--:|" * (len(params) + 1)]
    for name in names:
        cells = []
        for p in params:
            us = results.get(group, p, name)
            ref = results.get(ref_group, p, name) if ref_group else results.get(group, p, reference)
            if us is None:
                cells.append("")
            elif ref is None or (name == reference and not ref_group):
                cells.append(fmt_us(us))
            else:
                cells.append(f"{fmt_us(us)} ({us / ref:.2f}×)")
        first, last = results.get(group, params[0], name), results.get(group, params[-1], name)
        growth = _x(last / first) if first and last else ""
        shown = f"**{name}**" if kind[name] == "ours" else name
        lines.append(f"| {shown} | {' | '.join(cells)} | {growth} |")
    return lines


def body(results: Results, targets: list[Target], machine: dict[str, Any],
         images: dict[str, str], level: int = 2) -> list[str]:
    """The report's sections; ``images`` maps a plot's file name to the path to show it by."""
    cfg = results.config
    h = "#" * level

    def image(name: str, alt: str) -> list[str]:
        return ["", f"![{alt}]({images[name]})"] if name in images else []

    out = ["| machine | |", "|---|---|"]
    out += [f"| {k} | {v} |" for k, v in machine.items()]
    out += ["", f"{h} Targets", "", "| target | measured | bound | result |", "|---|--:|--:|---|"]
    for t in targets:
        got = t.ratio_text
        res = f"**{t.status}**" + (f" ({t.detail})" if t.detail else "")
        out.append(f"| {t.label} | {got} | {t.bound_text} | {res} |")

    dispatch_sections = (
        (dispatch.DISPATCH, dispatch.RAW, "1. jit dispatch, cache hit, method call",
         "`params.step(x)` with two `f32[4]` arrays and a static int `n` "
         "(or the closest equivalent each library offers)."),
        (dispatch.FRESH, dispatch.RAW, "1b. the same call on a new instance each time",
         "`unflatten(treedef, leaves).step(x)`: the instance is rebuilt by "
         "`jax.tree_util.tree_unflatten` before every call, as a training loop's "
         "update hands back a new one. The raw row builds no instance."),
        (dispatch.METHOD_PYTREE, dispatch.PARTIAL, "2. bound method passed as a pytree into a jitted function",
         "`apply(params.step, x)` where `apply = jax.jit(lambda f, x: f(x))` "
         "(or `eqx.filter_jit`)."),
    )
    for group, base, title, about in dispatch_sections:
        if results.select(group):
            out += ["", f"{h} {title}", "", about, ""]
            out += _table(results.select(group), base)
    out += image("dispatch.png", "µs per cache-hit call, per library")
    if results.select(variants.VARIANTS):
        out += ["", f"{h} 3. cache hit against the number of cached static variants", "",
                "Columns are the number of cached variants; cells are µs per call on the "
                "slowest cached variant (× the same library with a single cached variant, "
                "timed alongside). The last column divides the first and last cells as "
                "measured. The slowest variant at each count:", ""]
        for name, worst in results.extra.get("variants_worst_index", {}).items():
            out.append(f"- {name}: " + ", ".join(f"N={k}: n={v}" for k, v in worst.items()))
        out.append("")
        out += _matrix(results, variants.VARIANTS, cfg.variants, ref_group=variants.ONE_VARIANT)
        out += image("variants.png", "µs per call against the number of cached static variants")
    for op, title, reference in (
        (fields.FLATTEN, "4a. flatten (`jax.tree_util.tree_flatten`)", fields.NATIVE),
        (fields.UNFLATTEN, "4b. unflatten (`jax.tree_util.tree_unflatten`)", fields.NATIVE),
        (fields.CONSTRUCTION, "4c. construction (`Cls(*values)`)", fields.PLAIN),
    ):
        if results.select(op):
            out += ["", f"{h} {title} against the number of fields", "",
                    f"Columns are field counts (all dynamic); cells are µs (× {reference}).", ""]
            out += _matrix(results, op, cfg.field_counts, reference)
    out += image("fields.png", "flatten, unflatten and construction against the number of fields")
    if results.select(stacking.STACK):
        out += ["", f"{h} 5. stacking {cfg.stack_size} instances", ""]
        out += _table(results.select(stacking.STACK), stacking.BY_HAND)
    if results.select(nested.NESTED):
        best, best_name = nested.best_anchor(results)
        out += ["", f"{h} 6. a {nested.LAYERS}-layer model: jitted update, then a method call", "",
                "One training-style step: a jitted update takes the model and returns a new one "
                f"({nested.LAYERS} layers, each an instance with two arrays and a static), then a "
                "jitted method runs on the new model. µs per step.", ""]
        out += _table(results.select(nested.NESTED), best_name or nested.OURS)
    if results.select(misses.MISSES):
        out += ["", f"{h} 7. the miss path: trace + compile", "",
                "First calls, each a cache miss that traces and compiles a program no earlier "
                "call compiled; µs per miss, the 10th percentile of the misses timed (inputs made before the clock starts). All of staticfield's tracking runs here.", ""]
        out += _table(results.select(misses.MISSES), misses.RAW_SHAPE)
    for group, title in ((watch.HIT, "8a. a cache hit of plain `jax.jit`, with and without `sf.watch`"),
                         (watch.MISS, "8b. a compile of plain `jax.jit`, with and without `sf.watch`")):
        if results.select(group):
            out += ["", f"{h} {title}", "", "µs per call; the watcher's hooks run only on a miss.", ""]
            out += _table(results.select(group), watch.OFF)
    out += _deps_section(results, h)
    if results.select(restart.RESTART):
        out += ["", f"{h} 10. time to first result in a fresh process", "",
                "A new process calls a model's jitted method once for each static variant: 64 "
                "layers with 4 variants, and 256 layers with 1; and the 64-layer model in process 1 of "
                "a two-process job, where JAX's persistent cache never hits (process 0 writes it). µs "
                "from the first call to the last result (imports and inputs before the clock), the "
                "median of the processes (5 each, or --rounds).", ""]
        for model in dict.fromkeys(row.param for row in results.select(restart.RESTART)):
            out += [f"{model}:", ""] + _table(results.select(restart.RESTART, model), restart.COLD) + [""]
        out += _restart_parts(results)
    if results.select(buckets.SERVE):
        served = results.extra.get(buckets.COMPILES, {})
        out += ["", f"{h} 11. shape buckets: an MLP served with many batch sizes", "",
                f"{served.get('sizes', 'N')} NumPy batches of sizes drawn from 1..4096 "
                f"({served.get('distinct sizes', 'N')} distinct), one call each, compiles included: total µs. "
                "Compiles of the user's function: "
                + ", ".join(f"{k}: {v}" for k, v in served.items() if k not in ("sizes", "distinct sizes"))
                + ".", ""]
        out += _table(results.select(buckets.SERVE), buckets.RAW)
    if results.select(buckets.HIT):
        out += ["", f"{h} 11b. shape buckets: a cache hit", "",
                "A bucketed call with 37 rows (bucket 64) against a plain jitted call of the bucket's "
                "shape, and the pad and slice programs alone; µs per call.", ""]
        out += _table(results.select(buckets.HIT), buckets.RAW_HIT)
    if results.select(warmup.WARMUP):
        out += ["", f"{h} 12. time to ready with `sf.warmup()`", "",
                "A new process makes 8 programs of a 64-layer model ready (4 static activations × 2 "
                "batch sizes) and runs each once: without a store, after `sf.warmup()` from a warm "
                "store, and after `sf.warmup()` from a store whose programs were cleared and records "
                "kept, on 1 or 2 worker threads. µs from the start of warm-up to the last result, "
                "the median of 3 processes each.", ""]
        out += _table(results.select(warmup.WARMUP), warmup.COLD)
    if results.select(agree.AGREE):
        check = next((r.note for r in results.select(agree.AGREE) if r.note), "")
        out += ["", f"{h} 14. the agreement between processes, per new program", "",
                "A two-process job (2 CPU devices each): every call compiles and runs a new program "
                "sharded over both processes, with the check on and off in alternation. µs per first "
                "call (trace, compile, run), the 10th percentile of each on process 0"
                + (f"; {check}, waiting for the other process included" if check else "") + ".", ""]
        out += _table(results.select(agree.AGREE), agree.OFF)
    out += _large_section(results, h, image)
    notes = [f"- {n}" for n in results.notes]
    compile_s = results.extra.get("variants_compile_s")
    if compile_s:
        notes.append(
            f"- Tracing and compiling the {max(cfg.variants)} cached static variants of case 3 "
            "(set-up, not timed) took "
            + ", ".join(f"{seconds:g} s for {name}" for name, seconds in compile_s.items()) + "."
        )
    out += ["", f"{h} Notes", ""]
    out += notes or ["- none"]
    return out


def _large_section(results: Results, h: str, image: Any) -> list[str]:
    """Case 15: the hit against the model's leaves, the 10,000-leaf operations, the caches' bytes."""
    if not results.select(large.LARGE):
        return []
    counts = tuple(sorted({int(r.param) for r in results.select(large.LARGE)}))
    out = ["", f"{h} 15. large models: a cache hit against the number of leaves", "",
           f"A model of {large.LAYER_LEAVES}-array layers (`f32[2]` each) in a tuple field, a trivial method; "
           "columns are leaves, cells µs per hit (× plain `jax.jit` on a flat tuple of the same leaves, "
           "timed alongside in one process).", ""]
    out += _matrix(results, large.LARGE, counts, large.FLAT)
    out += image("large.png", "µs per hit against the number of leaves")
    ops = results.select(large.OPS)
    if ops:
        out += ["", f"On the {counts[-1]:,}-leaf model, µs per operation (`replace` of one layer rebuilds "
                "the layers' tuple around it):", "",
                f"| operation | {large.SF_OPS} | {large.DC_OPS} | × {large.DC_OPS} |", "|---|--:|--:|--:|"]
        for op in dict.fromkeys(r.param for r in ops):
            ours, theirs = results.get(large.OPS, op, large.SF_OPS), results.get(large.OPS, op, large.DC_OPS)
            if ours is not None and theirs is not None:
                out.append(f"| {op} | {fmt_us(ours)} | {fmt_us(theirs)} | {_x(ours / theirs)} |")
    memory = results.extra.get(large.MEMORY)
    if memory:
        out += ["", f"staticfield's per-instance caches on the {memory['leaves']:,}-leaf model after a hit of "
                f"each method form: {memory['bytes']:,} bytes over {memory['instances']:,} instances, "
                f"{memory['bytes per instance']:g} bytes per instance (the cached tuples, keys and bindings; "
                "the arrays are not counted)."]
    return out


def _deps_section(results: Results, h: str) -> list[str]:
    out: list[str] = []
    if results.select(deps.HIT):
        out += ["", f'{h} 9a. deps="read": cache hit', "",
                'A cache-hit call of a `@sf.jit_method(deps="read")` method, against plain `jax.jit` '
                'and the default `deps="all"`.', ""]
        out += _table(results.select(deps.HIT), deps.RAW)
    if results.select(deps.REUSE):
        out += ["", f'{h} 9b. deps="read": a new instance reusing a program', "",
                "The first call of an instance that differs only in a static the method never "
                "read: a lookup by the read fields, no trace, no compile (the fastest of the "
                "first calls timed), against a cache hit of the same method.", ""]
        out += _table(results.select(deps.REUSE), deps.READ_HIT)
    if results.select(deps.SWEEP):
        sweep = results.extra.get(deps.COMPILES, {})
        out += ["", f"{h} 9c. instances differing only in an unread static (jax#33043)", "",
                f"{sweep.get('instances', 'N')} instances whose `name` the method never reads, "
                "each called once: µs per instance (compiles included). Compiles: "
                + ", ".join(f"{k}: {v}" for k, v in sweep.items() if k != "instances") + ".", ""]
        out += _table(results.select(deps.SWEEP), deps.RAW)
    return out


def markdown(results: Results, targets: list[Target], machine: dict[str, Any],
             images: dict[str, str]) -> str:
    out = ["# staticfield benchmark results", ""]
    if results.config.smoke:
        out += ["**Smoke run: tiny counts, the figures mean nothing.**", ""]
    out += ["Generated by `python -m benchmarks` (`make bench`); all figures are µs per call,",
            "the minimum over interleaved rounds (see `docs/performance.md`). Lower is better.", ""]
    out += body(results, targets, machine, images)
    return "\n".join(out) + "\n"


DOC_START = "<!-- benchmarks:results:start (generated by python -m benchmarks; do not edit) -->"
DOC_END = "<!-- benchmarks:results:end -->"


def update_docs(doc: str, assets: str, results: Results, targets: list[Target],
                machine: dict[str, Any], pngs: list[str]) -> list[str]:
    """Copy the plots into the docs and regenerate the results block of ``doc``.

    Only the text between ``DOC_START`` and ``DOC_END`` is replaced, so every
    figure on the page comes from this run. Returns the paths written.
    """
    with open(doc) as f:
        text = f.read()
    if DOC_START not in text or DOC_END not in text:
        results.note(f"{doc} has no results markers: not updated")
        return []
    os.makedirs(assets, exist_ok=True)
    images = {}
    for png in pngs:
        name = os.path.basename(png)
        shutil.copyfile(png, os.path.join(assets, name))
        images[name] = os.path.relpath(os.path.join(assets, name), os.path.dirname(doc)).replace(os.sep, "/")
    block = "\n".join(body(results, targets, machine, images, level=3))
    head, rest = text.split(DOC_START, 1)
    tail = rest.split(DOC_END, 1)[1]
    with open(doc, "w") as f:
        f.write(f"{head}{DOC_START}\n{block}\n{DOC_END}{tail}")
    return [doc, *(os.path.join(assets, n) for n in images)]


def write(results: Results, targets: list[Target], machine: dict[str, Any], out_dir: str) -> list[str]:
    """Write everything into ``out_dir``; return the paths written."""
    os.makedirs(out_dir, exist_ok=True)
    written = plots(results, out_dir)
    images = {os.path.basename(p): os.path.basename(p) for p in written}
    md = os.path.join(out_dir, "results.md")
    with open(md, "w") as f:
        f.write(markdown(results, targets, machine, images))
    js = os.path.join(out_dir, "results.json")
    with open(js, "w") as f:
        json.dump({
            "machine": machine,
            "config": dataclasses.asdict(results.config),
            "targets": [{"label": t.label, "ratio": t.ratio, "bound": t.bound_text,
                         "status": t.status, "detail": t.detail} for t in targets],
            "rows": [dataclasses.asdict(r) for r in results.rows],
            "notes": results.notes,
            "extra": results.extra,
        }, f, indent=1)
    return [md, js, *written]
