"""deps="read" gives what deps="all" and plain Python give, on the user's own class:
cached values never answer a read, descriptors keep their meaning, ``type(self)`` is
the user's class, and a method binding follows the class attribute."""

from __future__ import annotations

import copy
import functools
from unittest import mock

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import staticfield as sf

# Every program shared with a new key is checked against a trace for that key (DESIGN).
pytestmark = pytest.mark.usefixtures("check_deps")

MODES = ["all", "read"]


# ----------------------------------------------------------------- cached values in nested statics
class CachedCfg(sf.Struct):
    n: sf.Static[int] = 1

    @functools.cached_property
    def double(self):
        return self.n * 2

    @sf.jit_method
    def scale(self, x):
        return x * self.n


def _model(body, deps):
    class M(sf.Struct):
        w: jax.Array
        cfg: sf.Static[CachedCfg] = CachedCfg()
        tag: sf.Static[str] = "t"

        @sf.jit_method(deps=deps, warn_compiles=None)
        def f(self, x):
            return body(self, x)

    return M


@pytest.mark.parametrize("deps", MODES)
def test_cached_property_of_a_nested_static_never_answers_a_read(deps):
    """A cached_property computed on a config before the call: each config gets its own value."""
    M = _model(lambda self, x: x * self.cfg.double, deps)
    one, five = CachedCfg(1), CachedCfg(5)
    assert (one.double, five.double) == (2, 10)  # cached in their __dict__ before any trace
    assert float(M(jnp.ones(1), one).f(1.0)) == 2.0
    assert float(M(jnp.ones(1), five).f(1.0)) == 10.0
    assert M.f.compile_count == 2


@pytest.mark.parametrize("deps", MODES)
def test_a_jit_method_binding_cached_on_a_nested_static_never_answers_a_read(deps):
    """cfg.scale called before (its binding cached on cfg): the method sees each cfg's own n."""
    M = _model(lambda self, x: self.cfg.scale(x), deps)
    one, five = CachedCfg(1), CachedCfg(5)
    assert [float(one.scale(1.0)), float(five.scale(1.0))] == [1.0, 5.0]  # bindings cached
    got = [float(M(jnp.ones(1), cfg).f(1.0)) for cfg in (one, five)]
    assert got == [1.0, 5.0]


@pytest.mark.parametrize("deps", MODES)
def test_a_nested_static_keeps_its_identity(deps):
    """self.cfg is the very object stored: an `is DEFAULT` check gives what it gives with
    deps="all" (equal statics share a program there, as with any jax.jit)."""
    default = CachedCfg(3)
    M = _model(lambda self, x: x * (2.0 if self.cfg is default else 1.0), deps)
    got = [float(M(jnp.ones(1), cfg, tag).f(1.0))
           for cfg, tag in ((default, "a"), (CachedCfg(4), "a"), (default, "b"))]
    assert got == [2.0, 1.0, 2.0]


# ----------------------------------------------------------------- user descriptors over statics
def _with_property(deps):
    class Base(sf.Struct):
        w: jax.Array
        k: sf.Static[int] = 2

        @sf.jit_method(deps=deps, warn_compiles=None)
        def f(self, x):
            return x * self.k

    class Sub(Base):
        @property
        def k(self):
            return 7

    return Base, Sub


@pytest.mark.parametrize("deps", MODES)
def test_a_subclass_property_over_a_static_keeps_its_meaning(deps):
    """A decorated subclass overriding a static with a property: the method sees the property."""
    Base, Sub = _with_property(deps)
    s = Sub(jnp.ones(1))
    assert s.k == 7  # plain Python
    assert float(s.f(1.0)) == 7.0
    assert float(Base(jnp.ones(1)).f(1.0)) == 2.0


