"""sf.watch and ``python -m staticfield watch``: every compile, per function, in user paths.

The command-line tests run real scripts in subprocesses (the shipped demo has one
recompile of each kind); the in-process tests use ``with sf.watch() as w``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import NamedTuple

import jax
import jax.numpy as jnp
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import staticfield as sf
from staticfield._watch import _describe as _watch_describe
from staticfield.examples import watch_demo

DEMO = Path(watch_demo.__file__).resolve()
ROOT = Path(__file__).resolve().parent.parent


def run_watch(tmp_path: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """``python -m staticfield watch ARGS`` in a subprocess, in tmp_path."""
    return subprocess.run(
        [sys.executable, "-m", "staticfield", "watch", *args],
        capture_output=True, text=True, cwd=tmp_path, env={**os.environ, **(env or {})},
        timeout=300,
    )


def script(tmp_path: Path, source: str, name: str = "prog.py") -> str:
    path = tmp_path / name
    path.write_text(textwrap.dedent(source))
    return str(path)


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess, dict]:
    """The demo run once under watch with --json and a budget of 3 compiles."""
    out = tmp_path_factory.mktemp("demo") / "report.json"
    demo = str(DEMO.relative_to(ROOT))  # from the repository root, as docs/watch.md runs it
    proc = run_watch(ROOT, "--json", str(out), "--max-compiles", "3", demo)
    return proc, json.loads(out.read_text())


def one_line(text: str) -> str:
    """The report with its wrapped lines joined (lines wrap at 100 columns)."""
    return " ".join(text.split())


def demo_line(text: str) -> int:
    """The number of the demo's first line that contains ``text``."""
    lines = DEMO.read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if text in line)


def function(data: dict, name: str) -> dict:
    (entry,) = [f for f in data["functions"] if f["name"] == name]
    return entry


def changes(data: dict, name: str, number: int) -> list[tuple[str, str]]:
    """(path, kind) of each change of compile #number of the named function."""
    event = function(data, name)["events"][number - 1]
    return [(c["path"], c["kind"]) for c in event["changes"]]


def test_demo_output_reaches_stdout_and_report_stderr(demo):
    """The script's own output is untouched on stdout; the report goes to stderr."""
    proc, _ = demo
    assert proc.stdout == "done\n"
    assert "staticfield watch: 5 jitted function(s), 13 compile(s); trace " in one_line(proc.stderr)
    assert f"watch_demo.py:{demo_line('@jax.jit')}): 4 compiles" in proc.stderr  # apply


def _without_times(text: str) -> str:
    """The report less its seconds and its eager-op counts (both vary by machine and JAX)."""
    text = re.sub(r"\d+\.\d{3} s", "_ s", text)
    return re.sub(r"\n+eager op-by-op compiles .*", "", text, flags=re.DOTALL)


def test_docs_page_shows_the_demos_report(demo):
    """docs/watch.md shows the report the demo prints now (seconds aside)."""
    proc, _ = demo
    page = (ROOT / "docs" / "watch.md").read_text()
    shown = re.search(r"```text\n(staticfield watch: .*?)```", page, flags=re.DOTALL)
    assert shown is not None
    report = proc.stderr.split("\nstaticfield watch: apply")[0].strip()  # less the budget lines
    assert _without_times(shown.group(1).strip()) == _without_times(report)


def test_static_field_change_named_by_field(demo):
    """A new static field value is `layer.activation` (static), with old → new."""
    _, data = demo
    assert changes(data, "apply", 2) == [("layer.activation", "static")]
    change = function(data, "apply")["events"][1]["changes"][0]
    assert (change["old"], change["new"]) == ("'relu'", "'tanh'")
    assert "static" in change["hint"]


def test_dtype_change_is_blamed_not_the_static_field(demo):
    """A dtype change right after a static change is explained as the dtype change.

    jax_explain_cache_misses compares with the most recent key and blames the
    pytree metadata ('tanh' vs 'relu'); the closest earlier compile differs only in dtype.
    """
    _, data = demo
    assert changes(data, "apply", 3) == [("layer.w", "dtype")]
    change = function(data, "apply")["events"][2]["changes"][0]
    assert (change["old"], change["new"]) == ("f32[3]", "i32[3]")


def test_shape_change_names_every_argument(demo):
    """A shape change names each changed leaf: the field and the plain argument."""
    _, data = demo
    assert changes(data, "apply", 4) == [("layer.w", "shape"), ("x", "shape")]


def test_weak_type_change(demo):
    """A Python float where a float32 array was passed is a weak_type change of `lr`."""
    _, data = demo
    assert changes(data, "step", 2) == [("lr", "weak_type")]


