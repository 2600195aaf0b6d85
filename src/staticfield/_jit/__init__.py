"""``sf.jit`` and ``@sf.jit_method``: jit with instances as pytrees, counted and explained.

``_api`` builds what the decorators return; ``_engine`` owns a function's static
variants and its miss path (``_programs``: its AOT and cache methods; ``_deps_args``:
``deps="read"`` with static arguments); ``_hitpath`` generates the code that runs on every hit;
``_bound`` makes ``obj.method`` (bound once, a pytree); ``_variant`` is one variant's
``jax.jit`` and what JAX is told of the user's function; ``_tracker`` holds the
counters, budgets and recompile events; ``_args`` resolves ``jax.jit``'s options
against a signature; ``_auto`` is ``static="auto"``'s hit path and ``_auto_plan`` what a
call shape becomes on a miss (arguments and outputs partitioned as ``eqx.filter_jit``
does, defaults bound, the variant's key); ``_types`` is what type checkers see.

A call goes: ``obj.method(x)`` → the bound method's hit path (``_hitpath``) looks up
``obj``'s static key in the variants → the variant's ``jax.jit`` with ``obj``'s
dynamic children → on a miss, ``_engine`` makes the variant and JAX traces
``_variant``'s wrapper, which rebuilds ``obj``, describes the trace (``_explain``)
and counts it (``_tracker``).

Imports: ``_core``, ``_explain``, ``_deps``, ``_store`` (a variant's ``jax.jit`` is a
``_store.StoredJit`` while a program store is set), ``_buckets`` (with ``buckets=``, JAX
traces the bucket body and calls go through the bucket front), ``_stance`` (the tracker
refuses a compile inside ``sf.no_compiles()``) and ``_agree`` (in a multi-process job, a
new program agrees with the other processes' program of the same rank when its trace
ends, or, prepared ahead, on its first run); nothing imports it but the package root.
"""

from ._api import _SharedCache as _SharedCache  # pickles made by 0.1 name these
from ._api import _unpickle as _unpickle  # staticfield._jit._SharedCache / ._unpickle
