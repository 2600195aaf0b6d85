"""`make dist` builds a wheel that installs into a fresh venv and runs the README's quick start."""

from __future__ import annotations

import os
import re
import shutil
import site
import subprocess
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# source_tree: `make test` runs these, `make test-newest` does not (none depends on JAX's
# version, and the wheel is built in the checkout, which the other end shares in .ci/run).
pytestmark = [pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed"),
              pytest.mark.source_tree]


def test_wheel_installs_into_a_fresh_venv_and_runs_the_quick_start(tmp_path: Path):
    """The wheel from `make dist`, installed alone (--no-deps) into a new venv that borrows
    this interpreter's JAX, runs the README's quick start from outside the checkout."""
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS")}
    dist = tmp_path / "dist"
    built = subprocess.run(["make", "--no-print-directory", "dist", f"DIST={dist}"], cwd=ROOT, env=env,
                           capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stdout + built.stderr
    (wheel,) = dist.glob("staticfield-*.whl")

    fresh = tmp_path / "fresh"
    venv.create(fresh, with_pip=True)
    python = fresh / "bin" / "python"
    # JAX and the other dependencies come from this interpreter's site-packages; a path
    # added by a .pth line does not run that directory's own .pth files, so this checkout's
    # editable install stays out of sight and `import staticfield` finds only the wheel.
    purelib = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    Path(purelib, "borrowed.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    installed = subprocess.run([python, "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)],
                               capture_output=True, text=True, timeout=300)
    assert installed.returncode == 0, installed.stdout + installed.stderr

    (code,) = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    script = tmp_path / "quick_start.py"
    script.write_text("import staticfield\nprint(staticfield.__file__)\n" + code)
    ran = subprocess.run([python, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                         env={**env, "JAX_PLATFORMS": "cpu"})
    assert ran.returncode == 0, ran.stdout + ran.stderr
    where, *printed = ran.stdout.splitlines()
    assert where.startswith(str(fresh)), where  # the wheel, not this checkout
    assert printed == ["2", "Params.apply recompiled (compile #2) because:", "  self.depth: 2 → 3 (static)"]
