"""``sf.jit(fn, static="auto")``'s hit on objects JAX flattens in Python (an equinox Module,
a registered class): it runs no library's Python flatten, and it never serves a program
for content that changed since (a list or dict changed in place, an attribute rebound,
an object freed and its ``id`` reused)."""

from __future__ import annotations

import dataclasses
import gc
import sys
from typing import Any, Callable

import jax
import jax.numpy as jnp
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import staticfield as sf

X = jnp.arange(3.0)


@jax.tree_util.register_pytree_node_class
@dataclasses.dataclass(frozen=True)
class Node:
    """A frozen class JAX flattens through Python functions, as equinox does."""

    k: Any
    extra: Any = None

    def tree_flatten(self):
        return (self.k, self.extra), None

    @classmethod
    def tree_unflatten(cls, aux, children):
        return cls(*children)


@jax.tree_util.register_pytree_node_class
class Loose:
    """A registered class whose attributes may be rebound."""

    def __init__(self, k):
        self.k = k

    def tree_flatten(self):
        return (self.k,), None

    @classmethod
    def tree_unflatten(cls, aux, children):
        return cls(*children)


def _scaled():
    """``f(x, node)`` = ``x`` times the sum of the node's numbers, and its trace count."""
    traces = [0]

    def f(x, node):
        traces[0] += 1
        return x * sum(jax.tree_util.tree_leaves(node))

    return sf.jit(f, static="auto", warn_compiles=None), traces


def _frames(f: Callable[..., Any], *args: Any, **kwargs: Any) -> list[str]:
    frames: list[str] = []

    def profile(frame, event, arg):
        if event == "call":
            frames.append(f"{frame.f_code.co_filename}:{frame.f_code.co_name}")

    gc.collect()
    gc.disable()
    sys.setprofile(profile)
    try:
        for _ in range(50):
            f(*args, **kwargs)
    finally:
        sys.setprofile(None)
        gc.enable()
    return frames


def _only_the_hit(frames: list[str]) -> bool:
    """Whether 50 calls ran the hit's two frames each (the call, its shape's generated hit)
    and nothing else: no library's flatten, no lookup of another shape, no miss."""
    names = [name.rsplit("/", 1)[-1] for name in frames]
    return (len(names) == 100 and set(names[0::2]) == {"_auto.py:__call__"} and len(set(names[1::2])) == 1
            and names[1].startswith('<generated static="auto" hit #') and names[1].endswith(">:hit"))


def test_a_hit_on_a_python_flattened_object_runs_no_python_flatten():
    """A frozen object whose classes JAX flattens by calling Python (nested, holding floats,
    a function and a bool) costs a hit no Python call but staticfield's two frames."""
    f = sf.jit(lambda x, node, n: node.k[1](x) * node.k[0] * n if node.extra.k else x, static="auto")
    node = Node((2.0, jnp.sin), Node(True))
    for _ in range(3):
        f(X, node, 3)
    frames = _frames(f, X, node, 3)
    assert _only_the_hit(frames), frames[:5]
    assert f.compile_count == 1


@pytest.mark.parametrize("static", [0.25, 1 + 2j, frozenset({"a", "b"}), (0.5, -0.0), "name"], ids=repr)
def test_a_hit_with_each_kind_of_static_takes_the_bare_lookup(static):
    """Statics of every spelling the bare lookup keys (``==``, a float's bits, the
    identity's key) beside a frozen object: after the first calls, a hit never falls back
    to the full flatten (it would run the object's Python flatten again)."""
    f = sf.jit(lambda x, node, s: x * node.k[0] if s is not None else x, static="auto")
    node = Node((2.0, jnp.sin))
    for _ in range(3):
        f(X, node, static)
    frames = _frames(f, X, node, static)
    assert not [name for name in frames if "tree_flatten" in name or name.endswith(":_full")], frames[:8]
    assert f.compile_count == 1


def test_an_equinox_module_hit_runs_no_python_flatten():
    eqx = pytest.importorskip("equinox")

    class Inner(eqx.Module):
        well_posed: Any = None

    class Solver(eqx.Module):
        rtol: float
        norm: Callable = jnp.max
        inner: Inner = Inner(True)

    f = sf.jit(lambda x, s, max_steps=8: s.norm(x) * s.rtol * max_steps if s.inner.well_posed else x, static="auto")
    solver = Solver(rtol=1e-3)
    for _ in range(3):
        f(X, solver, max_steps=4)
    frames = _frames(f, X, solver, max_steps=4)
    assert _only_the_hit(frames), frames[:5]
    assert f.compile_count == 1
    assert jnp.allclose(f(X, Solver(rtol=2e-3), max_steps=4), 2.0 * 2e-3 * 4)
    assert f.compile_count == 2


