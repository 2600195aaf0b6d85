"""One property suite for the one identity of static values: for pairs of values of every
kind DESIGN lists (``_identity_values``), each site that keys on a static value as such
answers "the same" exactly when the identity does: in one process for the keys and the
hit paths' fast keys, and across two fresh processes with different ``PYTHONHASHSEED``s
for ``trust="source"`` keys and agreement digests. A site added later joins this suite.

The sites exempt by design are tested for their own rule: ``trust="trace"`` (two values
that trace to one program may share it: ``test_store_soundness``), ``deps="read"`` (the
statics read: ``test_deps_properties``), identity-hashed values across processes (type
only: below), explanations (the identity's first difference: ``test_identity``).
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import pickle
import sys
import warnings

import jax
import jax.numpy as jnp
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import _identity_values as iv
import staticfield as sf
from staticfield import _agree
from staticfield._core import _portable
from staticfield._core._identity import key
from staticfield._core._keys import StaticArgKey
from staticfield._store import _key, _records

FAST = settings(max_examples=300, deadline=None)
COMPILING = settings(max_examples=40, deadline=None)

values = st.sampled_from(iv.POOL)
# Pairs: two that Python calls equal (1 and True, {1, 9} and {9, 1}, 0.0 and -0.0), two
# draws, or a value and its copy.
pairs = st.one_of(st.sampled_from(iv.EQUAL_PAIRS), st.tuples(values, values),
                  values.map(lambda v: (v, copy.deepcopy(v))))


@sf.dataclass
class Holder:
    v: object = sf.static()


@sf.dataclass
class AnyLeaves:
    v: object = sf.field(leaves="any")


@sf.dataclass(check=False)
class Loose:
    v: object


@jax.tree_util.register_pytree_node_class
@dataclasses.dataclass(frozen=True)
class Node:
    """A frozen class JAX flattens by calling Python (as an equinox Module): a static="auto"
    hit keys it by identity once its content is proven immutable."""

    v: object

    def tree_flatten(self):
        return (self.v,), None

    @classmethod
    def tree_unflatten(cls, aux, children):
        return cls(*children)


def _quiet(fn, *args):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", sf.StaticFieldWarning)
        return fn(*args)


# ----- in one process: the keys ------------------------------------------------------------
@FAST
@given(pairs)
def test_the_identity_key_is_designs_identity(pair):
    a, b = pair
    assert (key(a) == key(b)) == iv.same(a, b)


@FAST
@given(pairs)
def test_static_fields_and_an_instances_eq_and_hash_follow_the_identity(pair):
    a, b = pair
    x, y = _quiet(Holder, a), _quiet(Holder, b)
    same = iv.same(x.v, y.v)  # the frozen values (a list is a tuple by now)
    assert (x == y) == same
    assert (jax.tree_util.tree_structure(x) == jax.tree_util.tree_structure(y)) == same
    if same:
        assert hash(x) == hash(y)


@FAST
@given(pairs)
def test_static_argument_keys_follow_the_identity(pair):
    a, b = pair
    assert (StaticArgKey(a) == StaticArgKey(b)) == iv.same(a, b)


def _leaves(p):
    """Pairs of static leaves for static="auto" and leaves="any": NumPy values are traced
    there, and a FrozenDict is a pytree node (see ``iv.holds_frozendict``)."""
    return not any(iv.holds_numpy(v) or iv.holds_frozendict(v) for v in p)


@FAST
@given(pairs.filter(_leaves))
def test_leaves_any_leaves_follow_the_identity(pair):
    a, b = pair
    x, y = AnyLeaves(v=(jnp.ones(()), a)), AnyLeaves(v=(jnp.ones(()), b))
    structure = jax.tree_util.tree_structure
    assert (structure(x) == structure(y)) == iv.same(a, b)


@FAST
@given(pairs)
def test_warmup_records_keep_the_identity(pair):
    """A record read back gives the key it was written from, exactly when the value read back
    is the same identity (an identity-hashed object has no identity in another process:
    exempt). Python cannot build a set in a given iteration order: a set of colliding
    strings read back may iterate otherwise, and is then another value, whose key differs
    (warm-up compiles it at its first call: a cost, never another program's result)."""
    a, _ = pair
    if iv.holds_identity_hashed(a):
        return
    vkey = (StaticArgKey(a),)
    try:
        data = pickle.dumps(_records._plain(vkey), protocol=4)
    except Exception:  # a lambda: no record is written
        return
    back = _records._keyed(pickle.loads(data))
    assert (back == vkey) == iv.same(back[0].raw, a)
    if back != vkey:
        assert iv.same(back[0].raw, a, set_order=False)  # the same items, another order


# ----- in one process: the hit paths' fast keys, by what compiles ---------------------------
def _compiles(wrap, call, a, b):
    """Calls with a, a, b, b, a (hits after each first call): how many programs."""
    f = wrap()
    for v in (a, a, b, b, a):
        _quiet(call, f, v)
    return f.compile_count


arguments = pairs.filter(lambda p: not iv.holds_ndarray(p[0]) and not iv.holds_ndarray(p[1]))


@COMPILING
@given(arguments)
def test_static_argnums_hit_paths_follow_the_identity(pair):
    a, b = pair

    def wrap():
        return sf.jit(lambda x, s: x + 1, static_argnums=1)

    assert _compiles(wrap, lambda f, v: f(jnp.ones(()), v), a, b) == (1 if iv.same(a, b) else 2)


@COMPILING
@given(arguments)
def test_static_parameter_hit_paths_follow_the_identity(pair):
    a, b = pair

    def wrap():
        def f(x, s: sf.Static[object]):
            return x + 1

        return sf.jit(f)

    assert _compiles(wrap, lambda f, v: f(jnp.ones(()), v), a, b) == (1 if iv.same(a, b) else 2)


@COMPILING
@given(pairs.filter(_leaves))
def test_static_auto_hit_paths_follow_the_identity(pair):
    a, b = pair

    def wrap():
        return sf.jit(lambda x, s: x + 1, static="auto")

    assert _compiles(wrap, lambda f, v: f(jnp.ones(()), v), a, b) == (1 if iv.same(a, b) else 2)


@COMPILING
@given(pairs.filter(_leaves))
def test_static_auto_hit_paths_on_objects_follow_the_identity(pair):
    """The same pair inside objects JAX flattens in Python: each object passed again (a hit
    keyed by the object's identity) and a copy of it."""
    a, b = pair
    na, nb = Node(a), Node(b)
    f = sf.jit(lambda x, node: x + 1, static="auto")
    for node in (na, na, nb, nb, na, Node(a), copy.copy(nb)):
        _quiet(f, jnp.ones(()), node)
    assert f.compile_count == (1 if iv.same(a, b) else 2)


@COMPILING
@given(pairs.filter(lambda p: not isinstance(p[0], (tuple, frozenset, sf.FrozenDict, iv.Inner))
                    and not isinstance(p[1], (tuple, frozenset, sf.FrozenDict, iv.Inner))
                    and not iv.holds_numpy(p[0]) and not iv.holds_numpy(p[1])))
def test_check_false_field_leaves_follow_the_identity(pair):
    """A non-array leaf held directly by a check=False field is static under static="auto"."""
    a, b = pair

    def wrap():
        return sf.jit(lambda x, loose: x + 1, static="auto")

    assert _compiles(wrap, lambda f, v: f(jnp.ones(()), Loose(v)), a, b) == (1 if iv.same(a, b) else 2)


# ----- in one process: the cross-process forms ----------------------------------------------
def _source_key(v):
    return _key.statics_digest((_quiet(Holder, v)._staticfield_flat[1],))


def _agreement(v):
    return _agree.digest("f", {"self.v": ("static", v)})


@FAST
@given(pairs)
def test_source_keys_and_agreement_digests_follow_the_cross_process_identity(pair):
    a, b = pair
    fa, fb = _quiet(Holder, a).v, _quiet(Holder, b).v
    across = iv.same(fa, fb, across=True)
    assert (_agreement(fa) == _agreement(fb)) == iv.same(fa, fb, across=True, set_order=False)
    if iv.holds_identity_hashed(fa) or iv.holds_identity_hashed(fb):
        # no identity across processes: trust="source" keys no program on it
        assert None in (_source_key(fa), _source_key(fb))
    else:
        assert (_source_key(fa) == _source_key(fb)) == across


# ----- across two fresh processes with different PYTHONHASHSEEDs ----------------------------
_SCRIPT = '''
import json, sys, warnings
warnings.simplefilter("ignore")
import _identity_values as iv
import staticfield as sf
from staticfield import _agree
from staticfield._store import _key


class Holder(sf.Struct):
    v: object = sf.static()


out = []
for v in iv.POOL:
    h = Holder(v=v)
    out.append([_key.statics_digest((h._staticfield_flat[1],)), _agree.digest("f", {"self.v": ("static", h.v)}),
                [repr(x) for x in h.v] if isinstance(h.v, frozenset) else None])
print(json.dumps(out))
'''


@pytest.mark.skipif(sys.platform != "linux", reason="the multi-process launcher is tested on Linux")
def test_two_processes_with_other_hash_seeds_write_the_same_keys_for_the_same_identity(tmp_path):
    """Each process of a job (``_launch``) runs with its own ``PYTHONHASHSEED`` and writes
    each pool value's trust="source" key and agreement digest: they match exactly where the
    value's cross-process identity matches. A frozenset of strings may iterate in another
    order there: another value for the store (a load without a trace must run what was
    traced for that order: it traces), the same for agreement (processes of one job with
    other seeds must agree, DESIGN: "whatever PYTHONHASHSEED")."""
    from _launch import launch

    here = os.path.dirname(os.path.abspath(__file__))
    script = tmp_path / "identity_keys.py"
    script.write_text(_SCRIPT)
    env = {"PYTHONPATH": os.pathsep.join([here, os.environ.get("PYTHONPATH", "")])}
    command = ["sh", "-c", f'PYTHONHASHSEED=$((PROCESS_ID + 11)) exec "{sys.executable}" "{script}"']
    first, second = (json.loads(f.out.strip().splitlines()[-1]) for f in launch(command, 2, 1, env, 120))
    differ = 0
    for value, mine, theirs in zip(iv.POOL, first, second):
        if mine[2] != theirs[2]:  # a frozenset that iterates in another order there
            differ += 1
            assert mine[0] != theirs[0], value  # the store: another order, another key
            assert mine[1] == theirs[1], value  # agreement: the same, whatever the seed
            continue
        assert mine[1] == theirs[1], value
        assert mine[0] == theirs[0], value
        assert (mine[0] is None) == iv.holds_identity_hashed(value), value
    assert differ > 0  # string sets did iterate differently: the case was exercised


def test_identity_hashed_values_are_their_type_across_processes():
    """Exempt by design: an identity-hashed object has no identity across processes, so
    agreement compares its type only and trust="source" keys no program on it."""
    assert _agreement(iv.TAG_A) == _agreement(iv.TAG_B) != _agreement(iv.Color.RED)
    assert _portable.write(iv.TAG_A).partial
    assert _source_key(iv.TAG_A) is None and _source_key(iv.Color.RED) is not None
