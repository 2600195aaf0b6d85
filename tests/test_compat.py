"""JAX's private names: each present with the signature staticfield expects, and a JAX
that lacks or changed one disables only the feature needing it, which says so once."""

from __future__ import annotations

import importlib
import inspect
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import pytest

import staticfield as sf
from staticfield._core import _compat


def _lookup(p: _compat.Private):
    if p.key.startswith("jitted_"):  # attributes of the C++ class jax.jit returns
        return getattr(type(jax.jit(lambda x: x)), p.attr.rpartition(".")[2])
    owner = importlib.import_module(p.module)
    for part in p.attr.split("."):
        owner = getattr(owner, part)
    return owner


@pytest.mark.parametrize("private", _compat.PRIVATE, ids=lambda p: p.path)
def test_installed_jax_has_every_private_name_with_the_expected_signature(private):
    """Each private name exists in the installed JAX and takes the parameters staticfield
    passes; a JAX release that renames or reorders one fails here, naming it."""
    obj = _lookup(private)
    if private.params is not None:
        try:
            params = [
                f"*{p.name}" if p.kind is p.VAR_POSITIONAL else p.name
                for p in inspect.signature(obj).parameters.values()
            ]
        except (TypeError, ValueError):
            params = []
        if params in ([], ["*args", "kwargs"]):  # a C++ function: its docstring's first line says them
            params = list(_compat._documented_params(obj) or ())
        assert tuple(params[: len(private.params)]) == private.params, (
            f"jax {jax.__version__} changed {private.path}: it takes {params}"
        )
    assert private.key not in _compat.PROBLEMS
    assert _compat.get(private.key) is obj or private.params is None


def test_no_feature_is_unavailable_on_the_installed_jax():
    """On a JAX that CI tests, every feature works and none says otherwise."""
    assert _compat.PROBLEMS == {}
    assert all(_compat.unavailable(feature) == "" for feature in _compat.FEATURES)


def test_a_changed_signature_is_found_and_named(monkeypatch):
    """A hook that takes other parameters (jax 0.9.0's 4-argument _trace_for_jit) fails the check,
    which names the JAX version and both signatures."""
    from jax._src import pjit

    def _trace_for_jit(fun, ji, dbg, args):
        raise AssertionError("never called")

    monkeypatch.setattr(pjit, "_trace_for_jit", _trace_for_jit)
    obj, problem = _compat.check(_compat.PRIVATE_BY_KEY["trace_for_jit"])
    assert obj is None
    assert problem == (
        f"jax {jax.__version__}'s jax._src.pjit._trace_for_jit takes (fun, ji, dbg, args), "
        "not (fun, ji, ctx_mesh, dbg, avals, args, kwargs, ...)"
    )


def test_a_missing_name_is_found_and_named(monkeypatch):
    """A private name the JAX lacks fails the check, which names the JAX version and the name."""
    from jax._src import traceback_util

    monkeypatch.delattr(traceback_util, "filter_traceback")
    obj, problem = _compat.check(_compat.PRIVATE_BY_KEY["tb_filter"])
    assert obj is None
    assert problem == f"jax {jax.__version__} has no jax._src.traceback_util.filter_traceback"


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-W", "always::UserWarning", "-c", textwrap.dedent(code)],
        capture_output=True, text=True, timeout=180,
    )


def test_watch_on_a_jax_whose_trace_hook_differs_says_so_once_and_still_counts():
    """With a changed trace hook (as on jax 0.9.0), sf.watch installs nothing into it, says why
    in one notice naming the JAX version, and still counts compiles; sf.jit still explains."""
    proc = _run(
        """
        import jax, jax.numpy as jnp
        from jax._src import pjit
        original = pjit._trace_for_jit
        def _trace_for_jit(fun, ji, dbg, args):  # the shape of jax 0.9.0's hook
            raise AssertionError("staticfield called a hook it could not understand")
        pjit._trace_for_jit = _trace_for_jit
        import staticfield as sf
        pjit._trace_for_jit = original  # JAX itself must still run
        def double(x):
            return x * 2
        def inc(x):
            return x + 1
        f, g = jax.jit(double), sf.jit(inc)
        with sf.watch() as w:
            f(jnp.ones(2)); f(jnp.ones(3)); g(jnp.ones(2)); g(jnp.ones(3))
        with sf.watch() as w2:
            f(jnp.ones(4))
        counts = {e.name: e.count for e in w.functions}
        print(w.as_dict()["explained"], counts["double"], counts["inc"], len(w.notices), w.notices == w2.notices)
        print(w.notices[0])
        print(g.recompiles[-1])
        """
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    flag, notice, *recompile = proc.stdout.splitlines()
    assert flag == "False 2 2 1 True"
    assert notice == (
        f"staticfield: on jax {jax.__version__}, sf.watch cannot explain recompiles (it still "
        f"counts and times them), because jax {jax.__version__}'s jax._src.pjit._trace_for_jit "
        "takes (fun, ji, dbg, args), not (fun, ji, ctx_mesh, dbg, avals, args, kwargs, ...) "
        f"(staticfield is tested with {_compat.TESTED})."
    )
    assert recompile == ["inc recompiled (compile #2) because:", "  x: f32[2] → f32[3] (shape)"]


def test_changed_traceback_filter_warns_once_at_import_and_errors_still_reach_the_user():
    """With a changed JAX traceback filter, importing staticfield warns once (naming the JAX version),
    and a user's error raised through sf.jit still arrives unchanged."""
    proc = _run(
        """
        import warnings
        from jax._src import traceback_util
        original = traceback_util.filter_traceback
        def filter_traceback(traceback):  # a renamed parameter: not what staticfield expects
            return original(traceback)
        traceback_util.filter_traceback = filter_traceback
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            import staticfield as sf
        print(len(caught), caught[0].category.__name__ if caught else "")
        print(caught[0].message if caught else "")
        @sf.jit
        def f(x):
            raise ValueError("the user's own error")
        try:
            f(1.0)
        except ValueError as e:
            print("raised:", e)
        """
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    count, message, raised = proc.stdout.splitlines()[:3]
    assert count == "1 StaticFieldWarning"
    assert message == (
        f"staticfield: on jax {jax.__version__}, staticfield's own frames stay in the tracebacks "
        f"of errors raised through it, because jax {jax.__version__}'s "
        "jax._src.traceback_util.filter_traceback takes (traceback), not (tb, ...) "
        f"(staticfield is tested with {_compat.TESTED})."
    )
    assert raised == "raised: the user's own error"


def test_cache_size_without_jax_count_says_why_and_the_budget_still_holds(monkeypatch):
    """Without JAX's private program count, cache_size() raises a sentence naming the JAX
    version; compile_count and max_compiles go on working."""
    monkeypatch.delitem(_compat.FOUND, "jitted_cache_size")
    monkeypatch.setitem(_compat.PROBLEMS, "jitted_cache_size", f"jax {jax.__version__} has no jaxlib.PjitFunction._cache_size")
    f = sf.jit(lambda x: x * 2, max_compiles=1)
    f(jnp.ones(2))
    with pytest.raises(RuntimeError, match=rf"^staticfield: on jax {jax.__version__}, cache_size\(\) cannot count"):
        f.cache_size()
    with pytest.raises(sf.RecompileError):
        f(jnp.ones(3))
    assert f.compile_count == 1
