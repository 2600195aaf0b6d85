"""sf.jit and @sf.jit_method behave like jax.jit around the call: leaf types, copies, names, equality."""

from __future__ import annotations

import copy
import inspect
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import staticfield as sf

# staticfield's own files (the package folder, generated code included). Matched by the
# package's folder, never by a "/staticfield/" part: a checkout is itself often named so.
_PACKAGE_DIR = str(Path(sf.__file__).resolve().parent) + "/"


def _is_ours(filename: str) -> bool:
    return str(Path(filename).resolve()).startswith(_PACKAGE_DIR) or filename.startswith("<staticfield")


def test_typed_prng_key_recompile_is_explained():
    """A typed PRNG key among the arguments never breaks the explanation of a recompile."""
    f = sf.jit(lambda k, x: x + 1)
    f(jax.random.key(0), 1.0)
    out = f(jax.random.key(0), jnp.ones(2))
    np.testing.assert_allclose(out, np.full(2, 2.0))
    assert f.compile_count == 2
    (event,) = f.recompiles
    assert [(c.path, c.kind) for c in event.changes] == [("x", "shape")]


def test_typed_key_change_is_described():
    """A typed key's shape change is described with its key dtype."""
    f = sf.jit(lambda k: jax.random.key_data(k))
    f(jax.random.key(0))
    f(jax.random.split(jax.random.key(0), 3))
    (event,) = f.recompiles
    (change,) = event.changes
    assert change.kind == "shape" and "key<fry>" in change.new and "[3]" in change.new


def test_float0_leaf_is_described():
    """A float0 leaf (the tangent of an integer) is describable."""
    f = sf.jit(lambda t, x: x * 2)
    f(np.zeros((), dtype=jax.dtypes.float0), 1.0)
    f(np.zeros((2,), dtype=jax.dtypes.float0), 1.0)
    (event,) = f.recompiles
    assert [(c.path, c.kind) for c in event.changes] == [("t", "shape")]


def test_tracking_failure_never_breaks_the_call(monkeypatch, caplog):
    """A bug in the explainer is reported on the staticfield logger, never raised into the call."""
    from staticfield import _describe

    def broken(*args, **kwargs):
        raise RuntimeError("explainer bug")

    monkeypatch.setattr(_describe, "describe", broken)
    f = sf.jit(lambda x: x + 1)
    with caplog.at_level("WARNING", logger="staticfield"):
        f(1.0)
        out = f(jnp.ones(2))
    np.testing.assert_allclose(out, np.full(2, 2.0))
    assert f.compile_count == 2
    assert "explainer bug" in caplog.text


def _model_class():
    @sf.dataclass
    class Model:
        w: jax.Array
        n: sf.Static[int] = 1

        @sf.jit_method
        def apply(self, x, scale=1.0):
            """Apply the model to x."""
            return self.w * x * self.n * scale

    return Model


def test_copy_and_deepcopy_of_a_bound_method():
    """copy.copy and copy.deepcopy of obj.method (and of a pytree holding it) give a working method."""
    Model = _model_class()
    m = Model(jnp.ones(2), 3)
    for c in (copy.copy(m.apply), copy.deepcopy(m.apply), copy.deepcopy({"f": m.apply})["f"]):
        np.testing.assert_allclose(c(2.0), np.full(2, 6.0))
        assert c == m.apply and c.compile_count == Model.apply.compile_count
        assert len(jax.tree_util.tree_leaves(c)) == 1


def test_bound_methods_of_equal_instances_are_equal():
    """Two bound methods of == instances are == and hash alike; of different instances, not ==."""
    Model = _model_class()
    a, b = Model(jnp.ones(2), 3), Model(jnp.ones(2), 3)
    c = Model(jnp.ones(2), 4)
    assert a == b
    assert a.apply == b.apply and hash(a.apply) == hash(b.apply)
    assert a.apply != c.apply


