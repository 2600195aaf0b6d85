"""``vars(obj)`` and ``obj.__dict__`` hold an instance's fields and nothing else (DESIGN.md,
"Inheritance and validation"): code written for chex or plain dataclasses reads them as
the fields, whatever staticfield cached on the instance, and pickling, copying and
``object.__setattr__`` work as before."""

from __future__ import annotations

import copy
import dataclasses
import functools
import pickle
import sys

import jax
import jax.numpy as jnp
import pytest

import staticfield as sf


class State(sf.Struct):
    pos: jax.Array
    step: jax.Array
    mode: sf.Static[str] = "a"

    @sf.jit_method
    def advance(self, dt):
        return self.replace(pos=self.pos + dt, step=self.step + 1)

    @sf.jit_method
    def ahead(self, dt):
        return self.pos + dt


@sf.dataclass
class Plain:
    a: int
    b: sf.Static[int] = 2


def _used(s: State) -> State:
    """``s`` after everything that caches on an instance: a jit call, a binding, a flatten,
    a hash, the deps="read" flatten."""
    s.advance(1.0)
    s.ahead(1.0), s.ahead(1.0)
    jax.tree.leaves(s)
    hash(s)
    s._staticfield_deep  # noqa: B018 - fills deps="read"'s cache
    return s


def test_vars_holds_the_fields_in_declaration_order_whatever_was_cached():
    """After jit calls, a binding, flattens and a hash, vars(obj) and obj.__dict__ are
    exactly the fields, in declaration order (chex's __dict__ is exactly the fields)."""
    s = _used(State(jnp.zeros(2), jnp.asarray(0)))
    assert list(vars(s)) == ["pos", "step", "mode"]
    assert list(s.__dict__) == ["pos", "step", "mode"]
    assert [type(v) for v in s.__dict__.values()][2] is str
    assert dict(vars(s).items()) == {"pos": s.pos, "step": s.step, "mode": "a"}
    assert {**vars(_used(State(jnp.zeros(2), jnp.asarray(0))))}.keys() == {"pos", "step", "mode"}


def test_every_construction_path_shows_the_fields_only():
    """Fields set in another order by a custom __init__, an unflattened instance (JAX's
    outputs), sf.replace, copy and a decorated plain class: the fields, in declaration order."""

    class Custom(sf.Struct):
        a: jax.Array
        n: sf.Static[int]

        def __init__(self, n):
            self.n = n
            self.a = jnp.ones(n)

    assert list(vars(Custom(2))) == ["a", "n"]
    s = State(jnp.zeros(2), jnp.asarray(0))
    out = s.advance(1.0)  # rebuilt by unflatten from the program's outputs
    for obj in (out, sf.replace(out, mode="b"), copy.copy(out), copy.deepcopy(out)):
        assert list(vars(obj)) == ["pos", "step", "mode"]
    p = Plain(1)
    hash(p), jax.tree.leaves(p)
    assert vars(p) == {"a": 1, "b": 2}


def test_writing_to_vars_never_changes_the_instance():
    """vars(obj) is a new dict of the fields: writing to it changes neither the frozen
    instance nor what a flatten or a jit call sees."""
    s = _used(State(jnp.zeros(2), jnp.asarray(0)))
    d = vars(s)
    d["mode"] = "changed"
    d["pos"] = None
    d.clear()
    assert s.mode == "a" and s.pos.shape == (2,)
    assert vars(s)["mode"] == "a"
    assert jnp.array_equal(s.advance(1.0).pos, jnp.ones(2))


def test_pickle_copy_and_object_setattr_are_unchanged():
    """pickle, copy and deepcopy round-trip; object.__setattr__ (the frozen-dataclass escape
    hatch) still changes a field and everything derived from it; vars shows the new value."""
    s = _used(State(jnp.zeros(2), jnp.asarray(0)))
    for other in (pickle.loads(pickle.dumps(s)), copy.copy(s), copy.deepcopy(s)):
        assert other == s and list(vars(other)) == ["pos", "step", "mode"]
        assert jnp.array_equal(other.advance(1.0).pos, jnp.ones(2))
    object.__setattr__(s, "mode", "b")
    assert vars(s)["mode"] == "b" and s.mode == "b"
    assert jax.tree.structure(s) != jax.tree.structure(State(jnp.zeros(2), jnp.asarray(0)))
    assert list(vars(s)) == ["pos", "step", "mode"]


