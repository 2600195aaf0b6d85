"""sf.set_program_store: programs kept across processes, never stale, never wrong.

A "fresh process" is simulated in-process by executing the user's module again from
its file under the same name (new function objects, new caches, the same identity);
what needs a real process (the environment variable, device counts, two writers)
runs in subprocesses.
"""

from __future__ import annotations

import importlib.util
import json
import os
import pickle
import stat
import subprocess
import sys
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import staticfield as sf
from staticfield import _store
from staticfield._store import _entries
from _launch import launch

USER = '''
import jax
import jax.numpy as jnp
import staticfield as sf
import store_helper
import store_other  # loaded, never run while tracing


@sf.dataclass
class Model:
    w: jax.Array
    depth: int = sf.static(default=2)

    @sf.jit_method
    def apply(self, x):
        for _ in range(self.depth):
            x = jnp.tanh(x * self.w) + 1.0
        return store_helper.scale(x)


@sf.jit(static_argnums=1)
def power(x, k):
    return x ** k


def scaled_by(k):
    @sf.jit
    def scaled(x):
        return x * k
    return scaled


def times(x, k):
    return x * k


@sf.jit(donate_argnums=0)
def double(x):
    return x * 2.0


@sf.dataclass
class Cfg:
    w: jax.Array
    depth: int = sf.static(default=2)
    name: str = sf.static(default="a")  # never read by run

    @sf.jit_method(deps="read")
    def run(self, x):
        return x * self.depth + self.w

    @sf.jit_method(deps="read", static_argnums=2)
    def scaled(self, x, k):
        return x * self.depth * k


@sf.dataclass
class Branchy:
    w: jax.Array
    s: float = sf.static(default=1.0)

    @sf.jit_method(deps="read")
    def f(self, x):
        if x.shape[0] > 2:  # reads s only for long inputs
            return x * self.s + self.w
        return x + self.w
'''

HELPER = '''
def scale(x):
    return x * 2.0
'''


@pytest.fixture
def store(tmp_path, monkeypatch):
    """A program store in tmp_path, and the user's modules there (loaded by ``fresh``)."""
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "store_user.py").write_text(USER)
    (tmp_path / "store_helper.py").write_text(HELPER)
    (tmp_path / "store_other.py").write_text("def unused():\n    return 1\n")
    saved = dict(_store._state)
    sf.set_program_store(tmp_path / "store")
    yield tmp_path
    _store._state.update(saved)
    for name in ("store_user", "store_helper", "store_other"):
        sys.modules.pop(name, None)


