"""jit_method and jit: what recompiles, what does not, and the counters that say so."""

from __future__ import annotations

import threading

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import staticfield as sf


def make_params_class():
    """A fresh class per test, so class-level counters start at zero."""
    traces = {"apply": 0}

    @sf.dataclass
    class Params:
        x: jax.Array
        a: sf.Static[int] = 2

        @sf.jit_method
        def apply(self, y):
            traces["apply"] += 1
            return self.x * y + self.a

        def one_step(self, carry, x):
            return carry + self.a * jnp.sum(self.x) * x, carry

    return Params, traces


def test_new_values_do_not_recompile():
    """New instances with new array values (same shapes/dtypes/statics) reuse the program."""
    Params, traces = make_params_class()
    y = jnp.ones(3)
    for i in range(5):
        out = Params(jnp.full(3, float(i))).apply(y)
        np.testing.assert_allclose(out, np.full(3, i + 2.0))
    assert Params.apply.compile_count == 1
    assert traces["apply"] == 1
    assert Params.apply.cache_size() == 1
    assert Params.apply.recompiles == []


def test_changed_static_recompiles_and_explains():
    """A changed static field always recompiles, once, and the event names self.<field>."""
    Params, traces = make_params_class()
    p = Params(jnp.ones(3))
    p.apply(jnp.ones(3))
    q = p.replace(a=3)
    np.testing.assert_allclose(q.apply(jnp.ones(3)), np.full(3, 4.0))
    q.apply(jnp.ones(3))
    assert Params.apply.compile_count == 2 == traces["apply"]
    (event,) = Params.apply.recompiles
    assert event.function.endswith("Params.apply")
    assert [(c.path, c.kind, c.old, c.new) for c in event.changes] == [("self.a", "static", "2", "3")]
    assert "self.a: 2 → 3" in str(event)


def test_going_back_to_an_old_static_is_a_hit():
    """Toggling between two static values compiles exactly twice."""
    Params, traces = make_params_class()
    p = Params(jnp.ones(2))
    for i in range(20):
        p.replace(a=i % 2).apply(jnp.ones(2))
    assert Params.apply.compile_count == 2 == traces["apply"]


def test_class_call_shares_the_cache_with_bound_call():
    """Cls.method(obj, ...) and obj.method(...) are the same compiled program."""
    Params, traces = make_params_class()
    p = Params(jnp.ones(2))
    np.testing.assert_allclose(Params.apply(p, jnp.ones(2)), p.apply(jnp.ones(2)))
    assert Params.apply.compile_count == 1 == traces["apply"]


def test_type_strict_statics_compile_separately():
    """1, 1.0 and True are different static values: separate programs, right dtypes."""
    traces = []

    @sf.dataclass
    class Scale:
        x: jax.Array
        k: sf.Static[object]

        @sf.jit_method
        def __call__(self):
            traces.append(self.k)
            return self.x * 0 + jnp.asarray(self.k)

    x = jnp.zeros((), jnp.int32)
    outs = [Scale(x, k)() for k in (1, 1.0, True)]
    assert Scale.__call__.compile_count == 3 == len(traces)
    assert [o.dtype for o in outs] == [jnp.int32, jnp.float32, jnp.int32]


def test_two_classes_with_same_layout_never_share():
    """Classes with identical fields and values get separate programs."""

    @sf.dataclass
    class A:
        x: jax.Array
        n: sf.Static[int] = 1

    @sf.dataclass
    class B:
        x: jax.Array
        n: sf.Static[int] = 1

    f = sf.jit(lambda obj: obj.x + obj.n)
    f(A(jnp.ones(2)))
    f(B(jnp.ones(2)))
    assert f.compile_count == 2
    assert f.recompiles[0].changes[0].kind == "structure"


def test_bound_method_is_a_pytree_of_self():
    """obj.method flattens to obj's dynamic leaves and rebuilds a working method."""
    Params, _ = make_params_class()
    p = Params(jnp.arange(3.0))
    leaves, treedef = jax.tree_util.tree_flatten(p.apply)
    assert len(leaves) == 1 and leaves[0] is p.x
    rebuilt = jax.tree_util.tree_unflatten(treedef, [jnp.zeros(3)])
    np.testing.assert_allclose(rebuilt(jnp.ones(3)), np.full(3, 2.0))


def test_bound_method_passed_to_jit_is_not_baked_in():
    """Passing obj.method as a jit argument traces obj's values: new values, same program."""
    Params, _ = make_params_class()
    calls = []

    @jax.jit
    def use(method, y):
        calls.append(1)
        return method(y)

    a = Params(jnp.ones(2))
    b = Params(jnp.zeros(2))
    np.testing.assert_allclose(use(a.apply, jnp.ones(2)), [3.0, 3.0])
    np.testing.assert_allclose(use(b.apply, jnp.ones(2)), [2.0, 2.0])
    assert len(calls) == 1