def test_a_class_sent_by_value_shows_the_fields_only():
    """cloudpickle sends a class defined in a function by value; the copy's instances show
    their fields only, and run."""
    cloudpickle = pytest.importorskip("cloudpickle")

    def make():
        class Local(sf.Struct):
            w: jax.Array
            k: sf.Static[int] = 3

            @sf.jit_method
            def f(self, x):
                return self.w * x * self.k

        return Local

    Local = pickle.loads(cloudpickle.dumps(make()))
    obj = Local(jnp.ones(2))
    assert obj.f(1.0).tolist() == [3.0, 3.0]
    assert vars(obj) == {"w": obj.w, "k": 3}


def test_cached_property_still_caches_and_is_no_field():
    """functools.cached_property computes once and is kept with what staticfield derives:
    vars(obj) never shows it; object.__setattr__ drops it."""
    calls = []

    class C(sf.Struct):
        n: sf.Static[int] = 2

        @functools.cached_property
        def double(self):
            calls.append(1)
            return 2 * self.n

    c = C()
    assert (c.double, c.double, len(calls)) == (4, 4, 1)
    assert vars(c) == {"n": 2}
    object.__setattr__(c, "n", 5)
    assert c.double == 10 and len(calls) == 2


def test_the_hit_path_runs_no_python_after_vars():
    """Reading vars(obj) takes nothing away from a hit: 0 Python calls per obj.method(x)
    (a method returning arrays: an instance returned is rebuilt by its unflatten)."""
    s = _used(State(jnp.zeros(2), jnp.asarray(0)))
    vars(s)
    calls = [0]

    def profile(frame, event, arg):
        if event == "call":
            calls[0] += 1

    sys.setprofile(profile)
    try:
        for _ in range(1000):
            s.ahead(1.0)
    finally:
        sys.setprofile(None)
    assert calls[0] == 0


def test_a_field_may_not_be_named_like_the_real_dict():
    """_staticfield_dict is staticfield's: a field of that name is a TypeError naming it."""
    with pytest.raises(TypeError, match=r"Bad: the field name '_staticfield_dict' is reserved by staticfield"):
        @sf.dataclass
        class Bad:
            _staticfield_dict: int


def test_dataclasses_asdict_and_fields_agree_with_vars():
    """dataclasses.asdict and fields name what vars shows."""
    s = State(jnp.zeros(2), jnp.asarray(0))
    assert list(dataclasses.asdict(s)) == list(vars(s)) == [f.name for f in dataclasses.fields(s)]


def test_without_the_namespace_mechanism_it_says_so_once_and_works(monkeypatch):
    """The CPython mechanism (writing a class's namespace) is checked at import; where it is
    missing, decorating says so once (a StaticFieldWarning naming Python's version), vars
    also shows staticfield's entries, and everything else works."""
    from staticfield._core import _compat, _vars

    assert _compat.CLASS_NAMESPACE_PROBLEM == ""  # on every Python staticfield supports
    monkeypatch.setattr(_compat, "class_namespace", lambda cls: None)
    monkeypatch.setattr(_compat, "CLASS_NAMESPACE_PROBLEM", "staticfield: on Python X, vars(obj) also shows")
    monkeypatch.setattr(_vars, "_warned", [])
    with pytest.warns(sf.StaticFieldWarning, match=r"on Python X, vars\(obj\) also shows"):
        class Old(sf.Struct):
            w: jax.Array

    o = Old(jnp.ones(2))
    jax.tree.leaves(o)
    assert "_staticfield_flat" in vars(o) and o.w.shape == (2,)
    assert sf.jit(lambda m: m.w * 2)(o).tolist() == [2.0, 2.0]