def test_a_class_attribute_set_over_a_static_later_is_read_as_plain_python_does():
    """Cls.k = 5 after decoration: instances still read their own k (the dict wins); so does the trace."""

    class P(sf.Struct):
        w: jax.Array
        k: sf.Static[int] = 2
        tag: sf.Static[str] = "t"

        @sf.jit_method(deps="read", warn_compiles=None)
        def f(self, x):
            return x * self.k

    P.k = 5
    assert P(jnp.ones(1), 3).k == 3
    assert [float(P(jnp.ones(1), k).f(1.0)) for k in (3, 4, 3)] == [3.0, 4.0, 3.0]


@pytest.mark.parametrize("deps", MODES)
def test_cached_property_on_self_reading_a_static(deps):
    """A cached_property of the model itself, computed from a static inside the trace."""

    class P(sf.Struct):
        w: jax.Array
        k: sf.Static[int] = 2
        tag: sf.Static[str] = "t"

        @functools.cached_property
        def triple(self):
            return self.k * 3

        @sf.jit_method(deps=deps, warn_compiles=None)
        def f(self, x):
            return x * self.triple

    first = P(jnp.ones(1), 1)
    assert first.triple == 3  # cached on the instance before the call
    got = [float(P(jnp.ones(1), k, t).f(1.0)) for k, t in ((1, "a"), (2, "a"), (1, "b"))]
    assert got == [3.0, 6.0, 3.0]
    assert float(first.f(1.0)) == 3.0
    assert P.f.compile_count == (2 if deps == "read" else 4)


# ----------------------------------------------------------------- the class inside the trace
REGISTRY: dict[str, type] = {}


class Registered(sf.Struct):
    w: jax.Array
    k: sf.Static[int] = 1
    cfg: sf.Static[CachedCfg] = CachedCfg()

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        REGISTRY[cls.__name__] = cls

    @sf.jit_method(deps="read", warn_compiles=None)
    def f(self, x):
        same = jax.tree.structure(self) == jax.tree.structure(type(self)(jnp.ones(1), self.k, self.cfg))
        SEEN.append((type(self) is Registered, type(self).__name__, type(self.cfg) is CachedCfg, same))
        return x


SEEN: list = []


class Layer(Registered):
    pass


@pytest.mark.usefixtures("no_check_deps")  # counts the traces of the user's function
def test_type_of_self_is_the_users_class_and_no_class_is_made():
    """type(self) is the class, type(self)(...) and treedefs compare equal, no subclass reaches
    __init_subclass__ registries."""
    m = Layer(jnp.ones(1), 2)
    for obj in (Registered(jnp.ones(1), 1), m):
        obj.f(1.0)
    assert SEEN == [(True, "Registered", True, True), (False, "Layer", True, True)]
    assert REGISTRY == {"Layer": Layer}
    assert isinstance(m, REGISTRY["Layer"])


# ----------------------------------------------------------------- bindings follow the class
def _jitted_class(deps):
    class M(sf.Struct):
        w: jax.Array
        k: sf.Static[int] = 2

        @sf.jit_method(deps=deps, warn_compiles=None)
        def f(self, x):
            return self.w * x

    return M


@pytest.mark.parametrize("deps", MODES)
def test_replacing_a_method_on_the_class_takes_effect_on_used_instances(deps):
    """M.f = other after m.f was used: m.f is other (a cached binding never hides the class)."""
    M = _jitted_class(deps)
    m = M(jnp.ones(2))
    assert m.f(2.0).tolist() == [2.0, 2.0]
    M.f = lambda self, x: "replaced"
    assert m.f(2.0) == "replaced"


@pytest.mark.parametrize("deps", MODES)
def test_mock_patch_and_monkeypatch_of_a_used_method(deps, monkeypatch):
    """mock.patch.object and monkeypatch.setattr reach instances that called the method before."""
    M = _jitted_class(deps)
    m = M(jnp.ones(2))
    m.f(1.0)
    with mock.patch.object(M, "f", return_value="mocked") as patched:
        assert m.f(1.0) == "mocked"
    patched.assert_called_once_with(1.0)
    assert m.f(3.0).tolist() == [3.0, 3.0]  # restored
    monkeypatch.setattr(M, "f", lambda self, x: "patched")
    assert m.f(1.0) == "patched"


