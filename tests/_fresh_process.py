"""One fresh Python process over a program store: the user's code (``model.py``) and a
script beside it in ``tmp_path``, run with the store in ``tmp_path/store``; its last line
of output, as JSON. Used by the warm-up tests (a store recorded by one process, warmed up
in the next)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap


def run(tmp_path, model, script, *argv, env=None, trust=None, stderr=False):
    """The script's last line of output as JSON (with ``stderr``: and its standard error),
    run under Python's default warning filters."""
    full = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", STATICFIELD_PROGRAM_STORE=str(tmp_path / "store"),
                PYTHONPATH=os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    for name in ("XLA_FLAGS", "STATICFIELD_PROGRAM_STORE_TRUST", "STATICFIELD_CHECK_STORE", "MEET", "PYTHONWARNINGS"):
        full.pop(name, None)
    if trust:
        full["STATICFIELD_PROGRAM_STORE_TRUST"] = trust
    full.update(env or {})
    (tmp_path / "model.py").write_text(textwrap.dedent(model))
    path = tmp_path / "script.py"
    path.write_text(textwrap.dedent(script))
    proc = subprocess.run([sys.executable, str(path), *argv], env=full, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stderr[-4000:]}"
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    return (out, proc.stderr) if stderr else out
