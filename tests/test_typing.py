"""pyright and mypy accept the good example files in tests/typing and reject the bad ones.

A bad file marks each line that must be rejected with ``# expect-error``; the
checkers must report errors on exactly those lines, so a file cannot pass by
failing for an unrelated reason. Good files must check clean (mypy in
``--strict`` mode) and also run.
"""

from __future__ import annotations

import json
import re
import runpy
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TYPING_DIR = Path(__file__).resolve().parent / "typing"
BIN = Path(sys.executable).parent
GOOD = sorted(TYPING_DIR.glob("good_*.py"))
BAD = sorted(TYPING_DIR.glob("bad_*.py"))
CHECKERS = ["pyright", "mypy"]


def _expected_lines(path: Path) -> set[int]:
    lines = path.read_text().splitlines()
    return {i for i, line in enumerate(lines, 1) if line.rstrip().endswith("# expect-error")}


def _run(cmd: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)


def _pyright(files: list[Path]) -> dict[str, set[int]]:
    result = _run([str(BIN / "pyright"), "--outputjson", "--pythonpath", sys.executable, *map(str, files)])
    try:
        report = json.loads(result.stdout)
    except json.JSONDecodeError:
        pytest.fail(f"pyright did not report JSON:\n{result.stdout}\n{result.stderr}")
    errors: dict[str, set[int]] = {}
    for diag in report["generalDiagnostics"]:
        if diag["severity"] == "error":
            errors.setdefault(Path(diag["file"]).name, set()).add(diag["range"]["start"]["line"] + 1)
    return errors


_MYPY_LINE = re.compile(r"^(?P<file>[^:\n]+\.py):(?P<line>\d+): error:", re.MULTILINE)


def _mypy(files: list[Path]) -> dict[str, set[int]]:
    result = _run(
        [str(BIN / "mypy"), "--strict", "--no-error-summary", "--python-executable", sys.executable,
         *map(str, files)]
    )
    if result.returncode not in (0, 1):  # 2 means mypy itself failed
        pytest.fail(f"mypy failed to run:\n{result.stdout}\n{result.stderr}")
    errors: dict[str, set[int]] = {}
    for m in _MYPY_LINE.finditer(result.stdout):
        errors.setdefault(Path(m["file"]).name, set()).add(int(m["line"]))
    return errors


@pytest.fixture(scope="module", params=CHECKERS)
def diagnostics(request: pytest.FixtureRequest) -> tuple[str, dict[str, set[int]]]:
    """Run one checker once over every example file; map file name to the lines with errors."""
    checker = request.param
    if not (BIN / checker).exists():
        pytest.skip(f"{checker} is not installed (pip install -e '.[typing]')")
    run = _pyright if checker == "pyright" else _mypy
    return checker, run(GOOD + BAD)


def test_example_files_exist():
    """The typing examples include good and bad files, and every bad file marks the lines it expects rejected."""
    assert GOOD and BAD
    for path in BAD:
        assert _expected_lines(path), f"{path.name} marks no line with # expect-error"


@pytest.mark.parametrize("path", GOOD, ids=lambda p: p.name)
def test_good_file_is_accepted(diagnostics, path):
    """A good example file checks without a single error."""
    checker, errors = diagnostics
    assert errors.get(path.name, set()) == set(), f"{checker} rejected {path.name} on lines {sorted(errors[path.name])}"


@pytest.mark.parametrize("path", BAD, ids=lambda p: p.name)
def test_bad_file_is_rejected_on_the_marked_lines(diagnostics, path):
    """A bad example file has errors on exactly the lines marked # expect-error."""
    checker, errors = diagnostics
    assert errors.get(path.name, set()) == _expected_lines(path), checker


@pytest.mark.parametrize("path", GOOD, ids=lambda p: p.name)
def test_good_file_runs(path):
    """A good example file is real code: it also runs without error."""
    runpy.run_path(str(path), run_name=f"typing_example_{path.stem}")