@pytest.mark.parametrize("deps", MODES)
def test_deleting_a_used_method_from_the_class(deps):
    """del M.f after m.f was used: m.f is gone, as in plain Python."""
    M = _jitted_class(deps)
    m = M(jnp.ones(2))
    m.f(1.0)
    del M.f
    with pytest.raises(AttributeError, match="'f'"):
        m.f  # noqa: B018


@pytest.mark.parametrize("deps", MODES)
def test_a_subclass_override_defined_later_is_what_runs(deps):
    """A binding made on a base-class instance does not stand in for a subclass's method."""
    M = _jitted_class(deps)
    m = M(jnp.ones(2))
    m.f(1.0)

    class Sub(M):
        def f(self, x):
            return "sub"

    assert Sub(jnp.ones(2)).f(1.0) == "sub"
    assert m.f(1.0).tolist() == [1.0, 1.0]


# ----------------------------------------------------------------- copies and the escape hatch
@pytest.mark.parametrize("deps", MODES)
def test_copy_then_object_setattr_is_what_jit_sees(deps):
    """copy.copy(m), then object.__setattr__(new, "w", v) (the frozen-dataclass escape hatch):
    new.f, jax.jit and tree_leaves all see v, not m's w."""
    M = _jitted_class(deps)
    m = M(jnp.ones(2))
    m.f(1.0)  # flattened and bound
    new = copy.copy(m)
    object.__setattr__(new, "w", jnp.full(2, 3.0))
    assert new.f(1.0).tolist() == [3.0, 3.0]
    assert jax.jit(lambda o, x: o.w * x)(new, 1.0).tolist() == [3.0, 3.0]
    assert np.asarray(jax.tree.leaves(new)[0]).tolist() == [3.0, 3.0]
    assert m.f(1.0).tolist() == [1.0, 1.0]


# ----------------------------------------------------------------- the checking mode
def _leaky(monkeypatch, body=lambda self, x: self.w * x * self.k):
    """Simulate a recording bug: the traced self answers ``k`` from its dict, unrecorded."""
    from staticfield._deps import _share

    real = _share.stand_in

    def leaky(obj, *args):
        new, *rest = real(obj, *args)
        del new._staticfield_dict.statics["k"]  # the dict holds k's value; its reads go unrecorded
        return (new, *rest)

    monkeypatch.setattr(_share, "stand_in", leaky)

    class P(sf.Struct):
        w: jax.Array
        k: sf.Static[int] = 1
        tag: sf.Static[str] = "t"

        @sf.jit_method(deps="read", warn_compiles=None)
        def f(self, x):
            return body(self, x)

    return P


def test_checking_mode_catches_a_read_that_escaped(monkeypatch):
    """STATICFIELD_CHECK_DEPS=1: a shared program that traces differently for the new key
    raises DepsCheckError naming the method, both keys and the static whose read escaped."""
    P = _leaky(monkeypatch)
    assert P(jnp.ones(1), 1).f(1.0).tolist() == [1.0]
    with pytest.raises(sf.DepsCheckError) as info:
        P(jnp.ones(1), 2).f(1.0)
    text = str(info.value)
    assert text.startswith("_leaky.<locals>.P.f: deps=\"read\" shared the program traced for self.k=1 "
                           "with self.k=2, but the method traces differently for them (the equations")
    assert "a read of self.k escaped the recording" in text
    assert "use deps=\"all\" (the default) for this method" in text
    assert isinstance(info.value, RuntimeError)


