"""Every explanation names the true cause, in the user's words (sf.watch and sf.Recompile)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

import staticfield as sf


def jitted(w: sf.watch) -> list:
    return [f for f in w.functions if not f.eager]


def changes(compile_) -> list[tuple[str, str, str, str]]:
    return [(c.path, c.kind, c.old, c.new) for c in compile_.changes]


def test_an_int_to_float_static_gets_the_precise_hint_in_the_watch():
    """self.n: 1 → 1.0 in sf.watch has the hint sf.Recompile gives (convert before the call)."""

    class Q(sf.Struct):
        w: jax.Array
        n: sf.Static[object] = 1

        @sf.jit_method(warn_compiles=None)
        def f(self, x):
            return self.w * x * self.n

    with sf.watch() as w:
        Q(jnp.ones(2), 1).f(1.0)
        Q(jnp.ones(2), 1.0).f(1.0)
    (change,) = jitted(w)[0].compiles[1].changes
    assert change.hint == Q.f.recompiles[-1].changes[0].hint
    assert "equal values of different types (int → float)" in change.hint
    assert "float(n)" in w.report()


def test_a_weakly_typed_array_is_not_called_a_python_scalar():
    """A weak array (jnp.asarray(2.0)) reads `weak f32[]`; a Python float reads as one."""

    def scale(x, y):
        return x * y

    f, g = jax.jit(scale), jax.jit(lambda y: y * 2)
    with sf.watch() as w:
        f(jnp.ones(2), jnp.float32(2.0))
        f(jnp.ones(2), jnp.asarray(2.0))
        g(2.0)
        g(jnp.float32(2.0))
    first, second = jitted(w)
    assert changes(first.compiles[1]) == [("y", "weak_type", "f32[]", "weak f32[]")]
    assert "Python" not in first.compiles[1].changes[0].new
    assert changes(second.compiles[1]) == [("y", "weak_type", "weak f32[] (a Python float)", "f32[]")]


def test_jax_enable_x64_is_named_not_the_arguments_dtype():
    """A Python float passed before and after jax_enable_x64: the setting is the change (no
    dtype change, no cast as the fix)."""

    def scale(x, y):
        return x * y

    f = jax.jit(scale)
    with sf.watch() as w:
        f(jnp.ones(2), 2.0)
        with jax.enable_x64(True):
            f(jnp.ones(2), 2.0)
    (entry,) = jitted(w)
    assert changes(entry.compiles[1]) == [("jax_enable_x64", "context", "False", "True")]
    assert "astype" not in w.report()


# ----------------------------------------------------------------- on 8 virtual devices
EIGHT = """
import os
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
import json
import jax, jax.numpy as jnp, numpy as np
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec as P
import staticfield as sf
out = {}
"""


def run8(body: str) -> dict:
    """``body`` in a fresh process with 8 virtual CPU devices; the dict it leaves in ``out``."""
    import json
    import os
    import subprocess
    import sys
    import textwrap

    code = EIGHT + textwrap.dedent(body) + "\nprint(json.dumps(out))\n"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env={k: v for k, v in os.environ.items() if k != "XLA_FLAGS"})
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_a_mesh_change_with_the_same_specs_is_named_with_its_mesh():
    """The same P('i') on a mesh of another shape or device order is a sharding change that
    shows both meshes, never "no argument differs"."""
    out = run8("""
        f = jax.jit(lambda x: x * 2)
        forward = jax.make_mesh((8,), ("i",))
        backward = Mesh(np.array(jax.devices()[::-1]), ("i",))
        grid = jax.make_mesh((4, 2), ("i", "j"))
        with sf.watch() as w:
            for mesh in (forward, backward, grid):
                f(jax.device_put(jnp.ones(8), NamedSharding(mesh, P("i"))))
        (entry,) = [e for e in w.functions if not e.eager]
        out["changes"] = [[(c.path, c.kind, c.old, c.new) for c in k.changes] for k in entry.compiles[1:]]
        out["report"] = w.report()
    """)
    second, third = out["changes"]
    assert [c[:2] for c in second] == [["x", "sharding"]] and [c[:2] for c in third] == [["x", "sharding"]]
    assert "mesh(i=8)" in second[0][2] and "devices 7..0" in second[0][3]
    assert "mesh(i=4,j=2)" in third[0][3]
    assert "no argument differs" not in out["report"]


def test_many_identical_sharding_changes_read_as_one_line_with_a_count():
    """75 arguments moved to the same sharding: one line naming the first and last and 75."""
    out = run8("""
        g = jax.jit(lambda *xs: sum(xs))
        mesh = jax.make_mesh((8,), ("i",))
        with sf.watch() as w:
            g(*[jnp.ones(8)] * 75)
            g(*[jax.device_put(jnp.ones(8), NamedSharding(mesh, P("i")))] * 75)
        out["report"] = w.report()
    """)
    lines = [line for line in out["report"].splitlines() if "(sharding)" in line]
    assert len(lines) == 1, out["report"]
    assert "xs[0] … xs[74] (75 paths)" in lines[0]


def test_a_trace_that_raised_is_no_phantom_compile():
    """A jitted function whose trace raises inside JAX (mismatched shapes) is one function with
    0 compiles and 1 trace that raised, not a second function with "1 compile"."""

    def shape_bad(x):
        return jnp.ones(2) + jnp.ones(3)

    with sf.watch() as w:
        with pytest.raises(TypeError):
            jax.jit(shape_bad)(jnp.ones(2))
    assert [(f.name.rpartition(".")[2], f.count, f.failed_traces) for f in jitted(w)] == [("shape_bad", 0, 1)]
    assert "1 compile" not in w.report()


def test_recompile_names_jax_enable_x64_not_the_arguments_dtype():
    """sf.Recompile: a Python float passed before and after jax_enable_x64 is the setting,
    not `y: weak f32[] → weak f64[]`."""
    f = sf.jit(lambda x, y: x * y)
    f(jnp.ones(2, jnp.float32), 2.0)
    with jax.enable_x64(True):
        f(jnp.ones(2, jnp.float32), 2.0)
    (event,) = f.recompiles
    assert [(c.path, c.kind, c.old, c.new) for c in event.changes] == [
        ("jax_enable_x64", "context", "False", "True")]
    assert "astype" not in str(event) and "(dtype)" not in str(event)


# ------------------------------------------------- issue 39, case 3: static="auto" in the watch
def _said(changes) -> list[tuple[str, str, str, str]]:
    return [(c.path, c.kind, c.old, c.new) for c in changes]


def test_static_auto_watch_report_agrees_with_recompile_and_the_warning():
    """sf.jit(static="auto"): the watch says `max_steps: 256 → 100 (static_arg)` (the default
    bound, as a call passing 256 keys) as the Recompile and the warning do (no AnyLeaves node
    or metadata); a new lambda each call is
    `fn: an earlier function object → a new function object, same code`, and no hint tells a
    function to become traced."""
    import warnings

    def solve(fn, y0, args=None, *, max_steps=256):
        return fn(y0) * max_steps

    f = sf.jit(solve, static="auto", warn_compiles=2)
    x = jnp.ones(3)
    with sf.watch() as w, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        f(jnp.sin, x)
        f(jnp.sin, x, max_steps=100)
        for _ in range(2):
            f(lambda y: y + 1, x, max_steps=100)
    (entry,) = jitted(w)
    watched = [_said(c.changes) for c in entry.compiles[1:]]
    assert watched == [_said(r.changes) for r in f.recompiles], w.report()
    assert watched[0] == [("max_steps", "static_arg", "256", "100")]
    assert watched[2] == [("fn", "static_arg", "an earlier function object", "a new function object, same code")]
    text = w.report()
    assert "AnyLeaves" not in text and "leaves='any'" not in text, text
    assert "dynamic" not in entry.compiles[3].changes[0].hint and "define it once" in entry.compiles[3].changes[0].hint
    assert str(f.recompiles[0]) in str(caught[0].message)


def test_a_leaves_any_field_in_the_watch_is_a_static_change_at_its_path():
    """A function in an sf.field(leaves="any") field (a non-array leaf): the watch names it
    `m.act: relu → gelu (static)` as sf.Recompile does."""

    def relu(x):
        return jnp.maximum(x, 0)

    def gelu(x):
        return x * 0.5

    class M(sf.Struct):
        w: jax.Array
        act: object = sf.field(leaves="any")

    f = sf.jit(lambda m: m.act(m.w), warn_compiles=None)
    with sf.watch() as w:
        f(M(jnp.ones(2), relu))
        f(M(jnp.ones(2), gelu))
    (entry,) = jitted(w)
    (event,) = f.recompiles
    assert _said(event.changes) == [("m.act", "static", "relu", "gelu")]
    assert _said(entry.compiles[1].changes) == _said(event.changes), w.report()
