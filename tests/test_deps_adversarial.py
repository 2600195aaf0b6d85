"""deps="read" never reuses a program that would compute something different (adversarial cases)."""

from __future__ import annotations

import copy
import dataclasses
import threading

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import staticfield as sf

# Every program shared with a new key is checked against a trace for that key (DESIGN).
pytestmark = pytest.mark.usefixtures("check_deps")


def _class(body, deps="read"):
    """A class whose jit_method runs ``body(self, x)``; statics ``k`` (int) and ``tag`` (str)."""

    @sf.dataclass
    class P:
        w: jax.Array
        k: sf.Static[int] = 1
        tag: sf.Static[str] = "t"

        @sf.jit_method(deps=deps, warn_compiles=None)
        def f(self, x):
            return body(self, x)

    return P


def _same_as_all(body, instances, call=lambda p, x: p.f(x), x=1.0, whole=False):
    """Results with deps="read" are bit-identical to deps="all" and compile no more often
    (with ``whole``, exactly as often: the method used self as a whole)."""
    Read, All = _class(body), _class(body, deps="all")
    for kwargs in instances:
        got = call(Read(jnp.ones(2), **kwargs), x)
        want = call(All(jnp.ones(2), **kwargs), x)
        assert str(jax.tree.structure(got)) == str(jax.tree.structure(want)), kwargs  # same statics
        for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
            assert np.asarray(a).tobytes() == np.asarray(b).tobytes(), kwargs
    assert Read.f.compile_count <= All.f.compile_count
    if whole:
        assert Read.f.compile_count == All.f.compile_count
    return Read


def _identity_scaling_gradient(x, scale):
    """``x``, whose custom_vjp backward rule multiplies the cotangent by ``scale()``: a read
    that happens only when the gradient runs, after the trace has returned."""

    @jax.custom_vjp
    def g(x):
        return x

    def fwd(x):
        return x, None

    def bwd(_, ct):
        return (ct * scale(),)

    g.defvjp(fwd, bwd)
    return g(x)


def test_custom_vjp_rule_reading_self_after_the_trace():
    """A custom_vjp backward rule reading a static after the trace: gradients per instance, not shared."""

    def body(self, x):
        return _identity_scaling_gradient(x, lambda: self.k)

    P = _class(body)
    a, b = P(jnp.ones(1), k=1), P(jnp.ones(1), k=5)
    a.f(1.0)  # traced first without a gradient: the forward pass reads no static
    b.f(1.0)
    grads = [float(jax.grad(p.f)(1.0)) for p in (b, a)]
    assert grads == [5.0, 1.0]


def test_debug_callback_reading_self():
    """A jax.debug.callback reading a static at run time sees each instance's own value."""
    seen = []

    def body(self, x):
        jax.debug.callback(lambda: seen.append(self.tag))
        return x * 2

    P = _class(body)
    a, b, c = (P(jnp.ones(1), tag=tag) for tag in "abc")
    a.f.lower(1.0)  # traced, not run: nothing has read self after the trace yet
    for p in (b, c, a):
        jax.block_until_ready(p.f(1.0))
    jax.effects_barrier()
    assert seen == ["b", "c", "a"]


@pytest.mark.usefixtures("no_check_deps")  # counts the traces of the user's function
def test_reference_kept_past_the_trace():
    """A reference to self stored during the trace makes the program unshared; reading it later is fine."""
    kept = []

    def body(self, x):
        kept.append(self)
        return x

    P = _class(body)
    for tag in ("a", "b"):
        P(jnp.ones(1), tag=tag).f(1.0)
    assert P.f.compile_count == 2
    assert [p.tag for p in kept] == ["a", "b"]
    assert type(kept[0]).__mro__[1] is P or kept[0].__class__ is P


@pytest.mark.parametrize(
    "use",
    [
        lambda self: int(hash(self) == hash(self)),
        lambda self: len(repr(self)) % 3,
        lambda self: len(str(vars(self))) % 3,
        lambda self: int(self == copy.copy(self)),
        lambda self: len(copy.deepcopy(self).tag),
        lambda self: len(sf.replace(self, w=self.w).tag),
        lambda self: len(dataclasses.replace(self, w=self.w).tag),
        lambda self: len(self.replace(w=self.w).tag),
        lambda self: len(jax.tree.map(lambda a: a, self).tag),
        lambda self: len(jax.tree.structure(self).node_data()[1].state["tag"]),
    ],
    ids=["hash", "repr", "vars", "eq_copy", "deepcopy", "sf_replace", "dataclasses_replace",
         "replace_method", "tree_map", "treedef"],
)
def test_whole_instance_uses_read_every_static(use):
    """Using self as a whole inside the method counts as reading every static."""
    _same_as_all(lambda self, x: x * 2 + use(self), [{"tag": t} for t in ("a", "bb", "ccc", "a")], whole=True)