@pytest.mark.parametrize("read", [
    lambda self: dict.get(vars(self), "k", 0),
    lambda self: sum(v for k, v in dict.items(vars(self)) if k == "k"),
    lambda self: dict.get(object.__getattribute__(self, "__dict__"), "k", 0),
], ids=["dict.get(vars(self))", "dict.items(vars(self))", "object.__getattribute__"])
@pytest.mark.parametrize("checking", [True, False])
def test_obtaining_vars_self_reads_every_static(read, checking, monkeypatch):
    """``dict``'s own C methods called on ``vars(self)`` go past any recording dict's
    overrides; so obtaining ``vars(self)`` (or ``self.__dict__``, however it is reached)
    reads every static: a new value there compiles a program of its own, with or without
    STATICFIELD_CHECK_DEPS=1 (DESIGN.md: "obtaining vars(self) or self.__dict__ reads
    every static"). ``inspect.getattr_static`` reads no value: see test_reassign.py."""
    if not checking:
        monkeypatch.delenv("STATICFIELD_CHECK_DEPS", raising=False)

    class P(sf.Struct):
        w: jax.Array
        k: sf.Static[int] = 3
        tag: sf.Static[str] = "t"

        @sf.jit_method(deps="read", warn_compiles=None)
        def f(self, x):
            return self.w * x * read(self)

    assert P(jnp.ones(1)).f(1.0).tolist() == [3.0]
    assert P(jnp.ones(1), k=4).f(1.0).tolist() == [4.0]
    assert P(jnp.ones(1), k=4, tag="u").f(1.0).tolist() == [4.0]
    assert P.f.compile_count == 3
    (first, second) = P.f.recompiles
    assert "vars(self)" in str(first)


def test_checking_mode_compares_the_first_trace_with_an_ordinary_one(monkeypatch):
    """A recording self that computes something else than an ordinary one (simulated: its
    dict answers k with a wrong value, unrecorded) raises DepsCheckError at the first call,
    before any sharing."""
    from staticfield._deps import _share, _trace

    real = _trace.stand_in

    def wrong(obj, *args):
        new, *rest = real(obj, *args)
        del new._staticfield_dict.statics["k"]
        dict.__setitem__(new._staticfield_dict, "k", 7)
        return (new, *rest)

    monkeypatch.setattr(_share, "stand_in", wrong)
    monkeypatch.setattr(_trace, "stand_in", wrong)

    class P(sf.Struct):
        w: jax.Array
        k: sf.Static[int] = 1

        @sf.jit_method(deps="read", warn_compiles=None)
        def f(self, x):
            return self.w * x * self.k

    with pytest.raises(sf.DepsCheckError, match=r"P.f: deps=\"read\" traced the method for self.k=1 "
                                                  r"with a recording self, and it traces differently"):
        P(jnp.ones(1)).f(1.0)


def test_checking_mode_compares_what_a_gradient_uses(monkeypatch):
    """STATICFIELD_CHECK_DEPS=1 also compares the gradient: an escaped read that only a
    custom_vjp backward rule uses (the forward equations are the same) raises DepsCheckError."""
    P = _leaky(monkeypatch, lambda self, x: _identity_scaling(self.w * x, lambda k=self.k: k))
    assert P(jnp.ones(1), 1).f(1.0).tolist() == [1.0]
    with pytest.raises(sf.DepsCheckError, match=r"P.f: .* self.k=1 with self.k=2, .*the gradient"):
        P(jnp.ones(1), 2).f(1.0)


def test_without_the_checking_mode_the_same_escape_is_silent(monkeypatch):
    """The same simulated bug without the checking mode returns the first key's result:
    what the checking mode is for."""
    monkeypatch.delenv("STATICFIELD_CHECK_DEPS", raising=False)
    P = _leaky(monkeypatch)
    P(jnp.ones(1), 1).f(1.0)
    assert P(jnp.ones(1), 2).f(1.0).tolist() == [1.0]  # wrong, as the leak makes it


