"""sf.shardings / sf.shard: per-field PartitionSpec annotations to NamedShardings.

The layout rules and every error are checked here in-process, on abstract meshes
(no devices needed). Running real sharded programs needs 8 devices, which JAX
only creates if XLA_FLAGS is set before it starts, so those checks run in a
subprocess (tests/_sharding_8dev.py), and the multi-host example runs as two
processes on localhost.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AbstractMesh, AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

import staticfield as sf
from _launch import launch

HERE = pathlib.Path(__file__).resolve().parent
DOCS = HERE.parent / "docs"
AUTO = AbstractMesh((4, 2), ("data", "model"), axis_types=(AxisType.Auto,) * 2)
EXPLICIT = AbstractMesh((4, 2), ("data", "model"), axis_types=(AxisType.Explicit,) * 2)


@pytest.fixture(params=[AUTO, EXPLICIT], ids=["auto_axes", "explicit_axes"])
def mesh(request):
    """Both kinds of mesh: automatic axes (older JAX's default) and explicit axes (the
    default of jax.make_mesh, and of AbstractMesh since jax 0.12)."""
    return request.param


@sf.dataclass
class Dense:
    w: jax.Array = sf.field(sharding=P(None, "model"))
    b: jax.Array


@sf.dataclass
class Model:
    layers: tuple = sf.field(sharding=P("data"))
    emb: dict = sf.field(sharding=P("model", None))
    head: Dense
    scale: jax.Array
    name: str = sf.static(default="m")


def model() -> Model:
    return Model(
        layers=(jnp.zeros((8, 3)), Dense(w=jnp.zeros((4, 6)), b=jnp.zeros(4))),
        emb={"tokens": jnp.zeros((10, 4)), "positions": jnp.zeros((6, 4)), "none": None},
        head=Dense(w=jnp.zeros((3, 2)), b=jnp.zeros(2)),
        scale=jnp.float32(1),
    )


def specs(tree):
    return jax.tree.map(lambda s: s.spec, tree)


# --- layout rules --------------------------------------------------------------------


def test_shardings_is_an_instance_of_the_class_with_one_named_sharding_per_leaf(mesh):
    """The result has obj's pytree structure (same class, same statics) and a NamedSharding per leaf."""
    m = model()
    sh = sf.shardings(m, mesh)
    assert type(sh) is Model and sh.name == "m"
    assert jax.tree.structure(sh) == jax.tree.structure(m)
    leaves = jax.tree.leaves(sh)
    assert len(leaves) == len(jax.tree.leaves(m))
    assert all(isinstance(s, NamedSharding) and s.mesh == mesh for s in leaves)


def test_unannotated_leaves_are_replicated(mesh):
    """A leaf with no annotation above it gets PartitionSpec()."""
    sh = sf.shardings(model(), mesh)
    assert sh.scale.spec == P()
    assert sh.head.b.spec == P()


def test_field_annotation_applies_to_every_leaf_under_it(mesh):
    """A dict field's annotation shards each of the dict's leaves; None stays None."""
    sh = sf.shardings(model(), mesh)
    assert sh.emb["tokens"].spec == P("model", None)
    assert sh.emb["positions"].spec == P("model", None)
    assert sh.emb["none"] is None


def test_nested_instance_uses_its_own_annotations(mesh):
    """A nested instance's annotated field keeps its own spec."""
    sh = sf.shardings(model(), mesh)
    assert sh.head.w.spec == P(None, "model")


def test_nearest_annotation_wins_inside_an_annotated_field(mesh):
    """Under an annotated field, a nested instance's own annotation wins; its unannotated leaves take the field's."""
    sh = sf.shardings(model(), mesh)
    assert sh.layers[0].spec == P("data")
    assert sh.layers[1].w.spec == P(None, "model")  # Dense.w's own annotation
    assert sh.layers[1].b.spec == P("data")  # Dense.b has none: Model.layers' applies


def test_any_pytree_holding_instances(mesh):
    """A tuple or dict holding instances and plain arrays works; plain arrays are replicated."""
    sh = sf.shardings((model(), {"step": jnp.int32(0)}), mesh)
    assert sh[0].head.w.spec == P(None, "model")
    assert sh[1]["step"].spec == P()


def test_shape_dtype_struct_leaves_from_eval_shape(mesh):
    """jax.eval_shape output (ShapeDtypeStruct leaves) gets shardings, e.g. for jit out_shardings."""
    abstract = jax.eval_shape(model)
    sh = sf.shardings(abstract, mesh)
    assert specs(sh) == specs(sf.shardings(model(), mesh))


