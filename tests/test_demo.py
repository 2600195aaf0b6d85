"""`python -m staticfield`: the demo's key lines, usage, and the exit code of a bad command."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from staticfield.examples import EXAMPLES

ROOT = Path(__file__).resolve().parent.parent


def staticfield_cli(*args: str, encoding: str = "utf-8") -> subprocess.CompletedProcess[str]:
    """Run ``python -m staticfield ARGS`` in a fresh interpreter, outside the repository."""
    env = dict(os.environ, PYTHONIOENCODING=encoding)
    return subprocess.run(
        [sys.executable, "-m", "staticfield", *args],
        capture_output=True,
        text=True,
        encoding=encoding,
        timeout=300,
        cwd=ROOT / "tests",  # not the repo root: the package must come from the install
        env=env,
    )


@pytest.fixture(scope="module")
def demo() -> subprocess.CompletedProcess[str]:
    """The output of one `python -m staticfield demo` run, shared by the tests below."""
    return staticfield_cli("demo")


def test_demo_succeeds_quietly(demo: subprocess.CompletedProcess[str]):
    """`demo` exits 0 and writes nothing to stderr (no warnings, no log records)."""
    assert demo.returncode == 0, demo.stderr
    assert demo.stderr == ""


def test_demo_runs_every_example_in_order(demo: subprocess.CompletedProcess[str]):
    """`demo` prints one numbered title per example, in the order of EXAMPLES."""
    titles = [line for line in demo.stdout.splitlines() if line.startswith("[")]
    assert [t.split(":")[0] for t in titles] == [
        f"[{i}/{len(EXAMPLES)}] {name}" for i, name in enumerate(EXAMPLES, 1)
    ]


def test_demo_shows_calls_counts_and_explanations(demo: subprocess.CompletedProcess[str]):
    """`demo` prints what was called, the compile counts, and each recompile explanation."""
    out = demo.stdout
    for line in [
        # scan_params: new values reuse the program, a new static int recompiles
        "simulate(Params(x_array=[1. 1.], a=2), xs) -> ys=[ 2.  8. 22.]  compile_count=1 (compiled)",
        "simulate(Params(x_array=[ 0.5 -1. ], a=2), xs) -> ys=[-0.5 -2.  -5.5]"
        "  compile_count=1 (hit, no compile)",
        "compile_count=2 (compiled)",
        "simulate recompiled (compile #2) because:",
        "  params.a: 2 → 3 (static)",
        # static_flag: 100 toggles, two compiles
        "step 2: Dense(use_bias=False).apply(x) -> [24. 24.]  compile_count=2 (hit, no compile)",
        "Dense.apply.compile_count = 2",
        "Dense.apply.cache_size() = 2",
        "  self.use_bias: False → True (static)",
        # shape_change: a new shape recompiles, the old one is a hit
        "Poly(coeffs=[0. 1. 0.])(2.0) -> 2.0  compile_count=2 (hit, no compile)",
        "  self.coeffs: f32[3] → f32[5] (shape)",
        # stale_results
        "STALE (eager: 30.0)",
        "hash(HashedModel(w)) raises TypeError: unhashable type",
        "after sf.replace(model, w=[10. 20.]): 30.0  compile_count=1 (hit, no compile)",
        "Model.predict.compile_count = 1",
        "dot_static(Model(w=[1. 2.]), x) -> 3.0  compile_count=1 (hit, no compile)",
        "dot_static(Model(w=[10. 20.]), x) -> 30.0  compile_count=2 (compiled)",
        "  dot_static recompiled because:",
        "    model: Model(w=[1. 2.]) → Model(w=[10. 20.]) (static argument, compared by value)",
    ]:
        assert line in out, f"missing from the demo output: {line!r}\n{out}"


def test_demo_every_recompile_is_explained(demo: subprocess.CompletedProcess[str]):
    """As many recompile explanations as calls that compiled a second (or later) program."""
    lines = demo.stdout.splitlines()
    recompiles = [l for l in lines if re.search(r"compile_count=([2-9]|\d\d+) \(compiled\)$", l)]
    explanations = [l for l in lines if re.search(r"recompiled( \(compile #\d+\))? because:$", l)]
    assert len(recompiles) == 4 + 8  # serving_buckets: 9 buckets, 8 recompiles
    assert len(explanations) == len(recompiles)


def test_demo_marks_static_fields_and_points_to_sources(demo: subprocess.CompletedProcess[str]):
    """Each example names its source file and lists its dataclasses' fields, the static ones marked."""
    out = demo.stdout
    for name in EXAMPLES:
        assert re.search(rf"^source: .*staticfield[/\\]examples[/\\]{name}\.py$", out, re.M), name
    assert "Params: x_array (dynamic), a (static)" in out
    assert "Dense: w (dynamic), b (dynamic), use_bias (static)" in out


def test_demo_on_a_stdout_that_cannot_encode_arrows():
    """Under PYTHONIOENCODING=cp1252 the demo still succeeds, writing `->` where it writes `→`."""
    result = staticfield_cli("demo", encoding="cp1252")
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert "  params.a: 2 -> 3 (static)" in result.stdout
    assert "→" not in result.stdout


def test_demo_one_example():
    """`demo NAME` runs only that example."""
    result = staticfield_cli("demo", "shape_change")
    assert result.returncode == 0, result.stderr
    assert "shape_change" in result.stdout and "scan_params" not in result.stdout
    assert "self.coeffs: f32[3] → f32[5] (shape)" in result.stdout


@pytest.mark.parametrize("args", [(), ("--help",), ("-h",)])
def test_usage(args: tuple[str, ...]):
    """No arguments, or --help, prints usage naming the demo command and exits 0."""
    result = staticfield_cli(*args)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: python -m staticfield")
    assert "demo" in result.stdout


def test_unknown_command_exits_2():
    """An unknown command exits 2 with a message on stderr naming it and the valid choice."""
    result = staticfield_cli("frobnicate")
    assert result.returncode == 2
    assert "invalid choice: 'frobnicate'" in result.stderr
    assert "demo" in result.stderr


def test_unknown_example_exits_2():
    """`demo` with an unknown example name exits 2, naming it and listing the examples."""
    result = staticfield_cli("demo", "nope")
    assert result.returncode == 2
    assert "unknown example 'nope'" in result.stderr
    assert all(name in result.stderr for name in EXAMPLES)
