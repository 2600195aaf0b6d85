"""Run by tests/test_multiprocess.py as 2 processes x 4 CPU devices: staticfield's
whole-instance operations on global arrays (spread over both processes).

Each check prints one JSON line ``{"check": name, "ok": bool, "detail": str}``.
"""

from __future__ import annotations

import os

import jax

jax.distributed.initialize(
    coordinator_address=os.environ["COORDINATOR_ADDRESS"],
    num_processes=int(os.environ["NUM_PROCESSES"]),
    process_id=int(os.environ["PROCESS_ID"]),
)

import json  # noqa: E402
import traceback  # noqa: E402

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

import staticfield as sf  # noqa: E402

mesh = jax.make_mesh((jax.device_count(),), ("i",))


@sf.dataclass
class Params:
    w: jax.Array = sf.field(sharding=P("i"))
    n: int = sf.static(default=2)


def global_params(value: float) -> Params:
    """Params whose w is made on the devices of both processes (never gathered: a NaN
    would fail device_put's check that every process passes the same host value)."""
    make = jax.jit(lambda: Params(jnp.full(8, value, jnp.float32)), out_shardings=sf.shardings(Params(jnp.zeros(8)), mesh))
    return make()


def check(name, fn):
    try:
        ok, detail = fn()
    except Exception as e:  # noqa: BLE001
        ok, detail = False, f"{type(e).__name__}: {e}\n{traceback.format_exc()[-1500:]}"
    print(json.dumps({"check": name, "ok": bool(ok), "detail": str(detail)}), flush=True)


def eq():
    a, b, c = global_params(1.0), global_params(1.0), global_params(2.0)
    assert not a.w.is_fully_addressable
    bitwise = [global_params(0.0) == global_params(-0.0), global_params(np.nan) == global_params(np.nan)]
    got = [a == b, a == c, *bitwise, hash(a) == hash(b)]
    return got == [True, False, False, True, True], str(got)


def eq_refused():
    local = Params(jax.device_put(jnp.full(8, 1.0, jnp.float32), jax.local_devices()[0]))
    try:
        global_params(1.0) == local
    except ValueError as e:
        text = str(e)
        return text.startswith("Params.__eq__: the field `w` holds an array spread over processes"), text
    return False, "no error"


def state_dict():
    a = global_params(3.0)
    back = sf.from_state_dict(a, sf.to_state_dict(a))
    host = sf.from_state_dict(a, {"w": np.full(8, 3.0, np.float32)})  # the same global values
    ok = back.w.sharding == a.w.sharding == host.w.sharding and back == a and host == a
    return ok, str(back.w.sharding)


def unstack():
    stacked = sf.stack([Params(jnp.full(8, float(i), jnp.float32)) for i in range(2)])
    s = jax.device_put(stacked, NamedSharding(mesh, P(None, "i")))
    parts = sf.unstack(s)
    return [p == global_params(float(i)) for i, p in enumerate(parts)] == [True, True], str(parts)


def reversed_mesh():
    """The same operations on a mesh whose devices are in another order than jax.devices()
    (each process's shards sit on other devices): ==, from_state_dict and unstack agree."""
    rmesh = jax.sharding.Mesh(np.array(jax.devices()[::-1]), ("i",))
    shardings = sf.shardings(Params(jnp.zeros(8)), rmesh)
    a = jax.jit(lambda: Params(jnp.arange(8.0)), out_shardings=shardings)()
    b = jax.jit(lambda: Params(jnp.arange(8.0)), out_shardings=shardings)()
    back = sf.from_state_dict(a, sf.to_state_dict(a))
    stacked = jax.device_put(sf.stack([Params(jnp.arange(8.0)), Params(jnp.arange(8.0) + 1)]),
                             NamedSharding(rmesh, P(None, "i")))
    parts = sf.unstack(stacked)
    got = [a == b, back == a, back.w.sharding == a.w.sharding, parts[0] == a, parts[1] == a]
    return got == [True, True, True, True, False], str(got)


def local_state():
    """A process-local instance (on this process's first device) restores from a host state
    dict in each process, placed as the template is; its == compares locally."""
    local = Params(jax.device_put(jnp.zeros(8, jnp.float32), jax.local_devices()[0]), n=3)
    back = sf.from_state_dict(local, {"w": np.full(8, float(jax.process_index()), np.float32)})
    ok = (back.w.is_fully_addressable and back.w.sharding == local.w.sharding and back.n == 3
          and back == Params(jnp.full(8, float(jax.process_index()), jnp.float32), n=3))
    return ok, str(back.w.sharding)


for name, fn in [("eq", eq), ("eq_refused", eq_refused), ("state_dict", state_dict), ("unstack", unstack),
                 ("reversed_mesh", reversed_mesh), ("local_state", local_state)]:
    check(name, fn)
