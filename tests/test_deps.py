"""`@sf.jit_method(deps="read")`: a method compiles once per value of the statics it reads."""

from __future__ import annotations

import pickle

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import staticfield as sf

# Every program shared with a new key is checked against a trace for that key (DESIGN).
pytestmark = pytest.mark.usefixtures("check_deps")


def _model(deps="read", **options):
    traces = []

    @sf.dataclass
    class Model:
        w: jax.Array
        mode: sf.Static[str] = "a"
        name: sf.Static[str] = "m"
        scale: sf.Static[float] = 1.0

        @sf.jit_method(deps=deps, warn_compiles=None, **options)
        def apply(self, x):
            traces.append(1)
            if self.mode == "a":
                return self.w * x
            return self.w * x * self.scale

    return Model, traces


@pytest.mark.usefixtures("no_check_deps")  # counts traces itself
def test_unread_static_does_not_recompile():
    """Instances differing only in a static the method never reads share one compile."""
    Model, traces = _model()
    outs = [Model(jnp.ones(2), name=f"m{i}").apply(2.0) for i in range(20)]
    assert Model.apply.compile_count == 1 == len(traces)
    assert Model.apply.cache_size() == 1
    assert all(np.array_equal(o, [2.0, 2.0]) for o in outs)


def test_default_deps_all_recompiles_for_every_static():
    """Without deps="read" (deps="all", the default) every static value change recompiles."""
    Model, traces = _model(deps="all")
    for i in range(3):
        Model(jnp.ones(2), name=f"m{i}").apply(2.0)
    assert Model.apply.compile_count == 3 == len(traces)


@pytest.mark.usefixtures("no_check_deps")  # counts traces itself
def test_read_static_recompiles_and_conditional_reads_decide_the_lookup():
    """A static read on one branch only keys the variants that took that branch."""
    Model, traces = _model()
    Model(jnp.ones(2), mode="a", scale=2.0).apply(1.0)
    Model(jnp.ones(2), mode="a", scale=3.0).apply(1.0)  # mode "a" never reads scale
    assert Model.apply.compile_count == 1
    b2 = Model(jnp.ones(2), mode="b", scale=2.0).apply(1.0)
    b3 = Model(jnp.ones(2), mode="b", scale=3.0).apply(1.0)
    b3_again = Model(jnp.ones(2), mode="b", scale=3.0, name="other").apply(1.0)
    assert Model.apply.compile_count == 3 == len(traces)
    assert np.array_equal(b2, [2.0, 2.0]) and np.array_equal(b3, [3.0, 3.0])
    assert np.array_equal(b3_again, [3.0, 3.0])


def test_reads_are_type_strict():
    """1, 1.0 and True are different values of a read static, as in static keys."""

    @sf.dataclass
    class P:
        w: jax.Array
        k: sf.Static[object] = 1

        @sf.jit_method(deps="read", warn_compiles=None)
        def f(self, x):
            return self.w * x + (1.5 if isinstance(self.k, float) else 0.0)

    outs = [P(jnp.ones(1), k).f(1.0) for k in (1, 1.0, True)]
    assert P.f.compile_count == 3
    assert [float(o[0]) for o in outs] == [1.0, 2.5, 1.0]


def test_explanation_names_the_read_and_its_line():
    """A recompile says which read static changed and the line that read it."""
    Model, _ = _model()
    Model(jnp.ones(2), mode="b", scale=2.0).apply(1.0)
    Model(jnp.ones(2), mode="b", scale=3.0, name="other").apply(1.0)
    event = Model.apply.recompiles[-1]
    assert [c.path for c in event.changes] == ["self.scale"]
    change = event.changes[0]
    assert change.kind == "static"
    assert change.read.startswith("read at test_deps.py:")
    assert "self.scale: 2.0 → 3.0 (static; read at test_deps.py:" in str(event)


def test_explanation_leaves_out_statics_no_variant_read():
    """A recompile whose instance also changed unread statics names only the read one."""
    Model, _ = _model()
    Model(jnp.ones(2), mode="b", scale=2.0, name="first").apply(1.0)
    Model(jnp.ones(2), mode="b", scale=3.0, name="second").apply(1.0)
    assert [c.path for c in Model.apply.recompiles[-1].changes] == ["self.scale"]


def test_explanation_of_a_whole_instance_use():
    """When the method used self as a whole, the explanation says how and where."""

    @sf.dataclass
    class P:
        w: jax.Array
        k: sf.Static[int] = 0

        @sf.jit_method(deps="read", warn_compiles=None)
        def f(self, x):
            return self.w * x + hash(self) % 2

    P(jnp.ones(1), 0).f(1.0)
    P(jnp.ones(1), 1).f(1.0)
    assert "(static; self used as a whole (hash) at test_deps.py:" in str(P.f.recompiles[-1])


def test_bound_method_unbound_call_and_pytree_use():
    """obj.method, Cls.method(obj) and a bound method passed into jax.jit all share programs."""
    Model, _ = _model()
    a, b = Model(jnp.ones(2), name="a"), Model(jnp.ones(2), name="b")
    assert np.array_equal(Model.apply(a, 3.0), [3.0, 3.0])
    assert np.array_equal(jax.jit(lambda m, x: m(x))(b.apply, 3.0), [3.0, 3.0])
    assert Model.apply.compile_count == 1


