"""Whole-instance operations users call on values: ``stack``/``unstack`` (for ``scan`` and
``vmap``), per-field ``shardings``/``shard``, and state dicts (``to_state_dict``,
``from_state_dict``).

Imports: ``_core`` only.
"""
