"""Agreement between processes: a multi-process job's processes compile the same programs.

Owns the check (``_check``): in a ``jax.distributed`` job, every new program of an ``sf``
function whose arguments span more than one process (compiled, or loaded from the store
with or without a trace) publishes a digest of (function, static key (under
``deps="read"``, the statics its trace read), avals, shardings) in ``jax.distributed``'s key-value store before it first
runs, and waits until every other process has published the same digest for that
function; when one has not within ``STATICFIELD_HOST_CHECK_TIMEOUT`` seconds (default 60)
it raises ``sf.HostMismatchError`` naming the function, the processes and the difference
in the user's words, instead of hanging in the program's first collective.
``STATICFIELD_HOST_CHECK=0`` turns it off; nothing runs in one process or on a hit.

Imports: ``_core`` only (the description of a program's arguments comes from ``_jit``,
which calls ``agree`` from its miss path: after a trace, and for a program loaded from the
store without one).
"""

from ._check import agree as agree
from ._check import enabled as enabled
from ._check import spans_processes as spans_processes
