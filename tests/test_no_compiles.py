"""sf.no_compiles(): inside the block, in that thread, nothing compiles; everything else runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import staticfield as sf


@sf.dataclass
class Model:
    w: jax.Array
    n: int = sf.static(default=2)

    @sf.jit_method
    def apply(self, x):
        return self.w * x * self.n


def test_plain_jax_jit_is_refused_with_the_function_and_first_compile():
    """A new plain jax.jit program inside the block raises RecompileError naming the function,
    the call site and "first compile"; the same call outside the block compiles and runs."""
    def scale(x):
        return x * 3.0

    f = jax.jit(scale)
    x = np.ones(3, np.float32)
    with sf.no_compiles():
        with pytest.raises(sf.RecompileError, match=r"scale would compile inside sf.no_compiles\(\)"
                           r" \(called at .*test_no_compiles.py:\d+\): first compile") as info:
            f(x)
    assert "f.precompile" in str(info.value) and "sf.warmup()" in str(info.value)
    assert np.allclose(f(x), 3.0)


def test_plain_jax_jit_compiled_before_the_block_is_explained_against_that_compile():
    """A plain jax.jit function compiled for f32[3] before the block (no watcher running
    then), called with f32[4] inside it: the refusal names the shape change, not "first
    compile"."""
    def widen(x):
        return x * 2.0

    f = jax.jit(widen)
    f(np.ones(3, np.float32))
    with sf.no_compiles():
        with pytest.raises(sf.RecompileError, match=r"widen would compile inside") as info:
            f(np.ones(4, np.float32))
    text = str(info.value)
    assert "first compile" not in text and "closest earlier compile" in text
    assert "\n  x: f32[3] → f32[4] (shape)" in text, text
    assert np.allclose(f(np.ones(4, np.float32)), 2.0)  # outside the block it compiles


def test_a_warmed_up_program_runs_inside_the_block(counted_jit):
    """A program compiled before the block runs inside it, with no new trace."""
    f = counted_jit(lambda x: x + 1)
    x = np.ones(3, np.float32)
    f(x)
    with sf.no_compiles():
        assert np.allclose(f(x), 2.0)
    assert f.traces == 1


def test_nothing_of_the_stance_stays_in_jax_after_the_last_block():
    """Outside every block, JAX's compile entry point and trace hook are JAX's own again."""
    from jax._src import compiler, pjit

    before = compiler.compile_or_get_cached, compiler.backend_compile_and_load, pjit._trace_for_jit
    with sf.no_compiles():
        assert compiler.compile_or_get_cached is not before[0]
    assert (compiler.compile_or_get_cached, compiler.backend_compile_and_load, pjit._trace_for_jit) == before


def test_sf_jit_method_is_refused_and_not_counted():
    """A new static variant of a jit_method is refused before compiling: compile_count does
    not move, and the same call outside the block compiles once."""
    m = Model(jnp.ones(3))
    x = jnp.ones(3)
    m.apply(x)
    before = Model.apply.compile_count
    with sf.no_compiles(), pytest.raises(sf.RecompileError) as info:
        sf.replace(m, n=5).apply(x)
    assert "Model.apply would compile" in str(info.value)
    assert "n: 2 → 5" in str(info.value) or "n: 2 -> 5" in str(info.value)
    assert Model.apply.compile_count == before
    assert np.allclose(sf.replace(m, n=5).apply(x), 5.0)
    assert Model.apply.compile_count == before + 1


def test_sf_jit_first_compile_and_hit():
    """sf.jit: a first compile in the block is refused with "first compile"; after one call
    outside, the same call inside runs, with no trace."""
    traces = 0

    def double(x, k):
        nonlocal traces
        traces += 1
        return x * k

    f = sf.jit(double, static_argnames="k")
    x = jnp.ones(2)
    with sf.no_compiles(), pytest.raises(sf.RecompileError, match="first compile"):
        f(x, k=2)
    assert traces == 0 and f.compile_count == 0
    f(x, k=2)
    with sf.no_compiles():
        assert np.allclose(f(x, k=2), 2.0)
    assert traces == 1 and f.compile_count == 1


def test_eager_operations_are_refused():
    """An eager operation that needs a new program is refused too (op by op, outside jit)."""
    x = jnp.arange(7.0)
    with sf.no_compiles(), pytest.raises(sf.RecompileError, match=r"the eager operation \w+ \(run "
                                         r"outside jit\) would compile inside sf.no_compiles\(\) "
                                         r"\(called at .*test_no_compiles.py:\d+\): no program of it"):
        jnp.cumsum(x * 17.5 - 3)


def test_abstract_evaluation_is_allowed(counted_jit):
    """eval_shape, make_jaxpr and .lower() compile nothing, so the block lets them run;
    .compile() after them is refused."""
    f = jax.jit(lambda x: x * 5.0)
    g = sf.jit(lambda x: x - 1.0)
    x = jax.ShapeDtypeStruct((6,), jnp.float32)
    with sf.no_compiles():
        assert jax.eval_shape(f, x).shape == (6,)
        assert jax.eval_shape(g, x).shape == (6,)
        jax.make_jaxpr(g)(x)
        lowered = f.lower(x)
        g.lower(x)
        with pytest.raises(sf.RecompileError):
            lowered.compile()