def test_static_argname_change(demo):
    """A new static_argnames value is named by the parameter (`n`, static_arg)."""
    _, data = demo
    assert changes(data, "power", 2) == [("n", "static_arg")]


def test_structure_change_names_the_new_key(demo):
    """A new dict key inside a namedtuple argument is `batch.extras['mask']` (structure)."""
    _, data = demo
    assert changes(data, "total", 2) == [("batch.extras['mask']", "structure")]


def test_new_lambda_per_call_is_one_function(demo):
    """A lambda made per call is one function compiled 3 times, each time a new function."""
    _, data = demo
    entry = function(data, "main.<locals>.<lambda>")
    assert entry["compiles"] == 3
    assert entry["location"].endswith(f"watch_demo.py:{demo_line('jax.jit(lambda')}")
    assert changes(data, "main.<locals>.<lambda>", 3) == [("(the function)", "new function")]
    assert "define it once" in entry["events"][2]["changes"][0]["hint"]


def test_call_sites_are_the_users_lines(demo):
    """Each compile names the file:line of the user's call, not a JAX frame."""
    _, data = demo
    sites = [e["call_site"] for e in function(data, "apply")["events"]]
    first = demo_line("apply(Layer(jnp.ones(3)), x)")
    assert sites == [f"src/staticfield/examples/watch_demo.py:{first + i}" for i in range(4)]


def test_json_has_counts_and_times(demo):
    """The JSON has, per function, its compiles and trace/lower/compile seconds."""
    _, data = demo
    assert data["explained"] is True and data["notices"] == []
    entry = function(data, "apply")
    assert entry["compiles"] == len(entry["events"]) == 4
    assert entry["compile_s"] > 0 and entry["trace_s"] > 0 and entry["lower_s"] > 0
    assert entry["compile_s"] == pytest.approx(sum(e["compile_s"] for e in entry["events"]), abs=1e-5)


def test_max_compiles_exits_nonzero_naming_each_function_over(demo):
    """--max-compiles 3: exit 1, naming `apply` (4 compiles) and no function within budget."""
    proc, _ = demo
    assert proc.returncode == 1
    assert "apply (" in proc.stderr and "compiled 4 times, over --max-compiles 3" in proc.stderr
    over = [line for line in proc.stderr.splitlines() if "over --max-compiles" in line]
    assert len(over) == 1


def test_within_budget_exits_zero(tmp_path):
    """A script within --max-compiles exits 0."""
    prog = script(tmp_path, """
        import jax, jax.numpy as jnp
        jax.jit(lambda x: x + 1)(jnp.ones(2))
    """)
    proc = run_watch(tmp_path, "--max-compiles", "1", prog)
    assert proc.returncode == 0, proc.stderr


def test_report_printed_when_script_raises_and_on_nonzero_exit(tmp_path):
    """A raising script keeps its traceback and exit 1; sys.exit(3) keeps 3; both report."""
    prog = script(tmp_path, """
        import sys, jax, jax.numpy as jnp

        @jax.jit
        def f(x):
            return x * 2

        f(jnp.ones(2)); f(jnp.ones(3))
        if sys.argv[1] == "raise":
            raise ValueError("boom")
        sys.exit(3)
    """)
    raised = run_watch(tmp_path, prog, "raise")
    assert raised.returncode == 1
    assert "Traceback (most recent call last)" in raised.stderr
    assert "ValueError: boom" in raised.stderr and "runpy" not in raised.stderr
    assert "x: f32[2] → f32[3] (shape)" in raised.stderr
    exited = run_watch(tmp_path, prog, "exit")
    assert exited.returncode == 3
    assert "f (prog.py:4): 2 compiles" in exited.stderr


def test_sharding_change(tmp_path):
    """The same shape with another sharding is a sharding change of that argument."""
    prog = script(tmp_path, """
        import jax, jax.numpy as jnp
        from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
        mesh = Mesh(jax.devices()[:2], ("i",))
        f = jax.jit(lambda x: x * 2)
        x = jnp.ones(4)
        f(jax.device_put(x, NamedSharding(mesh, P())))
        f(jax.device_put(x, NamedSharding(mesh, P("i"))))
    """)
    proc = run_watch(tmp_path, "--json", "r.json", prog,
                     env={"XLA_FLAGS": "--xla_force_host_platform_device_count=2"})
    assert proc.returncode == 0, proc.stderr
    data = json.loads((tmp_path / "r.json").read_text())
    assert changes(data, "<lambda>", 2) == [("x", "sharding")]


