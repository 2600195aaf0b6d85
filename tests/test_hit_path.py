"""No Python on a cache hit (DESIGN.md, `@sf.jit_method` / `sf.jit`: "Speed", "Scale",
"Memory"): how many Python calls a hit makes, that a hit never blocks, that a binding
never keeps its instance, and that the C++ hit path gives what the Python path and
plain ``jax.jit`` give, including on a JAX without it (the fallback)."""

from __future__ import annotations

import gc
import sys
import warnings
import weakref

import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings

import staticfield as sf
from staticfield._core import _front

HITS = 10_000


@sf.dataclass
class Layer:
    w: jax.Array
    scale: sf.Static[int] = 1


@sf.dataclass
class Model:
    w: jax.Array
    layers: list
    n: sf.Static[int] = 2
    mode: sf.Static[str] = "a"

    @sf.jit_method
    def step(self, x):
        for layer in self.layers:
            x = x * layer.w + layer.scale
        return self.w * x + self.n

    @sf.jit_method(deps="read")
    def read_step(self, x):
        return self.w * x + self.n

    @sf.jit_method(static_argnames=("k",))
    def static_step(self, x, k):
        return self.w * x + k

    @sf.jit_method
    def typed_step(self, x, k: sf.Static[int]):
        return self.w * x + k

    @sf.jit_method(deps="read", static_argnames=("k",))
    def read_static_step(self, x, k):
        return self.w * x * self.n + k


@sf.jit
def free(model, x):
    return model.w * x + model.n


@sf.jit
def arrays(w, x):
    return w * x


@sf.jit(static_argnames=("k",))
def free_static(w, x, k):
    return w * x + k


class _Calls:
    """Counts Python-level calls (``sys.setprofile``'s "call" events) while active."""

    def __init__(self) -> None:
        self.count = 0

    def _profile(self, frame, event, arg):
        if event == "call":
            self.count += 1

    def __enter__(self) -> _Calls:
        sys.setprofile(self._profile)
        return self

    def __exit__(self, *exc) -> None:
        sys.setprofile(None)
        self.count -= 1  # this method's own call


def _model() -> Model:
    return Model(jnp.ones(3), [Layer(jnp.full(3, 2.0)), Layer(jnp.full(3, 3.0), 2)])


def test_a_hit_runs_no_python_for_instances_and_arrays():
    """obj.method, Cls.method(obj, ...), sf.jit with an instance (nested layers inside)
    and sf.jit with plain arrays: 0 Python calls over 10,000 hits of each."""
    model, x = _model(), jnp.ones(3)
    step = Model.step
    for _ in range(2):  # compile, then bind
        model.step(x), step(model, x), free(model, x), arrays(x, x)
    with _Calls() as method:
        for _ in range(HITS):
            model.step(x)
    with _Calls() as on_class:
        for _ in range(HITS):
            step(model, x)
    with _Calls() as instance:
        for _ in range(HITS):
            free(model, x)
    with _Calls() as plain:
        for _ in range(HITS):
            arrays(x, x)
    assert (method.count, on_class.count, instance.count, plain.count) == (0, 0, 0, 0)
    assert Model.step.compile_count == 1 and free.compile_count == 1 and arrays.compile_count == 1


def test_static_arguments_take_one_lookup():
    """static_argnames on a method, on sf.jit, and an sf.Static[int] parameter: at most
    3 Python calls per hit (DESIGN.md allows one type-strict lookup); here exactly one."""
    model, x = _model(), jnp.ones(3)
    for _ in range(2):
        model.static_step(x, k=1), free_static(x, x, k=1), model.typed_step(x, 1)
    counts = []
    for call in (lambda: model.static_step(x, k=1), lambda: free_static(x, x, k=1), lambda: model.typed_step(x, 1)):
        with _Calls() as calls:
            for _ in range(HITS):
                call()
        counts.append(calls.count / HITS - 1)  # less the lambda's own frame
    assert counts == [1.0, 1.0, 1.0]


