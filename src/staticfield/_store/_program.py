"""``StoredJit``: one static variant's ``jax.jit`` while a program store is set.

It keeps the variant's compiled programs by their arguments' avals (shapes, dtypes,
weak types, shardings, and the arguments' tree). A call with avals it has no program
for looks in the store: a matching entry is loaded (no trace, no lowering, no
compile); otherwise ``jax.jit``'s ``lower`` traces it (counted by the engine as
any trace) while ``_sources`` records the code that ran, it is compiled, and the
program is written. Programs are serialized with JAX's public
``jax.experimental.serialize_executable``.
"""

from __future__ import annotations

import logging
import pickle
import threading
import time
import warnings
from typing import Any, Callable

import jax

from .._core._errors import StaticFieldWarning
from .._core._keys import StaticArgKey, StaticKey
from . import _entries, _key, _sources

logger = logging.getLogger("staticfield")

LOAD_LISTENERS: list[Callable[[Callable, float], None]] = []  # sf.watch: (user function, seconds)


def _serialize(compiled: Any) -> bytes:
    from jax.experimental.serialize_executable import serialize

    payload, in_tree, out_tree = serialize(compiled)
    return pickle.dumps((payload, in_tree, out_tree), protocol=pickle.HIGHEST_PROTOCOL)


def _deserialize(data: bytes) -> Any:
    from jax.experimental.serialize_executable import deserialize_and_load

    payload, in_tree, out_tree = pickle.loads(data)  # noqa: S301 - a store is trusted like code
    return deserialize_and_load(payload, in_tree, out_tree)


