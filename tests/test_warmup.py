"""sf.warmup(): a store recorded by one process prepares every program in the next, so the
next process's run traces and compiles nothing; records outlive --clear-programs."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import jax.numpy as jnp
import pytest
from _fresh_process import run

import staticfield as sf

# The user's code: a jit_method with a static field, an sf.jit with a static argument,
# and calls with jax arrays, NumPy arrays and Python scalars. TRACES counts traces.
MODEL = '''
import jax, jax.numpy as jnp, numpy as np
import staticfield as sf

TRACES = []


def _traced(name):
    TRACES.append(name)


@sf.dataclass
class Layer:
    w: jax.Array
    act: str = sf.static(default="tanh")

    @sf.jit_method
    def apply(self, x, scale):
        _traced("apply")
        y = x @ self.w * scale
        return jnp.tanh(y) if self.act == "tanh" else jax.nn.relu(y)


def _step(x, k):
    _traced("step")
    return x * k + 1


step = sf.jit(_step, static_argnames="k")


def inputs():
    return ([Layer(jnp.ones((3, 3)), act=act) for act in ("tanh", "relu")],
            [jnp.ones((n, 3)) for n in (2, 5)], np.ones(4, np.float32), jnp.ones(4))


def run(layers, xs, a, b):
    """The program's own calls: two static variants, two shapes, three kinds of leaves."""
    out = [layer.apply(x, 0.5) for layer in layers for x in xs]
    return out + [step(a, k=2), step(b, k=3)]


def total(out):
    return [float(np.asarray(o).sum()) for o in out]


def report(**more):
    import json
    print(json.dumps({"compiles": Layer.apply.compile_count + step.compile_count,
                      "loads": Layer.apply.load_count + step.load_count,
                      "traces": len(TRACES), **more}))
'''

# One script for both processes (trust="source" keys programs by the source of the user's
# code, the main script included): "record" runs; "warm N" warms up on N threads, then runs
# under sf.no_compiles().
SCRIPT = '''
import sys, json
import staticfield as sf
import model

if sys.argv[1] == "record":
    model.report(out=model.total(model.run(*model.inputs())))
    sys.exit()
summary = sf.warmup(workers=int(sys.argv[2]))
warm = {"traces": len(model.TRACES), "compiles": model.Layer.apply.compile_count + model.step.compile_count}
model.TRACES.clear()
before = model.Layer.apply.compile_count + model.step.compile_count
args = model.inputs()
with sf.no_compiles():  # nothing may compile in the run
    out = model.run(*args)
out = model.total(out)
model.report(out=out, warm=warm, run_compiles=model.Layer.apply.compile_count + model.step.compile_count - before,
             summary={k: getattr(summary, k) for k in ("traced", "loaded", "compiled", "skipped", "threads")},
             functions=sorted(summary.functions), problems=summary.problems)
