"""What each compile is recorded as, and why it happened: ``sf.watch``'s explanations.

``Compiles`` is a base of ``_watcher.watch``, kept apart so that the watcher holds its
lifetime, its per-thread traces in progress and the routing of JAX's events. Three kinds
of compile, three records:

- ``_record``: a new trace (JAX's trace hook). The user's function is found behind
  library and staticfield wrappers (``_site.unwrap_library``, ``__sf_user_call__``), its
  arguments described by user path (``_describe``) and diffed with the closest earlier
  compile of the same function (``_diff``);
- ``_relowered``: a compile with no new trace (another sharding, or a program for a
  transformation), explained by its flat arguments against the closest earlier compile
  of the same kind;
- ``_unexplained``: a compile the trace hook did not see, counted by name.

Imports: ``_explain`` (``Change``) and this room's ``_describe``, ``_diff``, ``_records``
and ``_site``. Called by the watcher's hooks (``_watcher``), each of which catches its
own failures.
"""

from __future__ import annotations

import re
import threading
from typing import Any, Callable

from . import _describe, _diff
from .._explain._diff import Change
from ._records import Compile, WatchedFunction
from ._site import call_site, eager, identify, in_jax, is_eqx_eval_shape, relative, squash, unwrap_library, via


class Compiles:
    """The records of each compile (see the module docstring)."""

    # Set by the watcher: what these methods read and write.
    _by_key: dict[Any, WatchedFunction]
    _other: dict[str, WatchedFunction]
    _by_source: dict[str, WatchedFunction]
    _by_line: dict[tuple, WatchedFunction]
    _local: threading.local
    _lock: threading.Lock
    _push: Callable[[tuple], None]

    def _record(self, fun: Callable, ji: Any, dbg: Any, args: tuple, kwargs: dict, outer: str) -> str:
        user_fun, args, kwargs, static_leaf, static_argnums, static_argnames = unwrap_library(fun, ji, args, kwargs)
        user_call = getattr(fun, "__sf_user_call__", None)
        if user_call is not None:  # sf.jit/sf.jit_method: its instances rebuilt, statics back
            user_fun, args, kwargs, static_argnums, static_argnames = user_call(args, kwargs)
        key, name, location, eager = identify(user_fun, dbg)
        with self._lock:
            entry = self._by_key.get(key)
            if entry is None:
                entry = self._at_line(key, name, location, eager)
                entry.padding = bool(getattr(user_fun, "__staticfield_padding__", False))
        changes: list[Change] = []
        description: dict = {}
        # eqx.filter_eval_shape traces the user's function inside a partial of its own,
        # made anew each time: not another function object of the user's
        stand_in = not eager and is_eqx_eval_shape(fun)
        if not eager and not entry.padding:
            description = _describe.describe(
                user_fun, args, kwargs, static_argnums, static_argnames, static_leaf,
            )
        # The user's function object: staticfield makes one jax.jit per static variant,
        # not the user's doing, so its functions are told apart by the user's function.
        ident = user_fun if user_call is not None else fun
        # An sf wrapper's compiles are explained against its own only: two wrappers of one
        # function (other bucket_sizes=, other options) each have a first compile.
        wrapper = getattr(fun, "__sf_wrapper__", None)
        owner = id(ident) if wrapper is None else wrapper
        first_of_wrapper = (wrapper is not None and bool(entry.compiles) and wrapper not in entry._owners
                            and entry.seen(ident))
        if not eager and not entry.padding and not first_of_wrapper:
            if entry.compiles:
                seen = stand_in or entry.seen(ident) or all(o is None for o in entry._owners)
                own = not entry.note and seen
                earlier = [d if not own or o is None or o == owner else None
                           for d, o in zip(entry._descriptions, entry._owners)]
                changes = _diff.closest(earlier, description)[1]
                explain = getattr(fun, "__sf_explain__", None)  # deps="read": by what was read
                if explain is not None:
                    changes = explain(changes)
                if not entry.note and not own:
                    changes.insert(0, _diff.new_function(ident, entry._bound, entry._functions))
                if all(entry._transformed):  # compiled only for transformations before
                    changes = [_diff.transformation(into=False)]
            if not stand_in:
                entry.remember(ident)
        elif first_of_wrapper:
            entry.remember(ident)
        record = Compile(len(entry.compiles) + 1, call_site(), changes, via=via(), inside=outer,
                         first=first_of_wrapper)
        recompiles = getattr(fun, "__sf_recompiles__", None)
        if recompiles is not None and not changes:
            record.history = (recompiles, len(recompiles()))
        entry.compiles.append(record)
        entry._descriptions.append(description)
        entry._owners.append(None if stand_in else owner)
        entry._flat.append(None)
        entry._transformed.append(False)
        if not eager:
            self._by_source[str(getattr(dbg, "func_src_info", ""))] = entry
        names = (getattr(fun, "__name__", ""), getattr(getattr(fun, "func", None), "__name__", ""),
                 getattr(user_fun, "__name__", ""))
        self._push((record, tuple({squash(n) for n in names if isinstance(n, str)} - {""}), entry))
        return entry.name

    def _at_line(self, key: Any, name: str, location: str, eager: bool) -> WatchedFunction:
        """The function at ``key``'s code location (one function however it was reached:
        called, or compiled for a transformation first), else a new one."""
        line = (key[0], key[1], name.rpartition(".")[2]) if len(key) == 3 else None
        entry = self._by_line.get(line) if line else None
        if entry is None:
            entry = WatchedFunction(name, location, eager=eager)
            if line:
                self._by_line[line] = entry
        self._by_key[key] = entry
        return entry

    def _relowered(self) -> tuple | None:
        """A compile with no new trace: another sharding, or a program for a transformation
        (``jax.vmap(f)``, ``jax.grad``): explained against the closest earlier compile of
        the same kind (direct or transformed), by its flat arguments."""
        pending, self._local.pending = getattr(self._local, "pending", None), None
        if pending is None:
            return None
        args, dbg, is_transformed = pending
        entry = self._by_source.get(str(dbg.func_src_info))
        if entry is None:
            src = _describe.source_line(dbg)
            if src is None or in_jax(src[1]):  # jnp's own helpers: counted as eager operations
                return None
            name, file, line = src
            with self._lock:
                entry = self._at_line((file, line, name), name, f"{relative(file)}:{line}", False)
            self._by_source[str(dbg.func_src_info)] = entry
        flat = _describe.flat_args(args, dbg)
        earlier = [f if t == is_transformed and f is not None
                   and (not t or f.keys() == flat.keys()) else None  # the same transformation
                   for f, t in zip(entry._flat, entry._transformed)]
        found, changes = _diff.closest(earlier, flat)
        if entry.compiles and found < 0:  # the first of its kind
            changes = [_diff.transformation(into=is_transformed)]
        record = Compile(len(entry.compiles) + 1, call_site(), changes)
        entry.compiles.append(record)
        entry._descriptions.append(None)
        entry._owners.append(None)
        entry._flat.append(flat)
        entry._transformed.append(is_transformed)
        return (record, tuple({squash(dbg.func_name)} - {""}), entry)

    def _unexplained(self, fun_name: str, field: str) -> Compile:
        """A compile the trace hook did not see (a transformed jit, or no hook): by name."""
        while (inner := re.fullmatch(r"p?jit\((.*)\)", fun_name)) is not None:
            fun_name = inner.group(1)  # lowering and compile events say jit(f), tracing f
        entry = self._other.get(fun_name)
        if entry is None:  # an operation outside jit, traced before this watcher started?
            entry = self._other[fun_name] = WatchedFunction(fun_name, "", eager=eager())
        last = entry.compiles[-1] if entry.compiles else None
        if last is None or field == "trace_s" or getattr(last, field):
            last = Compile(entry.count + 1, call_site(), [])
            entry.compiles.append(last)
        return last