class StoredJit:
    """A variant's ``jax.jit`` whose programs are loaded from, or written to, the store."""

    def __init__(self, jitted: Any, fn: Callable, vkey: Any, store: Callable[[], Any],
                 traces: Callable[[], int], loaded: Callable[[], None]) -> None:
        self.jitted = jitted
        self.fn = fn
        self.vkey = vkey
        self._store = store  # the current store directory, or None
        self._traces = traces  # the engine's trace count: did lower() really trace?
        self._loaded = loaded
        self.programs: dict[Any, Any] = {}
        self._lock = threading.Lock()
        self._statics: str | None | bool = False  # not computed yet
        self._identity: dict | None | bool = False

    def __call__(self, *dyn: Any, **kwargs: Any) -> Any:
        leaves, tree = jax.tree_util.tree_flatten((dyn, kwargs))
        sig = (tree, _key.signature(leaves))
        if None in sig[1]:  # inside another function's trace (JAX inlines it there), or not arrays
            return self.jitted(*dyn, **kwargs)
        program = self.programs.get(sig)
        if program is None:
            program = self.program(sig, dyn, kwargs, run=True)
        return program(*dyn, **kwargs)

    def precompile(self, *dyn: Any, **kwargs: Any) -> bool:
        """Load or compile (and store) the program for these arguments (as ``jax.jit``'s
        ``lower`` takes them); whether it was new."""
        leaves, tree = jax.tree_util.tree_flatten((dyn, kwargs))
        sig = (tree, _key.signature(leaves))
        if None in sig[1]:
            raise TypeError(f"{_name(self.fn)}.precompile: called with traced values or values "
                            "that are not arrays; call it outside jax.jit, with arrays, Python "
                            "scalars or jax.ShapeDtypeStruct values.")
        if sig in self.programs:
            return False
        self.program(sig, dyn, kwargs, run=False)
        return True

    # ----- jax.jit's interface, for the engine's lower/trace/eval_shape/clear_cache --------
    def __getattr__(self, name: str) -> Any:
        return getattr(self.jitted, name)

    def clear_cache(self) -> None:
        self.programs.clear()
        self.jitted.clear_cache()

    def _cache_size(self) -> int:
        return len(self.programs) + self.jitted._cache_size()

    # ----- a program miss ---------------------------------------------------------------
    def program(self, sig: Any, dyn: tuple, kwargs: dict, run: bool) -> Any:
        with self._lock:
            program = self.programs.get(sig)
            if program is not None:
                return program
            directory = self._store()
            if directory is None:
                return self.jitted  # the store was turned off since this variant was made
            key = self._key(sig)
            path = _entries.entry_path(directory, _entries.key_digest(key)) if key is not None else None
            program = self._load(path, key) if path is not None else None
            if program is None:
                program = self._compile(sig, dyn, kwargs, path, key)
            self.programs[sig] = program
            return program

    def _key(self, sig: Any) -> dict[str, Any] | None:
        if self._statics is False:
            self._statics = _key.statics_digest(self.vkey)
        if self._identity is False:
            self._identity = _key.function_identity(self.fn)
        if self._statics is None or self._identity is None:
            return None
        tree, leaves = sig
        return {
            "format": _key.FORMAT,
            "function": self._identity,
            "statics": self._statics,
            "tree": _key.tree_digest(tree),
            "avals": [_key.describe_leaf(leaf) for leaf in leaves],
            "environment": _key.environment(),
        }

    def _load(self, path: str, key: dict[str, Any]) -> Any:
        start = time.perf_counter()
        try:
            with open(path, "rb") as f:
                header = _entries.read_header(f)
                if header.get("key") != key or not _sources.unchanged(header.get("sources", {})):
                    return None  # another key with the same digest, or stale: compile again
                payload = _entries.read_payload(f, header)
            program = _deserialize(payload)
        except FileNotFoundError:
            return None
        except Exception as exc:  # corrupt, truncated, foreign: ignored, and written again
            why = str(exc) if isinstance(exc, _entries.BadEntry) else f"unreadable ({type(exc).__name__})"
            warnings.warn(
                f"staticfield: the program store entry {path} for {_name(self.fn)} is {why}; it "
                "is ignored, and the program is compiled and written again.",
                StaticFieldWarning, stacklevel=2,
            )
            return None
        self._loaded()
        seconds = time.perf_counter() - start
        for listener in list(LOAD_LISTENERS):
            listener(self.fn, seconds)
        return program

    def _compile(self, sig: Any, dyn: tuple, kwargs: dict, path: str | None, key: dict | None) -> Any:
        before = self._traces()
        with _sources.recording() as files:
            lowered = self.jitted.lower(*dyn, **kwargs)
        compiled = lowered.compile()
        if path is None or key is None:
            logger.info("staticfield: %s: not stored (a static value, class or closure value that "
                        "pickle cannot write, such as a lambda or a class defined in a function)",
                        _name(self.fn))
            return compiled
        if self._traces() == before:  # JAX reused an earlier trace: what ran is unknown
            logger.info("staticfield: %s: not stored (JAX reused an earlier trace)", _name(self.fn))
            return compiled
        sources = _sources.describe(files)
        if sources is None:
            logger.info("staticfield: %s: not stored (code whose source cannot be checked ran "
                        "while tracing)", _name(self.fn))
            return compiled
        try:
            payload = _serialize(compiled)
            display = {"function": _name(self.fn), "statics": _display_statics(self.vkey)}
            _entries.write(path, {"key": key, "sources": sources, "display": display}, payload)
        except Exception as exc:  # a program that cannot be stored still runs
            logger.info("staticfield: %s: not stored (%s: %s)", _name(self.fn), type(exc).__name__, exc)
        return compiled


def _name(fn: Callable) -> str:
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', getattr(fn, '__name__', '?'))}"


def _display_statics(vkey: Any) -> str:
    """The static values as the listing shows them: ``M(n=3)``, ``k=3``."""
    def show(part: Any) -> str | None:
        if isinstance(part, StaticKey):
            return f"{part.cls.__qualname__}({', '.join(f'{n}={v!r}' for n, v in zip(part.names, part.values))})"
        if isinstance(part, StaticArgKey):
            return repr(part.raw)
        if isinstance(part, tuple) and len(part) == 2 and isinstance(part[1], StaticArgKey):
            return f"{part[0]}={part[1].raw!r}"
        return None

    try:
        parts = vkey if isinstance(vkey, tuple) else (vkey,)
        text = ", ".join(p for p in map(show, parts) if p is not None) or "(none)"
    except Exception:
        text = "?"
    return text if len(text) <= 300 else text[:297] + "..."
