"""``static="auto"``: ``jax.jit``'s options for one variant, in the user's words.

JAX is given a variant's traced leaves as flat positional arguments
(``_auto_plan``), so ``donate_argnums``/``donate_argnames`` as the user wrote them
(positions and names of the user's parameters, a static one counted) would name the
wrong leaves: ``(1,)`` on ``f(n, a, b)`` would donate ``b``. ``variant_options`` turns
them into the positions of the leaves the named arguments hold.

Imports: the standard library and ``_auto_plan`` (for types). Called by ``_miss``.
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._auto_plan import AutoKey


def variant_options(key: AutoKey, sig: inspect.Signature, jit_kwargs: dict) -> dict:
    """``jax.jit``'s options for the variant: ``donate_argnums``/``donate_argnames`` name the
    user's parameters (a static one counted, a ``*args`` element by its position in the
    call, a ``**kwargs`` entry by its name), and become the positions, among the traced
    leaves JAX is given, of the leaves those arguments hold."""
    nums, names = jit_kwargs.get("donate_argnums"), jit_kwargs.get("donate_argnames")
    if nums is None and names is None:
        return jit_kwargs
    out = {k: v for k, v in jit_kwargs.items() if k not in ("donate_argnums", "donate_argnames")}
    donated = _donated_leaves(key, sig, _tuple(nums), _tuple(names))
    dyn = 0
    positions = []
    for i, m in enumerate(key.mask):
        if not m:
            if i in donated:
                positions.append(dyn)
            dyn += 1
    if positions:
        out["donate_argnums"] = tuple(positions)
    return out


def _tuple(given: Any) -> tuple:
    return () if given is None else (given,) if isinstance(given, (int, str)) else tuple(given)


def _donated_leaves(key: AutoKey, sig: inspect.Signature, nums: tuple, names: tuple) -> set[int]:
    """The canonical leaves (indices) of the arguments named by ``nums`` and ``names``."""
    params = list(sig.parameters.values())
    positional = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    star = next((p.name for p in params if p.kind is p.VAR_POSITIONAL), None)
    double = next((p.name for p in params if p.kind is p.VAR_KEYWORD), None)
    whole, inside = set(names), []  # parameters, and (parameter, key) of *args / **kwargs
    for n in nums:
        if n < len(positional):
            whole.add(positional[n])
        elif star is not None:
            inside.append((star, n - len(positional)))
    for name in names:
        if name not in sig.parameters and double is not None:
            inside.append((double, name))
    leaves: set[int] = set()
    start = 0
    for name, sub in zip(key.names, key.treedef.children()):
        if name in whole:
            leaves.update(range(start, start + sub.num_leaves))
        else:
            at = start
            node = sub.node_data()
            keys = sorted(node[1]) if node is not None and node[0] is dict else range(sub.num_nodes)
            for k, part in zip(keys, sub.children()):
                if (name, k) in inside:
                    leaves.update(range(at, at + part.num_leaves))
                at += part.num_leaves
        start += sub.num_leaves
    return leaves