def fresh(tmp_path):
    """The user's module as a new process would see it: executed again from its files."""
    for name in ("store_user", "store_helper", "store_other"):
        sys.modules.pop(name, None)
    spec = importlib.util.spec_from_file_location("store_user", tmp_path / "store_user.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["store_user"] = module
    spec.loader.exec_module(module)
    return module


def run_model(mod, depth=2, x=None):
    m = mod.Model(jnp.full((3,), 0.5, jnp.float32), depth=depth)
    return np.asarray(m.apply(jnp.ones(3, jnp.float32) if x is None else x))


def _expected(depth, add=1.0):
    x = np.ones(3, np.float32)
    for _ in range(depth):
        x = np.tanh(x * 0.5) + add
    return x


def entries(tmp_path):
    return sorted((tmp_path / "store").glob("*.sfprog"))


# ----- loading --------------------------------------------------------------------------
def test_a_fresh_process_loads_the_program_without_tracing(store):
    first = fresh(store)
    expected = run_model(first)
    assert (first.Model.apply.compile_count, first.Model.apply.load_count) == (1, 0)
    assert len(entries(store)) == 1
    second = fresh(store)
    np.testing.assert_array_equal(run_model(second), expected)
    assert (second.Model.apply.compile_count, second.Model.apply.load_count) == (0, 1)


def test_sf_jit_with_static_argnums_loads_per_static_value(store):
    mod = fresh(store)
    assert float(mod.power(jnp.float32(3.0), 2)) == 9.0
    assert float(mod.power(jnp.float32(3.0), 3)) == 27.0
    again = fresh(store)
    assert float(again.power(jnp.float32(3.0), 3)) == 27.0
    assert float(again.power(jnp.float32(3.0), 2)) == 9.0
    assert (again.power.compile_count, again.power.load_count) == (0, 2)


# ----- every part of the key: a difference misses and compiles ---------------------------
def _stored_then_fresh(store, change=lambda: None, **call):
    first = fresh(store)
    run_model(first)
    change()
    second = fresh(store)
    out = run_model(second, **call)
    return second.Model.apply, out


def test_a_changed_method_body_compiles_again(store):
    def change():
        (store / "store_user.py").write_text(USER.replace("+ 1.0", "+ 2.0"))

    apply, out = _stored_then_fresh(store, change)
    assert (apply.compile_count, apply.load_count) == (1, 0)
    np.testing.assert_allclose(out, _expected(2, add=2.0) * 2.0, rtol=1e-6)


def test_a_changed_helper_in_another_file_that_ran_compiles_again(store):
    def change():
        (store / "store_helper.py").write_text(HELPER.replace("2.0", "3.0"))

    apply, out = _stored_then_fresh(store, change)
    assert (apply.compile_count, apply.load_count) == (1, 0)
    np.testing.assert_allclose(out, _expected(2) * 3.0, rtol=1e-6)


def test_a_changed_file_whose_code_did_not_run_still_loads(store):
    apply, _ = _stored_then_fresh(
        store, lambda: (store / "store_other.py").write_text("def unused():\n    return 22\n"))
    assert (apply.compile_count, apply.load_count) == (0, 1)


def test_another_jax_version_compiles_again(store, monkeypatch):
    apply, _ = _stored_then_fresh(store, lambda: monkeypatch.setattr(jax, "__version__", "99.0.0"))
    assert (apply.compile_count, apply.load_count) == (1, 0)


def test_another_device_kind_or_count_compiles_again(store, monkeypatch):
    real = jax.devices

    def change():
        monkeypatch.setattr(jax, "devices", lambda *a: real(*a) * 2)

    apply, _ = _stored_then_fresh(store, change)
    assert (apply.compile_count, apply.load_count) == (1, 0)


def test_another_machines_cpu_compiles_again(store, monkeypatch, caplog):
    from staticfield._store import _key

    with caplog.at_level("INFO", logger="staticfield"):
        apply, _ = _stored_then_fresh(store, lambda: monkeypatch.setattr(_key, "_host", lambda: "aarch64 other"))
    assert (apply.compile_count, apply.load_count) == (1, 0)
    assert "the machine (architecture or CPU features) changed" in caplog.text


def test_another_xla_flags_compiles_again(store, monkeypatch):
    apply, _ = _stored_then_fresh(
        store, lambda: monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_enable_fast_math=false"))
    assert (apply.compile_count, apply.load_count) == (1, 0)


def test_another_enable_x64_compiles_again(store):
    try:
        apply, _ = _stored_then_fresh(store, lambda: jax.config.update("jax_enable_x64", True))
    finally:
        jax.config.update("jax_enable_x64", False)
    assert (apply.compile_count, apply.load_count) == (1, 0)


def test_another_static_value_compiles_again_and_is_right(store):
    apply, out = _stored_then_fresh(store, depth=3)
    assert (apply.compile_count, apply.load_count) == (1, 0)
    np.testing.assert_allclose(out, _expected(3) * 2.0, rtol=1e-6)


def test_another_static_argument_compiles_again_and_is_right(store):
    fresh(store).power(jnp.float32(3.0), 2)
    again = fresh(store)
    assert float(again.power(jnp.float32(3.0), 3)) == 27.0
    assert (again.power.compile_count, again.power.load_count) == (1, 0)


@pytest.mark.parametrize("x", [
    jnp.ones((2, 3), jnp.float32),  # shape
    jnp.ones(3, jnp.bfloat16),  # dtype
], ids=["shape", "dtype"])
def test_another_shape_or_dtype_compiles_again(store, x):
    apply, out = _stored_then_fresh(store, x=x)
    assert (apply.compile_count, apply.load_count) == (1, 0)
    assert out.shape == x.shape


def test_another_weak_type_compiles_again(store):
    mod = fresh(store)
    m = mod.Model(jnp.full((), 0.5, jnp.bfloat16))
    weak = m.apply(jnp.asarray(1.0))  # weak float32: the result stays bfloat16
    again = fresh(store)
    m = again.Model(jnp.full((), 0.5, jnp.bfloat16))
    strong = m.apply(jnp.asarray(1.0, jnp.float32))
    assert (again.Model.apply.compile_count, again.Model.apply.load_count) == (1, 0)
    assert (weak.dtype, strong.dtype) == (jnp.bfloat16, jnp.float32)


def test_closures_of_one_def_with_other_values_are_told_apart(store):
    assert float(fresh(store).scaled_by(2.0)(jnp.float32(1.0))) == 2.0
    again = fresh(store)
    three = again.scaled_by(3.0)
    assert float(three(jnp.float32(1.0))) == 3.0
    assert (three.compile_count, three.load_count) == (1, 0)
    two = again.scaled_by(2.0)
    assert float(two(jnp.float32(1.0))) == 2.0
    assert (two.compile_count, two.load_count) == (0, 1)


def test_partials_with_other_arguments_are_told_apart(store):
    import functools

    mod = fresh(store)
    assert float(sf.jit(functools.partial(mod.times, k=2.0))(jnp.float32(1.0))) == 2.0
    three = sf.jit(functools.partial(fresh(store).times, k=3.0))
    assert float(three(jnp.float32(1.0))) == 3.0
    assert (three.compile_count, three.load_count) == (1, 0)


# ----- damaged entries: one warning, compiled and written again --------------------------
def _damage(path, how):
    data = path.read_bytes()
    if how == "corrupt":
        data = data[:-40] + bytes(b ^ 0xFF for b in data[-40:])
    elif how == "truncated":
        data = data[: len(data) // 2]
    elif how == "foreign":
        data = b"\x80\x04K\x01." + os.urandom(64)
    else:  # a header that is not JSON
        data = _entries.MAGIC + b"{not json\n" + data[-100:]
    path.write_bytes(data)


@pytest.mark.parametrize("how", ["corrupt", "truncated", "foreign", "bad header"])
def test_a_damaged_entry_is_ignored_with_one_warning_and_written_again(store, how):
    expected = run_model(fresh(store))
    (entry,) = entries(store)
    _damage(entry, how)
    second = fresh(store)
    with pytest.warns(sf.StaticFieldWarning, match="program store entry .* is ignored") as caught:
        np.testing.assert_array_equal(run_model(second), expected)
    assert len([w for w in caught if issubclass(w.category, sf.StaticFieldWarning)]) == 1
    assert str(entry) in str(caught[0].message)
    assert (second.Model.apply.compile_count, second.Model.apply.load_count) == (1, 0)
    third = fresh(store)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        np.testing.assert_array_equal(run_model(third), expected)
    assert (third.Model.apply.compile_count, third.Model.apply.load_count) == (0, 1)


def test_reading_a_key_never_unpickles(store):
    """An entry whose key does not match is never unpickled, whatever its payload."""
    run_model(fresh(store))
    (entry,) = entries(store)
    with open(entry, "rb") as f:
        header = _entries.read_header(f)
    header["key"]["environment"]["versions"]["jax"] = "0.0.1"  # another key, same file name
    marker = store / "unpickled"
    payload = pickle.dumps(_Marker(str(marker)))
    entry.unlink()
    _entries.write(str(entry), {k: header[k] for k in ("key", "display", "devices")}, payload)
    second = fresh(store)
    run_model(second)
    assert not marker.exists()
    assert (second.Model.apply.compile_count, second.Model.apply.load_count) == (1, 0)


class _Marker:
    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


# ----- the directory ----------------------------------------------------------------------
def test_a_directory_others_may_write_is_refused(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    with pytest.raises(PermissionError, match=f"{shared} is writable by other users"):
        sf.set_program_store(shared)


@pytest.mark.parametrize("umask", [0o000, 0o022, 0o077])
def test_the_store_is_0700_and_its_entries_0600_whatever_the_umask(tmp_path, store, umask):
    old = os.umask(umask)
    try:
        sf.set_program_store(tmp_path / "new" / "store")
        fresh(store).power(jnp.float32(2.0), 2)
    finally:
        os.umask(old)
    folder = tmp_path / "new" / "store"
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    files = list(folder.iterdir())
    assert files and all(stat.S_IMODE(f.stat().st_mode) == 0o600 for f in files)


def test_none_turns_the_store_off(store):
    sf.set_program_store(None)
    run_model(fresh(store))
    assert entries(store) == []


# ----- precompile -------------------------------------------------------------------------
def test_precompile_stores_without_running_and_a_fresh_process_loads(store):
    mod = fresh(store)
    m = mod.Model(jnp.ones(3, jnp.float32), depth=4)
    mod.Model.apply.precompile(m, jnp.ones(3, jnp.float32))
    mod.power.precompile(jnp.float32(2.0), 5)
    assert (mod.Model.apply.compile_count, mod.power.compile_count) == (1, 1)
    assert len(entries(store)) == 2
    m.apply(jnp.ones(3, jnp.float32))
    assert mod.Model.apply.compile_count == 1
    again = fresh(store)
    again.Model.apply.precompile(again.Model(jnp.ones(3, jnp.float32), depth=4), jnp.ones(3, jnp.float32))
    assert float(again.power(jnp.float32(2.0), 5)) == 32.0
    assert (again.Model.apply.load_count, again.power.load_count) == (1, 1)
    assert again.Model.apply.compile_count + again.power.compile_count == 0


def test_precompile_without_a_store_compiles_into_the_functions_cache(store):
    sf.set_program_store(None)
    mod = fresh(store)
    mod.power.precompile(jax.ShapeDtypeStruct((), jnp.float32), 5)
    assert mod.power.compile_count == 1
    assert float(mod.power(jnp.float32(2.0), 5)) == 32.0
    assert mod.power.compile_count == 1  # the call traced nothing


def test_precompile_with_values_that_are_not_arrays_says_what_it_takes(store):
    mod = fresh(store)
    with pytest.raises(TypeError, match=r"power.precompile: called with traced values or values that are "
                                        r"not arrays.*jax.ShapeDtypeStruct"):
        mod.power.precompile("three", 2)


# ----- the command line -----------------------------------------------------------------
def test_the_store_command_lists_and_clears(store, capsys):
    """One line per program (function, statics, leading avals, how it is found, size,
    age) in at most 100 columns; -v adds every aval, the devices and the JAX version."""
    from staticfield.__main__ import main

    run_model(fresh(store), depth=3)
    path = str(store / "store")
    assert main(["store", path]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 3 and all(len(line) <= 100 for line in out), out
    assert out[0].split()[:4] == ["store_user.Model.apply", "Model(depth=3)", "f32[3]", "\u00d72"], out
    assert out[0].split()[4] == "both" and out[1].startswith("1 program(s), ")
    assert out[2] == "1 record(s) for sf.warmup: store_user.Model.apply 1"
    assert main(["store", path, "-v"]) == 0
    verbose = capsys.readouterr().out
    assert "    avals: float32[3] SingleDeviceSharding" in verbose
    assert f"devices 0 of process 0 of 1; jax {jax.__version__}, cpu" in verbose
    assert main(["store", path, "--clear"]) == 0
    assert "removed 1 program(s)" in capsys.readouterr().out
    assert entries(store) == []


@pytest.mark.parametrize("what, said", [
    ("missing", "does not exist"),
    ("file", "is a file, not a program store directory"),
    ("other", "holds files but no program store entries"),
])
def test_the_store_command_refuses_what_is_not_a_store_in_one_line(tmp_path, capsys, what, said):
    from staticfield.__main__ import main

    path = tmp_path / what
    if what == "file":
        path.write_text("")
    elif what == "other":
        path.mkdir()
        (path / "notes.txt").write_text("")
    with pytest.raises(SystemExit) as exit_:
        main(["store", str(path)])
    assert exit_.value.code == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"store: {path} {said}" in err
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["store", str(empty)]) == 0
    assert "0 program(s)" in capsys.readouterr().out


# ----- real processes -----------------------------------------------------------------------
SCRIPT = '''
import json, sys, warnings
warnings.simplefilter("error")  # a damaged or half-written entry would warn
import jax.numpy as jnp
import staticfield as sf
import store_user

m = store_user.Model(jnp.full((3,), 0.5, jnp.float32), depth=2)
m.apply(jnp.ones(3, jnp.float32))
store_user.Model(m.w, depth=3).apply(jnp.ones(3, jnp.float32))
store_user.power(jnp.float32(3.0), 2)
print(json.dumps({
    "compiles": store_user.Model.apply.compile_count + store_user.power.compile_count,
    "loads": store_user.Model.apply.load_count + store_user.power.load_count,
}))
'''


def _processes(tmp_path, n=1, devices=1):
    """``n`` processes at once (by tests/_launch.py), each with ``devices`` CPU devices,
    running SCRIPT over the store of STATICFIELD_PROGRAM_STORE; each one's last line."""
    env = {"STATICFIELD_PROGRAM_STORE": str(tmp_path / "envstore"),
           "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    (tmp_path / "script.py").write_text(SCRIPT)
    finished = launch([sys.executable, str(tmp_path / "script.py")], processes=n, devices=devices, env=env,
                      timeout=300)
    return [json.loads(f.out.strip().splitlines()[-1]) for f in finished]


def test_fresh_processes_sharing_a_store_trace_nothing(store):
    """Two processes write the same keys at once; a third loads every program, no trace."""
    _store._state.update({"set": _store._UNSET})
    writers = _processes(store, n=2)
    assert all(r["compiles"] + r["loads"] == 3 for r in writers)  # the later one may load
    (reader,) = _processes(store)
    assert reader == {"compiles": 0, "loads": 3}
    assert not [p for p in (store / "envstore").iterdir() if p.name.endswith(".tmp")]


def test_another_device_count_compiles_again(store):
    _processes(store)
    (other,) = _processes(store, devices=2)
    assert other == {"compiles": 3, "loads": 0}


# ----- with the rest of staticfield ---------------------------------------------------------
def test_donated_arguments_stay_donated_when_loaded(store):
    fresh(store).double(jnp.ones(3, jnp.float32))
    again = fresh(store)
    x = jnp.ones(3, jnp.float32)
    np.testing.assert_array_equal(np.asarray(again.double(x)), np.full(3, 2.0, np.float32))
    assert (again.double.compile_count, again.double.load_count) == (0, 1)
    assert x.is_deleted()


def test_deps_read_stores_a_shared_program_once_and_loads_it(store):
    mod = fresh(store)
    w = jnp.ones(3, jnp.float32)
    mod.Cfg(w, name="a").run(jnp.ones(3, jnp.float32))
    mod.Cfg(w, name="b").run(jnp.ones(3, jnp.float32))  # reads only depth: shares a's program
    assert mod.Cfg.run.compile_count == 1
    assert len(entries(store)) == 1
    again = fresh(store)
    out = again.Cfg(w, name="a").run(jnp.ones(3, jnp.float32))
    np.testing.assert_array_equal(np.asarray(out), np.full(3, 3.0, np.float32))
    assert (again.Cfg.run.compile_count, again.Cfg.run.load_count) == (0, 1)
    out = again.Cfg(w, depth=5).run(jnp.ones(3, jnp.float32))  # another read value: compiled
    np.testing.assert_array_equal(np.asarray(out), np.full(3, 6.0, np.float32))
    assert again.Cfg.run.compile_count == 1


def test_deps_read_with_static_arguments_and_precompile_load(store):
    mod = fresh(store)
    w = jnp.ones(3, jnp.float32)
    mod.Cfg.scaled.precompile(mod.Cfg(w, name="a"), jnp.ones(3, jnp.float32), 4)
    mod.Cfg.run.precompile(mod.Cfg(w, name="a"), jnp.ones(3, jnp.float32))
    assert (mod.Cfg.scaled.compile_count, mod.Cfg.run.compile_count) == (1, 1)
    again = fresh(store)
    out = again.Cfg(w, name="a").scaled(jnp.ones(3, jnp.float32), 4)
    np.testing.assert_array_equal(np.asarray(out), np.full(3, 8.0, np.float32))
    out = again.Cfg(w, name="a").scaled(jnp.ones(3, jnp.float32), 5)  # another static argument
    np.testing.assert_array_equal(np.asarray(out), np.full(3, 10.0, np.float32))
    again.Cfg(w, name="a").run(jnp.ones(3, jnp.float32))
    assert (again.Cfg.scaled.compile_count, again.Cfg.scaled.load_count) == (1, 1)
    assert (again.Cfg.run.compile_count, again.Cfg.run.load_count) == (0, 1)


def test_watch_reports_a_load_as_a_load(store):
    run_model(fresh(store))
    again = fresh(store)
    with sf.watch() as w:
        run_model(again)
    (f,) = [f for f in w.functions if f.name == "Model.apply"]
    assert (f.count, f.loads) == (0, 1)
    assert "0 compiles, 1 loaded from the program store" in " ".join(w.report().split())  # lines wrap at 100
    assert w.as_dict()["functions"][0]["loads"] == 1


def test_a_store_from_the_environment_others_may_write_is_refused(tmp_path, monkeypatch):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    monkeypatch.setitem(_store._state, "set", _store._UNSET)
    monkeypatch.setitem(_store._state, "env", None)
    monkeypatch.setenv("STATICFIELD_PROGRAM_STORE", str(shared))

    @sf.jit
    def f(x):
        return x + 1

    with pytest.warns(sf.StaticFieldWarning, match=f"STATICFIELD_PROGRAM_STORE=.*{shared} is "
                                                   r"writable by other users.*chmod go-w"):
        assert float(f(1.0)) == 2.0
    assert not list(shared.iterdir())  # the store stays off


SHARDED = '''
import json, sys
import jax, jax.numpy as jnp, numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P
import staticfield as sf
import store_user

mesh = jax.make_mesh((8,), ("x",))
m = store_user.Model(jnp.full((8,), 0.5, jnp.float32))
x = jnp.arange(8, dtype=jnp.float32)
spec = P("x") if sys.argv[1] == "split" else P()
xs = jax.device_put(x, NamedSharding(mesh, spec))
out = m.apply(xs)
print(json.dumps({"compiles": store_user.Model.apply.compile_count, "loads": store_user.Model.apply.load_count,
                  "sharding": str(out.sharding.spec), "out": np.asarray(out).tolist()}))
'''


def test_sharded_arguments_on_8_devices_load_per_sharding(store):
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=8", PYTHONDONTWRITEBYTECODE="1",
               STATICFIELD_PROGRAM_STORE=str(store / "shardstore"),
               PYTHONPATH=os.pathsep.join([str(store), os.environ.get("PYTHONPATH", "")]))
    (store / "sharded.py").write_text(SHARDED)

    def run(how):
        done = subprocess.run([sys.executable, str(store / "sharded.py"), how], env=env, capture_output=True,
                              text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        return eval(done.stdout.strip().splitlines()[-1])  # noqa: S307 - our own JSON line

    first = run("split")
    assert (first["compiles"], first["loads"]) == (1, 0)
    loaded = run("split")
    assert (loaded["compiles"], loaded["loads"], loaded["sharding"]) == (0, 1, first["sharding"])
    assert loaded["out"] == first["out"]
    replicated = run("replicated")  # another sharding: another program
    assert (replicated["compiles"], replicated["loads"]) == (1, 0)
    np.testing.assert_allclose(replicated["out"], first["out"], rtol=1e-6)


def test_a_function_called_inside_another_trace_is_inlined_and_nested_compiles_work(store):
    @sf.jit
    def inner(x):
        return x * 2.0

    constant = jnp.ones(3, jnp.float32)

    @sf.jit
    def outer(x):
        return inner(x) + inner(constant)  # a tracer, then concrete values: a compile inside a trace

    np.testing.assert_array_equal(np.asarray(outer(jnp.ones(3, jnp.float32))), np.full(3, 4.0, np.float32))
    assert outer.compile_count == 1


def test_a_running_profiler_is_left_alone(store):
    import cProfile
    import pstats

    def marker():
        return None

    profiler = cProfile.Profile()
    profiler.enable()
    try:
        out = run_model(fresh(store))
        marker()  # still profiled after the store's recording
    finally:
        profiler.disable()
    np.testing.assert_allclose(out, _expected(2) * 2.0, rtol=1e-6)
    assert any(name == "marker" for _, _, name in pstats.Stats(profiler).stats)


def test_a_loaded_deps_program_is_never_shared_with_a_key_it_did_not_record(store):
    """deps="read": a program loaded from the store was traced in another process, so
    nothing here recorded what it read; it counts as reading every static. Here the short
    trace reads no static, so B shares A's program for short inputs; the long program
    (loaded, and reading s) must not compute B's result with A's s."""
    first = fresh(store)
    a = first.Branchy(jnp.zeros(1), 1.0)
    np.testing.assert_array_equal(a.f(jnp.ones(3)), np.ones(3))  # stored: reads s
    second = fresh(store)
    a, b = second.Branchy(jnp.zeros(1), 1.0), second.Branchy(jnp.zeros(1), 5.0)
    np.testing.assert_array_equal(a.f(jnp.ones(2)), np.ones(2))
    np.testing.assert_array_equal(b.f(jnp.ones(2)), np.ones(2))  # shares A's short program
    assert second.Branchy.f.compile_count == 1
    np.testing.assert_array_equal(b.f(jnp.ones(3)), np.full(3, 5.0))  # not A's s
    np.testing.assert_array_equal(a.f(jnp.ones(3)), np.ones(3))
    assert second.Branchy.f.load_count == 1


# ----- misses explained ---------------------------------------------------------------------
def test_a_miss_names_what_differs_from_the_closest_stored_program(store, caplog):
    run_model(fresh(store))
    (store / "store_helper.py").write_text("def scale(x):\n    return x * 3.0\n")
    again = fresh(store)
    with caplog.at_level("INFO", logger="staticfield"):
        run_model(again)
    said = " ".join(r.getMessage() for r in caplog.records)
    assert "store_user.Model.apply: not loaded from the program store: the traced program differs: " in said
    assert "(mul at " in said and "store_helper.py:2" in said, said
    run_model(again, depth=4)
    (event,) = again.Model.apply.recompiles
    assert event.store == ("not loaded from the program store: the closest stored program differs in "
                           "self.depth: 2 → 4 (static)")
    assert event.store in str(event)


def test_a_source_miss_names_the_file_that_changed(store, caplog):
    """trust="source": a changed file misses the zero-trace key; the trace then finds the
    same program (a comment or an unused function changed) or says which file changed."""
    sf.set_program_store(store / "store", trust="source")
    run_model(fresh(store))
    (store / "store_other.py").write_text("def unused():\n    return 2\n")  # loaded, never ran
    again = fresh(store)
    np.testing.assert_array_equal(run_model(again), _expected(2) * 2.0)
    assert (again.Model.apply.compile_count, again.Model.apply.load_count) == (0, 1)
    (store / "store_helper.py").write_text("def scale(x):\n    return x * 3.0\n")
    third = fresh(store)
    with caplog.at_level("INFO", logger="staticfield"):
        np.testing.assert_array_equal(run_model(third), _expected(2) * 3.0)
    said = " ".join(r.getMessage() for r in caplog.records)
    assert f"not loaded from the program store: {store / 'store_helper.py'} changed" in said, said


def test_watch_reports_why_the_store_had_no_program(store):
    run_model(fresh(store))
    (store / "store_helper.py").write_text("def scale(x):\n    return x * 3.0\n")
    again = fresh(store)
    with sf.watch() as w:
        run_model(again)
    report = " ".join(w.report().split())
    assert "#1 at " in report and "(not loaded from the program store: the traced program differs: equation" in report