def test_unknown_script_is_a_usage_error(tmp_path):
    """A missing script exits 2 and names it."""
    proc = run_watch(tmp_path, "missing.py")
    assert proc.returncode == 2 and "no such script 'missing.py'" in proc.stderr


# -- in process ---------------------------------------------------------------------------


def test_counts_match_an_independent_trace_counter():
    """w.functions counts each trace once, as a nonlocal counter inside the function does."""
    traces = 0

    @jax.jit
    def f(x):
        nonlocal traces
        traces += 1
        return x + 1

    with sf.watch() as w:
        for n in (1, 2, 1, 3, 2):
            f(jnp.ones(n))
    (entry,) = [e for e in w.functions if e.name.endswith("f")]
    assert entry.count == traces == 3


def test_cache_hit_runs_no_watcher_code(monkeypatch):
    """After the first compile, cache hits call neither the trace hook nor the listener."""
    calls = []
    f = jax.jit(lambda x: x * 3)
    with sf.watch() as w:
        f(jnp.ones(2))
        monkeypatch.setattr(w, "_traced", lambda *a: calls.append("trace"))
        monkeypatch.setattr(w, "_duration", lambda *a: calls.append("duration"))
        for _ in range(20):
            f(jnp.ones(2))
    assert calls == []


@dataclasses.dataclass
class Config:
    w: jax.Array
    mode: str


jax.tree_util.register_dataclass(Config, data_fields=["w"], meta_fields=["mode"])


class Pair(NamedTuple):
    first: jax.Array
    second: jax.Array


def test_stdlib_dataclass_static_field_and_namedtuple_paths():
    """register_dataclass meta fields are `cfg.mode` (static); namedtuple leaves are `.second`."""

    @jax.jit
    def f(cfg, pair):
        return cfg.w + pair.first + pair.second

    with sf.watch() as w:
        f(Config(jnp.ones(2), "a"), Pair(jnp.ones(2), jnp.ones(2)))
        f(Config(jnp.ones(2), "b"), Pair(jnp.ones(2), jnp.ones(2)))
        f(Config(jnp.ones(2), "a"), Pair(jnp.ones(2), jnp.ones(2, jnp.int32)))
    (entry,) = [e for e in w.functions if not e.eager]
    assert [(c.path, c.kind) for c in entry.compiles[1].changes] == [("cfg.mode", "static")]
    assert [(c.path, c.kind) for c in entry.compiles[2].changes] == [("pair.second", "dtype")]


def test_flax_struct_static_field():
    """A flax.struct pytree_node=False field is named `p.act` (static)."""
    struct = pytest.importorskip("flax.struct")

    @struct.dataclass
    class Params:
        w: jax.Array
        act: str = struct.field(pytree_node=False)

    f = jax.jit(lambda p: p.w * 2)
    with sf.watch() as w:
        f(Params(jnp.ones(2), "relu"))
        f(Params(jnp.ones(2), "gelu"))
    (entry,) = [e for e in w.functions if not e.eager]
    (change,) = entry.compiles[1].changes
    assert (change.path, change.kind, change.old, change.new) == ("p.act", "static", "'relu'", "'gelu'")


def test_equinox_filter_jit_names_module_fields_and_arguments():
    """equinox filter_jit: the user's function, `m.depth` (static field), `scale` (held static)."""
    eqx = pytest.importorskip("equinox")

    class Model(eqx.Module):
        w: jax.Array
        depth: int = eqx.field(static=True)

    @eqx.filter_jit
    def run(m, scale):
        return m.w * scale * m.depth

    with sf.watch() as w:
        run(Model(jnp.ones(2), 2), 1.0)
        run(Model(jnp.ones(2), 3), 1.0)
        run(Model(jnp.ones(2), 3), 2.0)
    (entry,) = [e for e in w.functions if not e.eager]
    assert entry.name.endswith("run") and entry.count == 3
    assert [(c.path, c.kind) for c in entry.compiles[1].changes] == [("m.depth", "static")]
    assert [(c.path, c.kind) for c in entry.compiles[2].changes] == [("scale", "static")]
    assert "jnp.asarray" in entry.compiles[2].changes[0].hint


def test_a_failing_watcher_leaves_the_program_unharmed(monkeypatch):
    """If describing a trace raises, the jitted call still works and the report says so."""

    def boom(*args, **kwargs):
        raise RuntimeError("describe exploded")

    monkeypatch.setattr(_watch_describe, "describe", boom)
    f = jax.jit(lambda x: x + 1)
    with sf.watch() as w:
        out = f(jnp.ones(2))
        out2 = f(jnp.ones(3))
    assert out.tolist() == [2.0, 2.0] and out2.shape == (3,)
    assert len(w.notices) == 1
    text = one_line(w.report())
    assert "failed inside its trace hook (RuntimeError: describe exploded)" in text
    assert "the program went on unharmed" in text


