"""sf.watch on real programs' corners: pmap, one code location with two function objects,
a change deep inside a static value, JAX's spelling of shapes, lines that fit, hints that
fit the value, eager op-by-op compiles apart, and a summary before a long explanation.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import pytest

import staticfield as sf


def jitted(w: sf.watch) -> list:
    return [f for f in w.functions if not f.eager]


def kinds(compile_: Any) -> list[tuple[str, str]]:
    return [(c.path, c.kind) for c in compile_.changes]


PMAP = """
import jax, jax.numpy as jnp

f = jax.pmap(lambda x: x * 2)
f(jnp.ones((8, 2)))
f(jnp.ones((8, 3)))
f(jnp.ones((8, 3), jnp.int32))

from jax.sharding import NamedSharding, PartitionSpec as P

mesh = jax.make_mesh((8,), ("i",))
def body(x):
    return x + 1
g = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P("i"), out_specs=P("i")))
for n in (8, 16):
    g(jax.device_put(jnp.ones(n), NamedSharding(mesh, P("i"))))
"""


def test_pmap_and_shard_map_compiles_are_counted_and_explained(tmp_path):
    """A pmap that compiles 3 times on 8 devices is one function with 3 compiles, over budget 1;
    a jit of a shard_map is its body, with its argument names."""
    (tmp_path / "prog.py").write_text(PMAP)
    proc = subprocess.run(
        [sys.executable, "-m", "staticfield", "watch", "--json", "r.json", "--max-compiles", "1",
         "prog.py"],
        capture_output=True, text=True, cwd=tmp_path, timeout=300,
        env={**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=8"},
    )
    assert proc.returncode == 1, proc.stderr
    assert "2 jitted function(s), 5 compile(s)" in proc.stderr
    entry, body = [f for f in json.loads((tmp_path / "r.json").read_text())["functions"]
                   if not f["eager"]]
    assert entry["name"] == "<lambda>" and entry["location"] == "prog.py:4"
    assert entry["compiles"] == 3
    assert [(c["path"], c["kind"]) for c in entry["events"][1]["changes"]] == [("x", "shape")]
    assert [(c["path"], c["kind"]) for c in entry["events"][2]["changes"]] == [("x", "dtype")]
    assert "compiled 3 times, over --max-compiles 1" in proc.stderr
    assert (body["name"], body["compiles"]) == ("body", 2)  # jit of shard_map: by its own names
    assert [(c["path"], c["kind"]) for c in body["events"][1]["changes"]] == [("x", "shape")]


def make(k: float) -> Callable:
    def f(x, n):
        return x * k * n

    return jax.jit(f, static_argnames="n")


def test_two_function_objects_of_one_code_location_are_diffed_each_with_its_own():
    """make(1.) then make(2.), each with n=1 then n=2: #3 is a new function, #4 is `n: 1 → 2`."""
    x = jnp.ones(3)
    with sf.watch() as w:
        for k in (1.0, 2.0):
            g = make(k)
            g(x, n=1)
            g(x, n=2)
    (entry,) = jitted(w)
    assert entry.count == 4
    assert kinds(entry.compiles[1]) == [("n", "static_arg")]
    assert kinds(entry.compiles[2]) == [("(the function)", "new function")]
    assert kinds(entry.compiles[3]) == [("n", "static_arg")]
    assert (entry.compiles[3].changes[0].old, entry.compiles[3].changes[0].new) == ("1", "2")
    assert "no argument differs" not in w.report()


class CellListFns(NamedTuple):
    allocate: Callable
    update: Callable


@dataclasses.dataclass(frozen=True)
class NeighborList:
    """jax-md's shape: arrays, a shape-defining int and a NamedTuple of closures."""

    idx: jax.Array
    max_occupancy: int
    cell_list_fn: CellListFns


jax.tree_util.register_dataclass(
    NeighborList, data_fields=["idx"], meta_fields=["max_occupancy", "cell_list_fn"]
)


def neighbor_list(capacity: int) -> NeighborList:
    def allocate(n):
        return jnp.zeros((n, capacity), jnp.int32)

    def update(idx):
        return idx

    return NeighborList(jnp.zeros((4, capacity), jnp.int32), capacity, CellListFns(allocate, update))


