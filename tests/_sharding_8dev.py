"""Sharding checks on 8 virtual CPU devices, run by tests/test_sharding.py in a subprocess.

``XLA_FLAGS=--xla_force_host_platform_device_count=8`` only takes effect if it is
set before JAX starts, so these checks run in their own process. Each check
prints one JSON line ``{"check": name, "ok": bool, "detail": str}``; the tests
assert on those lines. The plain ```python blocks of docs/sharding.md run here
too, in order, in one namespace.
"""

from __future__ import annotations

import os

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

import contextlib  # noqa: E402
import io  # noqa: E402
import json  # noqa: E402
import pathlib  # noqa: E402
import re  # noqa: E402
import sys  # noqa: E402
import textwrap  # noqa: E402
import traceback  # noqa: E402
import types  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import AxisType, NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

import staticfield as sf  # noqa: E402

DOCS = pathlib.Path(__file__).resolve().parent.parent / "docs"
CHECKS = []


def check(fn):
    CHECKS.append(fn)
    return fn


def close(a, b):
    """Two pytrees with the same structure and numerically equal leaves."""
    la, ta = jax.tree.flatten(a)
    lb, tb = jax.tree.flatten(b)
    assert ta == tb, (ta, tb)
    for x, y in zip(la, lb):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=2e-5, atol=1e-6)


def assert_laid_out_as(tree, shardings):
    """Every leaf of ``tree`` has exactly the sharding given for it."""
    got = jax.tree.map(lambda a: a.sharding, tree)
    assert got == shardings, (got, shardings)


# --- models --------------------------------------------------------------------------


@sf.dataclass
class Layer:
    w: jax.Array
    b: jax.Array


@sf.dataclass
class DPModel:
    """Unannotated, so replicated: plain data parallelism. Nested instances and a dict."""

    layers: tuple
    norm: dict
    activation: str = sf.static(default="tanh")

    def __call__(self, x):
        for layer in self.layers:
            x = getattr(jnp, self.activation)(x @ layer.w + layer.b)
        return x * self.norm["scale"] + self.norm["shift"]


def dp_init(key):
    k1, k2 = jax.random.split(key)
    return DPModel(
        layers=(
            Layer(jax.random.normal(k1, (6, 8)) / 3, jnp.zeros(8)),
            Layer(jax.random.normal(k2, (8, 2)) / 3, jnp.zeros(2)),
        ),
        norm={"scale": jnp.ones(2), "shift": jnp.zeros(2)},
    )


@sf.dataclass
class Dense:
    w: jax.Array = sf.field(sharding=P(None, "model"))
    b: jax.Array = sf.field(sharding=P("model"))


@sf.dataclass
class Output:
    w: jax.Array = sf.field(sharding=P("model", None))
    b: jax.Array


@sf.dataclass
class TPModel:
    hidden: Dense
    out: Output
    extra: dict = sf.field(sharding=P("data"))  # applies to every leaf of the dict
    activation: str = sf.static(default="relu")

    def __call__(self, x):
        h = getattr(jax.nn, self.activation)(x @ self.hidden.w + self.hidden.b)
        return h @ self.out.w + self.out.b + self.extra["bias"].mean()


def tp_init(key):
    k1, k2 = jax.random.split(key)
    return TPModel(
        hidden=Dense(jax.random.normal(k1, (16, 32)) / 4, jnp.zeros(32)),
        out=Output(jax.random.normal(k2, (32, 4)) / 6, jnp.zeros(4)),
        extra={"bias": jnp.zeros(8), "unused": None},
    )


def mse_step(model, x, y):
    loss, grads = jax.value_and_grad(lambda m: jnp.mean((m(x) - y) ** 2))(model)
    return jax.tree.map(lambda p, g: p - 0.1 * g, model, grads), loss


def batch(n_in, n_out, rows=64, seed=0):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(rows, n_in)).astype(np.float32), rng.normal(size=(rows, n_out)).astype(np.float32)


