"""Agreement between processes: a multi-process job's processes run the same programs.

Owns the check (``_check``) and the order of each function's programs in this process
(``_order``). In a ``jax.distributed`` job, every new program of an ``sf`` function whose
arguments span more than one process (compiled, or loaded from the store with or without
a trace) publishes a digest of (function, static key (under ``deps="read"``, the statics
its trace read), avals, shardings) in ``jax.distributed``'s key-value store as the k-th
program of that function this process runs, before it first runs, and reads every other
process's k-th: a different one that process has not published at any index raises
``sf.HostMismatchError`` at once, naming the function, the processes and the difference in
the user's words, instead of hanging in the program's first collective; one that has not
come within ``STATICFIELD_HOST_CHECK_TIMEOUT`` seconds (default 60) raises then. Programs
prepared ahead of their first run (``ahead``: ``sf.warmup``, ``precompile``) are only
remembered (``prepare``) and agree on their first run. ``STATICFIELD_HOST_CHECK=0`` turns
it off; nothing runs in one process or on a hit.

Imports: ``_core`` only (the description of a program's arguments comes from ``_jit``,
which calls ``agree`` from its miss path: after a trace, for a program loaded from the
store without one, and before the first run of a program prepared ahead).
"""

from ._check import agree as agree
from ._check import digest as digest
from ._check import enabled as enabled
from ._check import spans_processes as spans_processes
from ._order import ahead as ahead
from ._order import prepare as prepare
from ._order import prepared as prepared
from ._order import preparing as preparing
