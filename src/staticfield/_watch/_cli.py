"""``python -m staticfield watch [--json FILE] [--max-compiles N] [-m] script.py [args...]``.

Runs the script as ``python script.py args...`` would (with ``-m``, a module, as
``python -m module args...`` would) (its output, exit code and
traceback unchanged) under ``sf.watch``, then prints the report to stderr, also
when the script raised or exited non-zero. Exit status: the script's own when it
is non-zero, else 1 when a function compiled more than ``--max-compiles`` times.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import runpy
import sys
import traceback
from typing import Callable, Sequence

from ._report import process, wrap
from ._watcher import watch

OVER_BUDGET = (
    "staticfield watch: {name} compiled {count} times, over --max-compiles {limit} "
    "({location}); see its recompiles above for the fix"
)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m staticfield watch",
        description="Run a Python script and report, per jitted function, how often it "
        "compiled, how long that took, and why each recompile happened.",
    )
    parser.add_argument("--json", metavar="FILE", help="also write the report as JSON to FILE "
                        "({process} in FILE becomes the process index, for a multi-process job)")
    parser.add_argument(
        "--max-compiles", metavar="N", type=int,
        help="exit non-zero if any jitted function compiles more than N times (a CI guard)",
    )
    parser.add_argument("-m", dest="module", action="store_true",
                        help="run a module, as python -m MODULE does (SCRIPT names it)")
    parser.add_argument("script", help="the Python script (or, with -m, module) to run")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="arguments for the script")
    return parser


def main(argv: Sequence[str]) -> int:
    options = _parser().parse_args(argv)
    script = os.path.abspath(options.script)
    if options.module:
        sys.path.insert(0, os.getcwd())
        run = functools.partial(runpy.run_module, options.script, run_name="__main__",
                                alter_sys=True)
    elif os.path.isfile(script):
        sys.path.insert(0, os.path.dirname(script))
        run = functools.partial(runpy.run_path, script, run_name="__main__")
    else:
        print(f"python -m staticfield watch: no such script {options.script!r}", file=sys.stderr)
        return 2
    sys.argv = [options.script, *options.args]
    watcher = watch()
    watcher.start()
    try:
        status = _run(run)
    finally:
        watcher.stop()
    return _finish(watcher, status, options)


def _run(run: Callable[[], object]) -> int:
    """Run the script as __main__; its exit status, printing its traceback as Python would."""
    try:
        run()
    except SystemExit as e:
        if e.code is None:
            return 0
        if isinstance(e.code, int):
            return e.code
        print(e.code, file=sys.stderr)
        return 1
    except BaseException as e:
        tb = e.__traceback__
        while tb is not None and tb.tb_frame.f_globals.get("__name__") in ("runpy", __name__):
            tb = tb.tb_next  # drop this runner's and runpy's frames
        traceback.print_exception(type(e), e, tb or e.__traceback__)
        return 1
    return 0


def _finish(watcher: watch, status: int, options: argparse.Namespace) -> int:
    sys.stdout.flush()
    print("\n" + watcher.report(), file=sys.stderr)
    if options.json:
        here = process()
        options.json = options.json.replace("{process}", str(here[0] if here else 0))
        try:
            with open(options.json, "w") as f:
                json.dump(watcher.as_dict(), f, indent=2)
        except OSError as e:
            print(f"python -m staticfield watch: cannot write --json {options.json}: {e}",
                  file=sys.stderr)
            status = status or 2
    if options.max_compiles is not None:
        over = watcher.over_budget(options.max_compiles)
        for fn in over:
            text = OVER_BUDGET.format(name=fn.name, location=fn.location or "no location",
                                      count=fn.count, limit=options.max_compiles)
            print(*wrap(text, "  "), sep="\n", file=sys.stderr)
        if over and not status:
            status = 1
    sys.stderr.flush()
    return status