def train(init, mesh, data_spec, n_in, n_out):
    """Three steps sharded and three unsharded; return what the checks compare."""
    traces = 0

    def step_fn(model, x, y):
        nonlocal traces
        traces += 1
        return mse_step(model, x, y)

    x, y = batch(n_in, n_out)
    model = init(jax.random.key(0))
    ms = sf.shardings(model, mesh)
    data = NamedSharding(mesh, data_spec)
    rep = NamedSharding(mesh, P())
    step = jax.jit(step_fn, in_shardings=(ms, data, data), out_shardings=(ms, rep))
    sharded = sf.shard(model, mesh)
    assert_laid_out_as(sharded, ms)
    xs, ys = jax.device_put(x, data), jax.device_put(y, data)
    losses = []
    for _ in range(3):
        sharded, loss = step(sharded, xs, ys)
        losses.append(loss)
    sharded_traces = traces

    plain = jax.jit(mse_step)
    ref, ref_losses = model, []
    for _ in range(3):
        ref, loss = plain(ref, x, y)
        ref_losses.append(loss)
    return dict(
        sharded=sharded, ref=ref, losses=losses, ref_losses=ref_losses, shardings=ms,
        traces=sharded_traces, step_fn=step_fn, in_sh=(ms, data, data), out_sh=(ms, rep),
        model=model, x=xs, y=ys,
    )


# --- checks --------------------------------------------------------------------------


@check
def eight_devices():
    assert jax.device_count() == 8, jax.devices()


_RUNS: dict = {}


def dp_run():
    """Data parallel: 1-D mesh with JAX's default (explicit) axis types, model replicated."""
    if "dp" not in _RUNS:
        _RUNS["dp"] = train(dp_init, jax.make_mesh((8,), ("data",)), P("data", None), 6, 2)
    return _RUNS["dp"]


def tp_run():
    """Data x model: a 4 x 2 mesh with auto axes, the hidden layer split over "model"."""
    if "tp" not in _RUNS:
        mesh = jax.make_mesh((4, 2), ("data", "model"), axis_types=(AxisType.Auto,) * 2)
        _RUNS["tp"] = train(tp_init, mesh, P("data", None), 16, 4)
    return _RUNS["tp"]


@check
def data_parallel_matches_unsharded():
    r = dp_run()
    close(r["sharded"], r["ref"])
    close(r["losses"], r["ref_losses"])
    assert type(r["sharded"]) is DPModel and r["sharded"].activation == "tanh"


@check
def data_parallel_outputs_have_annotated_shardings():
    r = dp_run()
    assert_laid_out_as(r["sharded"], r["shardings"])
    mesh = jax.tree.leaves(r["shardings"])[0].mesh
    for s in jax.tree.leaves(r["shardings"]):
        assert s == NamedSharding(mesh, P()), s
    assert r["losses"][-1].sharding == NamedSharding(mesh, P())


@check
def data_parallel_compiles_once():
    r = dp_run()
    assert r["traces"] == 1, r["traces"]
    jit_compiles(r)


def jit_compiles(r):
    """With sf.jit (when present): same numbers, annotated layout, compile_count == 1."""
    if not hasattr(sf, "jit"):
        return
    step = sf.jit(r["step_fn"], in_shardings=r["in_sh"], out_shardings=r["out_sh"])
    model = sf.shard(r["model"], jax.tree.leaves(r["shardings"])[0].mesh)
    for _ in range(3):
        model, _loss = step(model, r["x"], r["y"])
    assert step.compile_count == 1, step.compile_count
    close(model, r["ref"])
    assert_laid_out_as(model, r["shardings"])


@check
def two_d_mesh_matches_unsharded():
    r = tp_run()
    close(r["sharded"], r["ref"])
    close(r["losses"], r["ref_losses"])