def test_change_inside_a_static_namedtuple_of_closures_is_named_by_its_innermost_path():
    """A NamedTuple of closures rebuilt: `nbrs.cell_list_fn.allocate`, a new function object."""
    step = jax.jit(lambda nbrs: nbrs.idx + 1)
    with sf.watch() as w:
        step(neighbor_list(3))
        step(neighbor_list(3))
    (entry,) = jitted(w)
    changes = entry.compiles[1].changes
    assert [(c.path, c.kind) for c in changes] == [
        ("nbrs.cell_list_fn.allocate", "static"), ("nbrs.cell_list_fn.update", "static")]
    assert changes[0].new == "a new function object, same code"
    assert "define it once" in changes[0].hint


def test_a_shape_defining_int_is_told_it_is_a_shape():
    """max_occupancy 3 → 5 with idx's shape: the hint says it sets a shape, not 'make it dynamic'."""
    step = jax.jit(lambda nbrs: nbrs.idx + 1)
    with sf.watch() as w:
        nbrs = neighbor_list(3)
        step(nbrs)
        step(dataclasses.replace(nbrs, idx=jnp.zeros((4, 5), jnp.int32), max_occupancy=5))
    (entry,) = jitted(w)
    by_path = {c.path: c for c in entry.compiles[1].changes}
    assert set(by_path) == {"nbrs.idx", "nbrs.max_occupancy"}
    hint = by_path["nbrs.max_occupancy"].hint
    assert "shape" in hint and "dynamic" not in hint


def test_a_string_static_is_not_told_to_become_dynamic():
    """A string activation changing is a setting: its hint does not say 'dynamic'."""
    f = jax.jit(lambda x, act: x + 1, static_argnames="act")
    with sf.watch() as w:
        f(jnp.ones(2), act="relu")
        f(jnp.ones(2), act="tanh")
    (change,) = jitted(w)[0].compiles[1].changes
    assert change.kind == "static_arg" and "dynamic" not in change.hint
    assert "array" not in change.hint


def test_nnx_graphdef_change_after_eval_is_named_inside_the_graphdef():
    """flax nnx: m.eval() changes one attribute inside the GraphDef, named by its path."""
    nnx = pytest.importorskip("flax.nnx")

    class Model(nnx.Module):
        def __init__(self, rngs):
            self.lin = nnx.Linear(3, 3, rngs=rngs)
            self.drop = nnx.Dropout(0.5, rngs=rngs)

        def __call__(self, x):
            return self.drop(self.lin(x))

    @nnx.jit
    def run(m, x):
        return m(x)

    m = Model(nnx.Rngs(0))
    with sf.watch() as w:
        run(m, jnp.ones(3))
        m.eval()
        run(m, jnp.ones(3))
    (entry,) = jitted(w)
    (change,) = entry.compiles[1].changes
    assert "GraphDef" in change.path and "deterministic" in change.path
    assert (change.old, change.new) == ("False", "True")


def test_shapes_are_spelled_as_jax_spells_them():
    """`x: f32[2] → f32[3] (shape)`, as JAX and sf.Recompile write it."""
    f = jax.jit(lambda x: x * 2)
    with sf.watch() as w:
        f(jnp.ones(2))
        f(jnp.ones(3))
        f(jnp.ones(3, jnp.int32))
    text = w.report()
    assert "x: f32[2] → f32[3] (shape)" in text
    assert "x: f32[3] → i32[3] (dtype)" in text
    assert "float32[" not in text


def test_every_report_line_fits_in_100_columns():
    """Long names, long static values and every hint: no line is over 100 columns."""

    def a_function_with_a_rather_long_name_to_stretch_the_line(x, option_with_long_name):
        return jax.tree_util.tree_map(lambda v: v + 1, x)

    f = jax.jit(a_function_with_a_rather_long_name_to_stretch_the_line,
                static_argnames="option_with_long_name")
    with sf.watch() as w:
        f(jnp.ones(2), option_with_long_name="a" * 80)
        f(jnp.ones(2), option_with_long_name="b" * 80)
        f(jnp.ones(3), option_with_long_name="b" * 80)
        f(2.0, option_with_long_name="b" * 80)
        f(jnp.ones(3, jnp.int32), option_with_long_name="b" * 80)
        f({"k": jnp.ones(3)}, option_with_long_name="b" * 80)
    lines = w.report().splitlines()
    assert len(lines) > 10
    assert max(map(len, lines)) <= 100, max(lines, key=len)


