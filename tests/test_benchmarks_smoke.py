"""The benchmark suite runs end to end in its quick mode (no timing is checked)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import staticfield as sf  # noqa: E402

benchmarks = pytest.importorskip("benchmarks")
from benchmarks import _harness, _targets  # noqa: E402


@pytest.fixture(scope="module")
def smoke(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, Path, dict]:
    out = tmp_path_factory.mktemp("bench")
    status = benchmarks.main(["--smoke", "--out", str(out)])
    return status, out, json.loads((out / "results.json").read_text())


def _groups(data: dict, kind: str) -> set[str]:
    return {row["group"] for row in data["rows"] if row["kind"] == kind}


def test_smoke_run_exits_cleanly_and_writes_the_report(smoke):
    """`python -m benchmarks --smoke` returns 0 and writes results.md and results.json."""
    status, out, data = smoke
    assert status == 0
    text = (out / "results.md").read_text()
    assert "Smoke run" in text
    assert "## Targets" in text
    assert data["config"]["smoke"] is True
    assert data["machine"]["jax"]


def test_every_case_group_measures_staticfield(smoke):
    """Each case group has a figure for staticfield (jit and stack cases once they exist)."""
    _, _, data = smoke
    expected = {"flatten", "unflatten", "construction", "restart", "warmup", "hits", "large model hit",
                "large model ops"}
    if hasattr(sf, "jit_method") and hasattr(sf, "jit"):
        expected |= {"dispatch", "method_pytree", "variants"}
    if hasattr(sf, "stack"):
        expected.add("stack")
    assert expected <= _groups(data, "ours")
    assert all(row["us"] > 0 for row in data["rows"])


def test_every_case_group_has_a_reference(smoke):
    """Every group has the figure it is compared with (plain JAX, or one cached variant)."""
    _, _, data = smoke
    baseline = _groups(data, "baseline") | {
        row["group"] for row in data["rows"] if row["name"] == "register_dataclass (native)"
    }
    variant_groups = {"variants", "variants_one"}
    assert {row["group"] for row in data["rows"]} - variant_groups <= baseline
    pairs = {(row["group"], row["param"], row["name"]) for row in data["rows"]}
    for group, param, name in pairs:
        if group == "variants":
            assert ("variants_one", param, name) in pairs


def test_jit_figures_are_verified_cache_hits(smoke):
    """No timed jit call traced again: the trace counters did not move while timing."""
    _, _, data = smoke
    assert not [note for note in data["notes"] if "while being timed" in note]


def test_every_target_is_reported(smoke):
    """The design targets each come out as PASS, FAIL or SKIP with a ratio or a reason."""
    _, out, data = smoke
    targets = data["targets"]
    # 19, the restart case's (on a CPU nine: per model the store's own work for each trust
    # mode and trust="trace" against JAX's cache; elsewhere six: the ratios), shape buckets'
    # six (compiles, a hit, and for two models the first call ever and a new bucket's), warm-up's
    # one, the hit-path case's nine (eight call forms, 1000 variants / 1) and its deps="read"
    # static-argument form, the agreement check's one, deps="read" reuse for a new key (two
    # forms), static="auto"'s two and the large model's two (obj.method, sf.jit)
    restart = 9 if data["machine"]["backend"] == "cpu" else 6
    assert len(targets) == 41 + restart
    for t in targets:
        assert t["status"] in {"PASS", "FAIL", "SKIP"}
        assert (t["ratio"] is None) == (t["status"] == "SKIP")
    text = (out / "results.md").read_text()
    assert all(t["label"] in text for t in targets)


def test_plots_are_written_when_matplotlib_is_installed(smoke):
    """dispatch.png, variants.png, fields.png and large.png are written (matplotlib installed)."""
    pytest.importorskip("matplotlib")
    _, out, data = smoke
    expected = {"fields.png", "large.png"}
    if any(row["group"] == "dispatch" for row in data["rows"]):
        expected |= {"dispatch.png", "variants.png"}
    assert expected <= {p.name for p in out.glob("*.png")}


def test_only_runs_the_selected_case_group(tmp_path):
    """`--only fields` measures the field cases and nothing else."""
    assert benchmarks.main(["--smoke", "--only", "fields", "--out", str(tmp_path)]) == 0
    data = json.loads((tmp_path / "results.json").read_text())
    assert {row["group"] for row in data["rows"]} == {"flatten", "unflatten", "construction"}


def test_missing_figures_make_a_target_skip_never_pass():
    """A target whose figures were not measured is SKIP with the missing names, not PASS."""
    results = _harness.Results(_harness.Config.smoke_config())
    for t in _targets.evaluate(results):
        assert t.status == "SKIP"
        assert "not measured" in t.detail


def test_a_ratio_over_its_bound_is_a_fail():
    """A ratio past its bound prints FAIL, in either direction of bound."""
    assert _targets.Target("slow", 1.10, True, 1.2).status == "FAIL"
    assert _targets.Target("fast", 1.10, True, 1.0).status == "PASS"
    assert _targets.Target("speedup", 5.0, False, 4.0).status == "FAIL"
    assert _targets.Target("speedup", 5.0, False, 6.0).line().startswith("PASS")


def test_a_missing_anchor_is_skipped_with_a_note():
    """An anchor that cannot be imported is skipped and the run says which and why."""
    results = _harness.Results(_harness.Config.smoke_config())

    def build():
        import not_an_installed_anchor  # noqa: F401

    assert _harness.optional(results, "some anchor", build) is None
    assert results.notes and "some anchor" in results.notes[0]
    assert "not_an_installed_anchor" in results.notes[0]


def test_docs_block_is_regenerated_and_the_rest_of_the_page_kept(smoke, tmp_path):
    """update_docs replaces only the marked block, and the page shows the copied plots."""
    from benchmarks import _report

    _, out, _ = smoke
    page = tmp_path / "performance.md"
    page.write_text(f"# Intro\n\nkept\n\n{_report.DOC_START}\nold figures\n{_report.DOC_END}\n\nafter\n")
    results = _harness.Results(_harness.Config.smoke_config())
    results.add("flatten", 8, {"sf.dataclass": 1.0}, {"sf.dataclass": "ours"})
    pngs = [str(p) for p in out.glob("*.png")]
    written = _report.update_docs(str(page), str(tmp_path / "assets"), results,
                                  _targets.evaluate(results), {"cpu": "test"}, pngs)
    text = page.read_text()
    assert text.startswith("# Intro\n\nkept\n\n")
    assert text.endswith(f"{_report.DOC_END}\n\nafter\n")
    assert "old figures" not in text
    assert "sf.dataclass" in text
    if any(Path(png).name == "fields.png" for png in pngs):  # plots need matplotlib
        assert "](assets/fields.png)" in text
    assert all((tmp_path / "assets" / Path(png).name).exists() for png in pngs)
    assert str(page) in written


def test_replot_rewrites_the_report_from_results_json(smoke, tmp_path: Path):
    """`--replot RESULTS_JSON --out DIR` measures nothing and writes the same report and plots."""
    _, out, _ = smoke
    assert benchmarks.main(["--replot", str(out / "results.json"), "--out", str(tmp_path)]) == 0
    assert (tmp_path / "results.md").read_text() == (out / "results.md").read_text()
    assert sorted(p.name for p in tmp_path.glob("*.png")) == sorted(p.name for p in out.glob("*.png"))


def test_large_model_case_measures_every_contender_and_the_caches(smoke):
    """Case 15: every contender at each leaf count, the four 10,000-leaf operations on both
    sides, and the caches' bytes per instance, in the report."""
    from benchmarks import large

    _, out, data = smoke
    rows = [row for row in data["rows"] if row["group"] == large.LARGE]
    names = {row["name"] for row in rows}
    assert {large.FLAT, large.DATACLASS, large.OBJ, large.CLS, large.FREE, large.READ} <= names
    for count in large.SMOKE_LEAVES:
        assert {row["name"] for row in rows if row["param"] == str(count)} == names
    ops = {(row["param"], row["name"]) for row in data["rows"] if row["group"] == large.OPS}
    assert ops == {(op, who) for op in (large.CONSTRUCT, large.REPLACE, large.FLATTEN, large.UNFLATTEN)
                   for who in (large.SF_OPS, large.DC_OPS)}
    memory = data["extra"][large.MEMORY]
    assert memory["bytes per instance"] > 0
    assert "15. large models" in (out / "results.md").read_text()


def test_notes_are_sentences_not_raw_data(smoke):
    """The report's Notes section is a list of sentences: no dict or list printed raw."""
    _, out, _ = smoke
    notes = (out / "results.md").read_text().split("## Notes", 1)[1]
    assert notes.strip().startswith("- ")
    assert "{'" not in notes and "['" not in notes
