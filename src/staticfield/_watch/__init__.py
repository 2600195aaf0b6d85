"""``sf.watch`` and ``python -m staticfield watch``: every compile of any JAX program,
per jitted function, explained in user paths.

``_watcher`` is the watch: its lifetime, each thread's traces in progress, and JAX's
events routed to them; ``_compiles`` records each compile and explains it (``_records``:
a function's compiles); ``_hooks`` feeds the watcher from JAX's monitoring events and
tracing; ``_site`` names a function and its call site; ``_describe`` describes a traced
call's arguments by user path and ``_diff`` diffs two of them; ``_report`` renders text
and JSON; ``_cli`` is the command.

Imports: ``_core``, ``_explain`` and ``_store`` (to hear of programs loaded from a
program store); it never depends on ``_jit`` (it watches any JAX program,
staticfield's among them, through JAX alone).
"""