@check
def two_d_mesh_outputs_have_annotated_shardings():
    r = tp_run()
    out = r["sharded"]
    mesh = jax.tree.leaves(r["shardings"])[0].mesh
    assert out.hidden.w.sharding == NamedSharding(mesh, P(None, "model"))
    assert out.hidden.b.sharding == NamedSharding(mesh, P("model"))
    assert out.out.w.sharding == NamedSharding(mesh, P("model", None))
    assert out.out.b.sharding == NamedSharding(mesh, P())
    assert out.extra["bias"].sharding == NamedSharding(mesh, P("data"))
    assert out.extra["unused"] is None
    # each device holds only its part
    assert out.hidden.w.addressable_shards[0].data.shape == (16, 16)
    assert out.out.w.addressable_shards[0].data.shape == (16, 4)
    assert out.extra["bias"].addressable_shards[0].data.shape == (2,)


@check
def two_d_mesh_compiles_once():
    r = tp_run()
    assert r["traces"] == 1, r["traces"]
    jit_compiles(r)


@check
def shard_places_every_leaf_as_annotated():
    mesh = jax.make_mesh((4, 2), ("data", "model"))
    model = tp_init(jax.random.key(1))
    placed = sf.shard(model, mesh)
    assert type(placed) is TPModel and placed == model
    assert_laid_out_as(placed, sf.shardings(model, mesh))


@check
def stacked_ensemble_sharded_over_data():
    @sf.dataclass
    class Ensemble:
        members: Layer = sf.field(sharding=P("data"))  # one member per "data" slice
        temperature: float = sf.static(default=1.0)

    mesh = jax.make_mesh((8,), ("data",))
    members = [Layer(jnp.full((3, 2), float(i)), jnp.zeros(2)) for i in range(8)]
    ens = sf.shard(Ensemble(members=sf.stack(members)), mesh)
    assert ens.members.w.sharding == NamedSharding(mesh, P("data"))
    assert ens.members.w.addressable_shards[0].data.shape == (1, 3, 2)
    x = jnp.ones(3)
    out = jax.jit(lambda e: jax.vmap(lambda m: x @ m.w + m.b)(e.members))(ens)
    np.testing.assert_allclose(np.asarray(out), [[3.0 * i] * 2 for i in range(8)])


@check
def errors_with_a_real_mesh():
    mesh = jax.make_mesh((4, 2), ("data", "model"))
    bad = tp_init(jax.random.key(0))
    bad = sf.replace(bad, extra={"bias": jnp.zeros(6)})
    try:
        sf.shardings(bad, mesh)
    except ValueError as e:
        msg = str(e)
    else:
        raise AssertionError("no error")
    assert "TPModel.extra['bias']" in msg and "(6,)" in msg and "data=4" in msg, msg
    try:
        sf.shard(bad, mesh)
    except ValueError as e:
        assert "TPModel.extra['bias']" in str(e)
    else:
        raise AssertionError("no error from sf.shard")


def python_blocks(page, titled=None):
    """``python`` blocks of a page, dedented: untitled ones, or the one with this title."""
    pattern = re.compile(r'^([ \t]*)```python([^\n]*)\n(.*?)^\1```[ \t]*$', re.M | re.S)
    out = []
    for m in pattern.finditer(page.read_text()):
        info = m.group(2).strip()
        if (titled is None and not info) or (titled is not None and f'title="{titled}"' in info):
            out.append(textwrap.dedent(m.group(3)))
    return out


def run_blocks(blocks, name):
    module = types.ModuleType(name)
    sys.modules[name] = module
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        for i, block in enumerate(blocks):
            exec(compile(block, f"{name} block {i}", "exec", dont_inherit=True), module.__dict__)  # noqa: S102
    return out.getvalue()


@check
def docs_sharding_page_runs():
    blocks = python_blocks(DOCS / "sharding.md")
    assert len(blocks) >= 4, len(blocks)
    run_blocks(blocks, "docs_sharding")


@check
def docs_multihost_example_on_one_process():
    """The multi-host file with one process owning all 8 devices; prints the reference loss."""
    (block,) = python_blocks(DOCS / "sharding.md", titled="train_multihost.py")
    os.environ.update(COORDINATOR_ADDRESS="localhost:0", NUM_PROCESSES="1", PROCESS_ID="0")
    real = jax.distributed.initialize
    jax.distributed.initialize = lambda **kw: None  # one process: nothing to connect
    try:
        printed = run_blocks([block], "docs_multihost")
    finally:
        jax.distributed.initialize = real
    assert printed.startswith("process 0: loss "), printed
    return printed.strip()


