"""A serving loop with random batch sizes: shape buckets compile a handful of programs.

Every new batch size is a new shape, and plain ``jax.jit`` compiles a program for each.
``buckets={"x": 0}`` pads the rows up to a power of two, runs that bucket's program and
slices the real rows back: 60 requests of 1 to 300 rows compile at most 10 programs
(buckets 1, 2, 4, ..., 512), one per bucket used.
The function is checked to be row-wise when each bucket is traced, so padding cannot
change a real row.
"""

import jax
import jax.numpy as jnp
import numpy as np

import staticfield as sf

rng = np.random.RandomState(0)
W1 = jnp.asarray(rng.randn(8, 32).astype(np.float32) / 3)
W2 = jnp.asarray(rng.randn(32, 4).astype(np.float32) / 3)


@sf.jit(buckets={"x": 0})
def classify(x, w1, w2):
    """Per-row class log-probabilities of a two-layer MLP: row-wise, so bucketable."""
    return jax.nn.log_softmax(jnp.tanh(x @ w1) @ w2, axis=-1)


def run():
    """Serve 60 requests of random sizes; print each compile, the buckets, the waste and why."""
    sizes = [int(n) for n in np.random.RandomState(1).randint(1, 301, size=60)]
    for i, n in enumerate(sizes):
        before = classify.compile_count
        out = classify(np.ones((n, 8), np.float32), W1, W2)
        assert out.shape == (n, 4)  # the real rows only
        if classify.compile_count > before:
            print(f"request {i:2d}: {n:3d} rows -> compile_count={classify.compile_count} (compiled)")
    print(f"{len(sizes)} requests, {len(set(sizes))} distinct sizes (plain jax.jit: "
          f"{len(set(sizes))} compiles), classify.compile_count = {classify.compile_count}")
    stats = classify.buckets()
    for bucket, s in stats.items():
        print(f"  bucket {bucket:3d}: {s['calls']:2d} calls, {s['rows']:5d} rows, {s['padded']:4d} padded")
    rows = sum(s["rows"] for s in stats.values())
    padded = sum(s["padded"] for s in stats.values())
    print(f"padding waste: {padded} of {rows + padded} rows computed ({padded / rows:.0%} of the real rows)")
    print("why each compile happened (`was`: the bucket of the program compiled just before):")
    for event in classify.recompiles:
        print(event)
    return {"sizes": sizes, "compile_count": classify.compile_count, "buckets": stats,
            "recompiles": list(classify.recompiles)}


if __name__ == "__main__":
    run()