def test_returning_self_or_a_replaced_copy():
    """A method returning self (or sf.replace(self, ...)) returns each instance's own statics."""
    Read = _same_as_all(lambda self, x: sf.replace(self, w=self.w * x),
                        [{"tag": t} for t in ("a", "b")])
    assert Read(jnp.ones(2), tag="zz").f(2.0).tag == "zz"
    Read2 = _same_as_all(lambda self, x: (self, x), [{"tag": t} for t in ("a", "b")])
    assert Read2(jnp.ones(2), tag="q").f(2.0)[0].tag == "q"


def test_passing_self_to_another_jitted_function():
    """self passed into sf.jit, jax.jit or jax.grad inside the method reads every static."""
    inner_sf = sf.jit(lambda p, x: x * len(p.tag), warn_compiles=None)
    inner_jax = jax.jit(lambda p, x: x * len(p.tag))
    for inner in (inner_sf, inner_jax):
        _same_as_all(lambda self, x, inner=inner: inner(self, x), [{"tag": t} for t in ("a", "bb", "ccc")],
                     whole=True)
    _same_as_all(lambda self, x: jax.grad(lambda p: jnp.sum(p.w) * len(p.tag))(self).w * x,
                 [{"tag": t} for t in ("a", "bb")], whole=True)


def test_calling_another_jit_method_of_self():
    """A jit_method of self called inside the method (it reads the whole static key) is never shared."""

    @sf.dataclass
    class P:
        w: jax.Array
        tag: sf.Static[str] = "t"

        @sf.jit_method(warn_compiles=None)
        def inner(self, x):
            return x * len(self.tag)

        @sf.jit_method(deps="read", warn_compiles=None)
        def outer(self, x):
            return self.inner(x)

    assert [float(P(jnp.ones(1), tag=t).outer(1.0)) for t in ("a", "bb", "ccc")] == [1.0, 2.0, 3.0]


def test_helper_methods_and_getattr_reads_are_recorded():
    """Reads through a helper method, getattr and dataclasses.asdict are recorded like direct ones."""
    helpers = [
        lambda self, x: x * getattr(self, "k"),  # noqa: B009 - the getattr path is the point
        lambda self, x: x * dataclasses.asdict(self)["k"],
        lambda self, x: x * object.__getattribute__(self, "k"),
    ]
    for body in helpers:
        _same_as_all(body, [{"k": 1, "tag": "a"}, {"k": 2, "tag": "a"}, {"k": 1, "tag": "b"}])


def test_type_of_self_builds_the_real_class():
    """type(self)(...) inside the method builds an instance of the user's class."""
    out = _same_as_all(lambda self, x: type(self)(w=self.w * x, k=self.k, tag=self.tag),
                       [{"tag": "a"}, {"tag": "b"}])
    made = out(jnp.ones(2), tag="c").f(1.0)
    assert made.__class__ is out and type(made) is out and made.tag == "c"


@pytest.mark.usefixtures("no_check_deps")  # counts the traces of the user's function
def test_isinstance_and_class_inside_the_method():
    """isinstance(self, Cls) and self.__class__ read as the user's class inside the trace."""
    seen = []

    def body(self, x):
        seen.append((isinstance(self, P), self.__class__ is P))
        return x

    P = _class(body)
    P(jnp.ones(1)).f(1.0)
    assert seen == [(True, True)]


def test_swallowing_exceptions_cannot_hide_an_abort():
    """A user's `except Exception` around a read cannot swallow the abort of a shared program."""

    def body(self, x):
        if x.shape[0] > 2:
            try:
                return x * self.k
            except Exception:  # noqa: BLE001 - the point of the test
                return x
        return x

    P = _class(body)
    a, b = P(jnp.ones(1), k=1, tag="a"), P(jnp.ones(1), k=3, tag="b")
    a.f(jnp.ones(2))
    b.f(jnp.ones(2))  # shares a's program: the 2-element trace read nothing
    assert P.f.compile_count == 1
    assert np.array_equal(b.f(jnp.ones(3)), [3.0, 3.0, 3.0])
    assert np.array_equal(a.f(jnp.ones(3)), [1.0, 1.0, 1.0])


