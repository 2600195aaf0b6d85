"""The Makefile's set-up: a missing or broken .venv is (re)made before any target runs."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# source_tree: `make test` runs these, `make test-newest` does not (none depends on JAX's
# version, and the wheel is built in the checkout, which the other end shares in .ci/run).
pytestmark = [pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed"),
              pytest.mark.source_tree]


def make(workdir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run ``make ARGS`` in ``workdir``, which holds a copy of the Makefile.

    The variables of an enclosing make (the suite runs under `make test`) are
    dropped, so the output is that of a make run from a shell.
    """
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS")}
    return subprocess.run(
        ["make", "--no-print-directory", *args],
        cwd=workdir, env=env, capture_output=True, text=True, timeout=300,
    )


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """A scratch directory holding only the repository's Makefile."""
    shutil.copy(ROOT / "Makefile", tmp_path / "Makefile")
    return tmp_path


def has_pip(venv_dir: Path) -> bool:
    python = venv_dir / "bin" / "python"
    return subprocess.run([python, "-m", "pip", "--version"], capture_output=True).returncode == 0


def test_venv_without_pip_is_made_again(workdir: Path):
    """A .venv whose python has no pip (a failed `python -m venv`) is replaced by one with pip."""
    venv.create(workdir / ".venv", with_pip=False)
    assert not has_pip(workdir / ".venv")
    result = make(workdir, "venv", f"PYTHON={sys.executable}")
    assert result.returncode == 0, result.stdout + result.stderr
    assert ".venv has no working pip: making it again" in result.stdout
    assert has_pip(workdir / ".venv")


def test_working_venv_is_kept(workdir: Path):
    """A .venv with a working pip is left as it is."""
    assert make(workdir, "venv", f"PYTHON={sys.executable}").returncode == 0
    (workdir / ".venv" / "kept").touch()
    result = make(workdir, "venv", f"PYTHON={sys.executable}")
    assert result.returncode == 0, result.stderr
    assert result.stdout == ""
    assert (workdir / ".venv" / "kept").exists()


def test_unusable_python_is_named_with_the_fix(workdir: Path):
    """A PYTHON that is missing or older than 3.11 fails, naming it and how to choose another."""
    result = make(workdir, "test", "PYTHON=no-such-python3")
    assert result.returncode != 0
    assert "'no-such-python3' is not a Python 3.11+" in result.stdout
    assert "PYTHON=python3.12 make test" in result.stdout
    assert not (workdir / ".venv").exists()


def test_newest_end_with_an_unusable_python_is_named_with_the_fix(workdir: Path):
    """`make test-newest` with a NEWEST_PYTHON that is missing (or older than the newest JAX
    needs) fails, naming it and how to choose another, and makes no venv."""
    result = make(workdir, "test-newest", "NEWEST_PYTHON=no-such-python3.13")
    assert result.returncode != 0
    assert "'no-such-python3.13' is not a Python 3.12+ (the newest JAX needs one)" in result.stdout
    assert "NEWEST_PYTHON=/path/to/python3.13 make test-newest" in result.stdout
    assert not (workdir / ".venv-newest").exists()


def find_python(version: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([ROOT / ".ci" / "find-python", version], capture_output=True, text=True, timeout=60)


def test_find_python_finds_the_version_asked_for():
    """.ci/find-python (how CI finds each end's Python) prints an interpreter of that version."""
    version = "%d.%d" % sys.version_info[:2]
    found = find_python(version)
    assert found.returncode == 0, found.stderr
    ran = subprocess.run([found.stdout.strip(), "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                         capture_output=True, text=True, timeout=60)
    assert ran.stdout.strip() == version


def test_find_python_says_when_there_is_none():
    """A version that is nowhere is an error naming it and how to name one by hand."""
    found = find_python("2.5")
    assert found.returncode == 1 and found.stdout == ""
    assert "no working Python 2.5" in found.stderr and "PYTHON=/path/to/python2.5" in found.stderr
