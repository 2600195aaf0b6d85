"""A static boolean flag toggled 100 times compiles exactly twice.

``use_bias`` is static, so each of its values gets its own program, compiled once
and then looked up: toggling the flag on every call costs two compiles in all,
one per value. The arrays are dynamic, so new weights never add a compile.
"""

import jax
import jax.numpy as jnp

import staticfield as sf


class Dense(sf.Struct):
    w: jax.Array
    b: jax.Array
    use_bias: sf.Static[bool] = True

    @sf.jit_method
    def apply(self, x):
        y = x @ self.w
        return y + self.b if self.use_bias else y  # a Python `if`: fine on a static field


def run():
    """Call ``Dense.apply`` 100 times, toggling ``use_bias`` and changing ``w`` each time."""
    layer = Dense(w=jnp.ones((3, 2)), b=jnp.array([10.0, 20.0]))
    x = jnp.array([1.0, 2.0, 3.0])
    for step in range(100):
        layer = sf.replace(layer, w=layer.w + 1.0, use_bias=not layer.use_bias)
        before = Dense.apply.compile_count
        y = layer.apply(x)
        if step < 3:
            compiled = Dense.apply.compile_count > before
            print(
                f"step {step}: Dense(use_bias={layer.use_bias}).apply(x) -> {y}"
                f"  compile_count={Dense.apply.compile_count}"
                f" ({'compiled' if compiled else 'hit, no compile'})"
            )
    print(f"... 100 calls, use_bias toggled on each: last result {y}")
    print(f"Dense.apply.compile_count = {Dense.apply.compile_count}")
    print(f"Dense.apply.cache_size() = {Dense.apply.cache_size()}")
    for event in Dense.apply.recompiles:
        print(event)
    return {
        "compile_count": Dense.apply.compile_count,
        "cache_size": Dense.apply.cache_size(),
        "recompiles": list(Dense.apply.recompiles),
    }


if __name__ == "__main__":
    run()