@pytest.mark.parametrize("change", ["list item", "dict item", "list appended"])
def test_a_list_or_dict_inside_a_frozen_object_changed_in_place_is_seen(change):
    """A frozen object holding a list or a dict can still change inside: the next call
    sees the new values (keyed by value, never by the object's identity)."""
    f, traces = _scaled()
    held = [1.0, 2.0] if change.startswith("list") else {"a": 1.0, "b": 2.0}
    node = Node(held)
    for _ in range(2):
        assert jnp.array_equal(f(X, node), X * 3.0)
    if change == "list item":
        held[0] = 5.0
        want = 7.0
    elif change == "dict item":
        held["a"] = 5.0
        want = 7.0
    else:
        held.append(4.0)
        want = 7.0
    for _ in range(2):
        assert jnp.array_equal(f(X, node), X * want)
    assert traces[0] == 2


def test_an_attribute_rebound_on_a_mutable_registered_object_is_seen():
    f, traces = _scaled()
    obj = Loose(2.0)
    for _ in range(2):
        assert jnp.array_equal(f(X, obj), X * 2.0)
    obj.k = 3.0
    for _ in range(2):
        assert jnp.array_equal(f(X, obj), X * 3.0)
    assert traces[0] == 2


def test_a_freed_objects_reused_id_never_selects_its_program():
    """Fresh frozen objects, each called until keyed by identity and then freed (CPython
    reuses their ids at once), each with another value: every result is its own value's."""
    f, traces = _scaled()
    for i in range(150):
        node = Node(float(i % 50))
        for _ in range(3):  # met twice: then keyed by identity
            assert jnp.array_equal(f(X, node), X * float(i % 50)), i
        del node
    assert traces[0] == 50


def test_equal_fresh_objects_share_a_program():
    f, traces = _scaled()
    for _ in range(3):
        assert jnp.array_equal(f(X, Node(2.0, 1.0)), X * 3.0)
    assert traces[0] == 1


def test_a_hits_non_array_outputs_are_the_objects_returned_in_fresh_containers():
    """A hit served from C++ gives back the output as the function returned it: the very
    objects for its non-array leaves, new containers around them (changing one returned
    output never changes the next), and no Python call but staticfield's two frames."""

    def step(x, n, fn):
        return {"y": fn(x) * n, "n": n, "fn": fn, "pair": (n, [fn])}

    f = sf.jit(step, static="auto")
    for _ in range(3):
        out = f(X, 3, jnp.sin)
    assert out["fn"] is jnp.sin and out["n"] == 3 and out["pair"] == (3, [jnp.sin])
    out["n"] = 99
    out["pair"][1].append(None)
    again = f(X, 3, jnp.sin)
    assert again["n"] == 3 and again["pair"] == (3, [jnp.sin]) and again is not out
    assert jnp.allclose(again["y"], jnp.sin(X) * 3)
    frames = _frames(f, X, 3, jnp.sin)
    assert _only_the_hit(frames), frames[:5]


def test_an_object_of_the_same_class_holding_an_array_is_never_served_by_identity():
    """Objects of one class, one holding only statics (keyed by identity), the next an
    array: the second is traced and its array passed on every call, its results its own."""
    f, traces = _scaled()
    static, holding = Node(2.0), Node(jnp.asarray(3.0))
    for _ in range(2):
        assert jnp.array_equal(f(X, static), X * 2.0)
    for _ in range(2):
        assert jnp.array_equal(f(X, holding), X * 3.0)
    assert jnp.array_equal(f(X, Node(jnp.asarray(4.0))), X * 4.0)
    assert jnp.array_equal(f(X, static), X * 2.0)
    assert traces[0] == 2


@pytest.mark.parametrize("empty", [[], {}, "OrderedDict"])
def test_an_empty_container_inside_a_frozen_object_filled_in_place_is_seen(empty):
    import collections

    f, traces = _scaled()
    held = collections.OrderedDict() if empty == "OrderedDict" else empty
    node = Node(2.0, held)
    for _ in range(2):
        assert jnp.array_equal(f(X, node), X * 2.0)
    if isinstance(held, list):
        held.append(1.0)
    else:
        held["a"] = 1.0
    assert jnp.array_equal(f(X, node), X * 3.0)


