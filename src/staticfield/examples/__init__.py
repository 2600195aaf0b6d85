"""Worked examples: each module is one scenario, with a ``run()`` that performs it.

``python -m staticfield demo`` runs them in this order; ``docs/examples/`` shows
each module's source and the output of its ``run()``. Run one on its own with
``python -m staticfield.examples.<name>``. The counters live on module-level
functions and classes, so ``run()`` shows the compile counts of a fresh process.
``SCRIPTS`` are examples of a job of several processes, each started by the user (its
docstring says how); ``demo`` leaves them out, and ``docs/examples/`` shows them too.
"""

EXAMPLES = ("scan_params", "static_flag", "shape_change", "stale_results", "serving_buckets")
SCRIPTS = ("two_processes",)