def test_python_scalar_leaves_are_replicated(mesh):
    """Python scalars are rank-0 leaves: replicated."""

    @sf.dataclass
    class Hyper:
        lr: float
        steps: int

    sh = sf.shardings(Hyper(lr=0.1, steps=3), mesh)
    assert sh.lr.spec == P() and sh.steps.spec == P()


def test_multi_axis_entry(mesh):
    """A tuple of axis names splits one dimension over both."""

    @sf.dataclass
    class Wide:
        x: jax.Array = sf.field(sharding=P(("data", "model"), None))

    sh = sf.shardings(Wide(x=jnp.zeros((16, 3))), mesh)
    assert sh.x.spec == P(("data", "model"), None) and sh.x.mesh == mesh


def test_unconstrained_is_passed_through_on_automatic_axes():
    """With automatic axes, P.UNCONSTRAINED is passed through for JAX to choose."""

    @sf.dataclass
    class Wide:
        x: jax.Array = sf.field(sharding=P(("data", "model"), P.UNCONSTRAINED))

    sh = sf.shardings(Wide(x=jnp.zeros((16, 3))), AUTO)
    assert sh.x.spec == P(("data", "model"), P.UNCONSTRAINED)


def test_unconstrained_on_explicit_axes_names_the_field_and_the_fix():
    """P.UNCONSTRAINED on a mesh with no automatic axis is a ValueError naming the field,
    the dimension and both ways out (None, or automatic axes)."""

    @sf.dataclass
    class Wide:
        x: jax.Array = sf.field(sharding=P(("data", "model"), P.UNCONSTRAINED))

    with pytest.raises(
        ValueError,
        match=re.escape(
            "Wide.x: P(('data', 'model'), UNCONSTRAINED) leaves dimension 1 to JAX "
            "(P.UNCONSTRAINED), which needs a mesh axis of type AxisType.Auto, but the mesh's "
            "axes are (Explicit, Explicit) (jax.make_mesh makes Explicit axes unless told). "
            "Write None to replicate that dimension, or build the mesh with "
            "axis_types=(AxisType.Auto, AxisType.Auto)."
        ).replace("Wide", r"\S*Wide", 1),
    ):
        sf.shardings(Wide(x=jnp.zeros((16, 3))), EXPLICIT)


def test_dataclasses_field_metadata_annotation_is_honoured(mesh):
    """An annotation given through dataclasses.field metadata is read like sf.field(sharding=...)."""
    import dataclasses

    @sf.dataclass
    class Raw:
        x: jax.Array = dataclasses.field(metadata={"staticfield.sharding": P("data")})

    assert sf.shardings(Raw(x=jnp.zeros(8)), mesh).x.spec == P("data")


@pytest.mark.parametrize("kind", [AxisType.Auto, AxisType.Explicit])
def test_shard_on_a_one_device_mesh_and_jit_in_shardings(kind):
    """sf.shard device_puts as annotated; the shardings work as jax.jit in/out_shardings,
    on automatic and explicit axes."""
    mesh = jax.make_mesh((1, 1), ("data", "model"), axis_types=(kind, kind))
    m = model()
    placed = sf.shard(m, mesh)
    assert type(placed) is Model and placed == m
    sh = sf.shardings(m, mesh)
    assert jax.tree.map(lambda a: a.sharding, placed) == sh
    traces = 0

    def f(m):
        nonlocal traces
        traces += 1
        return jax.tree.map(lambda a: a + 1, m)

    g = jax.jit(f, in_shardings=(sh,), out_shardings=sh)
    out = g(g(placed))
    assert traces == 1
    np.testing.assert_array_equal(out.scale, 3)
    assert jax.tree.map(lambda a: a.sharding, out) == sh


# --- errors --------------------------------------------------------------------------


def test_rank_too_high_names_field_spec_shape_and_mesh(mesh):
    """A spec longer than the leaf's rank is a ValueError naming the field path, spec, shape, mesh axes."""
    m = sf.replace(model(), emb={"tokens": jnp.zeros(10)})
    with pytest.raises(
        ValueError,
        match=re.escape(
            "Model.emb['tokens']: P('model', None) has 2 entries but the leaf has shape (10,) "
            "(rank 1), on a mesh with axes {data=4, model=2}."
        ),
    ) as info:
        sf.shardings(m, mesh)
    assert "drop the extra entries, e.g. P('model',)" in str(info.value)


