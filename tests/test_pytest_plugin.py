"""The pytest plugin: compile budgets (marker, option, fixture, baseline), run by pytester.

Each test writes a small test file and runs pytest on it in process; the plugin is
loaded from its ``pytest11`` entry point, as in any project that installs staticfield.
"""

from __future__ import annotations

import importlib.util
import json
import textwrap

import pytest

pytest_plugins = ["pytester"]

HEADER = """
import jax, jax.numpy as jnp, pytest

@jax.jit
def double(x):
    return x * 2
"""


def make(pytester: pytest.Pytester, body: str) -> None:
    pytester.makepyfile(test_budget=HEADER + textwrap.dedent(body))


def line_of(pytester: pytest.Pytester, text: str) -> int:
    lines = (pytester.path / "test_budget.py").read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if text in line)


def test_marker_within_budget_passes(pytester):
    """@pytest.mark.max_compiles(2) and two compiles: the test passes."""
    make(pytester, """
        @pytest.mark.max_compiles(2)
        def test_two_shapes():
            double(jnp.ones(2)); double(jnp.ones(3)); double(jnp.ones(2))
    """)
    pytester.runpytest().assert_outcomes(passed=1)


def test_marker_over_budget_fails_with_the_explanation_at_the_tests_line(pytester):
    """Three compiles over a budget of 1: the failure is the watch report, at the test's lines."""
    make(pytester, """
        @pytest.mark.max_compiles(1)
        def test_three_shapes():
            double(jnp.ones(2))
            double(jnp.ones(3))
            double(jnp.ones(3, jnp.int32))
    """)
    result = pytester.runpytest()
    result.assert_outcomes(failed=1)
    text = result.stdout.str()
    assert "this test compiled 3 time(s), over its budget of 1" in text
    assert f"double (test_budget.py:{line_of(pytester, '@jax.jit')}): 3 compiles" in text
    line = line_of(pytester, "double(jnp.ones(3))")
    assert f"#2 at test_budget.py:{line}: recompiled because" in text
    assert "x: f32[2] → f32[3] (shape)" in text and "x: f32[3] → i32[3] (dtype)" in text
    assert "Traceback" not in text and "pytest_plugin.py" not in text


def test_a_tests_own_failure_is_reported_as_itself(pytester):
    """A test over budget that also fails on its own shows its own error, not the budget."""
    make(pytester, """
        @pytest.mark.max_compiles(0)
        def test_broken():
            double(jnp.ones(2))
            assert double(jnp.ones(3)).sum() == 99, "the test's own message"
    """)
    result = pytester.runpytest()
    result.assert_outcomes(failed=1)
    text = result.stdout.str()
    assert "the test's own message" in text and "AssertionError" in text
    assert "over its budget" not in text


def test_option_sets_the_budget_of_every_unmarked_test(pytester):
    """--sf-max-compiles=1 fails an unmarked test compiling twice; a marker overrides it."""
    make(pytester, """
        def test_unmarked():
            double(jnp.ones(2)); double(jnp.ones(3))

        @pytest.mark.max_compiles(5)
        def test_marked():
            double(jnp.ones(4)); double(jnp.ones(5))

        def test_once():
            double(jnp.ones(6))
    """)
    result = pytester.runpytest("--sf-max-compiles=1")
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(["*test_unmarked*", "*compiled 2 time(s), over its budget of 1*"])


def test_without_marker_option_or_fixture_nothing_is_watched(pytester):
    """Inert until used: a plain test runs with no watcher started."""
    make(pytester, """
        from staticfield._watch import _hooks

        def test_plain():
            double(jnp.ones(7))
            assert _hooks._ACTIVE == []
    """)
    pytester.runpytest().assert_outcomes(passed=1)


def test_marker_argument_is_checked(pytester):
    """max_compiles("2") is a usage error naming the marker."""
    make(pytester, """
        @pytest.mark.max_compiles("2")
        def test_bad():
            pass
    """)
    result = pytester.runpytest()
    result.assert_outcomes(failed=1)
    assert "@pytest.mark.max_compiles(n) takes one int n >= 0, not ('2',)" in result.stdout.str()


