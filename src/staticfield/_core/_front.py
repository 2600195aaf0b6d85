"""JAX's C++ dispatch in front of an engine: a cache hit runs no Python.

``front(name, fun, miss)`` builds a ``PjitFunction``, the C++ object ``jax.jit``
returns, whose cache miss is staticfield's ``miss``. On a miss, ``miss`` chooses the
variant in Python (counted, budgeted and explained as always) and returns what that
variant's ``jax.jit`` returns from JAX's own miss handler (``_cache_miss``): the
outputs and the *fast-path data* (the program, its shardings and output tree) that
JAX's C++ cache then keeps under the front's signature. Every later call with that
signature runs the program from C++: instance arguments flatten in C (the class's
flatten is ``operator.attrgetter`` of the cached ``(children, key)``), and their static
keys are the treedef's aux data, which the C++ cache compares.

The invariant, owned here: **a front's cached entry runs the program the variant's
``jax.jit`` runs for the same call.** It holds because

- the front's flat arguments are the variant's: an instance's leaves are its children's
  leaves in order, and everything else is passed as it is (``dyn`` in the engine); a large
  model's cached flat leaves are those very leaves, and its ``Shape``, a static argument
  of its front, fixes all the rest (``_flatform``);
- the front's signature holds everything the variant is chosen by (each instance's
  static key, compared by JAX with ``==``, and which arguments are instances) and
  everything JAX keys its own jit on (avals, weak types, shardings, committedness, the
  trace context), so a call that would choose another variant or another program misses;
- the fast-path data is the variant's own, for this very call.

Where the variant cannot give fast-path data (a program store serves it, the call is
under another trace, or the program has effects), ``miss`` returns none and JAX calls
it again next time: correct, and as slow as before. Under ``jax.disable_jit()`` JAX
calls ``fun``, the engine's Python path.

With a program store, each variant's ``StoredJit`` has a front of its own whose miss
asks the store for the call's program (loaded or compiled) and answers with that
program's own fast-path data, so stored programs run from C++ too.

Without the private names this needs (``_compat``, feature ``"hit_path"``), ``front``
returns ``None``: callers keep their Python hit path, and it says so once. It sits in
``_core`` so that both ``_jit`` and ``_store`` may use it.
"""

from __future__ import annotations

import threading
import warnings
from typing import Any, Callable

from . import _compat
from ._errors import StaticFieldWarning

_pjit = _compat.get("pjit_function")
_Cache = _compat.get("pjit_function_cache")
_registry = _compat.get("dispatch_registry")
_shard_arg = _compat.get("cc_shard_arg")

# One C++ cache for every front (JAX keeps one for every jax.jit): its entries are keyed
# by the front's function object, and go when that function does.
_CACHE = _Cache() if _Cache is not None else None
_warned = threading.Event()


def available() -> bool:
    """Whether this JAX has every private name a front needs."""
    return not _compat.unavailable("hit_path") and _CACHE is not None


def front(name: str, fun: Callable[..., Any], miss: Callable[..., Any], static_argnums: tuple = ()) -> Any:
    """A C++ jit object named ``name`` that calls ``miss(*args, **kwargs)`` on a cache miss
    (it returns ``(outputs, fast-path data or None, False)``) and ``fun`` under
    ``jax.disable_jit()``; ``None`` on a JAX without the names it needs. Arguments at
    ``static_argnums`` are hashed into the cache key (and compared with ``==``) instead
    of flattened."""
    if not available():
        if not _warned.is_set():
            _warned.set()
            warnings.warn(_compat.unavailable("hit_path") or "staticfield: the C++ hit path is unavailable",
                          StaticFieldWarning, stacklevel=3)
        return None
    # JAX shares one C++ cache among its jit objects with the same function and key; each
    # front gets a key of its own (compared by identity), so no two fronts ever share one.
    return _pjit(name, fun, miss, static_argnums, (), _Own(), _registry, _shard_arg, _CACHE)


class _Own:
    """A front's own key in the C++ cache: equal to nothing but itself."""

    __slots__ = ()


def jax_miss(program: Any, dyn: tuple | list, kwargs: dict) -> Any:
    """What ``program`` (a ``jax.jit``, a front, or a compiled ``jax.stages.Compiled``)
    returns from JAX's miss handler for this call: the outputs, the fast-path data for a
    front to keep (or ``None``), and JAX's flag. A ``Compiled`` makes its C++ call on its
    first call: until then it answers without fast-path data."""
    miss = getattr(program, "_cache_miss", None)
    if miss is None:
        miss = getattr(getattr(program, "_call", None), "_cache_miss", None)
    if miss is None:
        return served(program(*dyn, **kwargs))
    if not hasattr(program, "__sf_jit__"):  # a jax.jit (or a Compiled): JAX's own miss
        return miss(*dyn, **kwargs)
    ASKED.on = True  # (a variant front's miss handler tells this from its own dispatch missing)
    try:
        return miss(*dyn, **kwargs)
    finally:
        ASKED.on = False


# ``ASKED.on``: the miss handler now running was called by ``jax_miss`` (another front asks
# a variant's front for its answer), not by JAX's C++ dispatch of that front missing.
ASKED = threading.local()


def served(out: Any) -> tuple[Any, None, bool]:
    """A miss's answer without fast-path data, which also asks JAX to drop the entry it
    made for the call: the next such call misses again, and may then be kept (an entry
    kept without fast-path data would send every later call to Python)."""
    return out, None, True


def unwrap(f: Any) -> Any:
    """The ``jax.jit`` (or ``StoredJit``) behind a variant's front (``__sf_jit__``), for JAX's
    AOT and cache methods, which a front lacks; anything else as it is."""
    return getattr(f, "__sf_jit__", f)


def cache_size(f: Any) -> int:
    """How many programs a front keeps."""
    return int(f._cache_size())


def clear(f: Any) -> None:
    """Drop a front's programs (its variants' own caches are cleared apart)."""
    f._clear_cache()
