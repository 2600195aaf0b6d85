"""``sf.jit(fn, static="auto")``'s generated hit: it reads the call's builtin containers in
place where JAX's bare flatten would build a treedef, so it must accept exactly the calls
of its own shape (container classes, lengths, dict keys, leaf classes) and send every
other call to the lookup of that call's own shape. The oracle is the function run
without jit: whatever the order of calls, each call's outputs are its own."""

from __future__ import annotations

import collections
import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import staticfield as sf

Pair = collections.namedtuple("Pair", "a b")


class Tup(tuple):
    """A tuple subclass that is not a named tuple: one leaf for JAX."""

    __slots__ = ()


@dataclasses.dataclass(frozen=True)
class Frozen:
    """A frozen object: keyed by identity once met twice."""

    k: Any


FROZEN = Frozen((1, "a"))
LEAVES = [jnp.ones(2), jnp.ones(3), np.float32(2.0), 1, True, 1.0, 2, -0.0, 0.0, "a", "b", jnp.sin, FROZEN,
          Tup((1, 2))]


def _report(*args: Any, **kwargs: Any) -> tuple:
    """The sum of every array leaf, and what the statics and the structure were: a program
    of another call shows in one or the other."""
    leaves, treedef = jax.tree_util.tree_flatten((args, kwargs))
    arrays = [leaf for leaf in leaves if isinstance(leaf, (jax.Array, np.ndarray, np.generic))]
    statics = [(type(leaf).__name__, repr(leaf)) for leaf in leaves if not isinstance(leaf, (jax.Array, np.ndarray,
                                                                                               np.generic))]
    total = sum((jnp.sum(a) * (i + 1) for i, a in enumerate(arrays)), jnp.zeros(()))
    return total, repr((str(treedef), statics))


def _trees() -> st.SearchStrategy:
    leaf = st.sampled_from(LEAVES) | st.none()
    return st.recursive(
        leaf,
        lambda kids: (st.lists(kids, max_size=3).map(tuple) | st.lists(kids, max_size=3)
                      | st.dictionaries(st.sampled_from(["a", "b", "c"]), kids, max_size=3)
                      | st.tuples(kids, kids).map(lambda t: Pair(*t))),
        max_leaves=6)


_calls = st.tuples(st.lists(_trees(), max_size=3).map(tuple),
                   st.dictionaries(st.sampled_from(["k1", "k2"]), _trees(), max_size=2))


def _swap(tree: Any, swaps: dict[int, int], kinds: dict[type, type]) -> Any:
    """``tree`` with each leaf ``LEAVES[i]`` replaced by ``LEAVES[swaps[i]]`` and each container
    of a class in ``kinds`` remade as the class it maps to (a tuple as a list or a named
    tuple, and back): a call of a related structure whose leaves may differ in class
    (``1``, ``True``, ``1.0``), value or shape."""
    if tree is None:
        return None
    if type(tree) in (tuple, list, Pair):
        items = [_swap(t, swaps, kinds) for t in tree]
        kind = kinds.get(type(tree), type(tree))
        if kind is Pair and len(items) != 2:
            kind = type(tree)
        return Pair(*items) if kind is Pair else kind(items)
    if type(tree) is dict:
        return {k: _swap(v, swaps, kinds) for k, v in tree.items()}
    i = next(i for i, leaf in enumerate(LEAVES) if leaf is tree)
    return LEAVES[swaps.get(i, i)]


_swaps = st.tuples(
    st.dictionaries(st.integers(0, len(LEAVES) - 1), st.integers(0, len(LEAVES) - 1), max_size=4),
    st.dictionaries(st.sampled_from([tuple, list, Pair]), st.sampled_from([tuple, list, Pair]), max_size=2))


@settings(max_examples=80, deadline=None)
@given(st.lists(_calls, min_size=1, max_size=3), st.lists(st.tuples(st.integers(0, 2), _swaps), min_size=1,
                                                          max_size=6))
def test_each_call_runs_its_own_program_whatever_came_before(shapes, order):
    """Property: calls of one structure whose leaves differ (``1`` for ``True`` or ``1.0``,
    ``-0.0`` for ``0.0``, an array of another shape, another string, an equal frozen
    object) and calls of related structures (a tuple for a list, another length, another
    dict key, a named tuple, a tuple subclass), in any order, each return what the
    function returns run without jit."""
    f = sf.jit(_report, static="auto", warn_compiles=None)
    calls = [_swap(shapes[i % len(shapes)], *swaps) for i, swaps in order]
    for args, kwargs in calls * 3:  # three rounds: the generated hits serve the later ones
        total, said = f(*args, **kwargs)
        want_total, want_said = _report(*args, **kwargs)
        assert said == want_said, (args, kwargs)
        assert np.allclose(total, want_total), (args, kwargs)


def test_a_list_in_the_call_changed_in_place_is_read_again():
    """The generated hit reads a list's items on every call: a static changed in place
    selects its own program, an array changed in place is the new array."""
    f = sf.jit(lambda x, cfg: x * cfg[0] + cfg[1], static="auto", warn_compiles=None)
    cfg = [2, jnp.ones(2)]
    for _ in range(3):
        assert jnp.array_equal(f(jnp.ones(2), cfg), jnp.full(2, 3.0))
    cfg[0] = 5
    assert jnp.array_equal(f(jnp.ones(2), cfg), jnp.full(2, 6.0))
    cfg[1] = jnp.zeros(2)
    assert jnp.array_equal(f(jnp.ones(2), cfg), jnp.full(2, 5.0))
    cfg[0] = True
    assert jnp.array_equal(f(jnp.ones(2), cfg), jnp.ones(2)) and f.compile_count == 3  # 2, 5, True


def test_a_dict_with_another_key_of_equal_length_is_another_shape():
    """Two dicts of one length but other keys: each call gets its own program."""
    f = sf.jit(lambda d: sum(v * (i + 1) for i, (k, v) in enumerate(sorted(d.items()))), static="auto",
               warn_compiles=None)
    one, two = {"a": jnp.ones(()), "b": 2.0}, {"a": jnp.ones(()), "c": 2.0}
    for _ in range(3):
        assert float(f(one)) == 5.0 and float(f(two)) == 5.0
    assert float(f({"b": jnp.ones(()), "c": 3.0})) == 7.0
    assert f.compile_count == 3
