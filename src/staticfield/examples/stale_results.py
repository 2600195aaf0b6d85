"""Jit on a method: stale results with a plain class, correct ones with staticfield.

``jax.jit(obj.method)`` on a plain class closes over ``self``: its arrays are
baked into the program as constants, so after ``obj.w`` changes the call still
returns the old answer. Making ``self`` hashable by hand fails, since jax arrays
are unhashable. An ``sf.Struct`` passes ``self`` to jit as a pytree, so
results follow the values; its instances also work as ``static_argnums`` of plain
``jax.jit``, where equal instances reuse the program and new values recompile.
"""

import jax
import jax.numpy as jnp

import staticfield as sf


class PlainModel:
    """A plain, mutable class: what many first attempts look like."""

    def __init__(self, w):
        self.w = w

    def predict(self, x):
        return jnp.dot(self.w, x)


class HashedModel(PlainModel):
    """A hand-written ``__hash__`` over the arrays, to use ``self`` as a static argument."""

    def __hash__(self):
        return hash(self.w)

    def __eq__(self, other):
        return type(other) is HashedModel and bool((self.w == other.w).all())


class Model(sf.Struct):
    w: jax.Array

    @sf.jit_method
    def predict(self, x):
        return jnp.dot(self.w, x)


def dot(model, x):
    TRACES.append(model)  # runs once per trace (each one a compile), never on a cache hit
    return jnp.dot(model.w, x)


TRACES = []
dot_static = jax.jit(dot, static_argnums=0)  # the model is part of the cache key


def run():
    """Show the three ways; return the results and counts each one gave."""
    x = jnp.array([1.0, 1.0])
    w_old, w_new = jnp.array([1.0, 2.0]), jnp.array([10.0, 20.0])

    print("plain class, jax.jit(obj.predict):")
    plain = PlainModel(w_old)
    predict = jax.jit(plain.predict)
    first = predict(x)
    plain.w = w_new
    stale = predict(x)
    print(f"  w={w_old}: {first};  after obj.w = {w_new}: {stale}  STALE (eager: {plain.predict(x)})")

    print("hand-written __hash__ over arrays:")
    try:
        hash(HashedModel(w_old))
        hash_error = None
    except TypeError as err:
        hash_error = f"{type(err).__name__}: {err}"
    print(f"  hash(HashedModel(w)) raises {hash_error}")

    print("sf.Struct with @sf.jit_method:")
    model, results = Model(w_old), []
    for label in (f"w={w_old}", f"after sf.replace(model, w={w_new})"):
        count = Model.predict.compile_count
        results.append(model.predict(x))
        compiled = Model.predict.compile_count > count
        print(
            f"  {label}: {results[-1]}  compile_count={Model.predict.compile_count}"
            f" ({'compiled' if compiled else 'hit, no compile'})"
        )
        model = sf.replace(model, w=w_new)
    jit_method_results = [float(r) for r in results]
    print(f"  Model.predict.compile_count = {Model.predict.compile_count}")

    print("sf.Struct instance as static_argnums of plain jax.jit:")
    static_results, previous = [], None
    for w in (w_old, jnp.array([1.0, 2.0]), w_new):
        count = len(TRACES)
        static_results.append(dot_static(Model(w), x))
        compiled = len(TRACES) > count
        print(
            f"  dot_static(Model(w={w}), x) -> {static_results[-1]}  compile_count={len(TRACES)}"
            f" ({'compiled' if compiled else 'hit, no compile'})"
        )
        if compiled and previous is not None:
            print("  dot_static recompiled because:")
            print(f"    model: Model(w={previous}) → Model(w={w}) (static argument, compared by value)")
        previous = w
    return {
        "plain": (float(first), float(stale)),
        "hash_error": hash_error,
        "jit_method": tuple(jit_method_results),
        "jit_method_compile_count": Model.predict.compile_count,
        "static_argnums": [float(r) for r in static_results],
        "static_argnums_traces": len(TRACES),
    }


if __name__ == "__main__":
    run()