def test_an_object_holding_a_list_after_one_proven_immutable_is_never_keyed_by_identity():
    f, traces = _scaled()
    assert jnp.array_equal(f(X, Node(2.0, 1.0)), X * 3.0)
    held = [1.0, 2.0]
    node = Node(held)  # the same class and bare shape, a list inside
    assert jnp.array_equal(f(X, node), X * 3.0)
    held[0] = 5.0
    assert jnp.array_equal(f(X, node), X * 7.0)


def test_a_partial_inside_a_frozen_object_changed_in_place_is_seen():
    """A ``functools.partial`` is keyed by its function, arguments and keywords, and its
    keywords can change in place: an object holding one is never keyed by identity."""
    import functools

    def scale(x, k):
        return x * k

    f = sf.jit(lambda x, node: node.k(x), static="auto", warn_compiles=None)
    p = functools.partial(scale, k=2.0)
    node = Node(p)
    for _ in range(2):
        assert jnp.array_equal(f(X, node), X * 2.0)
    p.keywords["k"] = 3.0
    assert jnp.array_equal(f(X, node), X * 3.0)


def test_a_list_a_frozen_objects_flatten_reads_besides_its_fields_is_seen():
    """A frozen class whose flatten reads an attribute that is not a field (set in
    ``__post_init__``): a list there, changed in place, is seen."""

    @jax.tree_util.register_pytree_node_class
    @dataclasses.dataclass(frozen=True)
    class Scaled:
        k: float

        def __post_init__(self):
            object.__setattr__(self, "extra", [1.0])

        def tree_flatten(self):
            return (self.k, self.extra), None

        @classmethod
        def tree_unflatten(cls, aux, children):
            out = cls(children[0])
            object.__setattr__(out, "extra", children[1])
            return out

    f, traces = _scaled()
    node = Scaled(2.0)
    for _ in range(2):
        assert jnp.array_equal(f(X, node), X * 3.0)
    node.extra[0] = 5.0
    assert jnp.array_equal(f(X, node), X * 7.0)


def test_an_object_called_once_is_not_kept_alive():
    """An object passed once (made afresh for each call) is not held by the wrapper."""
    import weakref

    f, _ = _scaled()
    f(X, Node(1.0))
    node = Node(2.0)
    f(X, node)
    ref = weakref.ref(node)
    del node
    gc.collect()
    assert ref() is None


def _shapes_in_turn():
    """``f(x, n, m=5, *, node=None)`` and the outputs that tell which program ran: the
    statics' types and values come back as they were passed."""

    def f(x, n, m=5, *, node=None):
        k = 0.0 if node is None else node.k[0]
        return x * n + m + k, (type(n).__name__, n, m, None if node is None else node.k)

    return f


def test_calls_of_several_shapes_in_turn_each_run_their_own_program():
    """The generated hit of the shape served last sees another shape's call first: read with its
    getters, ``f(x, 3, 7)`` read as ``f(x, 3)`` would key ``3`` alike. Each must still run the
    program of its own arguments, whichever shape came before."""
    f = sf.jit(_shapes_in_turn(), static="auto", warn_compiles=None)
    node = Node((2.0,))
    calls = [(X, 3), (X, 3, 7), (X, 3, 5), (X, 3.0), (X, True), (X, 3), (X, 3, 7), (X, 3, 7)]
    for _ in range(3):
        for args in calls:
            for kwargs in ({}, {"node": node}):
                out, statics = f(*args, **kwargs)
                want, want_statics = _shapes_in_turn()(*args, **kwargs)
                assert statics == want_statics and type(statics[1]) is type(want_statics[1]), (args, kwargs)
                assert jnp.array_equal(out, want), (args, kwargs)
    assert f.compile_count == 8  # (3) and (3, 5) (the default), (3, 7), (3.0), (True): with and without node


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([1, True, 1.0, 2, -0.0, 0.0]), st.sampled_from([None, 5, 7, 5.0]),
                          st.booleans()), min_size=1, max_size=24))
def test_a_hit_always_runs_the_program_its_arguments_select(calls):
    """Property: whatever the order of call shapes and statics (``1``, ``True`` and ``1.0``
    are three values; ``-0.0`` and ``0.0`` two), each call's outputs equal the function
    run without jit: the hit paths never serve another key's program."""
    fn = _shapes_in_turn()
    f = sf.jit(fn, static="auto", warn_compiles=None)
    node = Node((0.5,))
    for n, m, with_node in calls * 2:
        args = (X, n) if m is None else (X, n, m)
        kwargs = {"node": node} if with_node else {}
        out, statics = f(*args, **kwargs)
        want, want_statics = fn(*args, **kwargs)
        assert repr(statics) == repr(want_statics), (args, kwargs)
        assert jnp.array_equal(out, want), (args, kwargs)
