"""jaxtyping with beartype checks annotated fields at construction, and never on unflatten."""

import sys
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import staticfield as sf

jaxtyping = pytest.importorskip("jaxtyping")
beartype = pytest.importorskip("beartype")

from jaxtyping import Array, Float, Int, jaxtyped  # noqa: E402

typechecked = jaxtyped(typechecker=beartype.beartype)


@typechecked
@sf.dataclass
class Linear:
    w: Float[Array, "n m"]
    b: Float[Array, " m"]
    act: sf.Static[str] = "tanh"


@typechecked
@sf.dataclass
class Counter:
    counts: Int[Array, " k"]
    scale: float = 1.0


def _linear() -> Linear:
    return Linear(jnp.ones((2, 3)), jnp.zeros(3))


def test_valid_construction_passes():
    """Arguments that match the annotations construct normally, through jaxtyping's wrapper."""
    lin = _linear()
    assert lin.w.shape == (2, 3) and lin.act == "tanh"
    assert Counter(jnp.arange(4)).scale == 1.0


def test_wrong_shape_is_caught_at_construction():
    """Inconsistent dimension sizes between fields are a type-check error naming the parameter."""
    with pytest.raises(jaxtyping.TypeCheckError, match=r"Linear\.__init__[\s\S]*parameter 'b'"):
        Linear(jnp.ones((2, 3)), jnp.zeros(4))


def test_wrong_dtype_is_caught_at_construction():
    """An integer array for a Float field is a type-check error naming the parameter."""
    with pytest.raises(jaxtyping.TypeCheckError, match=r"Linear\.__init__[\s\S]*parameter 'w'"):
        Linear(jnp.ones((2, 3), jnp.int32), jnp.zeros(3))


def test_static_annotation_is_checked_too():
    """``sf.Static[str]`` is ``Annotated[str, ...]``, so beartype checks the static value's type."""
    with pytest.raises(jaxtyping.TypeCheckError, match=r"Linear\.__init__[\s\S]*parameter 'act'"):
        Linear(jnp.ones((2, 3)), jnp.zeros(3), act=3)


def test_string_annotations_are_checked():
    """With ``from __future__ import annotations`` the field annotations are still checked."""
    source = (
        "from __future__ import annotations\n"
        "import beartype, staticfield as sf\n"
        "from jaxtyping import Array, Float, jaxtyped\n"
        "@jaxtyped(typechecker=beartype.beartype)\n"
        "@sf.dataclass\n"
        "class Affine:\n"
        "    w: Float[Array, 'n m']\n"
        "    b: Float[Array, ' m']\n"
        "    depth: sf.Static[int] = 1\n"
    )
    module = types.ModuleType("staticfield_jaxtyping_future_example")
    sys.modules[module.__name__] = module
    try:
        exec(compile(source, "<future annotations example>", "exec"), module.__dict__)
        affine = module.Affine(jnp.ones((2, 3)), jnp.zeros(3))
        assert sf.static_fields(affine) == ("depth",)
        with pytest.raises(jaxtyping.TypeCheckError, match=r"parameter 'b'"):
            module.Affine(jnp.ones((2, 3)), jnp.zeros(4))
    finally:
        del sys.modules[module.__name__]


def test_unflatten_never_checks():
    """Unflatten builds instances whose leaves break the annotations (None, ints, ShapeDtypeStructs) without checking."""
    lin = _linear()
    as_none = jax.tree.map(lambda _: None, lin)
    assert as_none.w is None
    as_int = jax.tree.map(lambda x: x.astype(jnp.int32), lin)
    assert as_int.w.dtype == jnp.int32
    abstract = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), lin)
    assert abstract.b.shape == (3,)


def test_vmap_and_scan_over_stacked_instances():
    """vmap and scan over instances stacked on a leading axis work: the batched leaves are never checked."""
    lins = [Linear(jnp.full((2, 3), float(i)), jnp.full(3, float(i))) for i in range(4)]
    stacked = jax.tree.map(lambda *xs: jnp.stack(xs), *lins)
    assert stacked.w.shape == (4, 2, 3)

    totals = jax.vmap(lambda lin: lin.w.sum() + lin.b.sum())(stacked)
    np.testing.assert_allclose(totals, [9.0 * i for i in range(4)])

    def body(carry, lin):
        return carry + lin.b.sum(), lin.w.shape

    total, _ = jax.lax.scan(body, 0.0, stacked)
    assert float(total) == 18.0


def test_jit_round_trip_does_not_check():
    """An instance passed through jax.jit comes back without __init__ being called on tracers."""
    calls = 0

    @jax.jit
    def step(lin):
        nonlocal calls
        calls += 1
        return jax.tree.map(lambda x: x + 1.0, lin)

    out = step(_linear())
    assert calls == 1 and float(out.b[0]) == 1.0 and out.act == "tanh"