def test_checking_mode_passes_sound_sharing_and_never_counts_its_traces(monkeypatch):
    """Sharing that is right passes the check; its extra traces are not compiles."""
    traces = 0

    class P(sf.Struct):
        w: jax.Array
        k: sf.Static[int] = 1
        tag: sf.Static[str] = "t"

        @sf.jit_method(deps="read", warn_compiles=None)
        def f(self, x):
            nonlocal traces
            traces += 1
            return self.w * x * self.k

    got = [P(jnp.ones(1), 1, t).f(1.0).tolist() for t in ("a", "b", "c")]
    assert got == [[1.0]] * 3
    assert P.f.compile_count == 1
    # the real trace; the check's of the first trace (recording and ordinary self), then of
    # each shared key, forward and gradient (JAX may reuse some)
    assert 3 <= traces <= 1 + 4 + 2 * 4


# ----------------------------------------------------------------- static arguments
def _with_static_args(deps, **jit_kwargs):
    class P(sf.Struct):
        w: jax.Array
        k: sf.Static[int] = 1
        tag: sf.Static[str] = "t"

        @sf.jit_method(deps=deps, warn_compiles=None, **jit_kwargs)
        def f(self, x, n, *, scale=1.0):
            out = self.w * x * self.k
            for _ in range(n):  # n must be static: a Python int here
                out = out + 1.0
            return out * scale

    return P


@pytest.mark.parametrize("jit_kwargs", [dict(static_argnums=2), dict(static_argnames=("n", "scale"))],
                         ids=["argnums", "argnames"])
def test_static_arguments_with_deps_read(jit_kwargs):
    """deps="read" with static_argnums/argnames: equal static arguments share across unread
    statics; another static argument value (type-strict) compiles; results equal deps="all"."""
    Read, All = _with_static_args("read", **jit_kwargs), _with_static_args("all", **jit_kwargs)
    calls = [(1, "a", 2), (1, "b", 2), (1, "c", 2), (2, "a", 2), (1, "a", 3), (1, "b", True)]
    for k, tag, n in calls:
        got = Read(jnp.ones(1), k, tag).f(1.0, n)
        want = All(jnp.ones(1), k, tag).f(1.0, n)
        assert got.tolist() == want.tolist(), (k, tag, n)
    assert Read.f.compile_count == 4 < All.f.compile_count == 6
    assert Read.f(Read(jnp.ones(1), 1, "z"), 1.0, 2).tolist() == [3.0]  # Cls.f(obj, ...)
    assert Read.f.compile_count == 4


def test_static_keyword_with_deps_read_and_aot():
    """A static keyword is part of what must match; lower/trace take the user's arguments."""
    P = _with_static_args("read", static_argnames=("n", "scale"))
    a, b = P(jnp.ones(1), 1, "a"), P(jnp.ones(1), 1, "b")
    assert a.f(1.0, n=1, scale=2.0).tolist() == b.f(1.0, n=1, scale=2.0).tolist() == [4.0]
    assert b.f(1.0, n=1, scale=3.0).tolist() == [6.0]
    assert P.f.compile_count == 2
    assert "mul" in str(P.f.trace(a, 1.0, n=1, scale=2.0).jaxpr)
    assert "multiply" in P.f.lower(b, 1.0, n=1, scale=2.0).as_text()


# ----------------------------------------------------------------- sf.watch
def _shape_reader():
    class P(sf.Struct):
        w: jax.Array
        k: sf.Static[int] = 1
        tag: sf.Static[str] = "t"

        @sf.jit_method(deps="read", warn_compiles=None)
        def f(self, x):
            return x * (self.k if x.shape[0] == 3 else 1)  # reads k for 3 elements only

    return P


@pytest.mark.usefixtures("no_check_deps")  # counts the method's traces under sf.watch
def test_watch_does_not_report_an_aborted_retrace_as_a_trace_that_raised():
    """A retrace that deps="read" aborts (its keys disagree on a new read) and makes again is
    not "a trace that raised": the report counts the compiles that happened, no failure."""
    P = _shape_reader()
    with sf.watch() as w:
        P(jnp.ones(1), 1, "a").f(jnp.ones(2))
        P(jnp.ones(1), 2, "a").f(jnp.ones(2))  # shares: k was not read
        assert P(jnp.ones(1), 2, "a").f(jnp.ones(3)).tolist() == [2.0] * 3  # reads k: aborts, again
    (entry,) = [e for e in w.functions if not e.eager]
    assert entry.failed_traces == 0
    assert entry.count == P.f.compile_count == 2
    assert "raised" not in w.report()
    assert [c.call_site.split(":")[0] for c in entry.compiles] == ["tests/test_deps_soundness.py"] * 2


