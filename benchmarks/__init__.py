"""staticfield's benchmark suite: ``python -m benchmarks`` (or ``make bench``).

Each case group measures staticfield side by side with plain ``jax.jit`` and the
anchor libraries (flax.struct, equinox, jax_dataclasses, ``register_dataclass``)
and writes ``benchmarks/results/``: ``results.md``, ``results.json`` and plots.
``python -m benchmarks --smoke`` runs every case once with tiny counts.

This module imports nothing heavy, so that ``main`` can configure JAX before
anything is compiled.
"""

from ._cli import main as main

__all__ = ["main"]
