"""The program store never changes a result: each case that once loaded a stale or
wrong program, or crashed, run in fresh processes against the result without a store.

Every scenario runs its script in new Python processes sharing one store; the first
writes, later ones load. The oracle is the same script without a store.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import textwrap
import threading
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import staticfield as sf
from staticfield import _store


def _run(tmp_path, script, env=None, store=True, trust=None, devices=None, check=True):
    """Run ``script`` in a fresh process (the user's files in tmp_path); its last JSON line."""
    full = dict(os.environ, PYTHONDONTWRITEBYTECODE="1",
                PYTHONPATH=os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    for name in ("XLA_FLAGS", "STATICFIELD_PROGRAM_STORE", "STATICFIELD_PROGRAM_STORE_TRUST",
                 "STATICFIELD_CHECK_STORE"):
        full.pop(name, None)
    if store:
        full["STATICFIELD_PROGRAM_STORE"] = str(tmp_path / "store")
    if trust:
        full["STATICFIELD_PROGRAM_STORE_TRUST"] = trust
    if check and trust == "source":
        full["STATICFIELD_CHECK_STORE"] = "1"
    if devices:
        full["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
    full.update(env or {})
    path = tmp_path / "script.py"
    path.write_text(textwrap.dedent(script))
    proc = subprocess.run([sys.executable, str(path)], env=full, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stderr[-4000:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _write(tmp_path, **files):
    for name, text in files.items():
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(text))


REPORT = '''
import json
def report(out, *fns):
    print(json.dumps({"out": out, "compiles": sum(f.compile_count for f in fns),
                      "loads": sum(f.load_count for f in fns)}))
'''


# ----- what a trace read, wherever it came from --------------------------------------------
@pytest.mark.parametrize("trust", ["trace", "source"])
def test_a_constant_imported_from_another_module_and_edited(tmp_path, trust):
    _write(tmp_path, report=REPORT, consts="SCALE = 2.0\n", user='''
        import jax.numpy as jnp, numpy as np
        import staticfield as sf
        from consts import SCALE
        from report import report

        @sf.jit
        def f(x):
            return x * SCALE

        report(np.asarray(f(jnp.ones(2))).tolist(), f)
    ''')
    script = "import user\n"
    assert _run(tmp_path, script, trust=trust)["out"] == [2.0, 2.0]
    assert _run(tmp_path, script, trust=trust)["loads"] == 1
    (tmp_path / "consts.py").write_text("SCALE = 3.0\n")
    again = _run(tmp_path, script, trust=trust)
    assert (again["out"], again["compiles"]) == ([3.0, 3.0], 1)


def test_a_constant_read_from_the_environment_at_import(tmp_path):
    _write(tmp_path, report=REPORT, user='''
        import os
        import jax.numpy as jnp, numpy as np
        import staticfield as sf
        from report import report
        SCALE = float(os.environ.get("SCALE", "2"))

        @sf.jit
        def f(x):
            return x * SCALE

        report(np.asarray(f(jnp.ones(2))).tolist(), f)
    ''')
    assert _run(tmp_path, "import user\n")["out"] == [2.0, 2.0]
    again = _run(tmp_path, "import user\n", env={"SCALE": "5"})
    assert (again["out"], again["compiles"], again["loads"]) == ([5.0, 5.0], 1, 0)
    back = _run(tmp_path, "import user\n")
    assert (back["out"], back["compiles"], back["loads"]) == ([2.0, 2.0], 0, 1)


def test_a_helper_whose_trace_jax_cached_before(tmp_path):
    """A jitted building block warmed up first: its trace is JAX's cached one, so no code
    of it runs while the program is traced; the program still holds what it computes."""
    _write(tmp_path, report=REPORT, helper='''
        import jax
        @jax.jit
        def block(x):
            return x + 1.0
    ''', user='''
        import jax.numpy as jnp, numpy as np
        import staticfield as sf
        from helper import block
        from report import report

        block(jnp.ones(2))  # warmed up: JAX caches its trace

        @sf.jit
        def f(x):
            return block(x) * 2.0

        report(np.asarray(f(jnp.ones(2))).tolist(), f)
    ''')
    assert _run(tmp_path, "import user\n")["out"] == [4.0, 4.0]
    (tmp_path / "helper.py").write_text("import jax\n@jax.jit\ndef block(x):\n    return x + 10.0\n")
    again = _run(tmp_path, "import user\n")
    assert (again["out"], again["compiles"]) == ([22.0, 22.0], 1)


def test_a_bound_method_of_a_plain_object_is_stored_by_its_trace(tmp_path):
    """``sf.jit(env.step)`` of a plain object: the trace holds the object's values."""
    _write(tmp_path, report=REPORT, user='''
        import os
        import jax.numpy as jnp, numpy as np
        import staticfield as sf
        from report import report

        class Env:
            def __init__(self, g):
                self.g = g
            def step(self, x):
                return x * self.g

        step = sf.jit(Env(float(os.environ.get("G", "9.8"))).step)
        report(np.asarray(step(jnp.ones(2))).tolist(), step)
    ''')
    assert _run(tmp_path, "import user\n")["out"] == pytest.approx([9.8, 9.8])
    again = _run(tmp_path, "import user\n")
    assert (again["compiles"], again["loads"]) == (0, 1)
    moon = _run(tmp_path, "import user\n", env={"G": "1.6"})
    assert (moon["out"], moon["compiles"]) == (pytest.approx([1.6, 1.6]), 1)


def test_static_auto_programs_load_in_a_fresh_process(tmp_path):
    """sf.jit(static="auto") keys Python values in its argument tree; a trace-keyed entry
    does not depend on the tree, so the program loads, and other values compile."""
    _write(tmp_path, report=REPORT, user='''
        import os
        import jax.numpy as jnp, numpy as np
        import staticfield as sf
        from report import report

        @sf.jit(static="auto")
        def f(x, flag, name):
            return x * (2 if flag else 3) + len(name)

        report(np.asarray(f(jnp.ones(2), os.environ.get("FLAG") != "0", "ab")).tolist(), f)
    ''')
    assert _run(tmp_path, "import user\n")["out"] == [4.0, 4.0]
    again = _run(tmp_path, "import user\n")
    assert (again["out"], again["compiles"], again["loads"]) == ([4.0, 4.0], 0, 1)
    other = _run(tmp_path, "import user\n", env={"FLAG": "0"})
    assert (other["out"], other["compiles"], other["loads"]) == ([5.0, 5.0], 1, 0)


def test_static_auto_outputs_holding_objects_are_found_by_trace_only(tmp_path):
    """A static="auto" program whose outputs hold a non-array object comes back with the
    very object the function returned: trust="source" traces for it (then loads the
    program), never loads it with no trace; array-only outputs load with none."""
    _write(tmp_path, report=REPORT, user='''
        import json
        import jax.numpy as jnp, numpy as np
        import staticfield as sf

        TRACES = {"objects": 0, "arrays": 0}

        class Stats:
            pass

        STATS = Stats()

        @sf.jit(static="auto")
        def objects(x, n):
            TRACES["objects"] += 1
            return x * n, {"stats": STATS, "n": n}

        @sf.jit(static="auto")
        def arrays(x, n):
            TRACES["arrays"] += 1
            return x * n

        out, extra = objects(jnp.ones(2), 3)
        assert extra["stats"] is STATS and extra["n"] == 3
        arrays(jnp.ones(2), 3)
        print(json.dumps({"traces": TRACES, "loads": objects.load_count + arrays.load_count,
                          "out": np.asarray(out).tolist()}))
    ''')
    _run(tmp_path, "import user\n", trust="source", check=False)
    again = _run(tmp_path, "import user\n", trust="source", check=False)
    assert again["traces"] == {"objects": 1, "arrays": 0}
    assert (again["loads"], again["out"]) == (2, [3.0, 3.0])


def test_a_program_that_calls_back_into_python_says_once_that_it_is_not_kept(tmp_path):
    _write(tmp_path, report=REPORT, user='''
        import warnings
        import jax, jax.numpy as jnp, numpy as np
        import staticfield as sf
        from report import report

        @sf.jit
        def f(x):
            jax.debug.callback(lambda v: None, x)
            return x + 1

        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            out = [np.asarray(f(jnp.ones(n))).tolist() for n in (2, 3)]
        said = [str(w.message) for w in caught if issubclass(w.category, sf.StaticFieldWarning)]
        assert len(said) == 1 and "user.f" in said[0] and "calls back into Python" in said[0], said
        report(out, f)
    ''')
    first = _run(tmp_path, "import user\n")
    assert (first["out"], first["compiles"]) == ([[2.0, 2.0], [2.0, 2.0, 2.0]], 2)
    assert _run(tmp_path, "import user\n")["compiles"] == 2


# ----- inside one process: a faithful jax.jit ---------------------------------------------
@pytest.fixture
def store(tmp_path, monkeypatch):
    saved = dict(_store._state)
    sf.set_program_store(tmp_path / "store")
    yield tmp_path / "store"
    _store._state.update(saved)


def test_enable_x64_inside_one_process(store):
    @sf.jit
    def f(x):
        return jnp.asarray(x) * 2

    assert f(1.5).dtype == jnp.float32
    jax.config.update("jax_enable_x64", True)
    try:
        assert f(1.5).dtype == jax.jit(lambda x: jnp.asarray(x) * 2)(1.5).dtype == jnp.float64
    finally:
        jax.config.update("jax_enable_x64", False)
    assert f(1.5).dtype == jnp.float32


def test_numpy_rank_promotion_and_default_device_inside_one_process(store):
    @sf.jit
    def add(x, y):
        return x + y

    x, y = jnp.ones((2, 3)), jnp.ones(3)
    add(x, y)
    with jax.numpy_rank_promotion("raise"):
        with pytest.raises(ValueError, match="jax_numpy_rank_promotion='raise'"):
            add(x, y)
    device = jax.devices()[-1]
    with jax.default_device(device):
        assert add(x, y).devices() == jax.jit(lambda a, b: a + b)(x, y).devices()


def test_disable_jit_runs_the_function_eagerly(store):
    seen = []

    @sf.jit
    def f(x):
        seen.append(type(x).__name__)
        return x * 2

    f(jnp.ones(2))
    with jax.disable_jit():
        np.testing.assert_array_equal(f(jnp.ones(2)), np.full(2, 2.0))
    assert "ArrayImpl" in seen[-1]


def test_two_wrappers_with_other_jit_options_never_share_a_program(store):
    def double(x):
        return x * 2.0

    donating = sf.jit(double, donate_argnums=0)
    plain = sf.jit(double)
    donating(jnp.ones(3))
    x = jnp.ones(3)
    np.testing.assert_array_equal(plain(x), np.full(3, 2.0))
    assert not x.is_deleted()
    np.testing.assert_array_equal(x, np.ones(3))


def test_cache_size_and_clear_cache_work_with_a_store(store):
    @sf.jit
    def f(x):
        return x + 1

    f(jnp.ones(2))
    f(jnp.ones(3))
    assert f.cache_size() == 2
    f.clear_cache()
    assert f.cache_size() == 0
    f(jnp.ones(2))
    assert (f.compile_count, f.load_count, f.cache_size()) == (2, 1, 1)


def test_a_loaded_programs_outputs_are_arrays_jax_knows(store):
    """The outputs of a program loaded from the store have the avals a compiled program's
    have: a function called on them inside another trace is not traced again (JAX 0.12
    pickled its AutoLayout singleton as a new object, so every loaded output's aval was new
    to JAX's trace cache, and the RL rollout of a second process compiled its step again)."""
    traces = 0

    @sf.jit
    def inner(x):
        nonlocal traces
        traces += 1
        return x * 2

    @sf.jit
    def outer(x):
        return jax.lax.scan(lambda c, _: (inner(c), None), x, None, length=3)[0]

    inner(jnp.ones(3))
    inner.clear_cache()  # JAX's trace caches too: the next call loads, after a trace
    y = inner(jnp.ones(3))
    assert (inner.load_count, traces) == (1, 2)
    np.testing.assert_array_equal(outer(y), np.full(3, 16.0))
    assert (traces, inner.compile_count) == (2, 1)


@pytest.mark.parametrize("policy", ["dots_saveable", "names"])
def test_checkpoint_with_a_policy_is_stored_and_told_apart(store, policy):
    """jax.checkpoint with one of JAX's policies (a function of JAX's, or a closure over
    names) is kept: JAX's version covers its code, its closure is written by value; an
    other policy is another program (it was refused: "a Python function in the program")."""
    def loss(x, chosen):
        def layer(y):
            return jnp.sin(checkpoint_name(y @ y, "mm")).sum()
        return jax.grad(jax.checkpoint(layer, policy=chosen))(x)

    from jax.ad_checkpoint import checkpoint_name

    chosen = (jax.checkpoint_policies.dots_saveable if policy == "dots_saveable"
              else jax.checkpoint_policies.save_only_these_names("mm"))
    jitted = sf.jit(lambda x: loss(x, chosen))
    x = jnp.ones((3, 3))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        first = jitted(x)
        jitted.clear_cache()
        np.testing.assert_array_equal(jitted(x), first)
    assert (jitted.compile_count, jitted.load_count) == (1, 1)
    other = sf.jit(lambda x: loss(x, jax.checkpoint_policies.save_only_these_names("other")))
    np.testing.assert_array_equal(other(x), first)
    if policy == "names":  # the same program but for the closure's names: not the stored one
        assert (other.compile_count, other.load_count) == (1, 0)


def test_a_thread_calling_a_jitted_helper_while_another_traces_does_not_deadlock(store):
    tracing, done = threading.Event(), threading.Event()

    @sf.jit
    def slow(x):
        tracing.set()
        assert done.wait(20), "the other thread did not finish while this one traced"
        return x + 1

    @sf.jit
    def quick(x):
        return x * 2

    t = threading.Thread(target=lambda: slow(jnp.ones(2)))
    t.start()
    assert tracing.wait(20)
    np.testing.assert_array_equal(quick(jnp.ones(2)), np.full(2, 2.0))
    done.set()
    t.join(20)
    assert not t.is_alive()


def test_precompile_with_shape_dtype_structs_is_found_by_a_real_call(tmp_path):
    _write(tmp_path, report=REPORT, user='''
        import sys
        import jax, jax.numpy as jnp, numpy as np
        import staticfield as sf
        from report import report

        @sf.jit(static_argnums=1)
        def power(x, k):
            return x ** k

        if sys.argv[-1] == "precompile":
            power.precompile(jax.ShapeDtypeStruct((3,), jnp.float32), 3)
            report(None, power)
        else:
            report(np.asarray(power(jnp.full(3, 2.0, jnp.float32), 3)).tolist(), power)
    ''')
    assert _run(tmp_path, "import sys, user\n".replace("import sys, user", "import sys; sys.argv.append('precompile'); import user"))["compiles"] == 1
    call = _run(tmp_path, "import user\n")
    assert (call["out"], call["compiles"], call["loads"]) == ([8.0, 8.0, 8.0], 0, 1)


def test_a_frozenset_static_loads_whatever_the_hash_seed(tmp_path):
    _write(tmp_path, report=REPORT, user='''
        import jax.numpy as jnp, numpy as np
        import staticfield as sf
        from report import report

        TRACES = []

        @sf.jit(static_argnums=1)
        def pick(x, names):
            TRACES.append(1)
            return x * len(names)

        out = pick(jnp.ones(2), frozenset({"alpha", "beta", "gamma", "delta", "epsilon", "zeta"}))
        report([np.asarray(out).tolist(), len(TRACES)], pick)
    ''')
    _run(tmp_path, "import user\n", env={"PYTHONHASHSEED": "1"}, trust="source")
    same = _run(tmp_path, "import user\n", env={"PYTHONHASHSEED": "1"}, trust="source", check=False)
    assert (same["out"], same["compiles"], same["loads"]) == ([[6.0, 6.0], 0], 0, 1)  # no trace
    for seed in ("2", "3"):
        # Another seed iterates the set in another order: another static value for the
        # source key (a trace may depend on the order), so it traces, and the trace's
        # digest finds the stored program.
        again = _run(tmp_path, "import user\n", env={"PYTHONHASHSEED": seed}, trust="source", check=False)
        assert (again["out"], again["compiles"], again["loads"]) == ([[6.0, 6.0], 1], 0, 1)


def test_a_set_static_of_another_hash_seed_order_never_loads_the_other_order(tmp_path):
    """A method whose result follows the order its set static iterates in: each seed's run
    returns what that seed's run without a store returns, never the storing seed's order."""
    _write(tmp_path, report=REPORT, user='''
        import jax.numpy as jnp, numpy as np
        import staticfield as sf
        from report import report

        @sf.dataclass
        class Names:
            names: frozenset = sf.static()

            @sf.jit_method
            def order(self, x):
                return x * jnp.array([int(n[1:]) for n in self.names])

        names = Names(names=frozenset(f"n{i}" for i in range(8)))
        report(np.asarray(names.order(jnp.ones(()))).tolist(), Names.order)
    ''')
    _run(tmp_path, "import user\n", env={"PYTHONHASHSEED": "1"}, trust="source")
    for seed in ("2", "3", "4"):
        plain = _run(tmp_path, "import user\n", env={"PYTHONHASHSEED": seed}, store=False)
        again = _run(tmp_path, "import user\n", env={"PYTHONHASHSEED": seed}, trust="source", check=False)
        assert again["out"] == plain["out"], seed


# ----- devices ------------------------------------------------------------------------------
def test_a_one_device_program_loads_on_a_machine_with_eight(tmp_path):
    _write(tmp_path, report=REPORT, user='''
        import jax.numpy as jnp, numpy as np
        import staticfield as sf
        from report import report

        @sf.jit
        def f(x):
            return x * 2 + 1

        report([np.asarray(f(jnp.ones(2))).tolist() for _ in range(3)], f)
    ''')
    for _ in range(2):
        out = _run(tmp_path, "import user\n", devices=8)
        assert out["out"] == [[3.0, 3.0]] * 3
    assert out["loads"] == 1


def test_a_mesh_in_another_device_order_loads_and_runs_on_its_devices(tmp_path):
    _write(tmp_path, report=REPORT, user='''
        import jax, jax.numpy as jnp, numpy as np
        from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
        import staticfield as sf
        from report import report

        devices = np.array(jax.devices()[::-1]).reshape(4, 2)
        mesh = Mesh(devices, ("x", "y"))

        @sf.jit
        def f(x):
            return jnp.sin(x) @ x.T

        x = jax.device_put(jnp.arange(32.0).reshape(8, 4), NamedSharding(mesh, P("x", "y")))
        out = f(x)
        report({"value": np.asarray(out).tolist(), "ids": sorted(d.id for d in out.devices())}, f)
    ''')
    first = _run(tmp_path, "import user\n", devices=8)
    again = _run(tmp_path, "import user\n", devices=8)
    assert again["out"] == first["out"] == _run(tmp_path, "import user\n", devices=8, store=False)["out"]
    assert (again["compiles"], again["loads"]) == (0, 1)


def test_a_lapack_program_loads_in_a_fresh_process(tmp_path):
    _write(tmp_path, report=REPORT, user='''
        import jax.numpy as jnp, numpy as np
        import staticfield as sf
        from report import report

        @sf.jit
        def f(a):
            return jnp.linalg.inv(a) @ jnp.linalg.solve(a, a)

        a = jnp.array([[2.0, 1.0], [1.0, 3.0]])
        report(np.asarray(f(a)).round(5).tolist(), f)
    ''')
    first = _run(tmp_path, "import user\n")
    again = _run(tmp_path, "import user\n")
    assert again["out"] == first["out"] and again["loads"] == 1


# ----- trust="source" ----------------------------------------------------------------------
def test_trust_source_loads_without_tracing(tmp_path):
    _write(tmp_path, report=REPORT, user='''
        import jax.numpy as jnp, numpy as np
        import staticfield as sf
        from report import report
        TRACES = []

        @sf.jit
        def f(x):
            TRACES.append(1)
            return x + 1

        out = np.asarray(f(jnp.ones(2))).tolist()
        report({"value": out, "traces": len(TRACES)}, f)
    ''')
    _run(tmp_path, "import user\n", trust="source")
    again = _run(tmp_path, "import user\n", trust="source", check=False)
    assert again == {"out": {"value": [2.0, 2.0], "traces": 0}, "compiles": 0, "loads": 1}


def test_the_checking_mode_names_what_trust_source_missed(tmp_path):
    _write(tmp_path, report=REPORT, user='''
        import os
        import jax.numpy as jnp, numpy as np
        import staticfield as sf
        from report import report
        SCALE = float(os.environ.get("SCALE", "2"))

        @sf.jit
        def f(x):
            y = x + 1.0
            return y * SCALE

        try:
            report(np.asarray(f(jnp.ones(2))).tolist(), f)
        except sf.StoreCheckError as exc:
            report("StoreCheckError: " + str(exc), f)
    ''')
    _run(tmp_path, "import user\n", trust="source")
    said = _run(tmp_path, "import user\n", trust="source", env={"SCALE": "7"})["out"]
    assert said.startswith("StoreCheckError: user.f: the program store (trust=\"source\")")
    assert "user.py:11" in said and "mul" in said, said  # the first differing equation's line


# ----- the directory and its entries ------------------------------------------------------------
def test_a_directory_owned_by_another_user_or_group_writable_is_refused(tmp_path):
    group = tmp_path / "group"
    group.mkdir()
    group.chmod(0o770)
    with pytest.raises(PermissionError, match=f"{group} is writable by its group.*chmod go-w {group}"):
        sf.set_program_store(group)
    if os.geteuid() == 0:
        other = tmp_path / "other"
        other.mkdir(mode=0o700)
        os.chown(other, 12345, 12345)
        with pytest.raises(PermissionError, match=f"{other} is owned by another user"):
            sf.set_program_store(other)


def test_an_entry_others_may_write_is_never_loaded(tmp_path):
    _write(tmp_path, report=REPORT, user='''
        import jax.numpy as jnp, numpy as np
        import staticfield as sf
        from report import report

        @sf.jit
        def f(x):
            return x - 1

        report(np.asarray(f(jnp.ones(2))).tolist(), f)
    ''')
    _run(tmp_path, "import user\n")
    (entry,) = (tmp_path / "store").glob("*.sfprog")
    entry.chmod(0o620)
    script = ("import warnings; warnings.simplefilter('error', UserWarning)\n"
              "try:\n    import user\nexcept UserWarning as w:\n    import json; print(json.dumps(str(w)))\n")
    said = _run(tmp_path, script)
    assert "writable by its group, so it is not trusted" in said and str(entry) in said


def test_a_path_that_cannot_be_used(tmp_path, monkeypatch):
    afile = tmp_path / "afile"
    afile.write_text("")
    with pytest.raises(NotADirectoryError, match=f"sf.set_program_store: {afile} is not a directory"):
        sf.set_program_store(afile)
    monkeypatch.setitem(_store._state, "set", _store._UNSET)
    monkeypatch.setitem(_store._state, "env", None)
    monkeypatch.setenv("STATICFIELD_PROGRAM_STORE", str(afile / "below"))

    @sf.jit
    def f(x):
        return x + 1

    with pytest.warns(sf.StaticFieldWarning, match="STATICFIELD_PROGRAM_STORE=.*cannot be used, so the "
                                                   "program store is off"):
        assert float(f(1.0)) == 2.0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert float(f(2.0)) == 3.0  # one warning, not one per call


def test_an_unknown_trust_is_a_value_error(tmp_path):
    with pytest.raises(ValueError, match="trust must be \"trace\".*or \"source\".*got 'fast'"):
        sf.set_program_store(tmp_path / "s", trust="fast")
    assert stat.S_ISDIR  # the module is used above; nothing was made
    assert not (tmp_path / "s").exists()
