"""A fresh clone passes its tests whatever its folder is called, `staticfield` (the name
`git clone` gives it) included."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# The tests that look at where frames come from: they must tell the package's own files
# from the test files of a checkout that is itself named `staticfield`.
PATH_SENSITIVE = ["tests/test_jit_faithful.py"]


def _tracked_files() -> list[str]:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True)
    return [name for name in out.stdout.decode().split("\0") if name]


def test_tests_pass_in_a_clone_in_a_folder_named_staticfield(tmp_path: Path):
    """The frame-matching tests pass in a copy of the checkout whose folder is `staticfield`,
    importing the package from that copy."""
    clone = tmp_path / "staticfield"
    for name in _tracked_files():
        source = ROOT / name
        if source.is_file():
            (clone / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, clone / name)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "STATICFIELD_"))}
    env["PYTHONPATH"] = str(clone / "src")
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *PATH_SENSITIVE],
        cwd=clone, env=env, capture_output=True, text=True, timeout=600,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    where = subprocess.run(
        [sys.executable, "-c", "import staticfield; print(staticfield.__file__)"],
        cwd=clone, env=env, capture_output=True, text=True,
    ).stdout.strip()
    assert where.startswith(str(clone)), where  # the copy's package, not this checkout's