def test_without_the_trace_hook_it_counts_and_times_and_says_so_once(monkeypatch):
    """A JAX without the trace hook: one notice, and compiles still counted and timed."""
    from staticfield._watch import _hooks as _watch_hooks

    monkeypatch.setattr(_watch_hooks, "_install_trace_hook", lambda: None)  # as if JAX lacked it
    f = jax.jit(lambda x: x - 1)
    with sf.watch() as w:
        f(jnp.ones(2))
        f(jnp.ones(3))
    assert w.as_dict()["explained"] is False
    assert len(w.notices) == 1 and "counted and timed but not explained" in w.notices[0]
    entry = next(e for e in w.functions if e.name == "<lambda>")
    assert entry.count == 2 and entry.seconds("compile_s") > 0


def test_hook_is_removed_on_exit():
    """Leaving the block restores JAX's own trace function."""
    from jax._src import pjit

    before = pjit._trace_for_jit
    with sf.watch():
        assert pjit._trace_for_jit is not before
    assert pjit._trace_for_jit is before


def test_staticfield_jit_counted_at_the_users_function():
    """sf.jit_method and sf.jit compiles are counted and explained in the user's paths."""

    @sf.dataclass
    class Model:
        w: jax.Array
        depth: sf.Static[int] = 2

        @sf.jit_method
        def __call__(self, x):
            return self.w * x * self.depth

        @sf.jit_method(static_argnames="k")
        def scaled(self, x, k=1):
            return self.w * x * k

    with sf.watch() as w:
        Model(jnp.ones(2))(jnp.ones(2))
        Model(jnp.ones(2), 3)(jnp.ones(2))
        Model(jnp.ones(3), 3)(jnp.ones(3))
        Model(jnp.ones(2)).scaled(1.0, k=2)
        Model(jnp.ones(2)).scaled(1.0, k=3)
    entries = {e.name.rsplit(".", 1)[-1]: e for e in w.functions if not e.eager}
    call, scaled = entries["__call__"], entries["scaled"]
    assert call.count == 3 and scaled.count == 2
    assert "test_watch.py:" in call.location  # the user's method, not staticfield's inner
    assert [(c.path, c.kind, c.old, c.new) for c in call.compiles[1].changes] == [("self.depth", "static", "2", "3")]
    assert {(c.path, c.kind) for c in call.compiles[2].changes} == {("self.w", "shape"), ("x", "shape")}
    assert [(c.path, c.kind) for c in scaled.compiles[1].changes] == [("k", "static_arg")]
    assert "dyn[" not in w.report() and "new function" not in w.report()


def test_lower_trace_and_eval_shape_are_traces_not_compiles():
    """`.lower`/`.trace`/`.eval_shape` trace without compiling: listed, not counted, until compiled."""
    f = jax.jit(lambda x: x * 2)
    with sf.watch() as w:
        f.lower(jnp.ones(2))
        f.trace(jnp.ones(3))
        f.eval_shape(jnp.ones(5))
        f(jnp.ones(4))
        f.lower(jnp.ones(6)).compile()
    (entry,) = [e for e in w.functions if not e.eager]
    assert [(c.via, c.compiled) for c in entry.compiles] == [
        (".lower", False), (".trace", False), (".eval_shape", False), ("", True), (".lower", True),
    ]
    assert entry.count == 2 and not w.over_budget(2)
    text = w.report()
    assert "2 compiles, and 3 trace(s) by .lower/.trace/.eval_shape" in text
    assert "traced by .lower, not compiled" in text
    assert w.as_dict()["functions"][0]["compiles"] == 2


class Box:
    """A custom pytree node keeping a tag in its aux_data."""

    def __init__(self, value, tag):
        self.value, self.tag = value, tag


jax.tree_util.register_pytree_node(
    Box, lambda b: ((b.value,), b.tag), lambda tag, children: Box(children[0], tag)
)


def test_custom_node_metadata_named_by_class():
    """A custom node's aux_data change is `box (Box metadata)`, old → new, on one line."""
    f = jax.jit(lambda box: box.value * 2)
    with sf.watch() as w:
        f(Box(jnp.ones(2), "a\nb"))
        f(Box(jnp.ones(2), "c"))
    (entry,) = [e for e in w.functions if not e.eager]
    (change,) = entry.compiles[1].changes
    assert (change.path, change.kind, change.old, change.new) == (
        "box (Box metadata)", "static", "'a\\nb'", "'c'")


