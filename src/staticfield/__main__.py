"""``python -m staticfield``: the command line. ``demo`` runs the worked examples.

The examples live in ``staticfield.examples`` (one module per scenario, each with a
``run()``); their sources and outputs are the pages under ``docs/examples/``.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from typing import Sequence

from .examples import EXAMPLES

_USAGE_EPILOG = (
    "examples, in the order `demo` runs them: " + ", ".join(EXAMPLES) + "\n"
    "run one on its own: python -m staticfield demo shape_change"
)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m staticfield",
        description="staticfield: pytree dataclasses for JAX with safe static fields.",
        epilog=_USAGE_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    demo = commands.add_parser(
        "demo",
        help="run the worked examples: what is called, compile counts, recompile explanations",
        description="Run the worked examples (docs/examples/) and print, for each, what is "
        "called, the compile counts and the recompile explanations.",
        epilog=_USAGE_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands.add_parser(
        "watch",
        help="run a script and report every jit compile: counts, seconds, and why",
        add_help=False,
    )
    demo.add_argument(
        "names",
        nargs="*",
        metavar="EXAMPLE",
        help="run only these examples (default: all, in order)",
    )
    return parser


def _title(number: int, name: str, doc: str) -> str:
    summary = doc.strip().splitlines()[0].replace("``", "") if doc.strip() else name
    head = f"[{number}/{len(EXAMPLES)}] {name}: {summary}"
    return f"{head}\n{'=' * len(head)}"


def demo(names: Sequence[str] = ()) -> None:
    """Run the named examples (all by default), each under a title line."""
    chosen = [n for n in EXAMPLES if n in names] if names else list(EXAMPLES)
    for i, name in enumerate(chosen):
        module = importlib.import_module(f"{__package__}.examples.{name}")
        if i:
            print()
        print(_title(EXAMPLES.index(name) + 1, name, module.__doc__ or ""))
        module.run()
        sys.stdout.flush()


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["watch"]:
        from ._watch_cli import main as watch_main

        return watch_main(argv[1:])
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    unknown = [n for n in args.names if n not in EXAMPLES]
    if unknown:
        parser.exit(2, f"{parser.prog} demo: unknown example {', '.join(map(repr, unknown))}; "
                       f"choose from {', '.join(EXAMPLES)}\n")
    try:
        demo(args.names)
    except BrokenPipeError:  # `... demo | head`: stop quietly, as other CLI tools do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
