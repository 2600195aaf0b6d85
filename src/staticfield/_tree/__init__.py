"""Whole-instance operations users call on values: ``stack``/``unstack`` (for ``scan`` and
``vmap``), per-field ``shardings``/``shard``, and state dicts (``to_state_dict``,
``from_state_dict``, which flax's own serialization calls for every class: ``_flax``).

Imports: ``_core`` only.
"""
