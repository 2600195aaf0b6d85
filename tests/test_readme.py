"""The README's quick start runs and prints what it says it prints."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

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


def test_readme_says_how_to_choose_the_python_and_start_over():
    """The README shows how to pick the Python the venv is made from, and how to start over."""
    text = README.read_text()
    assert "`PYTHON=python3.12 make test`" in text
    assert "`make clean`" in text