def test_eager_compiles_are_one_line_after_the_jitted_functions():
    """Op-by-op compiles are summed on one last line, not in the header above the functions."""
    f = jax.jit(lambda x: x * 2)
    with sf.watch() as w:
        # shapes no other test uses: JAX's op-by-op programs are kept for the whole session
        y = jnp.ones((3, 19)) + jnp.arange(19.0)
        f(y)
    lines = w.report().splitlines()
    assert lines[0].startswith("staticfield watch: 1 jitted function(s), 1 compile(s);")
    assert "eager" not in lines[0]
    eager = [i for i, line in enumerate(lines) if "op-by-op" in line]
    assert len(eager) == 1 and eager[0] > next(i for i, l in enumerate(lines) if "<lambda>" in l)


@sf.dataclass
class SearchTree:
    a: jax.Array
    b: jax.Array
    c: jax.Array
    d: jax.Array
    e: jax.Array
    f: jax.Array
    g: jax.Array
    h: jax.Array
    i: jax.Array
    j: jax.Array
    k: jax.Array
    l: jax.Array
    m: jax.Array
    depth: sf.Static[int] = 0


def test_a_whole_structure_changed_starts_with_a_one_line_summary():
    """14 changed fields of one tree passed to sf.jit: one summary line, then each field."""
    search = sf.jit(lambda tree: tree.a + 1)
    with sf.watch() as w:
        search(SearchTree(*[jnp.ones(2)] * 13))
        search(SearchTree(*[jnp.ones(3)] * 13, depth=1))
    text = w.report()
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if line.lstrip().startswith("#2"))
    assert "14 changes (13 shape, 1 static) in tree" in lines[at]
    assert "at tests/test_watch_corners.py:" in lines[at]  # the user's line, not a hit path
    assert lines[at + 1].strip().startswith("tree.")


def _jax_compile_log(caplog) -> dict[str, int]:
    """JAX's own count of jit compiles by function name, from jax_log_compiles."""
    import re

    counts: dict[str, int] = {}
    for record in caplog.records:
        found = re.match(r"Compiling (?:p?jit\()?([\w.<>]+)\)? ", record.getMessage())
        if found:
            counts[found.group(1)] = counts.get(found.group(1), 0) + 1
    return counts


def test_equinox_program_counts_equal_jax_compile_log(caplog):
    """On an equinox program (filter_jit, filter_eval_shape of the jitted function, closure
    conversion, filter_vmap, filter_grad inside), sf.watch counts each of the user's functions
    exactly as often as JAX's own compile log, and lists no equinox internal as compiled."""
    eqx = pytest.importorskip("equinox")

    class Lin(eqx.Module):
        w: jax.Array

        def __call__(self, x):
            return self.w * x

    @eqx.filter_jit
    def eqx_step(m, x):
        shape = eqx.filter_eval_shape(m, x)
        f = eqx.filter_closure_convert(m, x)
        y = eqx.filter_vmap(lambda a: m(a))(jnp.stack([x, x]))
        g = eqx.filter_grad(lambda mm: jnp.sum(mm(x)))(m)
        return f(x) + y[0] + g.w + jnp.zeros(shape.shape)

    before = jax.config.jax_log_compiles
    jax.config.update("jax_log_compiles", True)
    try:
        with caplog.at_level("WARNING"), sf.watch() as w:
            eqx.filter_eval_shape(eqx_step, Lin(jnp.ones(3)), jnp.ones(3))
            eqx_step(Lin(jnp.ones(3)), jnp.ones(3))
            eqx_step(Lin(jnp.ones(3) * 2), jnp.ones(3))
            eqx_step(Lin(jnp.ones(4)), jnp.ones(4))
    finally:
        jax.config.update("jax_log_compiles", before)
    logged = _jax_compile_log(caplog)
    watched = {f.name.rsplit(".", 1)[-1]: f.count for f in w.functions if not f.eager and f.count}
    assert logged["eqx_step"] == 2
    assert watched == {"eqx_step": 2}, w.report()
    (step,) = [f for f in w.functions if f.name.endswith("eqx_step")]
    assert step.seconds("compile_s") > 0 and step.seconds("lower_s") > 0
    # the recompile is explained by the user's arguments alone: no equinox stand-in function
    # blamed as "a new function object", no dummy argument equinox appends
    assert [(c.path, c.kind) for c in step.compiles[-1].changes] == [("m.w", "shape"), ("x", "shape")]


