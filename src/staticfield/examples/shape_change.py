"""A shape change recompiles; going back to an earlier shape is a cache hit.

The shape and dtype of every array leaf are part of the compile cache key. A new
shape compiles a new program and the recompile names the field and both shapes;
an earlier shape finds its program again, whatever the values.
"""

import jax
import jax.numpy as jnp

import staticfield as sf


class Poly(sf.Struct):
    coeffs: jax.Array  # c0 + c1 x + c2 x**2 + ...

    @sf.jit_method
    def __call__(self, x):
        powers = x ** jnp.arange(self.coeffs.shape[0])  # the shape is static while tracing
        return jnp.dot(self.coeffs, powers)


def run():
    """Evaluate polynomials of degree 2, 4, then 2 again; print each call and the counts."""
    calls = [
        Poly(jnp.array([1.0, 2.0, 3.0])),
        Poly(jnp.array([1.0, 0.0, 0.0, 0.0, 2.0])),  # 5 coefficients: a new shape
        Poly(jnp.array([0.0, 1.0, 0.0])),  # 3 again, new values: a cache hit
    ]
    x = jnp.float32(2.0)
    counts = []
    for poly in calls:
        y = poly(x)
        compiled = Poly.__call__.compile_count > (counts[-1] if counts else 0)
        counts.append(Poly.__call__.compile_count)
        print(
            f"Poly(coeffs={poly.coeffs})(2.0) -> {y}  compile_count={counts[-1]}"
            f" ({'compiled' if compiled else 'hit, no compile'})"
        )
    print(f"Poly.__call__.cache_size() = {Poly.__call__.cache_size()}")
    for event in Poly.__call__.recompiles:
        print(event)
    return {
        "compile_counts": counts,
        "cache_size": Poly.__call__.cache_size(),
        "recompiles": list(Poly.__call__.recompiles),
    }


if __name__ == "__main__":
    run()