def test_deps_read_with_static_arguments_takes_one_lookup():
    """deps="read" with static_argnames is a static-argument form: obj.method(x, k=1) takes
    one type-strict lookup (at most 3 Python calls per hit; here exactly 1), for the
    instance that compiled and for one that shares its program; k=1 and k=1.0 stay apart."""
    model, x = _model(), jnp.ones(3)
    other = sf.replace(model, mode="b")  # a static read_static_step never reads: shares the program
    for _ in range(2):
        model.read_static_step(x, k=1), other.read_static_step(x, k=1)
    assert Model.read_static_step.compile_count == 1
    with _Calls() as calls:
        for _ in range(HITS):
            model.read_static_step(x, k=1)
            other.read_static_step(x, k=1)
    assert calls.count / (2 * HITS) == 1.0
    assert model.read_static_step(x, k=1.0).dtype == jnp.float32
    assert Model.read_static_step.compile_count == 2
    np.testing.assert_array_equal(sf.replace(model, n=3).read_static_step(x, k=1), x * 3 + 1)
    assert Model.read_static_step.compile_count == 3


def test_deps_read_hit_runs_no_python():
    """deps="read": obj.method reaches JAX's C++ dispatch with the key as a static
    argument, and Cls.method(obj, ...) with the instance as a pytree, for the instance
    that compiled and for one that shares its program."""
    model, x = _model(), jnp.ones(3)
    other = sf.replace(model, mode="b")  # a static read_step never reads: shares the program
    for _ in range(2):
        model.read_step(x), other.read_step(x)
    read = Model.read_step
    for _ in range(2):
        read(model, x), read(other, x)
    with _Calls() as calls:
        for _ in range(HITS):
            model.read_step(x)
            other.read_step(x)
            read(model, x)
            read(other, x)
    assert calls.count == 0 and Model.read_step.compile_count == 1


def test_a_hit_of_a_stored_program_runs_no_python(tmp_path):
    """With a program store set, a program it loaded or compiled runs from JAX's C++ cache
    too (each variant's front asks the store on a miss only)."""
    from staticfield import _store

    saved = dict(_store._state)
    sf.set_program_store(tmp_path / "store")
    try:
        @sf.dataclass
        class Stored:
            w: jax.Array
            n: sf.Static[int] = 1

            @sf.jit_method
            def step(self, x):
                return self.w * x + self.n

        g = sf.jit(lambda s, x: s.w - x)
        obj, x = Stored(jnp.ones(3)), jnp.full(3, 2.0)
        for _ in range(3):
            obj.step(x), Stored.step(obj, x), g(obj, x)
        with _Calls() as calls:
            for _ in range(1000):
                obj.step(x)
                Stored.step(obj, x)
                g(obj, x)
        assert calls.count == 0
        np.testing.assert_allclose(obj.step(x), np.full(3, 3.0))
        np.testing.assert_allclose(g(obj, x), np.full(3, -1.0))
        assert Stored.step.compile_count == 1 and g.compile_count == 1
    finally:
        _store._state.update(saved)


def test_static_values_stay_type_strict():
    """`2` and `2.0`, `True` and `1`: separate programs with their own results (JAX's `==`
    on static arguments would merge them)."""
    f = sf.jit(lambda x, k: x * k, static_argnums=1)
    x = jnp.ones(2, jnp.int32)
    assert f(x, 2).dtype == jnp.int32 and f(x, 2.0).dtype == jnp.float32
    assert f(x, True).dtype == jnp.int32 and f(x, 1).dtype == jnp.int32
    assert f.compile_count == 4
    assert f(x, 2).dtype == jnp.int32 and f(x, 2.0).dtype == jnp.float32  # hits, each its own
    assert f.compile_count == 4


def _slow(x):
    return jax.lax.fori_loop(0, 400, lambda i, v: jnp.tanh(v @ v), x)


@sf.dataclass
class Slow:
    x: jax.Array

    @sf.jit_method
    def run(self):
        return _slow(self.x)


