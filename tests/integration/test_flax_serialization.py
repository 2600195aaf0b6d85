"""sf.to_state_dict / sf.from_state_dict work with flax.serialization (state dicts and msgpack)."""

from __future__ import annotations

import functools
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import staticfield as sf

serialization = pytest.importorskip("flax.serialization")


@sf.dataclass
class Layer:
    w: jax.Array
    b: jax.Array
    act: sf.Static[str] = "tanh"


@sf.dataclass
class Model:
    layers: tuple
    extra: dict
    lr: float
    counts: np.ndarray
    config: dict = sf.static(default_factory=dict)


def _model() -> Model:
    layers = (
        Layer(jnp.arange(6.0).reshape(2, 3), jnp.ones(3, jnp.bfloat16)),
        Layer(jnp.full((3, 1), 0.5, jnp.float32), jnp.zeros(1), act="relu"),
    )
    return Model(
        layers,
        extra={"step": jnp.int32(3), "unused": None},
        lr=0.25,
        counts=np.arange(4, dtype=np.int16),
        config={"sizes": [2, 3, 1]},
    )


def _zeros_like(model: Model) -> Model:
    return jax.tree.map(lambda x: x * 0, model)


def test_state_dict_is_keyed_by_field_names():
    """to_state_dict nests dynamic leaves under field names (tuple items under "0", "1"); statics are left out."""
    state = sf.to_state_dict(_model())
    assert set(state) == {"layers", "extra", "lr", "counts"}
    assert set(state["layers"]) == {"0", "1"}
    assert set(state["layers"]["1"]) == {"w", "b"}
    assert set(state["extra"]) == {"step"}
    assert state["lr"] == 0.25


def test_from_state_dict_restores_into_template():
    """from_state_dict gives an instance equal to the saved one, with the template's statics and leaf kinds."""
    model = _model()
    template = _zeros_like(model)
    restored = sf.from_state_dict(template, sf.to_state_dict(model))
    assert restored == model
    assert restored.layers[1].act == "relu" and restored.config == {"sizes": (2, 3, 1)}
    assert isinstance(restored.layers[0].w, jax.Array) and isinstance(restored.counts, np.ndarray)
    assert type(restored.lr) is float


def test_msgpack_round_trip():
    """msgpack bytes (flax to_bytes/from_bytes and msgpack_serialize/restore) round-trip, bfloat16 included."""
    model = _model()
    data = serialization.msgpack_serialize(sf.to_state_dict(model))
    restored = sf.from_state_dict(_zeros_like(model), serialization.msgpack_restore(data))
    assert restored == model
    assert restored.layers[0].b.dtype == jnp.bfloat16

    state = sf.to_state_dict(model)
    data = serialization.to_bytes(state)
    assert sf.from_state_dict(_zeros_like(model), serialization.from_bytes(state, data)) == model


def test_registered_with_flax_nests_in_flax_trees():
    """Registered with register_serialization_state, an instance round-trips inside a flax-serialized dict."""
    model = _model()

    @sf.dataclass
    class Wrapper:  # a fresh class, so the global flax registry is not shared with other tests
        model: Model
        scale: jax.Array

    serialization.register_serialization_state(Wrapper, sf.to_state_dict, sf.from_state_dict)
    tree = {"params": Wrapper(model, jnp.float32(2.0)), "step": 7}
    data = serialization.to_bytes(tree)
    template = {"params": Wrapper(_zeros_like(model), jnp.float32(0.0)), "step": 0}
    restored = serialization.from_bytes(template, data)
    assert restored["params"] == tree["params"] and restored["step"] == 7


def test_wrong_shape_names_the_field_and_leaves_template_untouched():
    """A leaf of the wrong shape is a ValueError naming class and field; the template is unchanged."""
    model = _model()
    template = _zeros_like(model)
    state = sf.to_state_dict(model)
    state["layers"]["0"]["w"] = np.ones((3, 2), np.float32)
    with pytest.raises(ValueError, match=r"Model\.layers\[0\]\.w: the state holds f32\[3,2\], the template has f32\[2,3\]"):
        sf.from_state_dict(template, state)
    assert template == _zeros_like(model)


def test_wrong_dtype_names_the_field():
    """A leaf of the wrong dtype is a ValueError naming class and field."""
    model = _model()
    state = sf.to_state_dict(model)
    state["counts"] = np.arange(4, dtype=np.int8)
    with pytest.raises(ValueError, match=r"Model\.counts: the state holds i8\[4\], the template has i16\[4\]"):
        sf.from_state_dict(model, state)


def test_missing_field_names_the_field_and_leaves_template_untouched():
    """A field missing from the state is a ValueError naming class and field; the template is unchanged."""
    model = _model()
    template = _zeros_like(model)
    state = sf.to_state_dict(model)
    del state["layers"]["1"]["b"]
    with pytest.raises(ValueError, match=r"Model\.layers\[1\]\.b is missing from the state dict \(the state at Model\.layers\[1\] has keys: 'w'\)"):
        sf.from_state_dict(template, state)
    assert template == _zeros_like(model)