@pytest.mark.parametrize("static_arg", [False, True], ids=["plain", "static_argnames"])
def test_weak_method_of_a_bound_method(static_arg):
    """weakref.WeakMethod(obj.method) works as for a plain bound method: it gives the method
    while obj lives (its __self__ is obj), and None once obj is gone."""
    import gc
    import weakref

    @sf.dataclass
    class Model:
        w: jax.Array

        @sf.jit_method(static_argnames=("k",) if static_arg else ())
        def apply(self, x, k=1):
            return self.w * x * k

    m = Model(jnp.ones(2))
    assert m.apply.__self__ is m
    ref = weakref.WeakMethod(m.apply)
    again = ref()
    assert again == m.apply
    np.testing.assert_allclose(again(2.0), np.full(2, 2.0))
    del again, m
    gc.collect()
    assert ref() is None


def test_method_metadata_is_the_user_function():
    """Cls.method and obj.method carry the user's name, qualname, module, doc and signature."""
    Model = _model_class()
    m = Model(jnp.ones(2))
    for f in (Model.apply, m.apply):
        assert f.__name__ == "apply"
        assert f.__qualname__.endswith("Model.apply")
        assert f.__module__ == __name__
        assert f.__doc__ == "Apply the model to x."
        assert f.__wrapped__ is Model.__dict__["apply"].__wrapped__
    assert list(inspect.signature(Model.apply).parameters) == ["self", "x", "scale"]
    assert list(inspect.signature(m.apply).parameters) == ["x", "scale"]


def test_jit_metadata_is_the_user_function():
    """What sf.jit returns carries the user's name, module and signature."""

    def step(params, x):
        """One step."""
        return params * x

    f = sf.jit(step, static_argnames="x")
    assert (f.__name__, f.__module__, f.__doc__) == ("step", __name__, "One step.")
    assert list(inspect.signature(f).parameters) == ["params", "x"]


def test_unknown_jit_keyword_fails_at_decoration():
    """An unknown jax.jit keyword is refused when decorating, naming the function and the keyword."""
    with pytest.raises(TypeError, match=r"step: unknown jax.jit keyword 'static_argnum'"):

        @sf.jit(static_argnum=0)
        def step(x):
            return x

    with pytest.raises(TypeError, match=r"Model.apply: unknown jax.jit keyword 'donate'"):

        class Model:
            @sf.jit_method(donate=0)
            def apply(self, x):
                return x


@sf.dataclass
class _Net:
    w: jax.Array
    depth: int = 2  # forgot sf.static: a traced int

    @sf.jit_method
    def apply(self, x):
        for _ in range(self.depth):
            x = x * self.w
        return x

    @sf.jit_method
    def named(self, x, name):
        return x


def test_jax_errors_name_the_user_function_and_argument_paths():
    """JAX's tracer errors name the user's function, file and `self.depth`, not internal paths."""
    with pytest.raises(jax.errors.TracerIntegerConversionError) as info:
        _Net(jnp.ones(2)).apply(1.0)
    message = str(info.value)
    assert f"apply at {__file__}" in message
    assert "argument self.depth" in message


def test_jax_errors_name_a_non_array_argument():
    """A str passed to a jit_method is reported at its parameter's name."""
    with pytest.raises(TypeError, match=r"passed to the function at path name\b"):
        _Net(jnp.ones(2), 2).named(1.0, "a")


def test_tracebacks_hide_staticfield_frames():
    """A JAX error raised through a jit_method shows no staticfield frame in its traceback."""
    import traceback

    with pytest.raises(jax.errors.TracerIntegerConversionError) as info:
        _Net(jnp.ones(2)).apply(1.0)
    frames = traceback.extract_tb(info.value.__traceback__)
    assert not [f for f in frames if _is_ours(f.filename)]
    assert any(f.filename == __file__ for f in frames)