def test_a_hit_returns_before_the_device_finishes():
    """A hit queues the program and returns, as jax.jit does (eqx.filter_jit blocks)."""
    x = jnp.eye(256) * 0.5
    slow_free = sf.jit(_slow)
    obj = Slow(x)
    jax.block_until_ready((slow_free(x), obj.run(), Slow.run(obj)))  # compiled
    for call in (lambda: slow_free(x), obj.run, lambda: Slow.run(obj)):
        out = call()
        assert not out.is_ready()
        out.block_until_ready()


@pytest.mark.parametrize("form", ["obj.method", "Cls.method", "sf.jit", "static", "deps"])
def test_a_binding_never_keeps_its_instance_alive(form):
    """Dropping an instance frees it at once, with the cyclic collector off: no reference
    cycle between an instance and its binding, and no cache holds it."""
    x = jnp.ones(3)
    call = {
        "obj.method": lambda m: m.step(x),
        "Cls.method": lambda m: Model.step(m, x),
        "sf.jit": lambda m: free(m, x),
        "static": lambda m: m.static_step(x, k=3),
        "deps": lambda m: m.read_step(x),
    }[form]
    gc.collect()
    gc.disable()
    try:
        for _ in range(3):  # the first call compiles (a miss), the others are hits
            model = _model()
            ref = weakref.ref(model)
            call(model).block_until_ready()
            del model
            assert ref() is None
    finally:
        gc.enable()


def test_a_thousand_static_variants_compile_once_each_and_hit():
    """1000 variants of a static field: one compile each, then every one hits with its
    own result (its own program, found by JAX's C++ cache)."""
    @sf.dataclass
    class Shift:
        x: jax.Array
        n: sf.Static[int]

        @sf.jit_method(warn_compiles=None)
        def add(self, y):
            return self.x * y + self.n

    objs = [Shift(jnp.ones(2), i) for i in range(1000)]
    for obj in objs:
        obj.add(1.0)
    assert Shift.add.compile_count == 1000
    for obj in reversed(objs):
        assert float(obj.add(2.0)[0]) == 2.0 + obj.n
        assert float(Shift.add(obj, 3.0)[0]) == 3.0 + obj.n
    assert Shift.add.compile_count == 1000


def test_the_cpp_hit_path_matches_plain_jax_jit():
    """The same results, dtypes and weak types as plain jax.jit, for instances and arrays,
    under vmap, grad, an outer jit, disable_jit and x64."""
    def f(model, x):
        return jnp.sum(model.w * x) + model.n

    ours, plain = sf.jit(f), jax.jit(f)
    model = _model()
    for x in (jnp.ones(3), np.ones(3, np.float32), 1.0, jnp.arange(3)):
        a, b = ours(model, x), plain(model, x)
        assert a.dtype == b.dtype and a.weak_type == b.weak_type and np.allclose(a, b)
    xs = jnp.arange(6.0).reshape(2, 3)
    np.testing.assert_allclose(jax.vmap(ours, (None, 0))(model, xs), jax.vmap(plain, (None, 0))(model, xs))
    np.testing.assert_allclose(jax.grad(ours, 1)(model, jnp.ones(3)), jax.grad(plain, 1)(model, jnp.ones(3)))
    np.testing.assert_allclose(jax.jit(lambda m, x: ours(m, x) * 2)(model, jnp.ones(3)),
                               jax.jit(lambda m, x: plain(m, x) * 2)(model, jnp.ones(3)))
    with jax.disable_jit():
        assert float(ours(model, jnp.ones(3))) == float(plain(model, jnp.ones(3)))
    with jax.enable_x64(True) if hasattr(jax, "enable_x64") else jax.experimental.enable_x64():
        x64 = jnp.ones(3, jnp.float64)
        assert ours(model, x64).dtype == plain(model, x64).dtype == jnp.float64


