"""A method as the body of ``lax.scan`` inside a jitted function.

``Params`` holds an array and a static int. ``simulate`` scans ``params.one_step``
over a sequence. New ``Params`` with new array values reuse the compiled program;
a new value of the static int compiles once more, and the recompile is explained
in the user's own names: ``params.a: 2 → 3``.
"""

import jax
import jax.numpy as jnp
from jax import lax

import staticfield as sf


class Params(sf.Struct):
    x_array: jax.Array  # dynamic: traced, new values never recompile
    a: sf.Static[int]  # static: part of the compile cache key

    @sf.jit_method
    def one_step(self, carry, x):
        carry = self.a * carry + self.x_array * x
        return carry, carry.sum()


@sf.jit
def simulate(params, xs):
    carry = jnp.zeros_like(params.x_array)
    # params.one_step is a pytree of params' arrays: scan traces it, bakes nothing in
    return lax.scan(params.one_step, carry, xs)


def run():
    """Call ``simulate`` three times; print each call, the compile count after it,
    and the recompile explanation. Returns the counts and the ``sf.Recompile`` events."""
    xs = jnp.array([1.0, 2.0, 3.0])
    calls = [
        Params(x_array=jnp.array([1.0, 1.0]), a=2),
        Params(x_array=jnp.array([0.5, -1.0]), a=2),  # new values, same static a
        Params(x_array=jnp.array([0.5, -1.0]), a=3),  # a changed
    ]
    counts = []
    for params in calls:
        _, ys = simulate(params, xs)
        compiled = simulate.compile_count > (counts[-1] if counts else 0)
        counts.append(simulate.compile_count)
        print(
            f"simulate(Params(x_array={params.x_array}, a={params.a}), xs) -> ys={ys}"
            f"  compile_count={simulate.compile_count} ({'compiled' if compiled else 'hit, no compile'})"
        )
    for event in simulate.recompiles:
        print(event)
    return {"compile_counts": counts, "recompiles": list(simulate.recompiles)}


if __name__ == "__main__":
    run()
