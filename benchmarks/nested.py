"""Case 6: a nested model through a training-style step, against flax.struct and equinox.

The model holds ``LAYERS`` layers, each an instance with two arrays (``w: f32[4,4]``,
``b: f32[4]``) and a static activation name. One step is what a training loop
does: a jitted ``update`` that takes the model and returns a new one (flatten
64 instances in, unflatten 64 out), then a jitted method call on the new model.
Every library runs the same computation through its natural API: ours through
``sf.jit`` and ``@sf.jit_method``, flax.struct and equinox through ``jax.jit``
(equinox's ``filter_jit`` is several times slower to dispatch; the dispatch
case measures it). The figure is microseconds per step.
"""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp

import staticfield as sf

from ._harness import Config, Contender, Results, kinds, measure, optional, traced

NESTED = "nested model step"
LAYERS = 64
OURS = "sf (sf.jit + jit_method)"
FLAX = "flax.struct + jax.jit"
EQX = "equinox + jax.jit"
DICTS = "dicts + jax.jit"


def _apply(layers: tuple, x: jax.Array) -> jax.Array:
    for layer in layers:
        x = jnp.tanh(x @ layer.w + layer.b)
    return x


def _update(m: Any, lr: jax.Array) -> Any:
    return jax.tree.map(lambda p: p - lr * p, m)


def _stepper(jit: Callable[..., Any], model: Any, call: Callable[[Any, jax.Array], Any]
             ) -> tuple[Callable[[], Any], list[int]]:
    """One step: ``model = jit(update)(model, lr)``, then ``call(model, x)``; and the
    update's trace counter."""
    upd, count = traced(_update)
    update_jit = jit(upd)
    state = {"m": model}
    x, lr = jnp.ones(4), jnp.float32(1e-3)

    def step() -> Any:
        state["m"] = m = update_jit(state["m"], lr)
        return call(m, x)

    return step, count


def _layers(make: Callable[[jax.Array, jax.Array], Any]) -> tuple:
    return tuple(make(jnp.ones((4, 4)) * 0.1, jnp.zeros(4)) for _ in range(LAYERS))


def _dicts() -> tuple[Callable[[], Any], list[int]]:
    """The hand-written baseline: the same model as a dict of a tuple of dicts."""

    def apply(m, x):
        for layer in m["layers"]:
            x = jnp.tanh(x @ layer["w"] + layer["b"])
        return x

    model = {"layers": _layers(lambda w, b: {"w": w, "b": b})}
    return _stepper(jax.jit, model, jax.jit(apply))


def _ours() -> tuple[Callable[[], Any], list[int]]:
    @sf.dataclass
    class Layer:
        w: jax.Array
        b: jax.Array
        act: str = sf.static(default="tanh")

    @sf.dataclass
    class Model:
        layers: tuple

        @sf.jit_method
        def apply(self, x):
            return _apply(self.layers, x)

    return _stepper(sf.jit, Model(_layers(Layer)), lambda m, x: m.apply(x))


def _with_jax_jit(layer_cls: type, model_cls: type) -> tuple[Callable[[], Any], list[int]]:
    apply_jit = jax.jit(lambda m, x: _apply(m.layers, x))
    return _stepper(jax.jit, model_cls(_layers(layer_cls)), apply_jit)


def _flax() -> tuple[Callable[[], Any], list[int]]:
    import flax.struct

    @flax.struct.dataclass
    class Layer:
        w: jax.Array
        b: jax.Array
        act: str = flax.struct.field(pytree_node=False, default="tanh")

    @flax.struct.dataclass
    class Model:
        layers: tuple

    return _with_jax_jit(Layer, Model)


def _equinox() -> tuple[Callable[[], Any], list[int]]:
    import equinox as eqx

    class Layer(eqx.Module):
        w: jax.Array
        b: jax.Array
        act: str = eqx.field(static=True, default="tanh")

    class Model(eqx.Module):
        layers: tuple

    return _with_jax_jit(Layer, Model)


def run(cfg: Config, results: Results) -> None:
    print(f"case 6: a {LAYERS}-layer model through update + method call", flush=True)
    contenders = []
    builders = ((OURS, "ours", _ours), (FLAX, "anchor", _flax), (EQX, "anchor", _equinox),
                (DICTS, "baseline", _dicts))
    for name, kind, build in builders:
        built = optional(results, name, build)
        if built is not None:
            step, count = built
            contenders.append(Contender(name, step, kind, traces=count))
    outs = [c.fn() for c in contenders]
    if any(not bool(jnp.allclose(o, outs[0])) for o in outs):
        raise RuntimeError("the nested-model contenders disagree")
    results.add(NESTED, LAYERS, measure(contenders, cfg, results), kinds(contenders))


def best_anchor(results: Results) -> tuple[float | None, str]:
    """The fastest anchor's figure and name (``None`` when no anchor ran)."""
    rows = [r for r in results.select(NESTED, LAYERS) if r.kind == "anchor"]
    if not rows:
        return None, ""
    best = min(rows, key=lambda r: r.us)
    return best.us, best.name


__all__ = ["run", "best_anchor", "NESTED", "LAYERS", "OURS"]
