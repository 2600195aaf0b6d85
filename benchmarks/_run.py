"""Run the selected case groups and write the report."""

from __future__ import annotations

import argparse
import dataclasses
import json
import time

from . import (agree, auto, buckets, deps, dispatch, fields, hits, large, misses, nested, restart, stacking, variants,
               warmup, watch)
from ._harness import Config, Results, Row, load_average, machine
from ._report import update_docs, write
from ._targets import Target, evaluate

RUNNERS = {
    "dispatch": dispatch.run,
    "variants": variants.run,
    "fields": fields.run,
    "stack": stacking.run,
    "nested": nested.run,
    "watch": watch.run,
    "misses": misses.run,
    "deps": deps.run,
    "restart": restart.run,
    "buckets": buckets.run,
    "warmup": warmup.run,
    "hits": hits.run,
    "agree": agree.run,
    "auto": auto.run,
    "large": large.run,
}


def run(args: argparse.Namespace, out_dir: str, docs: tuple[str, str] | None = None) -> int:
    """Run, write the report into ``out_dir``; with ``docs=(page, assets)`` update the docs too."""
    cfg = Config.smoke_config() if args.smoke else Config()
    if args.rounds:
        cfg = dataclasses.replace(cfg, rounds=args.rounds)
    info = machine()
    results = Results(cfg)
    t0 = time.perf_counter()
    for name in args.only or list(RUNNERS):
        RUNNERS[name](cfg, results)
    elapsed = time.perf_counter() - t0
    info["load average (1, 5, 15 min) at end"] = load_average()
    info["run time"] = f"{elapsed:.0f} s"
    targets = evaluate(results)
    paths = write(results, targets, info, out_dir)
    if docs is not None:
        pngs = [p for p in paths if p.endswith(".png")]
        paths += update_docs(docs[0], docs[1], results, targets, info, pngs)
    print()
    print(f"wrote {', '.join(paths)}")
    print(f"run time {elapsed:.0f} s, load average at end {load_average()}")
    print()
    print("targets:")
    for t in targets:
        print("  " + t.line())
    failed = [t for t in targets if t.status == "FAIL"]
    if failed:
        print(f"{len(failed)} target(s) FAILED")
    return 1 if failed and args.strict else 0


def replot(results_json: str, out_dir: str, docs: tuple[str, str] | None = None) -> int:
    """Rewrite the plots and reports of a finished run from its ``results.json``, measuring nothing."""
    with open(results_json) as f:
        data = json.load(f)
    config = {k: tuple(v) if isinstance(v, list) else v for k, v in data["config"].items()}
    results = Results(Config(**config), [Row(**row) for row in data["rows"]],
                      list(data["notes"]), dict(data["extra"]))
    # The targets as that run judged them: a target added since would only show as SKIP.
    targets = [Target(t["label"], float(t["bound"][1:]), t["bound"].startswith("≤"), t["ratio"], t["detail"])
               for t in data["targets"]]
    paths = write(results, targets, data["machine"], out_dir)
    if docs is not None:
        paths += update_docs(docs[0], docs[1], results, targets, data["machine"],
                             [p for p in paths if p.endswith(".png")])
    print(f"wrote {', '.join(paths)}")
    return 0
