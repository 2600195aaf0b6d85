"""The worked examples: each docs page shows its module verbatim and what its run() prints.

Every example runs from a fresh namespace (``runpy.run_path``), so the counters on
its module-level functions and classes start at zero, as in ``python -m staticfield demo``.
"""

from __future__ import annotations

import re
import runpy
import sys
from pathlib import Path

import pytest

import staticfield as sf
from _launch import launch
from staticfield import examples

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = Path(examples.__file__).resolve().parent
PAGES = ROOT / "docs" / "examples"

# JAX's text for hash(jax_array) names the array type, which moved between releases.
_ARRAY_TYPE = re.compile(r"unhashable type: '[\w.]*ArrayImpl'")


def fenced(text: str, language: str) -> list[str]:
    """The bodies of the page's top-level fenced blocks of one language, in order."""
    return re.findall(rf"^```{language}\n(.*?)^```$", text, flags=re.DOTALL | re.MULTILINE)


def run_example(name: str, capsys: pytest.CaptureFixture[str]) -> tuple[dict, str]:
    """Run ``examples/<name>.py`` in a fresh namespace; return run()'s result and its output."""
    namespace = runpy.run_path(str(PACKAGE / f"{name}.py"), run_name=f"example_{name}")
    capsys.readouterr()
    result = namespace["run"]()
    return result, capsys.readouterr().out


def normalise(text: str) -> str:
    return _ARRAY_TYPE.sub("unhashable type: 'ArrayImpl'", text)


def test_every_example_module_has_a_page():
    """Each module listed in EXAMPLES or SCRIPTS exists, and each has exactly one page, and vice versa."""
    modules = {p.stem for p in PACKAGE.glob("*.py") if p.stem not in ("__init__", "watch_demo")}
    pages = {p.stem for p in PAGES.glob("*.md")}
    assert set(examples.EXAMPLES) | set(examples.SCRIPTS) == modules == pages


@pytest.mark.parametrize("name", examples.EXAMPLES)
def test_page_code_is_the_module(name: str):
    """The page's python block is exactly the module's source, so the two cannot drift."""
    page = (PAGES / f"{name}.md").read_text()
    blocks = fenced(page, "python")
    assert len(blocks) == 1, f"{name}.md should have exactly one python block"
    assert blocks[0] == (PACKAGE / f"{name}.py").read_text()
    assert blocks[0].rstrip().endswith('if __name__ == "__main__":\n    run()')


@pytest.mark.parametrize("name", examples.EXAMPLES)
def test_page_output_is_what_run_prints(name: str, capsys: pytest.CaptureFixture[str]):
    """The page's text block is exactly what the module's run() prints."""
    page = (PAGES / f"{name}.md").read_text()
    outputs = fenced(page, "text")
    assert len(outputs) == 1, f"{name}.md should have exactly one text block"
    _, printed = run_example(name, capsys)
    assert normalise(printed) == normalise(outputs[0])


@pytest.mark.max_compiles(2)  # JAX's own count agrees with the example's (1, then 2)
def test_scan_params(capsys: pytest.CaptureFixture[str]):
    """New Params values reuse the program; a new static `a` compiles once more, explained as params.a: 2 → 3."""
    result, printed = run_example("scan_params", capsys)
    assert result["compile_counts"] == [1, 1, 2]
    (event,) = result["recompiles"]
    assert isinstance(event, sf.Recompile)
    assert event.function == "simulate"
    assert event.changes == [sf.Change(path="params.a", kind="static", old="2", new="3")]
    assert "params.a: 2 → 3 (static)" in printed
    assert "params.a: 2 → 3 (static)" in (PAGES / "scan_params.md").read_text()


@pytest.mark.max_compiles(2)  # 100 toggles, 2 compiles: JAX's own count agrees
def test_static_flag(capsys: pytest.CaptureFixture[str]):
    """A static bool toggled over 100 calls compiles exactly twice, with two cached executables."""
    result, printed = run_example("static_flag", capsys)
    assert result["compile_count"] == 2
    assert result["cache_size"] == 2
    (event,) = result["recompiles"]
    assert event.function == "Dense.apply"
    assert event.changes == [sf.Change(path="self.use_bias", kind="static", old="False", new="True")]
    assert "Dense.apply.compile_count = 2" in printed
    assert "Dense.apply.cache_size() = 2" in printed