class _Raises(sf.Struct):
    w: jax.Array

    @sf.jit_method
    def plain(self, x):
        raise ValueError("raised by the user's method")

    @sf.jit_method(static_argnames="k")
    def with_static(self, x, k=1):
        raise ValueError("raised by the user's method")


def _raise_in(x, *, mode=0):
    raise ValueError("raised by the user's function")


@pytest.mark.parametrize("call", [
    lambda: sf.jit(_raise_in)(1.0),
    lambda: sf.jit(_raise_in, static_argnames="mode")(1.0, mode=2),
    lambda: _Raises(jnp.ones(2)).plain(1.0),
    lambda: _Raises(jnp.ones(2)).with_static(1.0, k=2),
    lambda: _Raises.plain(_Raises(jnp.ones(2)), 1.0),
], ids=["sf.jit", "sf.jit static", "jit_method", "jit_method static", "Cls.method(obj)"])
def test_tracebacks_of_user_errors_hide_staticfield_frames(call):
    """An error raised by the user's own code shows the user's frames and none of staticfield's."""
    import traceback

    with pytest.raises(ValueError, match="raised by the user's") as info:
        call()
    frames = traceback.extract_tb(info.value.__traceback__)
    ours = [f"{f.filename}:{f.lineno}" for f in frames
            if _is_ours(f.filename)]
    assert not ours
    assert [f.name for f in frames if f.filename == __file__][-1] in ("plain", "with_static", "_raise_in")


def test_traceback_filtering_off_shows_every_frame():
    """JAX_TRACEBACK_FILTERING=off keeps staticfield's frames, as it keeps JAX's."""
    import traceback

    before = jax.config.jax_traceback_filtering
    jax.config.update("jax_traceback_filtering", "off")
    try:
        with pytest.raises(ValueError) as info:
            sf.jit(_raise_in, static_argnames="mode")(1.0, mode=3)
    finally:
        jax.config.update("jax_traceback_filtering", before)
    frames = traceback.extract_tb(info.value.__traceback__)
    assert [f for f in frames if _is_ours(f.filename)]


def test_explain_cache_misses_names_user_paths(caplog):
    """jax_explain_cache_misses reports argument paths and the call site in the user's words."""
    f = sf.jit(lambda params, x: x * params["w"])
    with jax.explain_cache_misses(True), caplog.at_level("WARNING"):
        f({"w": jnp.ones(2)}, 1.0)
        f({"w": jnp.ones(3)}, 1.0)
    text = caplog.text
    assert "params['w']" in text
    assert "dyn[" not in text and "<generated" not in text


def test_explain_cache_misses_explains_a_new_static_variant(caplog):
    """With jax_explain_cache_misses on, a changed static field is explained at WARNING in the user's words."""
    Model = _model_class()
    with jax.explain_cache_misses(True), caplog.at_level("WARNING"):
        Model(jnp.ones(2), 3).apply(1.0)
        caplog.clear()
        Model(jnp.ones(2), 4).apply(1.0)
    ours = [r for r in caplog.records if r.name == "staticfield"]
    assert len(ours) == 1 and ours[0].levelname == "WARNING"
    text = ours[0].getMessage()
    assert "self.n: 3 → 4 (static)" in text
    assert f"{Path(__file__).name}:" in text  # the call site
    assert "never seen function" in text  # says what JAX's own line above means
    caplog.clear()
    with jax.explain_cache_misses(True), caplog.at_level("WARNING"):
        Model(jnp.ones(5), 4).apply(1.0)  # a new shape: JAX's own explanation says it all
    assert [r for r in caplog.records if r.name == "staticfield"] == []
    assert "self.w" in caplog.text


