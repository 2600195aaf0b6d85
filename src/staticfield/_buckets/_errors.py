"""The exceptions of shape buckets, and the messages that explain them."""

from __future__ import annotations


class BucketError(TypeError):
    """A bucketed function mixes rows along its row axis (a mean, a sort, a normalization
    over the batch), so padding the batch would change its real rows; or it returns an
    output that does not carry the row axis. Raised when the bucket program is traced."""


class BucketCheckError(RuntimeError):
    """``STATICFIELD_CHECK_BUCKETS=1``: a bucketed call's rows differ from the unpadded call's."""


MIXES_ROWS = (
    "{function}: the bucketed argument `{origin}` has its rows on axis {axis}, and "
    "{operation} at {where} {why}, so padding the batch to a bucket would change the real "
    "rows. Make the function row-wise (every output row computed from the same input row "
    "only), or pass mask=\"valid\" to sf.jit/jit_method: the function then receives a bool "
    "row mask `valid` (True for real rows), may mix rows, and must ignore padded ones itself."
)

NO_ROW_OUTPUT = (
    "{function}: {output} ({aval}) does not carry the row axis of the bucketed "
    "argument(s) {names}, so it cannot be sliced back to the real rows (it may be a "
    "reduction over rows, which padding would change). Return only per-row outputs, or "
    "pass mask=\"valid\" to sf.jit/jit_method and reduce over the real rows yourself "
    "(`valid` is True for them)."
)

CHECK_FAILED = (
    "{function}: STATICFIELD_CHECK_BUCKETS=1: {output} of the call with {rows} row(s) "
    "padded to bucket {bucket} differs from the unpadded call ({detail}). The function is "
    "not row-wise in a way the row analysis cannot see (the row count used as a number, "
    "x.shape[0] or len(x), is the usual cause). Use mask=\"valid\" and the real row count "
    "(valid.sum()), or drop buckets= for this function."
)

DISAGREE = (
    "{function}: the bucketed leaves {a} and {b} disagree on their number of rows ({na} and "
    "{nb}); every array leaf of a bucketed argument, and every bucketed argument of a call, "
    "must have the same number of rows on its row axis."
)
AMBIGUOUS = (
    "{function}: two of its programs return outputs of the same structure and shapes with "
    "the rows on different axes (or the output's row axes could not be found), so "
    "staticfield cannot tell which axis to slice. Return the rows on the same axis, or use "
    "two functions."
)


def output_name(path: tuple) -> str:
    """``output ['y']``, or ``the output`` for a function that returns one array."""
    import jax

    return f"output {jax.tree_util.keystr(path)}" if path else "the output"