def test_unknown_axis_names_field_axis_and_mesh_axes(mesh):
    """An axis the mesh lacks is a ValueError naming the field, the axis, the shape and the mesh axes."""

    @sf.dataclass
    class TP:
        w: jax.Array = sf.field(sharding=P("tensor"))

    with pytest.raises(
        ValueError,
        match=re.escape(
            "TP.w: P('tensor',) names the mesh axis 'tensor', which the mesh lacks "
            "(leaf shape (8,), mesh axes {data=4, model=2})"
        ).replace("TP", r"\S*TP"),
    ):
        sf.shardings(TP(w=jnp.zeros(8)), mesh)


def test_not_divisible_names_field_dimension_and_axis_size(mesh):
    """A dimension the mesh axes do not divide is a ValueError naming the field, shape and axis sizes."""
    m = sf.replace(model(), layers=(jnp.zeros((6, 3)), model().layers[1]))
    with pytest.raises(
        ValueError,
        match=re.escape(
            "Model.layers[0]: P('data',) splits dimension 0 of shape (6, 3) over 'data' (size 4) "
            "(4 parts, mesh axes {data=4, model=2}), but 6 is not divisible by 4."
        ),
    ):
        sf.shardings(m, mesh)


def test_not_divisible_over_two_axes(mesh):
    """A dimension split over two axes must divide by their product; the error shows both sizes."""

    @sf.dataclass
    class Wide:
        x: jax.Array = sf.field(sharding=P(("data", "model")))

    with pytest.raises(ValueError, match=r"Wide\.x: .* over 'data' \(size 4\) x 'model' \(size 2\) \(8 parts"):
        sf.shardings(Wide(x=jnp.zeros(12)), mesh)


def test_nested_error_names_the_full_path(mesh):
    """An error in a nested instance inside an annotated tuple names the whole path."""
    m = sf.replace(model(), layers=(jnp.zeros((8, 3)), Dense(w=jnp.zeros((4, 5)), b=jnp.zeros(4))))
    with pytest.raises(ValueError, match=re.escape("Model.layers[1].w: P(None, 'model') splits dimension 1 of shape (4, 5)")):
        sf.shardings(m, mesh)


def test_shard_raises_the_same_error_before_placing():
    """sf.shard checks the annotations first, so the error names the field, not a JAX internal."""
    mesh = jax.make_mesh((1,), ("data",))
    with pytest.raises(ValueError, match=r"Model\.layers\[1\]\.w: P\(None, 'model'\) names the mesh axis 'model'.*mesh axes \{data=1\}"):
        sf.shard(model(), mesh)


def test_annotation_that_is_not_a_partition_spec(mesh):
    """A sharding annotation that is not a PartitionSpec is a TypeError naming the field."""

    @sf.dataclass
    class Odd:
        x: jax.Array = sf.field(sharding=("data",))

    with pytest.raises(TypeError, match=r"\S*Odd\.x: the sharding annotation \('data',\) is not a jax\.sharding\.PartitionSpec"):
        sf.shardings(Odd(x=jnp.zeros(8)), mesh)


def test_mesh_argument_must_be_a_mesh():
    """Passing something other than a mesh is a TypeError that says how to build one."""
    with pytest.raises(TypeError, match="sf.shardings expects a jax.sharding.Mesh .* got tuple"):
        sf.shardings(model(), ("data",))


def test_static_field_cannot_be_sharded():
    """A static field with a sharding is refused at decoration, naming the class and field."""
    with pytest.raises(TypeError, match=r"\S*Cfg\.n: a static field holds no arrays, so it cannot have a sharding"):

        @sf.dataclass
        class Cfg:
            n: int = sf.field(static=True, sharding=P("data"))


# --- 8 devices, in a subprocess ------------------------------------------------------


def _env(**extra: str) -> dict:
    env = dict(os.environ)
    env.pop("JAX_PLATFORM_NAME", None)
    env.update(JAX_PLATFORMS="cpu", **extra)
    return env


@pytest.fixture(scope="module")
def eight():
    """Run tests/_sharding_8dev.py once with 8 virtual CPU devices; its results by check name."""
    proc = subprocess.run(
        [sys.executable, str(HERE / "_sharding_8dev.py")],
        env=_env(XLA_FLAGS="--xla_force_host_platform_device_count=8"),
        capture_output=True,
        text=True,
        timeout=300,
        cwd=HERE.parent,
    )
    results = {}
    for line in proc.stdout.splitlines():
        if line.startswith("{"):
            r = json.loads(line)
            results[r["check"]] = r
    assert proc.returncode == 0 and results, proc.stdout + proc.stderr
    return results


def _passed(results: dict, name: str) -> str:
    assert name in results, f"check {name} did not run: {sorted(results)}"
    assert results[name]["ok"], results[name]["detail"]
    return results[name]["detail"]