def test_a_program_compiled_ahead_of_time_runs_with_the_users_arguments():
    """.lower(...).compile() runs, as jax.jit's does, with the arguments a call takes:
    instances (another instance with new values, same statics: the same program), static
    values as lowered, a static="auto" call's objects put back in its outputs. Arguments
    selecting another program are a TypeError naming the function, never its result."""
    Model = _model_class()
    m, m2, x = Model(jnp.ones(2), 3), Model(jnp.full(2, 2.0), 3), jnp.full(2, 5.0)
    forms = (
        (Model.apply, (m,), (m2,)),
        (m.apply, (), ()),
        (sf.jit(lambda model, x: model.apply(x)), (m,), (m2,)),
    )
    for f, before, other in forms:
        compiled = f.lower(*before, x).compile()
        assert compiled.cost_analysis() is not None and "mul" in compiled.as_text()
        np.testing.assert_allclose(compiled(*before, x), f(*before, x))
        np.testing.assert_allclose(compiled(*other, x), f(*other, x))
    with pytest.raises(TypeError, match=r"apply: .*compiled ahead of time.*other static values"):
        Model.apply.lower(m, x).compile()(Model(jnp.ones(2), 4), x)

    g = sf.jit(lambda x, n: x * n, static_argnames="n")
    compiled = g.lower(x, n=2).compile()
    np.testing.assert_allclose(compiled(jnp.ones(2), n=2), [2.0, 2.0])
    with pytest.raises(TypeError, match=r"<lambda>: .*compiled ahead of time"):
        compiled(x, n=3)

    @sf.jit(static="auto")
    def solve(x, steps, name):
        return {"y": x * steps, "steps": steps, "name": name}

    compiled = solve.lower(x, 4, "newton").compile()
    out = compiled(jnp.ones(2), 4, "newton")
    assert out["steps"] == 4 and out["steps"].__class__ is int and out["name"] == "newton"
    np.testing.assert_allclose(out["y"], [4.0, 4.0])
    with pytest.raises(TypeError, match=r"solve: .*compiled ahead of time"):
        compiled(x, 5, "newton")


def test_trace_eval_shape_and_lower_take_the_users_arguments():
    """.trace, .eval_shape and .lower take instances and static arguments as the call does."""
    Model = _model_class()
    m = Model(jnp.ones(2), 3)
    for f, args in ((m.apply, (2.0,)), (Model.apply, (m, 2.0))):
        shape = f.eval_shape(*args)
        assert (shape.shape, shape.dtype) == ((2,), jnp.float32)
        assert "mul" in str(f.trace(*args).jaxpr)
        assert "mul" in f.lower(*args).as_text()
    g = sf.jit(lambda x, n: x * n, static_argnames="n")
    assert g.eval_shape(jnp.ones(3), n=2).shape == (3,)
    assert "mul" in str(g.trace(jnp.ones(3), n=2).jaxpr)


def test_clear_cache_drops_programs_and_resets_the_budget():
    """clear_cache() drops every program; compile_count stays a history; the budget counts anew."""
    traces = []

    @sf.dataclass
    class M:
        x: jax.Array

        @sf.jit_method(max_compiles=1)
        def f(self, y):
            traces.append(y)
            return self.x + y

    m = M(jnp.ones(2))
    m.f(1.0)
    assert M.f.cache_size() == 1
    M.f.clear_cache()
    assert M.f.cache_size() == 0
    np.testing.assert_allclose(m.f(1.0), np.full(2, 2.0))
    assert len(traces) == 2 and M.f.compile_count == 2 and M.f.cache_size() == 1
    f = sf.jit(lambda x: x + 1, max_compiles=1)
    f(1.0)
    f.clear_cache()
    f(1.0)
    assert f.compile_count == 2


def test_jax_clear_caches_does_not_exhaust_the_budget():
    """After jax.clear_caches(), a method at its max_compiles recompiles its live variant again."""
    @sf.dataclass
    class M:
        x: jax.Array

        @sf.jit_method(max_compiles=1)
        def f(self, y):
            return self.x + y

    m = M(jnp.ones(2))
    m.f(1.0)
    jax.clear_caches()
    np.testing.assert_allclose(m.f(1.0), np.full(2, 2.0))
    np.testing.assert_allclose(m.f(2.0), np.full(2, 3.0))
    with pytest.raises(sf.RecompileError):
        m.f(jnp.ones(3))


