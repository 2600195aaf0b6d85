"""The README's quick start runs and prints what it says it prints."""

from __future__ import annotations

import contextlib
import io
import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_quick_start_runs_and_matches_its_comments():
    """Executing the README's python block prints the compile count and explanation shown."""
    (code,) = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, str(README), "exec"), {"__name__": "readme"})
    assert out.getvalue().splitlines() == [
        "2",
        "Params.apply recompiled (compile #2) because:",
        "  self.depth: 2 → 3 (static)",
    ]


def test_readme_names_the_commands():
    """The README holds the make commands a fresh machine needs."""
    text = README.read_text()
    for command in ("make demo", "make test", "make bench"):
        assert f"`{command}`" in text


def test_readme_and_quick_start_link_the_warmup_page():
    """docs/warmup.md is reachable from the README and from docs/index.md."""
    assert "](docs/warmup.md)" in README.read_text()
    assert "](warmup.md)" in (README.parent / "docs" / "index.md").read_text()


def test_readme_says_how_long_make_test_takes_and_how_to_run_a_subset():
    """The README gives make test's duration and a subset command whose test exists."""
    text = README.read_text()
    assert re.search(r"takes about \d+ minutes on an idle 2-core machine", text)
    for path, name in re.findall(r"python -m pytest (tests/\w+\.py)(?:::(\w+))?", text):
        test_file = README.parent / path
        assert test_file.exists(), path
        assert not name or f"def {name}(" in test_file.read_text(), name


def test_readme_says_how_to_choose_the_python_and_start_over():
    """The README shows how to pick the Python the venv is made from, and how to start over."""
    text = README.read_text()
    assert "`PYTHON=python3.12 make test`" in text
    assert "`make clean`" in text


@pytest.mark.parametrize("checker", ["pyright", "mypy"])
def test_readme_quick_start_type_checks(checker: str, tmp_path: Path):
    """The README's quick start passes pyright and mypy --strict as written."""
    binary = Path(sys.executable).parent / checker
    if not binary.exists():
        pytest.skip(f"{checker} is not installed (pip install -e '.[typing]')")
    (code,) = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    source = tmp_path / "quick_start.py"
    source.write_text(code)
    if checker == "pyright":
        cmd = [str(binary), "--pythonpath", sys.executable, str(source)]
    else:
        cmd = [str(binary), "--strict", "--python-executable", sys.executable, "--cache-dir",
               str(tmp_path / ".mypy_cache"), str(source)]
    result = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr


def test_readme_and_quick_start_link_which_knob_first():
    """docs/which.md is the first documentation link of the README and of docs/index.md's
    "Where next"."""
    docs = README.read_text().split("## Documentation", 1)[1]
    assert re.findall(r"\]\((docs/[\w/.-]+)\)", docs)[0] == "docs/which.md"
    where_next = (README.parent / "docs" / "index.md").read_text().split("## Where next", 1)[1]
    assert re.findall(r"\]\(([\w/.-]+)\)", where_next)[0] == "which.md"


def test_readme_says_make_test_needs_the_package_index_and_disk():
    """make test downloads from the package index into .venv: the README says so, and how much disk."""
    text = README.read_text()
    assert "package index" in text
    assert re.search(r"about \d+(\.\d+)? GB of disk", text)