def test_8dev_recompile_names_an_auto_axis_sharding(eight):
    """sf.Recompile names P(None, 'model') on an Auto-axes mesh, not its aval's P(None, None)."""
    _passed(eight, "recompile_names_an_auto_axis_sharding")


def test_8dev_the_subprocess_sees_8_devices(eight):
    """The subprocess really runs on 8 devices."""
    _passed(eight, "eight_devices")


def test_8dev_data_parallel_step_matches_unsharded(eight):
    """A data-parallel training step of a sharded model gives the same numbers as the unsharded one."""
    _passed(eight, "data_parallel_matches_unsharded")


def test_8dev_data_parallel_outputs_keep_annotated_shardings(eight):
    """After data-parallel steps every model leaf has its annotated (replicated) sharding."""
    _passed(eight, "data_parallel_outputs_have_annotated_shardings")


def test_8dev_buckets_keep_the_row_axis_divisible_by_the_mesh(eight):
    """buckets= with a sharded row axis picks a bucket divisible by the devices it is split over."""
    _passed(eight, "buckets_row_axis_sharded")


def test_8dev_buckets_run_zero_rows_sharded_over_8_devices(eight):
    """0 rows sharded over 8 devices run the exact 0-row program (JAX's IndivisibleError before)."""
    _passed(eight, "buckets_zero_rows_sharded")


def test_8dev_data_parallel_step_compiles_once(eight):
    """The jitted data-parallel step traces once across steps (and sf.jit counts one compile)."""
    _passed(eight, "data_parallel_compiles_once")


def test_8dev_2d_mesh_step_matches_unsharded(eight):
    """On a 4x2 data x model mesh the training step matches the unsharded one."""
    _passed(eight, "two_d_mesh_matches_unsharded")


def test_8dev_2d_mesh_outputs_keep_annotated_shardings(eight):
    """On the 2-D mesh each output leaf has its annotated sharding and holds only its part."""
    _passed(eight, "two_d_mesh_outputs_have_annotated_shardings")


def test_8dev_2d_mesh_step_compiles_once(eight):
    """The 2-D mesh step traces once across steps (and sf.jit counts one compile)."""
    _passed(eight, "two_d_mesh_compiles_once")


def test_8dev_shard_places_every_leaf(eight):
    """sf.shard puts every leaf on the mesh with exactly sf.shardings' layout."""
    _passed(eight, "shard_places_every_leaf_as_annotated")


def test_8dev_stacked_ensemble_sharded_over_data(eight):
    """A stacked ensemble field annotated P('data') puts one member per device and vmaps under jit."""
    _passed(eight, "stacked_ensemble_sharded_over_data")


def test_8dev_errors_with_a_real_mesh(eight):
    """With a real 8-device mesh, a non-divisible leaf is a ValueError naming the field, from shardings and shard."""
    _passed(eight, "errors_with_a_real_mesh")


def test_8dev_docs_sharding_page_runs(eight):
    """Every plain python block of docs/sharding.md runs, in order, on 8 devices."""
    _passed(eight, "docs_sharding_page_runs")


# --- two processes -------------------------------------------------------------------


def _multihost_block() -> str:
    text = (DOCS / "sharding.md").read_text()
    m = re.search(r'^```python title="train_multihost.py"\n(.*?)^```', text, re.M | re.S)
    assert m, "docs/sharding.md lost its train_multihost.py block"
    return textwrap.dedent(m.group(1))


def test_multihost_example_runs_as_two_processes(eight, tmp_path):
    """The docs' multi-host file, run as 2 processes x 4 devices, gives the 1-process x 8-device loss."""
    reference = _passed(eight, "docs_multihost_example_on_one_process")
    script = tmp_path / "train_multihost.py"
    script.write_text(_multihost_block())
    # One process failing usually makes the other fail too: launch shows both.
    finished = launch([sys.executable, str(script)], processes=2, devices=4, timeout=120, cwd=tmp_path)
    want = float(reference.split()[-1])
    for i, f in enumerate(finished):
        m = re.search(rf"^process {i}: loss (\S+)$", f.out, re.M)
        assert m, f.out
        assert float(m.group(1)) == pytest.approx(want, rel=1e-5, abs=1e-6)


def test_import_does_not_start_the_backend():
    """Importing staticfield starts no XLA backend, so jax.distributed.initialize() may come after it."""
    code = (
        "import jax, staticfield\n"
        "from jax._src import xla_bridge\n"
        "assert not xla_bridge._backends, 'backend started by import staticfield'\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], env=_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
