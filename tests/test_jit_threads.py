"""Counters and the compile budget stay exact when many threads compile at once."""

from __future__ import annotations

import threading

import jax
import jax.numpy as jnp

import staticfield as sf


def _run_at_once(calls):
    """Start every call behind one barrier so their first calls really overlap."""
    barrier = threading.Barrier(len(calls))
    errors = []

    def run(call):
        barrier.wait()
        try:
            call()
        except Exception as exc:  # collected and checked by the test
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(c,)) for c in calls]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors


def _class():
    @sf.dataclass
    class Env:
        x: jax.Array
        n: sf.Static[int] = 0

        @sf.jit_method(warn_compiles=None)
        def step(self, y):
            return self.x * y + self.n

    return Env


def test_concurrent_first_calls_give_one_event_per_recompile():
    """Eight first calls of eight new variants at once: 8 compiles and exactly 7 recompile events."""
    Env = _class()
    errors = _run_at_once([lambda n=n: Env(jnp.ones(2), n).step(1.0) for n in range(8)])
    assert errors == []
    assert Env.step.compile_count == 8 == Env.step.cache_size()
    assert len(Env.step.recompiles) == 7
    assert sorted(e.compile_number for e in Env.step.recompiles) == list(range(2, 9))


def test_concurrent_first_calls_respect_max_compiles():
    """With max_compiles=1, eight new variants at once compile exactly once; seven are refused."""
    Env = _class()
    Env.step.max_compiles = 1
    errors = _run_at_once([lambda n=n: Env(jnp.ones(2), n).step(1.0) for n in range(8)])
    assert len(errors) == 7 and all(isinstance(e, sf.RecompileError) for e in errors)
    assert Env.step.compile_count == 1 == Env.step.cache_size()


def test_concurrent_sf_jit_calls_are_counted_exactly():
    """sf.jit with eight new shapes at once counts eight compiles and seven events."""
    f = sf.jit(lambda x: x + 1, warn_compiles=None)
    errors = _run_at_once([lambda n=n: f(jnp.ones(n + 1)) for n in range(8)])
    assert errors == []
    assert f.compile_count == 8 and len(f.recompiles) == 7
