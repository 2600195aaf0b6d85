"""The no-compiles stance: ``sf.no_compiles()``, a block (or function) in which nothing compiles.

Owns the stance's per-thread state (``_state``: whether this thread refuses compiles,
and whether the trace in progress is abstract, made by ``.lower``/``.trace``/
``eval_shape``/``make_jaxpr``, which compiles nothing); the refusal's message
(``_message``: the watch explanation, function, call site and what changed, else
"first compile"); the hook on JAX's one compile entry point (``_hook``), which refuses
the compiles of every JAX function that staticfield does not trace itself (plain
``jax.jit``, equinox, flax, eager operations) and hears their traces through a watcher of
its own; the small descriptions of plain JAX functions' compiles made before a block
opened (``_history``, a ``jax.monitoring`` listener), so that their refusals say what
changed; and the public ``no_compiles`` (``_api``: a context manager and a decorator).
``sf.jit`` and ``jit_method`` refuse earlier, where their tracker decides a compile, so a
refused trace is neither counted nor cached.

Imports: ``_core``, ``_explain`` and ``_watch`` (to explain a plain JAX function's
compile); ``_jit`` asks ``_state`` whether to refuse, and ``_message`` for the words.
"""

from ._api import no_compiles as no_compiles
from ._history import install as _install_history

_install_history()  # compiles before the first block are remembered too
