"""The exceptions of shape buckets, and the messages that explain them."""

from __future__ import annotations


class BucketError(TypeError):
    """A bucketed function would give its real rows another value when the batch is padded
    to a bucket: it mixes rows along its row axis (a mean, a sort, a normalization over the
    batch), uses the row count as a number, needs a concrete row count, returns an output
    that does not carry the row axis, or has a derivative rule or callback that would see
    the padding. Raised when the bucket program is traced."""


class BucketCheckError(RuntimeError):
    """``STATICFIELD_CHECK_BUCKETS=1``: a bucketed call's rows, or gradients, differ from the
    unpadded call's."""


_FIX = ("Make the function row-wise (every output row computed from the same input row only), "
        "or pass mask=\"valid\" to sf.jit/jit_method: the function then receives a bool row mask "
        "`valid` (True for real rows), may mix rows, and must ignore padded ones itself.")
_COUNT_FIX = ("Use the row count only as the size of the row axis (jnp.zeros((x.shape[0], d)), "
              "jnp.arange(x.shape[0]) as row indices), or pass mask=\"valid\" to sf.jit/jit_method "
              "and use valid.sum(), the real row count.")

MIXES_ROWS = (
    "{function}: the bucketed argument `{origin}` has its rows on axis {axis}, and "
    "{operation} at {where} {why}, so padding the batch to a bucket would change the real "
    "rows. " + _FIX
)

COUNT_USED = (
    "{function}: the row count of the bucketed argument(s) {names} becomes a value at {source} "
    "({why}), and {then}. Under buckets= that count is the bucket's size "
    "(the padded batch's), never the real one, so the real rows would change. " + _COUNT_FIX
)

NEEDS_COUNT = (
    "{function}: {where} needs a concrete row count for the bucketed argument(s) {names} "
    "({detail}); a bucketed function is traced once for every row count, so its code may use "
    "the count only where JAX keeps it symbolic. Instead of len(x), range(x.shape[0]), "
    "int(x.shape[0]), a NumPy shape or a Python comparison such as x.shape[0] > 3, keep "
    "x.shape[0] in JAX shapes (jnp.zeros((x.shape[0], d)), jnp.arange(x.shape[0])), or pass "
    "mask=\"valid\" and use valid.sum(), the real row count."
)

HASHED = (
    "{function}: {where} looks the row count of the bucketed argument(s) {names} up by hash "
    "(a dict or set keyed by x.shape[0], or a cache keyed by the shape), a decision on the "
    "count that staticfield cannot check for each real count. Key it by something else, or "
    "drop buckets= for this function."
)

NO_ROW_OUTPUT = (
    "{function}: {output} ({aval}) does not carry the row axis of the bucketed "
    "argument(s) {names}, so it cannot be sliced back to the real rows (it may be a "
    "reduction over rows, which padding would change). Return only per-row outputs, or "
    "pass mask=\"valid\" to sf.jit/jit_method and reduce over the real rows yourself "
    "(`valid` is True for them)."
)

OUTPUT_PAIRS = (
    "{function}: {output} ({aval}) has the row count on an axis that is not its row axis "
    "(pairs of rows, as x @ x.T, or an array of the batch's size per row, as "
    "x[:, :1] * jnp.eye(x.shape[0])), which slicing the rows back cannot restore. Return "
    "per-row values only, with the rows on one axis."
)

RULE_GRADIENT = (
    "{function}: the derivative through its {rule} gives `{arg}` a cotangent that is "
    "not zero on the pad rows (or not row by row), so a gradient taken around the bucketed "
    "call would change: the pad rows' cotangents are summed into the last real row. Make the "
    "rule linear in the output cotangent and row-wise, or drop buckets= for this function."
)

RULE_UNTRACEABLE = (
    "{function}: its {rule} cannot be traced with a symbolic row count for the bucketed "
    "argument(s) {names} ({where}: {detail}), so staticfield cannot check what a gradient "
    "through it would do to the real rows. Keep x.shape[0] symbolic in the rule (no len, "
    "range, int or NumPy shapes of it), or drop buckets= for this function."
)

CHECK_FAILED = (
    "{function}: STATICFIELD_CHECK_BUCKETS=1: {output} of the call with {rows} row(s) "
    "padded to bucket {bucket} differs from the unpadded call ({detail}). The row analysis "
    "accepted a function whose padded program gives another answer: please report it, with "
    "the function. Until then, drop buckets= for this function."
)

DISAGREE = (
    "{function}: the bucketed leaves {a} and {b} disagree on their number of rows ({na} and "
    "{nb}); every array leaf of a bucketed argument, and every bucketed argument of a call, "
    "must have the same number of rows on its row axis."
)


def output_name(path: tuple) -> str:
    """``output ['y']``, or ``the output`` for a function that returns one array."""
    import jax

    return f"output {jax.tree_util.keystr(path)}" if path else "the output"