def test_equinox_primitive_with_eval_shape_in_its_rule_counts_equal_jax_compile_log(caplog):
    """A jitted function binding an equinox primitive whose abstract-eval rule calls
    eqx.filter_eval_shape (as lineax's linear_solve does): the rule's trace starts while the
    function is being traced, and must not take over its compile. Counts equal JAX's log,
    once per function, with the times on it."""
    eqx = pytest.importorskip("equinox")
    eqxi = pytest.importorskip("equinox.internal")

    def _impl(x):
        return x * 2

    @eqxi.filter_primitive_def
    def _abstract(x):
        out = eqx.filter_eval_shape(_impl, jax.ShapeDtypeStruct(x.shape, x.dtype))
        return jax.core.ShapedArray(out.shape, out.dtype)

    def _unused(*args, **kwargs):
        raise NotImplementedError

    double_p = eqxi.create_vprim("double_p", eqxi.filter_primitive_def(_impl), _abstract, _unused, _unused)

    @eqx.filter_jit
    def prim_step(x):
        return eqxi.filter_primitive_bind(double_p, x) + 1

    before = jax.config.jax_log_compiles
    jax.config.update("jax_log_compiles", True)
    try:
        with caplog.at_level("WARNING"), sf.watch() as w:
            prim_step(jnp.ones(3))
            prim_step(jnp.ones(3) * 2)
            prim_step(jnp.ones(4))
    finally:
        jax.config.update("jax_log_compiles", before)
    assert _jax_compile_log(caplog)["prim_step"] == 2
    watched = {f.name.rsplit(".", 1)[-1]: f.count for f in w.functions if not f.eager and f.count}
    assert watched == {"prim_step": 2}, w.report()
    (step,) = [f for f in w.functions if f.name.endswith("prim_step")]
    assert step.seconds("trace_s") > 0 and step.seconds("compile_s") > 0
    assert [(c.path, c.kind) for c in step.compiles[-1].changes] == [("x", "shape")]
    # the rule's eval_shape is named as traced inside prim_step's trace, not as `.trace` calls
    assert "traced by .trace" not in w.report() and "inside the trace of" in w.report(), w.report()


VMAP_AND_DIRECT = """
import jax, jax.numpy as jnp

def f(x):
    return x * 2

jf = jax.jit(f)
for n in (1, 2, 3):
    jax.vmap(jf)(jnp.ones((2, n)))
for n in (1, 2, 3):
    jf(jnp.ones(n + 5))
"""


def test_one_function_reached_under_vmap_and_directly_is_one_function(tmp_path):
    """3 compiles under jax.vmap and 3 direct ones: one function at one code location with 6
    compiles, so --max-compiles 4 exits 1 naming it."""
    (tmp_path / "prog.py").write_text(VMAP_AND_DIRECT)
    proc = subprocess.run(
        [sys.executable, "-m", "staticfield", "watch", "--json", "r.json", "--max-compiles", "4",
         "prog.py"],
        capture_output=True, text=True, cwd=tmp_path, timeout=300,
    )
    assert proc.returncode == 1, proc.stderr
    (entry,) = [f for f in json.loads((tmp_path / "r.json").read_text())["functions"] if not f["eager"]]
    assert (entry["name"], entry["location"], entry["compiles"]) == ("f", "prog.py:4", 6)
    assert "compiled 6 times, over --max-compiles 4" in proc.stderr


@pytest.mark.parametrize("vmap_first", [False, True])
def test_a_compile_under_vmap_is_explained_as_a_transformation(vmap_first):
    """jax.vmap(f) after f (or before) is one function, and its compile is explained as a
    program for a transformation of f, never as a global setting."""

    def f(x):
        return x * 2

    jf = jax.jit(f)
    calls = [lambda: jf(jnp.ones(3)), lambda: jax.vmap(jf)(jnp.ones((2, 3)))]
    with sf.watch() as w:
        for call in calls[::-1] if vmap_first else calls:
            call()
    (entry,) = jitted(w)
    assert entry.count == 2
    assert "no argument differs" not in w.report()
    (change,) = entry.compiles[1].changes
    assert change.kind == "context" and "transformation" in change.old + change.new