@pytest.mark.usefixtures("no_check_deps")  # counts traces itself
def test_retrace_for_new_shapes_reading_outside_the_recorded_set():
    """A shared program retraced for new shapes that reads a new static is not reused; the abort is uncounted."""
    calls = []

    def body(self, x):
        calls.append(1)
        if x.shape[0] > 2:
            return x * self.k
        return x

    P = _class(body)
    a, b = P(jnp.ones(1), k=1, tag="a"), P(jnp.ones(1), k=3, tag="b")
    assert np.array_equal(a.f(jnp.ones(2)), [1.0, 1.0])
    assert np.array_equal(b.f(jnp.ones(2)), [1.0, 1.0])
    assert P.f.compile_count == 1
    assert np.array_equal(b.f(jnp.ones(3)), [3.0, 3.0, 3.0])  # aborted once, then its own
    assert np.array_equal(a.f(jnp.ones(3)), [1.0, 1.0, 1.0])
    assert np.array_equal(b.f(jnp.ones(2)), [1.0, 1.0])
    assert len(calls) == P.f.compile_count + 1  # the aborted trace ran but did not count
    assert P.f.compile_count <= 4  # what deps="all" compiles for these calls


def test_retrace_reading_a_static_all_sharers_agree_on_keeps_sharing():
    """A retrace reading a static on which every sharing instance agrees keeps one program."""

    def body(self, x):
        if x.shape[0] > 2:
            return x * self.k
        return x

    P = _class(body)
    ps = [P(jnp.ones(1), k=2, tag=t) for t in "abc"]
    for p in ps:
        p.f(jnp.ones(2))
    for p in ps:
        assert np.array_equal(p.f(jnp.ones(3)), [2.0, 2.0, 2.0])
    assert P.f.compile_count == 2


def test_max_compiles_does_not_count_an_aborted_trace():
    """With max_compiles, an aborted trace of a shared program is not held against the budget."""

    def body(self, x):
        if x.shape[0] > 2:
            return x * self.k
        return x

    P = _class(body)
    P.f.max_compiles = 2
    a, b = P(jnp.ones(1), k=1, tag="a"), P(jnp.ones(1), k=3, tag="b")
    a.f(jnp.ones(2))
    b.f(jnp.ones(2))
    assert np.array_equal(b.f(jnp.ones(3)), [3.0, 3.0, 3.0])
    assert P.f.compile_count == 2
    with pytest.raises(sf.RecompileError):
        a.f(jnp.ones(3))