@check
def buckets_row_axis_sharded():
    """buckets= with the row axis sharded over 8 devices (in a non-default order): the bucket
    is a multiple of 8, the padded batch keeps its sharding, the rows equal the unsharded call."""
    mesh = jax.sharding.Mesh(np.array(jax.devices()[::-1]), ("data",))
    w = np.random.RandomState(0).randn(4, 3).astype(np.float32)

    def fn(x, w):
        return jnp.tanh(x @ w)

    f = sf.jit(fn, buckets={"x": 0}, bucket_sizes=[12, 40, 64])
    x = np.random.RandomState(1).randn(8, 4).astype(np.float32)  # 8 rows: the list says 12
    xs = jax.device_put(x, NamedSharding(mesh, P("data")))
    close(f(xs, w), fn(x, w))
    assert list(f.buckets()) == [40], f.buckets()  # 12 is no multiple of 8; 40 is
    g = sf.jit(fn, buckets={"x": 0}, bucket_sizes=[12, 20])
    try:
        g(xs, w)
    except ValueError as exc:
        assert "is sharded over 8 devices along its row axis" in str(exc), exc
    else:
        raise AssertionError("no bucket divisible by 8 was accepted")
    return str(f.buckets())


@check
def buckets_zero_rows_sharded():
    """A batch of 0 rows sharded on its row axis over 8 devices runs its exact 0-row program,
    as plain jax.jit does (it raised JAX's IndivisibleError)."""
    mesh = jax.sharding.Mesh(np.array(jax.devices()), ("data",))
    w = np.ones((4, 3), np.float32)
    f = sf.jit(lambda x, w: jnp.tanh(x @ w), buckets={"x": 0})
    xs = jax.device_put(np.zeros((0, 4), np.float32), NamedSharding(mesh, P("data")))
    out = f(xs, w)
    assert out.shape == (0, 3), out.shape
    assert f.buckets() == {0: {"calls": 1, "rows": 0, "padded": 0}}, f.buckets()
    return str(out.shape)


@check
def recompile_names_an_auto_axis_sharding():
    """A field sharded P(None, "model") on a mesh with Auto axes: sf.Recompile names that
    spec (a tracer's aval drops Auto axes: it read P(None, None)), on every call form."""
    mesh = jax.make_mesh((4, 2), ("data", "model"), axis_types=(AxisType.Auto,) * 2)
    x = jnp.ones((2, 4))

    def make():
        class M(sf.Struct):
            w: jax.Array

            @sf.jit_method
            def f(self, x):
                return (x @ self.w).sum()

        return M

    def placed(M):
        w = jax.device_put(jnp.ones((4, 8)), NamedSharding(mesh, P(None, "model")))
        return M(jnp.ones((4, 8))), M(w)

    M1, M2 = make(), make()
    f = sf.jit(lambda m, x: (x @ m.w).sum())
    forms = {
        "obj.method": (M1, lambda m: m.f(x), M1.f),
        "Cls.method": (M2, lambda m: M2.f(m, x), M2.f),
        "sf.jit": (M1, lambda m: f(m, x), f),
    }
    texts = []
    for name, (M, call, counters) in forms.items():
        for m in placed(M):
            call(m)
        text = str(counters.recompiles[-1])
        assert "self.w" in text or "m.w" in text, (name, text)
        assert "P(None, 'model')" in text and "P(None, None)" not in text, (name, text)
        texts.append(text)
    return texts[0]


def main():
    only = set(sys.argv[1:])
    for fn in CHECKS:
        if only and fn.__name__ not in only:
            continue
        try:
            detail = fn() or ""
            ok = True
        except Exception:
            ok, detail = False, traceback.format_exc()
        print(json.dumps({"check": fn.__name__, "ok": ok, "detail": detail}), flush=True)


if __name__ == "__main__":
    main()