@pytest.mark.max_compiles(2)  # the scan body adds no compile of its own
def test_scan_body_method_inside_jit():
    """A method used as the lax.scan body inside sf.jit compiles once for new values."""
    Params, _ = make_params_class()
    traces = []

    @sf.jit
    def run(params, xs):
        traces.append(1)
        return lax.scan(params.one_step, 0.0, xs)

    xs = jnp.arange(4.0)
    results = [run(Params(jnp.ones(2) * i), xs)[0] for i in range(1, 4)]
    assert [float(r) for r in results] == [2 * 2 * i * 6.0 for i in range(1, 4)]
    assert run.compile_count == 1 == len(traces)
    run(Params(jnp.ones(2), a=3), xs)
    assert run.compile_count == 2
    change = run.recompiles[0].changes[0]
    assert (change.path, change.kind, change.old, change.new) == ("params.a", "static", "2", "3")


@pytest.mark.max_compiles(1)
def test_jit_method_as_scan_body_inside_jit():
    """A jit_method bound method works as a scan body and stays one compile."""
    Params, _ = make_params_class()

    @sf.jit
    def run(params, ys):
        return lax.scan(lambda c, y: (c + params.apply(y).sum(), None), 0.0, ys)[0]

    for i in range(3):
        assert float(run(Params(jnp.full(2, float(i))), jnp.ones((4, 2)))) == 4 * 2 * (i + 2)
    assert run.compile_count == 1


def test_sf_jit_shares_its_cache_per_function_and_options():
    """sf.jit of the same function and options shares programs and counters; other options do not."""
    traces = []

    def f(x):
        traces.append(x)
        return x + 1

    g1, g2 = sf.jit(f), sf.jit(f)
    g1(jnp.ones(2))
    g1(jnp.ones(3))
    g2(jnp.ones(2))
    assert g1 is g2 and g1.compile_count == 2 == len(traces)
    g3 = sf.jit(f, max_compiles=5)
    g3(jnp.ones(2))
    assert (g1.compile_count, g3.compile_count) == (2, 1)


def test_inline_sf_jit_in_a_loop_traces_once():
    """for ...: sf.jit(f)(x) traces once, like jax.jit(f)(x)."""
    traces = []

    def f(x):
        traces.append(x)
        return x * 2

    for i in range(5):
        sf.jit(f)(jnp.full(2, float(i)))
    assert len(traces) == 1 and sf.jit(f).compile_count == 1


def test_static_argnames_and_argnums_like_jax_jit():
    """static_argnames/static_argnums behave as in jax.jit, counted and type-strict."""
    traces = []

    @sf.jit(static_argnames="n")
    def power(x, n):
        traces.append(n)
        return x ** n

    np.testing.assert_allclose(power(jnp.full(2, 2.0), n=3), [8.0, 8.0])
    power(jnp.full(2, 5.0), n=3)
    power(jnp.full(2, 2.0), n=2)
    assert power.compile_count == 2 == len(traces)
    assert power.recompiles[0].changes[0].kind == "static_arg"
    assert (power.recompiles[0].changes[0].old, power.recompiles[0].changes[0].new) == ("3", "2")

    g = sf.jit(lambda x, flag: x * 2 if flag else x, static_argnums=1)
    g(jnp.ones(2), True)
    g(jnp.ones(2), 1)  # type-strict: True and 1 are different static values
    assert g.compile_count == 2


def test_jit_method_with_static_argnames():
    """A jit_method with static_argnames recompiles per static value and per self static."""

    @sf.dataclass
    class M:
        w: jax.Array
        depth: sf.Static[int] = 1

        @sf.jit_method(static_argnames="train")
        def f(self, x, train=False):
            return self.w * x * (2 if train else 1) * self.depth

    m = M(jnp.ones(2))
    np.testing.assert_allclose(m.f(jnp.ones(2), train=True), [2.0, 2.0])
    m.replace(w=jnp.zeros(2)).f(jnp.ones(2), train=True)
    m.f(jnp.ones(2), train=False)
    m.replace(depth=2).f(jnp.ones(2), train=False)
    assert M.f.compile_count == 3
    assert [c.path for c in M.f.recompiles[-1].changes] == ["self.depth"]


def test_donate_argnums_passes_through():
    """donate_argnums keeps jax.jit's meaning (argument 0 is self)."""

    @sf.dataclass
    class S:
        x: jax.Array

        @sf.jit_method(donate_argnums=0)
        def bump(self):
            return S(self.x + 1)

    s = S(jnp.zeros(3))
    t = s.bump()
    np.testing.assert_allclose(t.x, np.ones(3))
    assert S.bump.compile_count == 1


