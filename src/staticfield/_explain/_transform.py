"""A transformation applied around a jitted call (``jax.vmap`` called eagerly), as changes.

``_jit._transformed`` describes such a call with an entry per transformation (``"vmap"``:
``batch 8``); ``transform_changes`` says how two entries differ (``vmap: batch 4 → 8``, or
``a direct call → batch 4``), for ``_diff``. Imports nothing of staticfield's.
"""

from __future__ import annotations

TRANSFORM = "transform"  # a description's entry kind: the transformation around the call

HINT_BATCH = (
    "jax.vmap of a jitted function, called outside jit, compiles a batched program per batch "
    "size; jit the vmapped function once (sf.jit(jax.vmap(f))), or pad batches to a few sizes "
    "(buckets=)"
)
HINT_TRANSFORM = (
    "a jitted function called under a transformation (jax.vmap, jax.jvp, ...) outside jit "
    "compiles a program of its own for it; jit the transformed function once and call that"
)


def transform_changes(path: str, old: tuple | None, new: tuple | None) -> list[tuple[str, str, str, str, str]]:
    """(path, kind, old, new, hint) for two entries at ``path``, one or both a transformation:
    a batch size that changed is kind ``"shape"``, a call with and without it ``"context"``."""
    if old is not None and new is not None and old[0] == new[0] and old[1] == new[1]:
        return []
    otext = old[1] if old is not None and old[0] == TRANSFORM else "a direct call"
    ntext = new[1] if new is not None and new[0] == TRANSFORM else "a direct call"
    both = old is not None and new is not None
    kind = "shape" if both and path == "vmap" else "context"
    return [(path, kind, otext, ntext, HINT_BATCH if path == "vmap" else HINT_TRANSFORM)]
