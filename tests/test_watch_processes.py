"""sf.watch in a multi-process job: the report names its process, and `--json` takes
`{process}` so processes on a shared file system keep one report each."""

from __future__ import annotations

import json
import sys

import pytest

import staticfield as sf
from _launch import run

SCRIPT = '''
import io, json, os, sys, contextlib
import jax, jax.numpy as jnp
import staticfield as sf
from staticfield._watch._cli import main

with sf.watch() as w:
    jax.jit(lambda x: x + 1)(jnp.ones(3))
header = w.report().splitlines()[0]
target = os.path.join(os.environ["OUT"], "user.py")
with open(target, "w") as f:
    f.write("import jax, jax.numpy as jnp\\njax.jit(lambda x: x * 2)(jnp.ones(2))\\n")
err = io.StringIO()
with contextlib.redirect_stderr(err):
    status = main(["--json", os.path.join(os.environ["OUT"], "watch-{process}.json"), target])
done({"header": header, "status": status, "cli": err.getvalue().strip().splitlines()[0]})
'''


@pytest.mark.skipif(sys.platform != "linux", reason="jax.distributed on CPU is tested on Linux")
def test_each_process_names_itself_and_writes_its_own_json(tmp_path):
    """Process i's header says `process i/2`; `--json watch-{process}.json` gives two files."""
    results = run(SCRIPT, {"OUT": str(tmp_path)})
    for i, r in enumerate(results):
        assert r["header"].startswith(f"staticfield watch (process {i}/2): 1 jitted function(s)")
        assert r["cli"].startswith(f"staticfield watch (process {i}/2):") and r["status"] == 0
        data = json.loads((tmp_path / f"watch-{i}.json").read_text())
        assert data["process"] == {"index": i, "count": 2}
        assert data["functions"][0]["compiles"] == 1


def test_one_process_has_no_process_in_its_header():
    """Outside a multi-process job the header is as before."""
    import jax
    import jax.numpy as jnp

    with sf.watch() as w:
        jax.jit(lambda x: x - 1)(jnp.ones(4))
    assert w.report().startswith("staticfield watch: 1 jitted function(s)")
    assert "process" not in w.as_dict()