def test_max_compiles_raises_with_explanation_and_keeps_old_programs():
    """Exceeding max_compiles raises RecompileError with the explanation; nothing is counted."""
    traces = []

    @sf.dataclass
    class P:
        x: jax.Array
        a: sf.Static[int] = 0

        @sf.jit_method(max_compiles=1)
        def f(self):
            traces.append(self.a)
            return self.x + self.a

    p = P(jnp.ones(2))
    p.f()
    with pytest.raises(sf.RecompileError, match=r"(?s)P\.f would compile 2 times, over its budget max_compiles=1 because:\n  self\.a: 0 → 1 \(static\)"):
        p.replace(a=1).f()
    assert P.f.compile_count == 1 and P.f.recompiles == []
    np.testing.assert_allclose(p.replace(x=jnp.zeros(2)).f(), [0.0, 0.0])
    assert P.f.compile_count == 1
    with pytest.raises(sf.RecompileError):  # refused again: it was not cached
        p.replace(a=1).f()


def test_max_compiles_on_sf_jit():
    """sf.jit accepts max_compiles too."""
    f = sf.jit(lambda x: x * 2, max_compiles=2)
    f(jnp.ones(1))
    f(jnp.ones(2))
    with pytest.raises(sf.RecompileError, match="x: f32\\[2\\] → f32\\[3\\]"):
        f(jnp.ones(3))


def test_logging(caplog):
    """Recompiles log at INFO on 'staticfield'; the first compile at DEBUG."""
    f = sf.jit(lambda x: x + 1)
    with caplog.at_level("DEBUG", logger="staticfield"):
        f(jnp.ones(1))
        f(jnp.ones(2))
    records = [(r.levelname, r.getMessage()) for r in caplog.records if r.name == "staticfield"]
    assert records[0][0] == "DEBUG" and "first" in records[0][1]
    assert records[1][0] == "INFO" and "x: f32[1] → f32[2] (shape)" in records[1][1]


def test_threads_call_one_jit_method_concurrently():
    """8 threads calling one jit_method: no errors and exact counts."""
    Params, traces = make_params_class()
    errors = []
    barrier = threading.Barrier(8)

    def work(i):
        try:
            barrier.wait()
            for j in range(20):
                Params(jnp.full(2, float(j)), a=i % 2).apply(jnp.ones(2))
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert Params.apply.compile_count == 2 == traces["apply"]
    assert Params.apply.cache_size() == 2


@pytest.mark.filterwarnings("ignore::staticfield.StaticFieldWarning")  # 100+ compiles on purpose
def test_many_static_variants_are_all_cached():
    """Hundreds of static variants each compile once and are hits afterwards."""
    Params, traces = make_params_class()
    p = Params(jnp.ones(1))
    for i in range(200):
        p.replace(a=i).apply(jnp.ones(1))
    for i in range(200):
        p.replace(a=i).apply(jnp.ones(1))
    assert Params.apply.compile_count == 200 == traces["apply"]


def test_vmap_and_grad_through_jit_method():
    """jit_method composes with vmap (over self) and grad (w.r.t. self)."""
    Params, _ = make_params_class()
    batched = Params(jnp.ones((4, 3)))
    out = jax.vmap(lambda p: p.apply(jnp.ones(3)))(batched)
    assert out.shape == (4, 3)
    g = jax.grad(lambda p: p.apply(jnp.ones(3)).sum())(Params(jnp.ones(3)))
    assert isinstance(g, Params)
    np.testing.assert_allclose(g.x, np.ones(3))


def test_lower_gives_the_same_program():
    """f.lower(...) lowers the variant the call would use."""
    Params, _ = make_params_class()
    p = Params(jnp.ones(2))
    text = Params.apply.lower(p, jnp.ones(2)).as_text()
    assert "stablehlo" in text or "mhlo" in text
    f = sf.jit(lambda x, n: x * n, static_argnums=1)
    assert "stablehlo" in f.lower(jnp.ones(2), 3).as_text()


def test_in_shardings_given_as_an_instance():
    """in_shardings for self may be given as an instance of the class, as with jax.jit."""
    dev = jax.devices()[0]
    s = jax.sharding.SingleDeviceSharding(dev)

    @sf.dataclass
    class P:
        x: jax.Array
        y: jax.Array

    shard_spec = jax.tree_util.tree_map(lambda _: s, P(jnp.ones(1), jnp.ones(1)))
    f = sf.jit(lambda p: p.x + p.y, in_shardings=(shard_spec,))
    np.testing.assert_allclose(f(P(jnp.ones(2), jnp.ones(2))), [2.0, 2.0])