def test_threads_first_calls_with_different_read_sets():
    """Many first calls at once, whose traces read different statics, all get their own results."""

    @sf.dataclass
    class P:
        w: jax.Array
        mode: sf.Static[str] = "a"
        x: sf.Static[int] = 0
        y: sf.Static[int] = 0

        @sf.jit_method(deps="read", warn_compiles=None)
        def f(self, v):
            return v * (self.x if self.mode == "a" else 10 * self.y)

    configs = [(m, x, y) for m in "ab" for x in (1, 2) for y in (3, 4)] * 2
    results: dict = {}
    barrier = threading.Barrier(len(configs))

    def run(i, cfg):
        barrier.wait()
        results[i] = float(P(jnp.ones(1), *cfg).f(1.0))

    threads = [threading.Thread(target=run, args=(i, c)) for i, c in enumerate(configs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == {i: float(x if m == "a" else 10 * y) for i, (m, x, y) in enumerate(configs)}
    assert P.f.compile_count <= 8
    for m, x, y in configs:  # and afterwards, sequentially, every lookup is right
        assert float(P(jnp.ones(1), m, x, y).f(1.0)) == float(x if m == "a" else 10 * y)


@sf.dataclass
class Cfg:
    n: sf.Static[int] = 1
    label: sf.Static[str] = "c"


@sf.dataclass
class OtherCfg:
    n: sf.Static[int] = 1
    label: sf.Static[str] = "c"


def _nested(body):
    @sf.dataclass
    class P:
        w: jax.Array
        cfg: sf.Static[object] = Cfg()
        other: sf.Static[str] = "o"

        @sf.jit_method(deps="read", warn_compiles=None)
        def f(self, x):
            return body(self, x)

    return P


def test_a_nested_static_instance_is_read_whole():
    """Reading self.cfg.n of a static instance reads all of cfg (self.cfg is the stored object,
    so nothing read inside it can be missed), and none of the other statics."""
    P = _nested(lambda self, x: x * self.cfg.n)
    outs = [float(P(jnp.ones(1), cfg, o).f(1.0)) for cfg, o in
            [(Cfg(1, "a"), "x"), (Cfg(1, "a"), "y"), (Cfg(2, "a"), "x"), (Cfg(1, "b"), "x")]]
    assert outs == [1.0, 1.0, 2.0, 1.0]
    assert P.f.compile_count == 3
    assert float(P(jnp.ones(1), OtherCfg(1, "a")).f(1.0)) == 1.0  # another class: compiles
    assert P.f.compile_count == 4
    change = P.f.recompiles[-1].changes[0]
    assert (change.path, change.new) == ("self.cfg", "OtherCfg(n=1, label='a')")
    assert change.read.startswith("read at test_deps_adversarial.py:")


def test_nested_instance_used_as_a_whole():
    """hash(self.cfg) or passing self.cfg on reads all of cfg (but not the other statics)."""
    P = _nested(lambda self, x: x * (hash(self.cfg) == hash(self.cfg)) * len(self.cfg.label))
    for cfg, o in [(Cfg(1, "a"), "x"), (Cfg(1, "a"), "y"), (Cfg(2, "a"), "x"), (Cfg(1, "bb"), "x")]:
        assert float(P(jnp.ones(1), cfg, o).f(1.0)) == len(cfg.label)
    assert P.f.compile_count == 3


def test_nested_instance_kept_past_the_trace():
    """A custom_vjp rule reading self.cfg.n through a kept nested instance gets each instance's own value."""

    def body(self, x):
        cfg = self.cfg
        return _identity_scaling_gradient(x, lambda: cfg.n)

    P = _nested(body)
    a, b = P(jnp.ones(1), Cfg(1)), P(jnp.ones(1), Cfg(5))
    a.f(1.0)
    b.f(1.0)
    assert [float(jax.grad(p.f)(1.0)) for p in (b, a)] == [5.0, 1.0]


@pytest.mark.usefixtures("no_check_deps")  # counts the traces of the user's function
def test_nested_instance_identity_is_stable_in_a_trace():
    """self.cfg is self.cfg inside one trace, and isinstance(self.cfg, Cfg) holds."""
    seen = []

    def body(self, x):
        seen.append((self.cfg is self.cfg, isinstance(self.cfg, Cfg), self.cfg.__class__ is Cfg))
        return x

    _nested(body)(jnp.ones(1)).f(1.0)
    assert seen == [(True, True, True)]


def test_key_moved_off_a_program_while_its_call_runs():
    """A call whose key is moved to another program while it runs is made again on its own program."""
    other = []

    def body(self, x):
        if x.shape[0] == 3:
            other[0].f(jnp.ones(4))  # traces the shared program again, reading k: b is moved off it
            return x * self.k
        if x.shape[0] == 4:
            return x * self.k
        return x

    P = _class(body)
    a, b = P(jnp.ones(1), k=1, tag="a"), P(jnp.ones(1), k=3, tag="b")
    other.append(a)
    a.f(jnp.ones(2))
    b.f(jnp.ones(2))
    assert P.f.compile_count == 1
    assert np.array_equal(b.f(jnp.ones(3)), [3.0, 3.0, 3.0])
    assert np.array_equal(P.f(b, jnp.ones(3)), [3.0, 3.0, 3.0])
    assert np.array_equal(a.f(jnp.ones(3)), [1.0, 1.0, 1.0])


def test_threads_with_shape_dependent_reads_stay_correct():
    """Threads calling shared programs with new shapes (which read more statics) all get right results."""

    def body(self, x):
        if x.shape[0] > 2:
            return x * self.k
        return x + 0.0 * len(self.tag)  # reads tag only for short inputs

    P = _class(body)
    instances = [P(jnp.ones(1), k=k, tag=t) for k in (1, 2) for t in ("a", "a2", "bb")]
    calls = [(p, n) for _ in range(3) for p in instances for n in (1, 2, 3, 4)]
    barrier = threading.Barrier(8)
    errors = []

    def worker(i):
        barrier.wait()
        for p, n in calls[i::8]:
            got = np.asarray(p.f(jnp.ones(n)))
            want = np.full(n, float(p.k) if n > 2 else 1.0)
            if not np.array_equal(got, want):
                errors.append((p.k, p.tag, n, got))

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_a_class_that_refuses_subclasses_shares_its_programs():
    """A user's __init_subclass__ that refuses subclasses is never called: the traced self is
    an instance of the class itself, and only the statics read are keyed."""

    @sf.dataclass
    class Strict:
        w: jax.Array
        tag: sf.Static[str] = "t"
        other: sf.Static[int] = 0

        def __init_subclass__(cls, **kwargs):
            raise TypeError("Strict takes no subclasses")

        @sf.jit_method(deps="read", warn_compiles=None)
        def f(self, x):
            return x * len(self.tag)

    outs = [float(Strict(jnp.ones(1), t, o).f(1.0)) for t, o in [("a", 0), ("a", 1), ("bb", 0)]]
    assert outs == [1.0, 1.0, 2.0]
    assert Strict.f.compile_count == 2
