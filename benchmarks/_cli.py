"""Command line: parse options, configure JAX, run the cases, report.

Nothing here imports JAX at module level: the full run turns on JAX's
persistent compilation cache, which must happen before the first compile.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from unittest import mock
from typing import Sequence

CASES = ("dispatch", "variants", "fields", "stack", "nested", "watch", "misses", "deps", "restart", "buckets",
         "warmup", "hits", "agree", "auto", "large")
HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS_DIR = os.path.join(HERE, "results")
DOC_PAGE = os.path.join(os.path.dirname(HERE), "docs", "performance.md")
DOC_ASSETS = os.path.join(os.path.dirname(HERE), "docs", "assets", "benchmarks")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="Benchmark staticfield against plain jax.jit and the anchor libraries.",
    )
    p.add_argument("--smoke", action="store_true",
                   help="run every case once with tiny counts (the figures mean nothing)")
    p.add_argument("--out", default=None,
                   help=f"output folder (default: {RESULTS_DIR} for a full run, which also "
                        "updates docs/performance.md; a new temporary folder with --smoke or --only)")
    p.add_argument("--only", choices=CASES, action="append",
                   help="run only this case group (repeatable)")
    p.add_argument("--rounds", type=int, default=None, help="interleaved rounds per measurement")
    p.add_argument("--no-compile-cache", action="store_true",
                   help="do not use JAX's persistent compilation cache for the variants case")
    p.add_argument("--strict", action="store_true", help="exit with status 1 if a target FAILs")
    p.add_argument("--replot", metavar="RESULTS_JSON", nargs="?", const=os.path.join(RESULTS_DIR, "results.json"),
                   help="measure nothing: redraw the plots and rewrite the reports of RESULTS_JSON "
                        "(default: the committed results), and the docs page when it is the committed one")
    return p


def _enable_compile_cache(path: str) -> None:
    """Let identical XLA programs (the static variants) be compiled once, not thousands of times.

    Only cache misses read or write it; no timed call ever reaches it.
    """
    import jax

    jax.config.update("jax_compilation_cache_dir", path)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)


def main(argv: Sequence[str] | None = None) -> int:
    # The variants case compiles thousands of times on purpose: no compile-count warning
    # (restored after, for a caller in the same process such as the smoke test).
    with mock.patch.dict(os.environ, {"STATICFIELD_WARN_COMPILES": "0"}):
        return _main(argv)


def _main(argv: Sequence[str] | None) -> int:
    args = _parser().parse_args(argv)
    if args.replot:
        from ._run import replot

        return replot(args.replot, args.out or os.path.dirname(os.path.abspath(args.replot)),
                      (DOC_PAGE, DOC_ASSETS) if args.out is None and os.path.exists(DOC_PAGE) else None)
    with tempfile.TemporaryDirectory(prefix="staticfield-bench-") as tmp:
        if not args.smoke and not args.no_compile_cache:
            _enable_compile_cache(os.path.join(tmp, "xla-cache"))
        full = not args.smoke and not args.only
        out = args.out or (RESULTS_DIR if full else tempfile.mkdtemp(prefix="staticfield-bench-"))
        docs = (DOC_PAGE, DOC_ASSETS) if full and out == RESULTS_DIR and os.path.exists(DOC_PAGE) else None
        from ._run import run

        status = run(args, out, docs)
    return status


__all__ = ["main", "CASES"]
