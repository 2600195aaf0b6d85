"""``python -m staticfield``: the command line. ``demo`` runs the worked examples.

The examples live in ``staticfield.examples`` (one module per scenario, each with a
``run()``); their sources and outputs are the pages under ``docs/examples/``.
"""

from __future__ import annotations

import argparse
import codecs
import dataclasses
import importlib
import io
import os
import sys
from types import ModuleType
from typing import Sequence

from ._core import _field
from .examples import EXAMPLES

# Characters the output uses, and what a terminal that cannot show them gets instead.
_ASCII = {"\u2192": "->", "\u2026": "...", "\u00d7": "x"}


def _to_ascii(err: UnicodeError) -> tuple[str, int]:
    if not isinstance(err, UnicodeEncodeError):
        raise err
    text = err.object[err.start : err.end]
    return "".join(_ASCII.get(c, "?") for c in text), err.end


codecs.register_error("staticfield.ascii", _to_ascii)


def _degrade_unencodable_output() -> None:
    """On a stdout that cannot encode ``→`` (``PYTHONIOENCODING=cp1252``), print ``->``."""
    if isinstance(sys.stdout, io.TextIOWrapper):
        sys.stdout.reconfigure(errors="staticfield.ascii")

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
    store = commands.add_parser(
        "store",
        help="list the programs a program store holds (sf.set_program_store), or empty it",
        description="List what a program store holds, one line per program: its function, "
        "static values, bucket or leading argument avals, how it is found (by its trace, or "
        "both by trace and by source), size and age; then the warm-up records per function and "
        "the functions whose programs the store refused. -v adds every aval, sharding and "
        "device, and why each refusal. --clear removes every program and record; "
        "--clear-programs removes the programs and keeps the records (sf.warmup makes them again).",
    )
    store.add_argument("path", metavar="PATH", help="the store's directory")
    store.add_argument("-v", "--verbose", action="store_true",
                       help="under each program, every aval with its sharding, the devices and JAX version")
    clearing = store.add_mutually_exclusive_group()
    clearing.add_argument("--clear", action="store_true", help="remove every program and record in the store")
    clearing.add_argument("--clear-programs", action="store_true",
                          help="remove the programs, keep the records (for a new machine or a JAX upgrade)")
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


def _fields_legend(module: ModuleType) -> list[str]:
    """One line per dataclass the example defines: its fields, the static ones marked."""
    lines = []
    for obj in vars(module).values():
        if isinstance(obj, type) and obj.__module__ == module.__name__ and dataclasses.is_dataclass(obj):
            names = [
                f"{f.name} (static)" if _field.is_static(f) else f"{f.name} (dynamic)"
                for f in dataclasses.fields(obj)
            ]
            lines.append(f"{obj.__name__}: {', '.join(names)}")
    return lines


def demo(names: Sequence[str] = ()) -> None:
    """Run the named examples (all by default), each under a title line."""
    chosen = [n for n in EXAMPLES if n in names] if names else list(EXAMPLES)
    for i, name in enumerate(chosen):
        module = importlib.import_module(f"{__package__}.examples.{name}")
        if i:
            print()
        print(_title(EXAMPLES.index(name) + 1, name, module.__doc__ or ""))
        print(f"source: {module.__file__}")
        for line in _fields_legend(module):
            print(line)
        print()
        module.run()
        sys.stdout.flush()


def _demo_command(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    unknown = [n for n in args.names if n not in EXAMPLES]
    if unknown:
        parser.exit(2, f"{parser.prog} demo: unknown example {', '.join(map(repr, unknown))}; "
                       f"choose from {', '.join(EXAMPLES)}\n")
    demo(args.names)


def _store_command(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    from ._store._cli import check, command

    path = os.path.abspath(os.path.expanduser(args.path))
    problem = check(path)
    if problem:
        parser.exit(1, f"{parser.prog} store: {problem}\n")
    print(command(path, args.clear, args.clear_programs, args.verbose))


# One entry per subcommand: (parser, parsed arguments) -> None.
_COMMANDS = {"demo": _demo_command, "store": _store_command}


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["watch"]:
        from ._watch._cli import main as watch_main

        return watch_main(argv[1:])
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    _degrade_unencodable_output()
    try:
        _COMMANDS[args.command](parser, args)
    except BrokenPipeError:  # `... demo | head`: stop quietly, as other CLI tools do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