def test_sf_jit_on_a_method_binds_self_like_jax_jit():
    """@sf.jit used on a method binds self (as jax.jit does) and splits it as a pytree."""

    @sf.dataclass
    class P:
        x: jax.Array
        k: sf.Static[int] = 1

        @sf.jit
        def f(self, y):
            return self.x * y * self.k

    np.testing.assert_allclose(P(jnp.ones(2)).f(jnp.full(2, 3.0, jnp.float32)), [3.0, 3.0])
    P(jnp.zeros(2)).f(jnp.ones(2))
    assert P.f.compile_count == 1


def test_a_trace_that_fails_in_user_code_is_not_counted():
    """An error raised while tracing the user's function leaves the counters untouched."""
    bad = sf.jit(lambda x: x + None, max_compiles=1)
    for _ in range(2):  # the retry shows the user's error again, not a budget error
        with pytest.raises(TypeError, match="unsupported operand|NoneType"):
            bad(jnp.ones(1))
    assert bad.compile_count == 0 and bad.recompiles == []


def test_bound_method_lower_binds_self():
    """obj.method.lower(...) lowers with obj as self."""
    Params, _ = make_params_class()
    p = Params(jnp.ones(2))
    assert "stablehlo" in p.apply.lower(jnp.ones(2)).as_text()


def test_bound_method_is_cached_without_a_reference_cycle():
    """obj.method is bound once per instance, and the cache keeps no cycle: obj dies by refcount."""
    import gc
    import weakref

    Params, _ = make_params_class()
    p = Params(jnp.ones(2))
    assert p.apply is p.apply
    p.apply(jnp.ones(2))
    ref = weakref.ref(p)
    gc.disable()
    try:
        del p
        assert ref() is None
    finally:
        gc.enable()


def test_replace_and_copy_never_reuse_a_stale_binding():
    """A binding cached on one instance never leaks into sf.replace's result."""
    import copy

    Params, _ = make_params_class()
    p = Params(jnp.ones(2))
    np.testing.assert_allclose(p.apply(jnp.ones(2)), [3.0, 3.0])
    q = p.replace(x=jnp.zeros(2))
    np.testing.assert_allclose(q.apply(jnp.ones(2)), [2.0, 2.0])
    r = p.replace(a=5)
    np.testing.assert_allclose(r.apply(jnp.ones(2)), [6.0, 6.0])
    np.testing.assert_allclose(copy.copy(p).apply(jnp.ones(2)), [3.0, 3.0])
    assert r.apply.__self__ == r


def test_binding_inside_a_converting_custom_init_is_dropped():
    """A jit_method bound inside a custom __init__ is rebound after converters ran."""

    @sf.dataclass
    class Scaled:
        w: jax.Array = sf.field(converter=lambda v: jnp.asarray(v) * 10)

        def __init__(self, w):
            self.w = w
            self.probe = None  # not a field: refused below if it were kept
            del self.probe
            self.total(jnp.ones(1))

        @sf.jit_method
        def total(self, x):
            return (self.w * x).sum()

    s = Scaled(jnp.ones(2))
    assert float(s.total(jnp.ones(2))) == 20.0


def test_sf_jit_sharing_follows_the_function_not_a_copied_dict():
    """A function made with functools.wraps from a jitted one gets its own sf.jit, not the original's."""
    import functools

    def f(x):
        return x + 1

    g = sf.jit(f)

    @functools.wraps(f)
    def other(x):
        return x * 10

    h = sf.jit(other)
    assert h is not g
    assert float(h(1.0)) == 10.0 and float(g(1.0)) == 2.0


def test_sf_jit_of_a_callable_object_is_not_shared_into_its_state():
    """sf.jit of a callable instance writes nothing into the instance."""
    @sf.dataclass
    class Affine:
        a: float = sf.static(default=2.0)

        def __call__(self, x):
            return self.a * x

    model = Affine()
    f = sf.jit(model)
    assert float(f(3.0)) == 6.0
    assert set(vars(model)) <= {"a", "_staticfield_key", "_staticfield_flat"}


def test_a_bound_method_precompiles_its_own_call():
    """``obj.method.precompile(x)`` (and ``sf.jit(obj.method).precompile(x)``) prepare the
    program of ``obj.method(x)``, as ``lower``/``trace``/``eval_shape`` do: the call then
    compiles nothing (it used to pass ``x`` as ``self`` and raise)."""

    @sf.dataclass
    class Scale:
        w: jax.Array
        n: int = sf.static(default=2)

        @sf.jit_method
        def apply(self, x):
            return self.w * x * self.n

    obj, x = Scale(jnp.ones(3)), jnp.arange(3.0)
    obj.apply.precompile(x)
    assert Scale.apply.compile_count == 1
    with sf.no_compiles():
        out = obj.apply(x)
    assert np.array_equal(out, [0.0, 2.0, 4.0])
    jitted = sf.jit(Scale(jnp.ones(3), n=3).apply)
    jitted.precompile(x)
    with sf.no_compiles():
        out = jitted(x)
    assert np.array_equal(out, [0.0, 3.0, 6.0])
