"""``sf.jit`` and ``@sf.jit_method``: jit with instances as pytrees, counted and explained.

``_api`` builds what the decorators return. ``_engine`` is one function's engine: its
options, variants and the hit paths it chooses once; its bases hold the rest, one idea
each: ``_fronts`` (JAX's C++ dispatch in front of the variants, and its misses), ``_miss``
(a call's key to its variant, a new variant made in three named steps), ``_traced`` (what
runs while JAX traces a variant: described, budgeted, counted; and what the program
store sees of the counters), ``_programs`` (AOT and cache methods). The generated hit
paths: ``_hitpath`` (helpers, ``Cls.method(obj, ...)`` and ``deps="read"``'s),
``_hitpath_jit`` (what ``sf.jit`` returns, and its hit path), ``_hitpath_static`` (static
arguments), ``_hitpath_large`` (what ``sf.jit`` and ``Cls.method`` switch to once a large
model reached them). ``_bound`` makes ``obj.method`` (bound once, a pytree); ``_variant`` is one
variant's ``jax.jit`` and what JAX is told of the user's function; ``_tracker`` holds the
counters, budgets and recompile events; ``_transformed`` counts the programs JAX compiles
of a variant under a transformation applied outside it (an eager ``jax.vmap``); ``_args`` resolves ``jax.jit``'s options against
a signature; ``_hints`` adds hints to a failed trace; ``_deps_args`` is ``deps="read"``
with static arguments; ``_agreement`` the engine's side of agreement between processes;
``_auto`` is ``static="auto"``'s hit path and ``_auto_plan`` what a call shape becomes on
a miss (arguments and outputs partitioned as ``eqx.filter_jit`` does, defaults bound,
the variant's key), ``_auto_out`` its outputs' checks and ``_auto_options`` its
donation in the user's words; ``_types`` is what type checkers see.

A call goes: ``obj.method(x)`` → the binding (``_bound``: a C-level ``partial`` of the
variant's front, made once per instance; of a large model, of the engine's
``large_front`` with its flat leaves) → JAX's C++ dispatch, which on a hit runs the
compiled program → on a miss, ``_miss`` makes the variant and JAX traces ``_variant``'s
wrapper, which rebuilds ``obj`` and runs ``_traced``: describes the trace (``_explain``)
and counts it (``_tracker``).

Imports: ``_core``, ``_explain``, ``_deps``, ``_store`` (a variant's ``jax.jit`` is a
``_store.StoredJit`` while a program store is set), ``_buckets`` (with ``buckets=``, JAX
traces the bucket body and calls go through the bucket front), ``_stance`` (the tracker
refuses a compile inside ``sf.no_compiles()``) and ``_agree`` (in a multi-process job, a
new program agrees with the other processes' program of the same rank when its trace
ends, or, prepared ahead, on its first run); nothing imports it but ``_warmup`` and the
package root.
"""

from ._api import _SharedCache as _SharedCache  # pickles made by 0.1 name these
from ._api import _unpickle as _unpickle  # staticfield._jit._SharedCache / ._unpickle