class Opaque:
    """Hashable by identity; every instance prints the same."""

    def __repr__(self) -> str:
        return "Opaque()"


def test_static_arg_equal_in_print_but_not_in_value_gets_the_identity_hint():
    """A new static argument that prints like the old one is explained as compared by identity."""
    f = jax.jit(lambda x, opt: x + 1, static_argnums=1)
    with sf.watch() as w:
        f(jnp.ones(2), Opaque())
        f(jnp.ones(2), Opaque())
    (entry,) = [e for e in w.functions if not e.eager]
    (change,) = entry.compiles[1].changes
    assert (change.path, change.kind, change.old, change.new) == ("opt", "static_arg", "Opaque()", "Opaque()")
    assert "compared by identity" in change.hint and "Opaque" in change.hint


def test_a_trace_that_raises_is_not_a_compile():
    """A trace that raises counts as a failed trace, not a compile, and the error reaches the user."""

    @jax.jit
    def f(x):
        if x.shape[0] == 3:
            raise ValueError("no threes")
        return x + 1

    with sf.watch() as w:
        f(jnp.ones(2))
        with pytest.raises(ValueError, match="no threes"):
            f(jnp.ones(3))
        f(jnp.ones(4))
    (entry,) = [e for e in w.functions if not e.eager]
    assert entry.count == 2 and entry.failed_traces == 1
    assert [(c.path, c.kind) for c in entry.compiles[1].changes] == [("x", "shape")]
    assert "2 compiles, and 1 trace(s) that raised" in one_line(w.report())


def test_a_failing_watcher_under_the_command_line_leaves_the_script_unharmed(tmp_path):
    """With the watcher's listener broken, the script's output and exit status are its own."""
    prog = script(tmp_path, """
        import jax, jax.numpy as jnp
        from staticfield._watch import _watcher as _watch

        def broken(*args, **kwargs):
            raise RuntimeError("listener exploded")

        _watch.watch._duration = broken  # every jax.monitoring event now fails in the watcher
        print(jax.jit(lambda x: x * 2)(jnp.ones(2)).tolist())
    """)
    proc = run_watch(tmp_path, prog)
    assert proc.returncode == 0
    assert proc.stdout == "[2.0, 2.0]\n"
    assert "Traceback" not in proc.stderr
    assert ("failed inside its jax.monitoring listener (RuntimeError: listener exploded)"
            in one_line(proc.stderr))


@settings(max_examples=10, deadline=None)
@given(st.lists(st.integers(1, 4), min_size=1, max_size=6))
def test_compiles_and_shape_changes_match_the_calls(sizes):
    """For any sequence of input sizes: one compile per new size, each explained as x's shape."""
    traces = 0

    @jax.jit
    def f(x):
        nonlocal traces
        traces += 1
        return x * 2

    with sf.watch() as w:
        for n in sizes:
            f(jnp.ones(n))
    (entry,) = [e for e in w.functions if not e.eager and e.name.endswith("f")]
    assert entry.count == traces == len(set(sizes))
    for c in entry.compiles[1:]:
        assert [(ch.path, ch.kind) for ch in c.changes] == [("x", "shape")]


def test_jit_under_grad_is_counted_with_its_call_site():
    """A jitted function compiled under jax.grad is one function at its code location, at the
    user's call site; a compile for the transformation says so."""
    loss = jax.jit(lambda w: jnp.sum(w**2))
    with sf.watch() as w:
        line = sys._getframe().f_lineno + 1
        jax.grad(loss)(jnp.ones(3))
    (entry,) = [e for e in w.functions if not e.eager]
    assert entry.name == "<lambda>" and entry.count >= 1
    assert all(c.call_site.endswith(f"test_watch.py:{line}") for c in entry.compiles)
    assert entry.location.endswith(f"test_watch.py:{line - 3}")
    for c in entry.compiles[1:]:
        assert [(ch.path, ch.kind) for ch in c.changes] in ([("(the call)", "context")], [("w", "shape")])


def test_run_a_module_with_dash_m(tmp_path):
    """`watch -m module args` runs the module as __main__ with its arguments, and reports."""
    (tmp_path / "prog_mod.py").write_text(textwrap.dedent("""
        import sys, jax, jax.numpy as jnp
        print(sys.argv[1:])
        jax.jit(lambda x: x + 1)(jnp.ones(2))
    """))
    proc = run_watch(tmp_path, "-m", "prog_mod", "a", "b")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "['a', 'b']\n"
    assert "<lambda> (prog_mod.py:4): 1 compile" in proc.stderr
