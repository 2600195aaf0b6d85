"""Warm-up: ``sf.warmup()`` prepares every program the program store recorded, before step one.

Owns the run (``_run``): it reads the store's records (``_store._records``), matches each
to an ``sf.jit`` wrapper or ``jit_method`` that exists in this process (by module,
qualified name and ``jax.jit`` options), makes its static variant from the recorded key,
rebuilds the arguments as ``ShapeDtypeStruct``s, and loads or compiles the program on
worker threads (XLA compiles with the GIL released, so they overlap); and the summary it
returns (``.traced``, ``.loaded``, ``.compiled``, ``.skipped``, ``.seconds``,
``.functions``, ``.threads``).

Imports: ``_core``, ``_store`` (the records, and each thread's counts of traces, loads and
compiles) and ``_jit`` (the engines alive in this process, and their variants); nothing
imports it but the package root.
"""

from ._run import Summary as Summary
from ._run import warmup as warmup