def test_aot_methods_take_the_instance():
    """.lower, .trace and .eval_shape work on a deps="read" method."""
    Model, _ = _model()
    m = Model(jnp.ones(2))
    assert m.apply.eval_shape(1.0).shape == (2,)
    assert "mul" in str(m.apply.trace(1.0).jaxpr)
    assert m.apply.lower(1.0).compile() is not None


@pytest.mark.usefixtures("no_check_deps")  # counts the traces of the user's function
def test_subclasses_never_share_programs():
    """A subclass instance with the same static values gets its own program (its class differs)."""
    Model, traces = _model()

    @sf.dataclass
    class Sub(Model):
        pass

    Model(jnp.ones(2)).apply(1.0)
    Sub(jnp.ones(2)).apply(1.0)
    assert len(traces) == 2


def test_max_compiles_counts_compiles_not_reuses():
    """max_compiles=1 admits any number of instances sharing one program, then refuses a new one."""
    Model, _ = _model(max_compiles=1)
    for i in range(30):
        Model(jnp.ones(2), name=str(i)).apply(1.0)
    with pytest.raises(sf.RecompileError, match="Model.apply"):
        Model(jnp.ones(2), mode="b").apply(1.0)
    assert Model.apply.compile_count == 1
    assert np.array_equal(Model(jnp.ones(2), name="again").apply(1.0), [1.0, 1.0])


@pytest.mark.usefixtures("no_check_deps")  # counts traces itself
def test_clear_cache_then_reuse():
    """After clear_cache(), shared variants compile again once and are shared again."""
    Model, traces = _model()
    for i in range(3):
        Model(jnp.ones(2), name=str(i)).apply(1.0)
    Model.apply.clear_cache()
    assert Model.apply.cache_size() == 0
    for i in range(3):
        Model(jnp.ones(2), name=str(i)).apply(1.0)
    assert len(traces) == 2


@sf.dataclass
class Pickled:
    w: jax.Array
    name: sf.Static[str] = "p"

    @sf.jit_method(deps="read", warn_compiles=None)
    def f(self, x):
        return self.w * x


def test_pickle_keeps_deps():
    """A class with a deps="read" method pickles (by reference and with cloudpickle) and keeps the option."""
    cloudpickle = pytest.importorskip("cloudpickle")
    Model, _ = _model()
    Copy = cloudpickle.loads(cloudpickle.dumps(Model))
    for i in range(3):
        Copy(jnp.ones(2), name=str(i)).apply(1.0)
    assert Copy.apply.compile_count == 1
    assert pickle.loads(pickle.dumps(Pickled)) is Pickled
    for i in range(3):
        assert np.array_equal(pickle.loads(pickle.dumps(Pickled(jnp.ones(2), name=str(i)))).f(2.0), [2.0, 2.0])
    assert Pickled.f.compile_count == 1


def test_bad_deps_value_is_refused_at_decoration():
    """deps other than "all" or "read" is a TypeError naming the method and the choices."""
    with pytest.raises(TypeError, match=r'bad_deps.*deps must be "all".*or "read".*got \'reads\''):

        @sf.dataclass
        class P:
            w: jax.Array

            @sf.jit_method(deps="reads")
            def bad_deps(self, x):
                return x


def test_sf_jit_refuses_deps():
    """sf.jit(fn, deps=...) is a TypeError naming the function and pointing to jit_method."""

    def free(p, x):
        return x

    with pytest.raises(TypeError, match=r"free: sf.jit does not take deps=.*@sf.jit_method\(deps=\"read\"\)"):
        sf.jit(free, deps="read")
    with pytest.raises(TypeError, match=r"sf.jit does not take deps="):
        sf.jit(deps="read")


def test_wrapper_is_transparent():
    """A deps="read" method carries the user's name, doc and signature, bound and unbound."""
    import inspect

    @sf.dataclass
    class P:
        w: jax.Array
        tag: sf.Static[str] = "t"

        @sf.jit_method(deps="read")
        def f(self, x, y):
            """Doc of f."""
            return self.w * x + y

    p = P(jnp.ones(1))
    assert (P.f.__name__, P.f.__doc__, p.f.__name__, p.f.__doc__) == ("f", "Doc of f.", "f", "Doc of f.")
    assert list(inspect.signature(p.f).parameters) == ["x", "y"]
    assert p.f == P(jnp.ones(1)).f and hash(p.f) == hash(P(jnp.ones(1)).f)
    assert float(p.f(1.0, 1.0)[0]) == 2.0 and float(P.f(p, 1.0, 1.0)[0]) == 2.0


def test_user_errors_keep_a_clean_traceback():
    """An error raised by the method shows the user's frames only, with no internal exception chained."""
    import traceback

    @sf.dataclass
    class P:
        w: jax.Array
        tag: sf.Static[str] = "a"

        @sf.jit_method(deps="read")
        def f(self, x):
            if self.tag == "boom":
                raise ValueError("user error")
            return self.w * x

    p = P(jnp.ones(1), "boom")
    for call in (lambda: p.f(1.0), lambda: P.f(p, 1.0), lambda: p.f(1.0)):
        with pytest.raises(ValueError, match="user error") as info:
            call()
        assert info.value.__context__ is None
        text = "".join(traceback.format_exception(info.value))
        assert "<generated" not in text and "staticfield/_" not in text, text
