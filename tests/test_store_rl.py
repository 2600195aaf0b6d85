"""Acceptance: the programs of an RL environment, as every jumanji, gymnax or brax user
writes them (a state class, ``reset``/``step`` drawing from ``jax.random``, a vmapped
auto-reset wrapper, a 100-step ``lax.scan`` rollout), are kept by the program store: a
second process compiles nothing and its rollout is bit-identical, also with
``trust="source"``, and after ``sf.warmup()`` under ``sf.no_compiles()``."""

from __future__ import annotations

from _fresh_process import run

MODEL = '''
import jax, jax.numpy as jnp
import staticfield as sf

TRACES = []


@sf.dataclass
class State:
    pos: jax.Array
    vel: jax.Array
    goal: jax.Array
    t: jax.Array
    key: jax.Array  # a raw PRNGKey, as jumanji and gymnax keep it


@sf.dataclass
class Point:
    """A point mass pushed toward a random goal; an episode ends there or at the horizon."""
    horizon: int = sf.static(default=25)
    noise: float = sf.static(default=0.05)

    def reset(self, key):
        key, goal_key, pos_key = jax.random.split(key, 3)
        state = State(pos=jax.random.uniform(pos_key, (2,), minval=-1.0, maxval=1.0), vel=jnp.zeros(2),
                      goal=jax.random.uniform(goal_key, (2,), minval=-1.0, maxval=1.0), t=jnp.int32(0), key=key)
        return state, self.observe(state)

    def observe(self, s):
        return jnp.concatenate([s.pos, s.vel, s.goal - s.pos])

    def step(self, s, action):
        key, sub = jax.random.split(s.key)
        vel = 0.9 * s.vel + 0.1 * jnp.clip(action, -1.0, 1.0) + self.noise * jax.random.normal(sub, (2,))
        s = State(pos=s.pos + vel, vel=vel, goal=s.goal, t=s.t + 1, key=key)
        distance = jnp.linalg.norm(s.goal - s.pos)
        return s, self.observe(s), -distance, (distance < 0.1) | (s.t >= self.horizon)


@sf.dataclass
class VmapAutoResetWrapper:
    env: Point

    @sf.jit_method
    def reset(self, keys):
        TRACES.append("reset")
        return jax.vmap(self.env.reset)(keys)

    @sf.jit_method
    def step(self, state, action):
        TRACES.append("step")

        def one(s, a):
            s, obs, reward, done = self.env.step(s, a)
            fresh, fresh_obs = self.env.reset(s.key)
            s = jax.tree.map(lambda f, x: jnp.where(done, f, x), fresh, s)
            return s, jnp.where(done, fresh_obs, obs), reward, done

        return jax.vmap(one)(state, action)


@sf.jit(static_argnames="steps")
def rollout(env, state, obs, key, steps=100):
    TRACES.append("rollout")

    def body(carry, _):
        state, obs, key = carry
        key, sub = jax.random.split(key)
        action = obs[:, 4:6] + 0.1 * jax.random.normal(sub, (obs.shape[0], 2))  # toward the goal
        state, obs, reward, done = env.step(state, action)
        return (state, obs, key), (reward, done)

    (state, obs, key), (rewards, dones) = jax.lax.scan(body, (state, obs, key), None, length=steps)
    return state, rewards, dones
'''

SCRIPT = '''
import contextlib, json, sys
import jax, jax.numpy as jnp, numpy as np
import staticfield as sf
import model

env = model.VmapAutoResetWrapper(model.Point())
keys, key, action = jax.random.split(jax.random.PRNGKey(0), 8), jax.random.PRNGKey(1), jnp.ones((8, 2))
summary = None
if sys.argv[1] == "warm":
    summary = sf.warmup()
    model.TRACES.clear()
fs = (model.VmapAutoResetWrapper.reset, model.VmapAutoResetWrapper.step, model.rollout)
before = sum(f.compile_count for f in fs)
with sf.no_compiles() if summary is not None else contextlib.nullcontext():
    state, obs = env.reset(keys)
    state, obs, reward, done = env.step(state, action)
    out = model.rollout(env, state, obs, key)
print(json.dumps({"out": [np.asarray(x).tobytes().hex() for x in jax.tree.leaves(out)],
                  "episodes": int(np.asarray(out[2]).sum()),
                  "compiles": sum(f.compile_count for f in fs) - before, "loads": sum(f.load_count for f in fs),
                  "traces": len(model.TRACES), "loaded": summary and summary.loaded}))
'''


def test_an_rl_rollout_loads_in_a_fresh_process_bit_identical(tmp_path):
    """Record, then: load by trace, load by source with no trace, and warm up then run
    under sf.no_compiles(), in both trust modes: nothing compiles, the same bits."""
    first = run(tmp_path, MODEL, SCRIPT, "record")
    assert (first["compiles"], first["loads"]) == (3, 0)
    assert first["episodes"] > 8  # episodes ended, and the wrapper reset them
    for trust in ("trace", "source"):
        second = run(tmp_path, MODEL, SCRIPT, "load", trust=trust)
        assert (second["compiles"], second["loads"], second["out"]) == (0, 3, first["out"]), trust
        if trust == "source":
            assert second["traces"] == 0
        warm = run(tmp_path, MODEL, SCRIPT, "warm", trust=trust)
        assert (warm["compiles"], warm["loaded"], warm["traces"], warm["out"]) == (0, 3, 0, first["out"]), trust