def test_donation_through_the_cpp_hit_path():
    """donate_argnums: the donated buffer is deleted on a hit as with jax.jit."""
    f = sf.jit(lambda x: x * 2, donate_argnums=0)
    for _ in range(3):
        x = jnp.ones(4)
        np.testing.assert_allclose(f(x), np.full(4, 2.0))
        assert x.is_deleted()


def test_clear_cache_and_cache_size_count_the_cpp_entries():
    """cache_size() counts what the C++ front keeps; clear_cache() drops it, and the next
    call compiles again (counted)."""
    g = sf.jit(lambda model, x: jnp.sum(model.w) * x)
    model = _model()
    g(model, jnp.ones(3)), g(model, jnp.ones(2))
    assert g.cache_size() == 2 and g.compile_count == 2
    g.clear_cache()
    assert g.cache_size() == 0
    g(model, jnp.ones(3))
    assert g.compile_count == 3 and g.cache_size() == 1


def test_without_the_private_names_the_python_path_serves(monkeypatch):
    """On a JAX without the C++ hit path's private names: one warning, then the Python
    hit path (one call per hit), with the same results and compile counts."""
    monkeypatch.setattr(_front, "available", lambda: False)
    monkeypatch.setattr(_front, "_warned", type(_front._warned)())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")

        @sf.dataclass
        class P:
            w: jax.Array
            n: sf.Static[int] = 1

            @sf.jit_method
            def step(self, x):
                return self.w * x + self.n

            @sf.jit_method(deps="read")
            def read(self, x):
                return self.w * x

            @sf.jit_method(static_argnames=("k",))
            def shift(self, x, k):
                return self.w * x + k

        g = sf.jit(lambda p, x: p.w * x - p.n)
    assert [str(w.message).count("hit path") for w in caught] == [1]  # once, naming the feature
    p, x = P(jnp.ones(3)), jnp.full(3, 2.0)
    for _ in range(2):
        np.testing.assert_allclose(P.step(p, x), np.full(3, 3.0))
        np.testing.assert_allclose(g(p, x), np.full(3, 1.0))
        np.testing.assert_allclose(p.read(x), np.full(3, 2.0))
        np.testing.assert_allclose(p.shift(x, k=2), np.full(3, 4.0))
    with _Calls() as calls:
        for _ in range(100):
            P.step(p, x)
            g(p, x)
            p.read(x)
            p.shift(x, k=2)
    assert calls.count == 400  # one Python call each: the fallback's hit paths
    assert (P.step.compile_count, g.compile_count, P.read.compile_count, P.shift.compile_count) == (1, 1, 1, 1)


_STATICS = st.one_of(st.integers(-3, 3), st.booleans(), st.sampled_from(["a", "b"]),
                     st.sampled_from([0.0, -0.0, 1.0]), st.tuples(st.integers(0, 2), st.integers(0, 2)))


@settings(max_examples=30, deadline=None)
@given(calls=st.lists(st.tuples(_STATICS, st.integers(1, 3), st.booleans()), min_size=1, max_size=8))
def test_hits_agree_with_python_and_count_one_compile_per_key(calls):
    """Random static values (ints, bools, strings, floats with -0.0, tuples), shapes and
    instance or plain arguments: every call equals plain Python, and compile_count is the
    number of distinct type-strict keys seen, on the C++ and the one-lookup hit paths."""
    @sf.dataclass
    class Holder:
        x: jax.Array
        s: sf.Static[object]

    def value(s):
        return float(len(repr(s))) + (1.0 if repr(s).startswith("-") else 0.0)

    on_instance = sf.jit(lambda h, y: h.x * y + value(h.s))
    on_argument = sf.jit(lambda x, y, s: x * y + value(s), static_argnames="s")
    keys_i, keys_a = set(), set()
    for s, size, as_keyword in calls:
        x = jnp.arange(size, dtype=jnp.float32)
        expect = np.arange(size) * 2.0 + value(s)
        np.testing.assert_allclose(on_instance(Holder(x, s), 2.0), expect)
        got = on_argument(x, 2.0, s=s) if as_keyword else on_argument(x, 2.0, s)
        np.testing.assert_allclose(got, expect)
        strict = (repr(s), type(s).__name__, size)  # repr tells -0.0 from 0.0, True from 1
        keys_i.add(strict)
        keys_a.add(strict)
    assert on_instance.compile_count == len(keys_i)
    assert on_argument.compile_count == len(keys_a)