'''
RECORD = "record"


def _run(tmp_path, mode, *argv, env=None, trust=None, script=SCRIPT):
    return run(tmp_path, MODEL, script, mode, *argv, env=env, trust=trust)


@pytest.mark.parametrize("trust", ["trace", "source"])
def test_warmup_from_a_recorded_store_leaves_nothing_to_compile(tmp_path, trust):
    """Process 1 runs and records; process 2 warms up from the store, then runs the same
    calls under sf.no_compiles(): no trace, no compile, the same results."""
    first = _run(tmp_path, RECORD, trust=trust)
    assert first["compiles"] == 6
    second = _run(tmp_path, "warm", "2", trust=trust)
    assert second["out"] == first["out"]
    assert second["traces"] == 0 and second["run_compiles"] == 0
    assert second["summary"]["loaded"] == 6 and second["summary"]["compiled"] == 0
    assert second["summary"]["skipped"] == 0, second["problems"]
    assert second["warm"]["compiles"] == 0  # loads, not compiles
    assert second["summary"]["traced"] == (6 if trust == "trace" else 0)
    assert second["functions"] == ["model.Layer.apply", "model._step"]


def test_records_outlive_clear_programs_and_warmup_compiles_on_two_threads(tmp_path):
    """With the programs cleared and the records kept, sf.warmup(workers=2) compiles every
    program again, on worker threads while the calling thread traces the next ones (so
    more than one thread prepared programs), and the run after it compiles nothing."""
    first = _run(tmp_path, RECORD)
    cleared = subprocess.run([sys.executable, "-m", "staticfield", "store", str(tmp_path / "store"),
                              "--clear-programs"], capture_output=True, text=True, timeout=120)
    assert cleared.returncode == 0, cleared.stderr
    assert "removed 6 program(s)" in cleared.stdout and "kept 6 record(s)" in cleared.stdout
    second = _run(tmp_path, "warm", "2")
    assert second["summary"]["compiled"] == 6 and second["summary"]["loaded"] == 0, second["problems"]
    assert second["summary"]["threads"] >= 2
    assert second["warm"]["compiles"] == 6 and second["run_compiles"] == 0
    assert second["out"] == first["out"]


def test_clear_removes_the_records_too(tmp_path):
    """--clear removes programs and records: warm-up then has nothing to prepare."""
    _run(tmp_path, RECORD)
    cleared = subprocess.run([sys.executable, "-m", "staticfield", "store", str(tmp_path / "store"), "--clear"],
                             capture_output=True, text=True, timeout=120)
    assert "removed 6 program(s) and 6 record(s)" in cleared.stdout
    listing = subprocess.run([sys.executable, "-m", "staticfield", "store", str(tmp_path / "store")],
                             capture_output=True, text=True, timeout=120)
    assert "0 record(s)" in listing.stdout


def test_records_of_functions_that_do_not_exist_here_are_skipped(tmp_path):
    """A record whose function is not defined in this process is skipped, by name."""
    _run(tmp_path, RECORD)
    out = _run(tmp_path, "-", script='''
        import json, staticfield as sf
        s = sf.warmup(workers=1)
        print(json.dumps({"skipped": s.skipped, "loaded": s.loaded, "problems": s.problems}))
    ''')
    assert out["skipped"] == 6 and out["loaded"] == 0
    assert any("model.Layer.apply: no sf.jit or jit_method" in p for p in out["problems"])
    assert any("model._step: no sf.jit or jit_method" in p for p in out["problems"])


def test_warmup_without_a_store_says_to_set_one(monkeypatch):
    """sf.warmup() with no program store is a RuntimeError naming sf.set_program_store."""
    monkeypatch.delenv("STATICFIELD_PROGRAM_STORE", raising=False)
    sf.set_program_store(None)
    with pytest.raises(RuntimeError, match=r"no store is set.*sf.set_program_store\(path\)"):
        sf.warmup()


def test_warmup_rejects_a_bad_worker_count(tmp_path):
    """workers must be a positive int or None."""
    sf.set_program_store(str(tmp_path / "s"))
    try:
        with pytest.raises(TypeError, match="workers must be a positive int"):
            sf.warmup(workers=0)
    finally:
        sf.set_program_store(None)


def test_warmup_in_process_prepares_a_cleared_function(tmp_path):
    """In one process: after clear_cache(), warm-up makes the recorded program ready again,
    so the next call traces nothing."""
    traces = 0

    def halve(x):
        nonlocal traces
        traces += 1
        return x / 2

    sf.set_program_store(str(tmp_path / "s"))
    try:
        f = sf.jit(halve)
        f(jnp.ones(7))
        f.clear_cache()
        summary = sf.warmup(workers=1)
        assert summary.functions[f"{__name__}.{halve.__qualname__}"].loaded == 1
        with sf.no_compiles():
            f(jnp.ones(7))
        assert traces == 2  # the first call, and warm-up's checking trace (trust="trace")
    finally:
        sf.set_program_store(None)


def test_warmup_compiles_are_located_at_the_warmup_call(tmp_path):
    """A compile made by warm-up's worker thread counts as a compile, located at the line
    that called sf.warmup() (not in the thread pool's code)."""
    def twice(x, k):
        return x * k

    sf.set_program_store(str(tmp_path / "s"))
    try:
        f = sf.jit(twice, static_argnames="k")
        f(jnp.ones(3), k=2)
        f(jnp.ones(3), k=3)
        for name in os.listdir(tmp_path / "s"):  # the programs go, the records stay
            if name.endswith((".sfprog", ".sfsrc")):
                os.unlink(tmp_path / "s" / name)
        f.clear_cache()
        summary = sf.warmup(workers=1); line = sys._getframe().f_lineno  # noqa: E702
        assert summary.compiled == 2 and f.compile_count == 4
        assert all(r.location.endswith(f"test_warmup.py:{line}") for r in f.recompiles[-2:]), f.recompiles
    finally:
        sf.set_program_store(None)


def test_the_progress_line_is_on_stderr_and_progress_false_silences_it(tmp_path, monkeypatch, capsys):
    """The documented progress line: one per function that took longer than
    PROGRESS_AFTER seconds, on stderr; progress=False prints nothing."""
    from staticfield._warmup import _run

    monkeypatch.setattr(_run, "PROGRESS_AFTER", 0.0)  # every function is "slow"

    def third(x):
        return x / 3

    sf.set_program_store(str(tmp_path / "s"))
    try:
        f = sf.jit(third)
        f(jnp.ones(2))
        f.clear_cache()
        sf.warmup(workers=1)
        err = capsys.readouterr().err
        assert re.fullmatch(rf"sf.warmup: {re.escape(__name__)}\..*third: 1 loaded, 0 compiled in \d+\.\d s\n", err), err
        f.clear_cache()
        sf.warmup(workers=1, progress=False)
        assert capsys.readouterr().err == ""
    finally:
        sf.set_program_store(None)