def test_unknown_key_names_the_class_and_valid_keys():
    """A key the template has no field for is a ValueError naming the key and the valid field names."""
    model = _model()
    state = sf.to_state_dict(model)
    state["layers"]["0"]["bias"] = np.zeros(3)
    with pytest.raises(ValueError, match=r"the key 'bias' under Model\.layers\[0\].*keys there: 'b', 'w'"):
        sf.from_state_dict(model, state)


def test_state_not_a_dict_names_the_field():
    """A non-dict where a container of fields belongs is a ValueError naming the field."""
    state = sf.to_state_dict(_model())
    state["layers"] = 3
    with pytest.raises(ValueError, match=r"Model\.layers should be a dict \(with the key '0'\)"):
        sf.from_state_dict(_model(), state)


def test_scalar_field_with_an_array_state_names_the_field():
    """A Python scalar field restored from a non-scalar is a ValueError naming class and field."""
    state = sf.to_state_dict(_model())
    state["lr"] = np.ones(2)
    with pytest.raises(ValueError, match=r"Model\.lr: the state holds f64\[2\], the template has a Python float"):
        sf.from_state_dict(_model(), state)


def test_to_state_dict_refuses_keys_that_collide_as_strings():
    """Two dict keys with the same str() would share a state dict key: a ValueError naming class and field."""

    @functools.total_ordering
    class Version:
        def __init__(self, n):
            self.n = n

        def __eq__(self, other):
            return self.n == other.n

        def __lt__(self, other):
            return self.n < other.n

        def __hash__(self):
            return self.n

        def __str__(self):
            return "v"

        __repr__ = __str__

    @sf.dataclass
    class Table:
        rows: dict

    with pytest.raises(ValueError, match=r"Table\.rows\[v\]: two keys have the same string form 'v'"):
        sf.to_state_dict(Table({Version(1): np.zeros(1), Version(2): np.ones(1)}))


def test_flax_from_state_dict_restores_an_instance_never_a_dict():
    """flax.serialization's own to_state_dict/from_state_dict (what a flax checkpoint
    restore calls) round-trip an instance with no registration: the instance comes back,
    dynamic fields restored, statics from the target, nested in flax-serialized trees too."""

    class AgentState(sf.Struct):  # defined after flax was imported
        params: Model
        step: jax.Array
        name: sf.Static[str] = "agent"

    state = AgentState(_model(), jnp.int32(5), name="a")
    target = AgentState(_zeros_like(_model()), jnp.int32(0), name="a")
    saved = serialization.to_state_dict(state)
    assert isinstance(saved, dict) and set(saved) == {"params", "step"}
    back = serialization.from_state_dict(target, saved)
    assert isinstance(back, AgentState) and back == state and back.name == "a"
    data = serialization.to_bytes({"agent": state, "step": 7})
    restored = serialization.from_bytes({"agent": target, "step": 0}, data)
    assert isinstance(restored["agent"], AgentState) and restored["agent"] == state


@pytest.mark.parametrize("flax_first", [False, True])
def test_flax_serialization_knows_sf_classes_whichever_is_imported_first(flax_first):
    """A fresh process: staticfield imported (and a class made) before flax, or after; an
    explicit registration (what earlier docs said to write) is still accepted."""
    import subprocess
    import sys

    code = (
        ("import flax.serialization\n" if flax_first else "")
        + "import jax.numpy as jnp, staticfield as sf\n"
        "class S(sf.Struct):\n    w: object\n    k: sf.Static[int] = 1\n"
        "s = S(jnp.ones(2), k=3)\n"
        "from flax import serialization\n"
        "assert isinstance(serialization.to_state_dict(s), dict)\n"
        "back = serialization.from_bytes(S(jnp.zeros(2), k=3), serialization.to_bytes(s))\n"
        "assert type(back) is S and back == s, back\n"
        "class T(sf.Struct):\n    w: object\n"
        "serialization.register_serialization_state(T, sf.to_state_dict, sf.from_state_dict)\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


@pytest.mark.parametrize("flax_first", [False, True])
def test_flax_serialization_knows_sf_classes_after_a_reload(flax_first):
    """``importlib.reload(flax.serialization)`` makes a new registry: it still knows every
    ``sf`` class (a restore never silently becomes a dict)."""
    import subprocess
    import sys

    code = (
        ("import flax.serialization\n" if flax_first else "")
        + "import importlib, jax.numpy as jnp, staticfield as sf\n"
        "from flax import serialization\n"
        "class S(sf.Struct):\n    w: object\n"
        "importlib.reload(serialization)\n"
        "back = serialization.from_state_dict(S(jnp.zeros(2)), {'w': jnp.ones(2)})\n"
        "assert type(back) is S, back\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_to_state_dict_of_a_single_leaf_is_a_type_error():
    """A bare array has no field names to key by: a TypeError that says what to pass."""
    with pytest.raises(TypeError, match=r"sf.to_state_dict: state is a single leaf"):
        sf.to_state_dict(jnp.ones(2))


def test_importing_staticfield_imports_no_integration_library():
    """staticfield itself imports none of flax, optax, orbax, treescope, IPython, jaxtyping or beartype."""
    import subprocess
    import sys

    code = (
        "import sys, staticfield\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
        "{'flax', 'optax', 'orbax', 'treescope', 'IPython', 'jaxtyping', 'beartype'})\n"
        "print(bad)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