@pytest.mark.usefixtures("no_check_deps")
def test_watch_never_blames_an_unread_static_and_says_where_the_read_was():
    """sf.watch explains a deps="read" recompile by the statics the method read, with the
    line that read them, as sf.Recompile does; a static that also changed but was never
    read is not named."""
    P = _shape_reader()
    with sf.watch() as w:
        P(jnp.ones(1), 1, "a").f(jnp.ones(3))  # reads k
        P(jnp.ones(1), 2, "b").f(jnp.ones(3))  # k and tag differ; only k was read
    (entry,) = [e for e in w.functions if not e.eager]
    changes = [(c.path, c.kind) for c in entry.compiles[1].changes]
    assert changes == [("self.k", "static")]
    assert entry.compiles[1].changes[0].read.startswith("read at test_deps_soundness.py:")
    assert "self.k: 1 → 2 (static; read at test_deps_soundness.py:" in w.report()
    assert "self.tag" not in w.report()
    assert [(c.path, c.read[:8]) for c in P.f.recompiles[-1].changes] == [("self.k", "read at ")]


# ----------------------------------------------------------------- nested instances in dynamic fields
class Dense(sf.Struct):
    w: jax.Array
    n: sf.Static[int] = 1
    name: sf.Static[str] = "dense"


class Block(sf.Struct):
    inner: Dense
    scale: sf.Static[float] = 1.0
    label: sf.Static[str] = "block"


def _stack(deps, body=None):
    class Net(sf.Struct):
        layers: tuple
        block: Block
        tag: sf.Static[str] = "net"

        @sf.jit_method(deps=deps, warn_compiles=None)
        def __call__(self, x):
            if body is not None:
                return body(self, x)
            for layer in self.layers:
                x = x * layer.w * layer.n
            return x * self.block.inner.w * self.block.scale

    return Net


def _net(Net, ns=(1, 2), names=("a", "b"), scale=1.0, label="block", inner_name="dense"):
    layers = tuple(Dense(jnp.full(2, 2.0), n, name) for n, name in zip(ns, names))
    return Net(layers, Block(Dense(jnp.ones(2), 3, inner_name), scale, label))


def test_nested_layers_share_a_program_across_statics_never_read():
    """Layers (sf instances in a tuple and in a nested field) that differ only in statics the
    method never reads share one program; a static it reads compiles; results equal deps="all"."""
    Read, All = _stack("read"), _stack("all")
    variants = [dict(names=("a", "b")), dict(names=("c", "d")), dict(label="other", inner_name="x"),
                dict(ns=(1, 3)), dict(scale=2.0), dict(names=("e", "f"), ns=(1, 3))]
    for kw in variants:
        got, want = _net(Read, **kw)(jnp.ones(2)), _net(All, **kw)(jnp.ones(2))
        assert got.tolist() == want.tolist(), kw
    assert Read.__call__.compile_count == 3
    assert All.__call__.compile_count == 6
    event = Read.__call__.recompiles[0]
    assert [c.path for c in event.changes] == ["self.layers[1].n"]
    assert event.changes[0].read.startswith("read at test_deps_soundness.py:")


def test_a_thousand_models_differing_in_an_unread_nested_static_compile_once():
    """The jax#33043 sweep, one level down: 1000 models whose layers' names differ, one compile."""
    Net = _stack("read")
    for i in range(1000):
        _net(Net, names=(f"a{i}", f"b{i}"))(jnp.ones(2))
    assert Net.__call__.compile_count == 1