def test_fixture_counts_lists_and_reports(pytester):
    """sf_compiles.count, .functions and .report() follow the test's compiles live."""
    make(pytester, """
        def test_live(sf_compiles):
            assert sf_compiles.count == 0
            double(jnp.ones(8)); double(jnp.ones(9))
            assert sf_compiles.count == 2
            assert [f.name for f in sf_compiles.functions] == ["double"]
            assert "x: f32[8] → f32[9] (shape)" in sf_compiles.report()
    """)
    pytester.runpytest().assert_outcomes(passed=1)


def test_fixture_blocks_none_and_at_most(pytester):
    """none() fails on a compile with the report; at_most(k) allows k; warm-up then none() passes."""
    make(pytester, """
        def test_warm(sf_compiles):
            double(jnp.ones(10))
            with sf_compiles.none():
                double(jnp.ones(10))
            with sf_compiles.at_most(1):
                double(jnp.ones(11))

        def test_cold(sf_compiles):
            with sf_compiles.none():
                double(jnp.ones(12))
    """)
    result = pytester.runpytest()
    result.assert_outcomes(passed=1, failed=1)
    text = result.stdout.str()
    assert "this block compiled 1 time(s), over its budget of 0" in text
    assert f"#1 at test_budget.py:{line_of(pytester, 'double(jnp.ones(12))')}: first compile" in text


def test_a_compiling_fixture_never_counts_whatever_the_fixture_order(pytester):
    """Compiles in fixtures (setup) are warm-up: the marker and sf_compiles count the test
    function's own compiles only, with the compiling fixture before or after sf_compiles."""
    make(pytester, """
        @pytest.fixture
        def warm(request):  # two new shapes for each test
            n = {"test_warm_first": 21, "test_warm_last": 24, "test_marker_alone": 27}[request.node.name]
            double(jnp.ones(n))
            double(jnp.ones(n + 1))
            return n

        @pytest.mark.max_compiles(1)
        def test_warm_first(warm, sf_compiles):
            double(jnp.ones(warm + 2))
            assert sf_compiles.count == 1

        @pytest.mark.max_compiles(1)
        def test_warm_last(sf_compiles, warm):
            double(jnp.ones(warm + 2))
            assert sf_compiles.count == 1

        @pytest.mark.max_compiles(0)
        def test_marker_alone(warm):
            double(jnp.ones(warm))
    """)
    pytester.runpytest().assert_outcomes(passed=3)


def test_a_failing_block_names_the_reason_of_its_compile(pytester):
    """none() over a recompile explains it against the test's earlier compile (in a fixture
    too), as f.recompiles does: `x: f32[31] → f32[32] (shape)`, never "first compile"."""
    make(pytester, """
        @pytest.fixture
        def warm():
            double(jnp.ones(31))

        def test_block(sf_compiles, warm):
            with sf_compiles.none():
                double(jnp.ones(32))
    """)
    result = pytester.runpytest()
    result.assert_outcomes(failed=1)
    text = result.stdout.str()
    assert "this block compiled 1 time(s), over its budget of 0" in text
    assert "x: f32[31] → f32[32] (shape)" in text
    assert "first compile" not in text


def test_a_block_names_the_reason_of_an_sf_functions_compile_made_after_an_earlier_test(pytester):
    """An sf.jit function compiled by an earlier test: a failing none() block gives the reason
    its f.recompiles gives (`n: 5 → 6`), not "first compile"."""
    make(pytester, """
        import staticfield as sf

        power = sf.jit(lambda x, n: x ** n, static_argnames="n")

        def test_first():
            power(jnp.ones(2), n=5)

        def test_block(sf_compiles):
            with sf_compiles.none():
                power(jnp.ones(2), n=6)
    """)
    result = pytester.runpytest()
    result.assert_outcomes(passed=1, failed=1)
    text = result.stdout.str()
    assert "n: 5 → 6 (static_arg)" in text
    assert "first compile" not in text


