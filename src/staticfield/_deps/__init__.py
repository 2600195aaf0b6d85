"""Per-method static dependencies: ``@sf.jit_method(deps="read")``.

Records which statics a method reads while it traces (``_trace``, ``_read``) and
shares one program among the keys that agree on them (``_share``, whose docstring
holds the invariant and why it keeps every result equal to ``deps="all"``).

Imports: ``_core`` and ``_explain``. The jit engine (``_jit``) drives it and gives it
the function that makes a variant's program, so nothing here imports ``_jit``.
"""
