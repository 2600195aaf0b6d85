"""The optax training example (docs/training.md) runs under ``python -m staticfield watch``."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

PAGE = Path(__file__).resolve().parent.parent / "docs" / "training.md"


def test_training_example_runs_under_watch(tmp_path: Path):
    """The page's script trains, recompiles once for the static change, and sf.watch says why."""
    pytest.importorskip("optax")
    code = re.findall(r"```python\n(.*?)```", PAGE.read_text(), re.S)[0]  # the script
    script = tmp_path / "train.py"
    script.write_text(code)
    ran = subprocess.run([sys.executable, "-m", "staticfield", "watch", str(script)], cwd=tmp_path,
                         capture_output=True, text=True, timeout=600)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert ran.stdout.splitlines()[1:] == [
        "Trainer.update compiled 2 times",
        "Trainer.update recompiled (compile #2) because:",
        "  self.loss: 'mse' → 'huber' (static)",
    ]
    report = ran.stderr
    assert re.search(r"^Trainer\.update \(train\.py:\d+\): 2 compiles", report, re.M), report
    assert "#2 at train.py:" in report and "self.loss: 'mse' → 'huber' (static)" in report