def test_past_sixteen_instance_variants_one_lookup_serves_them():
    """sf.jit(f)(instance, ...) and Cls.method(obj, ...) with more than 16 static variants:
    JAX's C++ cache would compare every variant's key on each hit, so calls take one
    hashed Python lookup instead (DESIGN.md allows it), with the same results and counts."""
    @sf.dataclass
    class V:
        x: jax.Array
        n: sf.Static[int]

        @sf.jit_method(warn_compiles=None)
        def add(self, y):
            return self.x * y + self.n

    f = sf.jit(lambda v, y: v.x * y - v.n, warn_compiles=None)
    objs = [V(jnp.ones(2), i) for i in range(20)]
    for obj in objs:
        f(obj, 1.0), V.add(obj, 1.0)
    assert f.compile_count == V.add.compile_count == 20
    for obj in objs:
        assert float(f(obj, 2.0)[0]) == 2.0 - obj.n and float(V.add(obj, 2.0)[0]) == 2.0 + obj.n
    last = objs[-1]
    with _Calls() as calls:
        for _ in range(1000):
            f(last, 2.0)
            V.add(last, 2.0)
    assert calls.count <= 2 * 1000 * 3
    assert f.compile_count == V.add.compile_count == 20


@sf.dataclass
class Keyed:
    s: sf.Static[object]


@settings(max_examples=50, deadline=None)
@given(a=_STATICS, b=_STATICS)
def test_static_keys_are_interned_type_strictly(a, b):
    """Two instances' static keys are one object exactly when their values are
    type-strictly equal (so JAX's C++ cache compares them with no Python call); hash and
    == agree with that; pickling gives back that object."""
    import pickle

    ka, kb = Keyed(a)._staticfield_flat[1], Keyed(b)._staticfield_flat[1]
    same = type(a) is type(b) and repr(a) == repr(b)  # repr tells -0.0 from 0.0
    assert (ka is kb) == same and (ka == kb) == same and (ka != kb) != same
    if same:
        assert hash(ka) == hash(kb)
    assert pickle.loads(pickle.dumps(ka)) is ka


@sf.dataclass
class Ordered:
    w: jax.Array
    n: sf.Static[int] = 1

    @sf.jit_method
    def plain(self, c, b):
        return self.w + 10 * c + 100 * b

    @sf.jit_method(deps="read")
    def read(self, c, b):
        return self.w + 10 * c + 100 * b

    @sf.jit_method(static_argnames=("k",))
    def static(self, c, b, k):
        return self.w + 10 * c + 100 * b + k


def test_keywords_out_of_name_order_hit_the_right_program():
    """Keywords given out of alphabetical order (`f(a, c=x, b=y)`): JAX's C++ dispatch
    flattens them in name order, so a hit must run a program made for that order. Each
    form, called three times (a miss, then hits), gives what plain Python gives."""
    a, x, y = jnp.ones(2), jnp.full(2, 2.0), jnp.full(2, 3.0)
    obj = Ordered(a)
    free = sf.jit(lambda a, c, b: a + 10 * c + 100 * b)
    expect = np.full(2, 321.0)
    for _ in range(3):
        for out in (free(a, c=x, b=y), obj.plain(c=x, b=y), Ordered.plain(obj, c=x, b=y),
                    obj.read(c=x, b=y), Ordered.read(obj, c=x, b=y)):
            np.testing.assert_allclose(out, expect)
        np.testing.assert_allclose(obj.static(c=x, b=y, k=1), expect + 1)
        np.testing.assert_allclose(Ordered.static(obj, c=x, b=y, k=1), expect + 1)
        np.testing.assert_allclose(free(a, b=y, c=x), expect)  # and the other order after it