def test_setting_max_compiles_on_the_function_is_honoured():
    """f.max_compiles = 1 on what sf.jit returns (or on Cls.method) sets the budget itself."""
    f = sf.jit(lambda x: x + 1)
    f.max_compiles = 1
    f(1.0)
    with pytest.raises(sf.RecompileError, match="max_compiles=1"):
        f(jnp.ones(2))
    assert f.compile_count == 1
    Model = _model_class()
    Model.apply.max_compiles = 1
    Model(jnp.ones(2), 1).apply(1.0)
    with pytest.raises(sf.RecompileError, match=r"Model.apply would compile 2 times"):
        Model(jnp.ones(2), 2).apply(1.0)


def test_inherited_jit_method_counts_on_the_defining_class():
    """A jit_method inherited by subclasses counts on the class that defines it (DESIGN.md:
    "Per-class counters may follow the definition"): Sub.method is Base.method, and each
    recompile names the class it compiled for."""
    @sf.dataclass
    class Env:
        x: jax.Array
        n: sf.Static[int] = 0

        @sf.jit_method
        def step(self, y):
            return self.x * y + self.n

    @sf.dataclass
    class CartPole(Env):
        pass

    @sf.dataclass
    class Pendulum(Env):
        pass

    CartPole(jnp.ones(2)).step(1.0)
    CartPole(jnp.ones(2), 1).step(1.0)
    Pendulum(jnp.ones(2)).step(1.0)
    assert CartPole.step is Env.step and Pendulum.step is Env.step
    assert Env.step.compile_count == 3 and Env.step.cache_size() == 3
    assert [r.cls for r in Env.step.recompiles] == [CartPole.__qualname__, Pendulum.__qualname__]
    assert "for " + Pendulum.__qualname__ in str(Env.step.recompiles[-1])
    assert CartPole.step.__name__ == "step"
    np.testing.assert_allclose(Pendulum.step(Pendulum(jnp.ones(2)), 2.0), np.full(2, 2.0))


def test_doctest_finds_and_runs_a_jit_method_docstring(monkeypatch):
    """doctest finds the docstring of an @sf.jit_method and of an sf.jit function, and runs it."""
    import doctest
    import sys
    import types

    module = types.ModuleType("doctested")
    monkeypatch.setitem(sys.modules, "doctested", module)
    code = '''
import jax, jax.numpy as jnp, staticfield as sf

@sf.dataclass
class Scale:
    k: float = sf.static()

    @sf.jit_method
    def apply(self, x):
        """Scale x.

        >>> float(Scale(2.0).apply(3.0))
        6.0
        """
        return self.k * x

@sf.jit
def double(x):
    """Double x.

    >>> float(double(2.0))
    4.0
    """
    return 2 * x
'''
    exec(compile(code, "doctested.py", "exec"), module.__dict__)
    tests = doctest.DocTestFinder().find(module)
    names = sorted(t.name for t in tests if t.examples)
    assert names == ["doctested.Scale.apply", "doctested.double"]
    runner = doctest.DocTestRunner()
    for t in tests:
        runner.run(t)
    assert runner.summarize(verbose=False).failed == 0


def test_shape_dtype_structs_are_described():
    """Lowering with jax.ShapeDtypeStruct arguments counts and explains like real arrays."""
    f = sf.jit(lambda x: x * 2)
    f.lower(jax.ShapeDtypeStruct((2,), jnp.float32))
    f.lower(jax.ShapeDtypeStruct((3,), jnp.int32))
    (event,) = f.recompiles
    assert [(c.path, c.kind, c.old, c.new) for c in event.changes] == [("x", "shape", "f32[2]", "i32[3]")]