def test_a_plain_jit_function_compiled_by_an_earlier_test_reads_first_compile(pytester):
    """docs/ci-compiles.md says so: a plain jax.jit function is explained against this
    test's compiles only (an sf function against its whole history, as above)."""
    make(pytester, """
        def test_first():
            double(jnp.ones(2))

        @pytest.mark.max_compiles(0)
        def test_second():
            double(jnp.ones(3))
    """)
    result = pytester.runpytest()
    result.assert_outcomes(passed=1, failed=1)
    assert f"#1 at test_budget.py:{line_of(pytester, 'double(jnp.ones(3))')}: first compile" in result.stdout.str()


def test_an_error_inside_a_block_passes_through(pytester):
    """An exception raised inside `with sf_compiles.none()` reaches pytest as itself."""
    make(pytester, """
        def test_raises(sf_compiles):
            with sf_compiles.none():
                double(jnp.ones(13))
                raise KeyError("its own")
    """)
    result = pytester.runpytest()
    result.assert_outcomes(failed=1)
    assert "KeyError: 'its own'" in result.stdout.str()
    assert "over its budget" not in result.stdout.str()


def test_baseline_is_written_sorted_and_a_grown_count_fails(pytester):
    """--sf-baseline-update writes sorted JSON; a test that compiles more later fails, explained."""
    body = """
        def test_b():
            double(jnp.ones(2)){more}

        def test_a():
            double(jnp.ones(3))
    """
    make(pytester, body.format(more=""))
    baseline = pytester.path / "compiles.json"
    pytester.runpytest("--sf-baseline", str(baseline), "--sf-baseline-update").assert_outcomes(passed=2)
    text = baseline.read_text()
    assert json.loads(text) == {"compiles": {"test_budget.py::test_a": 1, "test_budget.py::test_b": 1}}
    assert text.index("::test_a") < text.index("::test_b") and text.endswith("}\n")
    pytester.runpytest("--sf-baseline", str(baseline)).assert_outcomes(passed=2)

    make(pytester, body.format(more="; double(jnp.ones(4))"))
    result = pytester.runpytest("--sf-baseline", str(baseline))
    result.assert_outcomes(passed=1, failed=1)
    text = result.stdout.str()
    assert "this test compiled 2 time(s), 1 more than the 1 in --sf-baseline" in text
    assert "x: f32[2] → f32[4] (shape)" in text
    assert json.loads(baseline.read_text())["compiles"]["test_budget.py::test_b"] == 1


def test_update_needs_a_file(pytester):
    """--sf-baseline-update alone is a usage error that names --sf-baseline."""
    make(pytester, "def test_x(): pass\n")
    result = pytester.runpytest("--sf-baseline-update")
    assert "--sf-baseline-update needs --sf-baseline=FILE" in result.stderr.str()


def test_a_broken_baseline_file_is_a_usage_error(pytester):
    """A baseline that is not ours is named in a usage error."""
    make(pytester, "def test_x(): pass\n")
    (pytester.path / "b.json").write_text('{"other": 1}')
    result = pytester.runpytest("--sf-baseline", "b.json")
    assert "--sf-baseline b.json is not a staticfield baseline" in result.stderr.str()


def test_libraries_jit_wrappers_are_counted(pytester):
    """equinox, flax linen, flax nnx and staticfield: each test's 2 compiles exceed budget 1."""
    pytest.importorskip("equinox")
    pytest.importorskip("flax")
    make(pytester, """
        import equinox as eqx
        import flax.linen as nn
        from flax import nnx
        import staticfield as sf

        @pytest.mark.max_compiles(1)
        def test_equinox():
            f = eqx.filter_jit(lambda x: x + 1)
            f(jnp.ones(2)); f(jnp.ones(3))

        @pytest.mark.max_compiles(1)
        def test_linen():
            model = nn.Dense(2)
            params = model.init(jax.random.key(0), jnp.ones((1, 3)))
            apply = jax.jit(model.apply)
            apply(params, jnp.ones((1, 3))); apply(params, jnp.ones((2, 3)))

        @pytest.mark.max_compiles(1)
        def test_nnx():
            model = nnx.Linear(3, 2, rngs=nnx.Rngs(0))
            f = nnx.jit(lambda m, x: m(x))
            f(model, jnp.ones((1, 3))); f(model, jnp.ones((2, 3)))

        @pytest.mark.max_compiles(1)
        def test_staticfield():
            f = sf.jit(lambda x: x - 1)
            f(jnp.ones(2)); f(jnp.ones(3))
    """)
    # in a process of its own: an inline run drops the modules it imported, and flax
    # imported twice in one process breaks the flax tests that run after it
    # -rN: no short summary, whose lines repeat the messages in full when CI is set
    result = pytester.runpytest_subprocess("-rN")
    result.assert_outcomes(failed=4)
    text = result.stdout.str()
    assert text.count("over its budget of 1") == 4
    assert text.count("(shape)") >= 4