def test_nested_instance_used_as_a_whole_reads_all_of_it():
    """hash(self.layers[0]) reads every static of that layer (and nothing else)."""
    Net = _stack("read", lambda self, x: x * (hash(self.layers[0]) == hash(self.layers[0])))
    for kw in (dict(names=("a", "b")), dict(names=("a", "c")), dict(names=("z", "b"))):
        _net(Net, **kw)(jnp.ones(2))
    assert Net.__call__.compile_count == 2  # layers[0].name changed once; layers[1].name is unread


def test_nested_instances_in_a_list_stay_keyed_by_jax():
    """Layers in a list (mutable) keep their statics in JAX's key: sound, never shared."""

    class Net(sf.Struct):
        layers: list
        tag: sf.Static[str] = "net"

        @sf.jit_method(deps="read", warn_compiles=None)
        def __call__(self, x):
            return x * self.layers[0].w * self.layers[0].n

    outs = [Net([Dense(jnp.ones(2), n, name)])(jnp.ones(2)).tolist() for n, name in ((1, "a"), (1, "b"), (2, "a"))]
    assert outs == [[1.0, 1.0], [1.0, 1.0], [2.0, 2.0]]
    assert Net.__call__.compile_count == 3


def test_a_nested_instance_kept_past_the_trace_reads_all_of_it():
    """A custom_vjp rule reading a layer's static after the trace: each model its own value."""

    def body(self, x):
        layer = self.layers[0]
        return _identity_scaling(x, lambda: layer.n)

    Net = _stack("read", body)
    a, b = _net(Net, ns=(1, 2)), _net(Net, ns=(5, 2))
    a(1.0), b(1.0)
    assert [float(jax.grad(m)(1.0)) for m in (b, a)] == [5.0, 1.0]


def test_a_tuple_of_layers_kept_past_the_trace_reads_all_of_them():
    """A custom_vjp rule closing over the layers tuple (layers = self.layers, then
    layers[0].n) gets each model's own value, as with deps="all"."""

    def body(self, x):
        layers = self.layers
        return _identity_scaling(x, lambda: layers[0].n)

    for deps in ("all", "read"):
        Net = _stack(deps, body)
        a, b = _net(Net, ns=(1, 2)), _net(Net, ns=(5, 2))
        a(1.0), b(1.0)
        assert [float(jax.grad(m)(1.0)) for m in (b, a)] == [5.0, 1.0], deps


def test_a_callback_closing_over_the_layers_tuple_sees_each_models_values():
    """A jax.debug.callback reading layers[0].n through the tuple sees each model's own n."""
    seen = []

    def body(self, x):
        layers = self.layers
        jax.debug.callback(lambda: seen.append(layers[0].n))
        return x * 2

    Net = _stack("read", body)
    models = [_net(Net, ns=(n, 2)) for n in (1, 5, 7)]
    models[0].__call__.lower(1.0)
    for m in models[1:] + models[:1]:
        jax.block_until_ready(m(1.0))
    jax.effects_barrier()
    assert seen == [5, 7, 1]


def _identity_scaling(x, scale):
    @jax.custom_vjp
    def g(x):
        return x

    g.defvjp(lambda x: (x, None), lambda _, ct: (ct * scale(),))
    return g(x)


def test_nested_reads_with_static_arguments_and_bound_methods_as_pytrees():
    """The same sharing through Cls.method(obj, ...), obj.method passed into jax.jit, and
    static arguments."""

    class Net(sf.Struct):
        layers: tuple
        tag: sf.Static[str] = "net"

        @sf.jit_method(deps="read", warn_compiles=None, static_argnames="k")
        def f(self, x, k=1):
            return x * self.layers[0].w * self.layers[0].n * k

    nets = [Net((Dense(jnp.ones(2), 2, name),)) for name in ("a", "b", "c")]
    assert [Net.f(m, 1.0, k=2).tolist() for m in nets] == [[4.0, 4.0]] * 3
    assert Net.f.compile_count == 1
    outer = jax.jit(lambda method, x: method(x))
    assert [outer(m.f, 1.0).tolist() for m in nets] == [[2.0, 2.0]] * 3