def test_blocks_nest_and_leaving_restores(counted_jit):
    """Nested blocks: leaving the inner one still refuses; leaving the outer one allows."""
    f = counted_jit(lambda x: x * 7)
    x = np.ones(5, np.float32)
    with sf.no_compiles():
        with sf.no_compiles():
            pass
        with pytest.raises(sf.RecompileError):
            f(x)
    assert np.allclose(f(x), 7.0)


def test_decorator_forms():
    """@sf.no_compiles and @sf.no_compiles() refuse inside the function only."""
    g = jax.jit(lambda x: x / 3.0)

    @sf.no_compiles
    def serve(x):
        return g(x)

    @sf.no_compiles()
    def serve2(x):
        return g(x)

    x = np.ones(9, np.float32)
    with pytest.raises(sf.RecompileError):
        serve(x)
    with pytest.raises(sf.RecompileError):
        serve2(x)
    g(x)
    assert np.allclose(serve(x), 1 / 3.0) and np.allclose(serve2(x), 1 / 3.0)


def test_other_threads_are_not_affected():
    """While one thread is inside a block, another thread compiles freely."""
    f = jax.jit(lambda x: x + 11)
    inside, done = threading.Event(), threading.Event()
    out: list = []

    def other():
        inside.wait(10)
        out.append(f(np.ones(4, np.float32)))
        done.set()

    t = threading.Thread(target=other)
    t.start()
    with sf.no_compiles():
        inside.set()
        assert done.wait(60)
        with pytest.raises(sf.RecompileError):
            f(np.ones(8, np.float32))
    t.join()
    assert np.allclose(out[0], 12.0)


def test_a_thread_started_inside_a_block_is_free():
    """The stance belongs to the thread that entered the block, not to threads it starts."""
    f = sf.jit(lambda x: x * 13)
    out: list = []
    with sf.no_compiles():
        t = threading.Thread(target=lambda: out.append(f(jnp.ones(2))))
        t.start()
        t.join()
    assert np.allclose(out[0], 13.0)


def test_equinox_filter_jit_is_refused():
    """equinox's filter_jit compiles through jax.jit: refused, named by the user's function."""
    eqx = pytest.importorskip("equinox")

    @eqx.filter_jit
    def shift(x):
        return x - 4.0

    x = jnp.ones(3)
    with sf.no_compiles(), pytest.raises(sf.RecompileError, match="shift would compile"):
        shift(x)
    assert np.allclose(shift(x), -3.0)


def test_decorating_with_a_value_is_a_type_error():
    """sf.no_compiles(3) is a TypeError saying how to use it."""
    with pytest.raises(TypeError, match=r"sf.no_compiles takes no arguments.*with sf.no_compiles\(\)"):
        sf.no_compiles(3)


def test_program_store_loads_are_allowed_and_misses_refused(tmp_path):
    """With a program store, a program the store holds loads inside the block (its checking
    trace included); a program it lacks is refused, and not counted as a compile."""
    def cube(x):
        return x * x * x

    sf.set_program_store(str(tmp_path / "store"))
    try:
        again = sf.jit(cube)
        again(jnp.ones(3))
        again.clear_cache()  # nothing in memory: the program is in the store only
        two, five = jnp.asarray(np.full(3, 2.0, np.float32)), jnp.ones(5)
        with sf.no_compiles():
            assert np.allclose(again(two), 8.0)
            with pytest.raises(sf.RecompileError, match="cube would compile"):
                again(five)
        assert again.load_count == 1 and again.compile_count == 1
        assert np.allclose(again(five), 1.0) and again.compile_count == 2
    finally:
        sf.set_program_store(None)


PERSISTENT = """
import json, sys
import jax, numpy as np
jax.config.update("jax_compilation_cache_dir", sys.argv[1])
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
import staticfield as sf


def cached(x):
    return x * 5.0 + 1.0


out = {"first": np.asarray(jax.jit(cached)(np.ones(5, np.float32))).tolist()}
jax.clear_caches()  # JAX's in-memory caches: only the persistent cache holds the program now
with sf.no_compiles():
    hit = jax.jit(cached)(np.ones(5, np.float32))
    try:
        jax.jit(cached)(np.ones(6, np.float32))
    except sf.RecompileError as exc:
        out["miss"] = str(exc)
out["hit"] = np.asarray(hit).tolist()
print(json.dumps(out))
"""


def test_a_hit_in_jax_persistent_cache_runs_inside_the_block(tmp_path):
    """With JAX's persistent compilation cache on (in a fresh process: JAX decides once per
    process whether it uses one), a program that JAX loads from it compiles nothing, so it
    runs inside the block; a shape the cache lacks is still refused before compiling."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    done = subprocess.run([sys.executable, "-c", PERSISTENT, str(tmp_path / "xla")], capture_output=True,
                          text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["first"] == out["hit"] == [6.0] * 5
    assert "cached would compile inside sf.no_compiles()" in out.get("miss", ""), out