@pytest.mark.skipif(importlib.util.find_spec("xdist") is None, reason="pytest-xdist not installed")
def test_under_xdist_each_worker_counts_its_own_tests(pytester):
    """With -n 2, budgets fail per test and the baseline holds every test's count."""
    make(pytester, """
        @pytest.mark.max_compiles(1)
        def test_over():
            double(jnp.ones(2)); double(jnp.ones(3))

        @pytest.mark.parametrize("n", [4, 5, 6])
        def test_once(n):
            double(jnp.ones(n))
    """)
    result = pytester.runpytest_subprocess("-n", "2", "--sf-baseline", "b.json", "--sf-baseline-update")
    result.assert_outcomes(passed=3, failed=1)
    assert "over its budget of 1" in result.stdout.str()
    counts = json.loads((pytester.path / "b.json").read_text())["compiles"]
    assert sorted(counts) == ["test_budget.py::test_once[4]", "test_budget.py::test_once[5]",
                              "test_budget.py::test_once[6]", "test_budget.py::test_over"]
    assert all(counts[k] == 1 for k in counts if "once" in k)


_NO_JAX_TEST = '''
import sys

def test_nothing_heavy_was_imported(request):
    assert request.config.pluginmanager.hasplugin("staticfield")  # the plugin is loaded
    heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("jax", "jaxlib", "staticfield"))
    assert heavy == []
'''


def test_plugin_imports_nothing_heavy_until_used(tmp_path):
    """In a project that never imports JAX, a pytest run (its own process, plugin loaded from
    the entry point) imports neither jax nor the staticfield package. (Other installed
    plugins that may import JAX themselves are left out of the run.)"""
    import os
    import subprocess
    import sys

    (tmp_path / "test_plain.py").write_text(_NO_JAX_TEST)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTEST_", "STATICFIELD_")) and k != "PYTHONPATH"}
    others = ["-p", "no:jaxtyping", "-p", "no:hypothesispytest", "-p", "no:cacheprovider"]
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", *others],
                            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert "1 passed" in result.stdout


def test_plugin_loads_by_its_package_name_with_autoload_off(tmp_path):
    """With plugin autoloading off, ``-p staticfield.pytest_plugin`` loads the same plugin:
    its option works and a test over budget fails."""
    import os
    import subprocess
    import sys

    (tmp_path / "test_one.py").write_text(HEADER + "\ndef test_one():\n    double(jnp.ones(2))\n")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTEST_", "STATICFIELD_")) and k != "PYTHONPATH"}
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "staticfield.pytest_plugin", "-p", "no:cacheprovider",
         "--sf-max-compiles=0"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 1, result.stdout[-3000:] + result.stderr[-2000:]
    assert "compiled 1 time(s), over its budget of 0" in result.stdout


def test_bucket_padding_programs_are_not_counted(pytester):
    """A bucketed function's pad and slice programs stay out of the budget: its own compiles count."""
    make(pytester, """
        import staticfield as sf

        @sf.jit(buckets={"x": 0})
        def triple(x):
            return x * 3

        @pytest.mark.max_compiles(2)
        def test_many_sizes():
            for n in range(9, 33):  # buckets 16 and 32; a pad and a slice program per size
                assert triple(jnp.ones((n, 2))).shape == (n, 2)
            assert triple.compile_count == 2

        @pytest.mark.max_compiles(1)
        def test_over():
            triple(jnp.ones((40, 2)))
            triple(jnp.ones((70, 2)))
    """)
    result = pytester.runpytest()
    result.assert_outcomes(passed=1, failed=1)
    assert "this test compiled 2 time(s), over its budget of 1" in result.stdout.str()
