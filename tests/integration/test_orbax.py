"""orbax-checkpoint saves and restores staticfield instances, with field names as keys."""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import staticfield as sf

ocp = pytest.importorskip("orbax.checkpoint")


@sf.dataclass
class Layer:
    w: jax.Array
    b: jax.Array
    act: sf.Static[str] = "tanh"


@sf.dataclass
class Model:
    layers: tuple
    step: jax.Array
    counts: np.ndarray
    lr: float
    config: dict = sf.static(default_factory=dict)


def _model() -> Model:
    layers = (
        Layer(jnp.arange(6.0).reshape(2, 3), jnp.ones(3, jnp.bfloat16)),
        Layer(jnp.full((3, 1), 0.5, jnp.float32), jnp.zeros(1), act="relu"),
    )
    return Model(
        layers,
        step=jnp.array(7, jnp.int32),
        counts=np.arange(4, dtype=np.int16),
        lr=0.25,
        config={"sizes": [2, 3, 1]},
    )


def test_standard_checkpointer_round_trip(tmp_path):
    """StandardCheckpointer restores nested instances equal to the original, dtypes and leaf types included."""
    model = _model()
    with ocp.StandardCheckpointer() as ckptr:
        ckptr.save(tmp_path / "ckpt", model)
        ckptr.wait_until_finished()
        restored = ckptr.restore(tmp_path / "ckpt", model)
    assert restored == model
    assert type(restored) is Model and type(restored.layers[1]) is Layer
    assert restored.layers[1].act == "relu" and restored.config == {"sizes": (2, 3, 1)}
    def kinds(tree):
        return [(type(x), getattr(x, "dtype", None)) for x in jax.tree.leaves(tree)]

    assert kinds(restored) == kinds(model)
    assert restored.layers[0].b.dtype == jnp.bfloat16


def test_restore_from_abstract_target(tmp_path):
    """Restoring into a tree of ShapeDtypeStructs (built by jax.tree.map) gives back the instance."""
    model = sf.replace(_model(), counts=jnp.arange(4, dtype=jnp.int16), lr=jnp.float32(0.25))
    with ocp.StandardCheckpointer() as ckptr:
        ckptr.save(tmp_path / "ckpt", model)
        ckptr.wait_until_finished()
        abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, model)
        restored = ckptr.restore(tmp_path / "ckpt", abstract)
    assert restored == model


def test_checkpoint_metadata_uses_field_names(tmp_path):
    """The checkpoint's tree metadata names every dynamic leaf by its field path; statics are not saved."""
    with ocp.StandardCheckpointer() as ckptr:
        ckptr.save(tmp_path / "ckpt", _model())
        ckptr.wait_until_finished()
    tree = json.loads((tmp_path / "ckpt" / "_METADATA").read_text())["tree_metadata"]
    assert set(tree) == {
        "('layers', '0', 'w')",
        "('layers', '0', 'b')",
        "('layers', '1', 'w')",
        "('layers', '1', 'b')",
        "('step',)",
        "('counts',)",
        "('lr',)",
    }


def test_pytree_checkpointer_round_trip(tmp_path):
    """PyTreeCheckpointer with the original as restore target also round-trips."""
    model = _model()
    ckptr = ocp.PyTreeCheckpointer()
    ckptr.save(tmp_path / "ckpt", model)
    restore_args = ocp.checkpoint_utils.construct_restore_args(model)
    restored = ckptr.restore(
        tmp_path / "ckpt", args=ocp.args.PyTreeRestore(item=model, restore_args=restore_args)
    )
    assert restored == model


def test_weak_typed_leaf_comes_back_strong(tmp_path):
    """A checkpoint stores dtypes, not weak types: a weak-typed leaf restores strong, and the
    restored model is not == the original (JAX computes differently with it), as jit tells
    the two apart; with an explicit dtype it is."""
    model = Layer(jnp.full((2,), 0.5), jnp.zeros(2))  # a Python-scalar fill value: weak f32
    assert model.w.weak_type
    with ocp.StandardCheckpointer() as ckptr:
        ckptr.save(tmp_path / "ckpt", model)
        ckptr.wait_until_finished()
        restored = ckptr.restore(tmp_path / "ckpt", model)
    assert not restored.w.weak_type and restored.w.dtype == model.w.dtype
    assert restored != model and hash(restored) != hash(model)  # == tells weak types apart
    assert restored == Layer(jnp.full((2,), 0.5, jnp.float32), jnp.zeros(2))
    traces = []
    f = sf.jit(lambda m: traces.append(1) or m.w * 2)
    f(model)
    f(restored)
    assert len(traces) == 2  # jit keys on the weak type: a new program for the restored one