@pytest.mark.max_compiles(2)  # the way back to the old shape compiles nothing
def test_shape_change(capsys: pytest.CaptureFixture[str]):
    """A new shape recompiles, explained with the field and both shapes; the old shape is a hit."""
    result, printed = run_example("shape_change", capsys)
    assert result["compile_counts"] == [1, 2, 2]
    assert result["cache_size"] == 2
    (event,) = result["recompiles"]
    assert event.function == "Poly.__call__"
    assert event.changes == [sf.Change(path="self.coeffs", kind="shape", old="f32[3]", new="f32[5]")]
    assert "self.coeffs: f32[3] → f32[5] (shape)" in printed


def test_stale_results(capsys: pytest.CaptureFixture[str]):
    """A plain class under jax.jit(obj.method) goes stale; staticfield results follow the values."""
    result, printed = run_example("stale_results", capsys)
    assert result["plain"] == (3.0, 3.0)  # stale: the eager answer after obj.w changed is 30
    assert result["hash_error"].startswith("TypeError: unhashable type")
    assert result["jit_method"] == (3.0, 30.0)
    assert result["jit_method_compile_count"] == 1
    assert result["static_argnums"] == [3.0, 3.0, 30.0]
    assert result["static_argnums_traces"] == 2  # an equal instance reused the first program
    assert "STALE (eager: 30.0)" in printed


def test_examples_leave_logging_alone(capsys: pytest.CaptureFixture[str]):
    """Running an example adds no handler and sets no level on the "staticfield" or root logger."""
    import logging

    loggers = [logging.getLogger("staticfield"), logging.getLogger()]
    before = [(lg.level, list(lg.handlers)) for lg in loggers]
    run_example("static_flag", capsys)
    assert [(lg.level, list(lg.handlers)) for lg in loggers] == before


@pytest.mark.max_compiles(9)  # one program per bucket used; the pad and slice programs are not counted
def test_serving_buckets(capsys: pytest.CaptureFixture[str]):
    """60 requests of random sizes compile one program per pow2 bucket used, each explained as a bucket."""
    result, printed = run_example("serving_buckets", capsys)
    buckets = {1 << (n - 1).bit_length() if n > 1 else 1 for n in result["sizes"]}
    assert result["compile_count"] == len(buckets) == 9 < len(set(result["sizes"]))
    assert set(result["buckets"]) == buckets
    assert all(c.kind == "bucket" for e in result["recompiles"] for c in e.changes)
    assert "x.shape[0]: 236 → bucket 256 (was bucket 64)" in printed


# ----- scripts of several processes ---------------------------------------------------------
@pytest.mark.parametrize("name", examples.SCRIPTS)
def test_script_page_code_is_the_module(name: str):
    """The page shows the script verbatim (```py: shown, never run in the docs' one process)."""
    page = (PAGES / f"{name}.md").read_text()
    assert fenced(page, "py") == [(PACKAGE / f"{name}.py").read_text()]


@pytest.mark.skipif(sys.platform != "linux", reason="jax.distributed on CPU is tested on Linux")
@pytest.mark.parametrize("mismatch", ["", "1"], ids=["agree", "mismatch"])
def test_two_processes_prints_what_its_page_shows(mismatch: str):
    """Run as the two processes of a job by tests/_launch.py (which sets the variables its
    docstring's command line leaves to the script's defaults, with a free port), the
    script prints the page's lines: both totals, or with MISMATCH=1 both processes'
    sf.HostMismatchError naming `self.n`."""
    page = (PAGES / "two_processes.md").read_text()
    expected = fenced(page, "text")[2 if mismatch else 1]
    finished = launch([sys.executable, "-m", "staticfield.examples.two_processes"], processes=2, devices=2,
                      env={"MISMATCH": mismatch}, timeout=90)
    printed = [line for f in finished for line in f.out.splitlines() if line.startswith("process ")]
    assert "\n".join(printed) + "\n" == expected
