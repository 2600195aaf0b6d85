"""A program found with no trace, by the user's source (``trust="source"``), and the link that finds it.

``BySource`` is a base of ``StoredJit`` (``_program``). ``_load_by_source`` is the first
look of a ``trust="source"`` miss, in four named steps:

1. ``_source_key``: the key found without tracing: the function, its closure values and
   statics written by value, the argument tree and avals, the ``jax.jit`` options, JAX's
   trace context and the machine (``_key``); ``None`` when one of them cannot be written;
2. ``_read_link``: the link that key names (``_entries``), the source of every module of
   the user's code it recorded unchanged (``_sources``; a change is the reason given,
   ``_misses``), and the entry it points to;
3. ``_check``: with ``STATICFIELD_CHECK_STORE=1``, a trace anyway, compared with the stored
   program (``StoreCheckError`` naming the first difference);
4. the program deserialized (``_executable``), and ``_loaded_untraced``: counted as a
   load with no trace, after agreeing on it with the other processes of a job.

No program found, ``StoredJit.program`` goes on to ``ByTrace._trace``. The link is written
beside every entry (``_write_link``, by ``ByTrace._write``) and beside a program another
function's trace loaded (``_relink``), so that an entry serves either trust, except for
a program whose outputs hold objects that only its trace gives back (``static="auto"``'s
non-array outputs): that one is found by trace only.

Imports: ``_core`` (errors) and the store's ``_digest``, ``_entries``, ``_executable``,
``_hooks``, ``_key``, ``_misses``, ``_saying`` and ``_sources``. Called by ``_program``
(``StoredJit.program``) and, through ``self``, by ``_by_trace``.
"""

from __future__ import annotations

import logging
import os
import pickle
import time
from typing import Any, Callable, NamedTuple

from .._core._errors import STORE_CHECK, StoreCheckError
from . import _digest, _entries, _executable, _hooks, _key, _misses, _saying, _sources

logger = logging.getLogger("staticfield")

CHECK_ENV = "STATICFIELD_CHECK_STORE"


class _Linked(NamedTuple):
    """What a link and the entry it points to hold, read before anything is loaded."""

    header: dict[str, Any]  # the link's: its key, entry, sources, trees and kept
    program_header: dict[str, Any]  # the entry's
    payload: bytes
    in_tree: Any
    out_tree: Any


class BySource:
    """Find a variant's program without a trace (see the module docstring)."""

    # Set by StoredJit: what these methods read.
    jitted: Any
    fn: Callable
    vkey: Any
    _options: dict[str, Any]
    _hooks: _hooks.Hooks
    _static: dict[str, Any]

    def _load_by_source(self, directory: str, sig: Any, dyn: tuple, kwargs: dict) -> tuple[Any, str]:
        """The program found with no trace, or ``None`` and why not (a changed file)."""
        link = self._source_key(sig)
        if link is None:
            _saying.cannot_serve(self.fn, "a closure value or static cannot be written by value, so "
                                 "trust=\"source\" cannot find its programs without tracing "
                                 "(trust=\"trace\" serves them)")
            return None, ""
        start = time.perf_counter()
        path = _entries.entry_path(directory, _entries.key_digest(link), _entries.LINK)
        linked = self._read_link(directory, path, link)
        if not isinstance(linked, _Linked):
            return None, linked
        # The checking mode's trace runs the user's function (and agrees between processes):
        # what it raises is the user's, or StoreCheckError, never a bad entry.
        checked = _checking() and self._check(linked.program_header, linked.out_tree, dyn, kwargs)
        try:
            program = _executable.deserialize(linked.payload, linked.program_header, linked.in_tree,
                                              linked.out_tree)
        except Exception as exc:
            _saying.bad_entry(self.fn, path, exc)
            return None, ""
        if not checked:  # the check's trace counted it (and agreed), reads of deps="read" included
            self._loaded_untraced(linked.header.get("kept"), dyn, kwargs)
        _hooks.counts()["loaded"] += 1
        _hooks.loaded(self.fn, time.perf_counter() - start, traced=checked)
        return program, ""

    def _source_key(self, sig: Any) -> dict[str, Any] | None:
        """Step 1: the key found without tracing (see the module docstring); ``None`` when
        the function, a closure value or a static cannot be written by value."""
        if "identity" not in self._static:
            self._static["identity"] = _key.function_identity(self.fn)
            self._static["statics"] = _key.statics_digest(self.vkey)
            self._static["options"] = _key.options(self._options)
        identity, statics, options = (self._static[k] for k in ("identity", "statics", "options"))
        context = _key.context()
        if None in (identity, statics, options, context):
            return None
        tree, leaves, _ = sig
        return {"format": _key.FORMAT, "trust": "source", "function": identity, "statics": statics,
                "options": options, "context": context, "tree": _key.tree_digest(tree),
                "avals": [_key.describe_leaf(leaf) for leaf in leaves], "environment": _key.environment()}

    def _read_link(self, directory: str, path: str, link: dict[str, Any]) -> _Linked | str:
        """Step 2: the link at ``path`` for ``link`` and the entry it points to, or why not:
        ``""`` for none there (or a damaged one, said once), a sentence for a changed file."""
        try:
            with _entries.open_entry(path) as f:
                header = _entries.read_header(f)
            if header.get("link") != link:
                return ""
            if not _sources.unchanged(header.get("sources", {})):
                return "not loaded from the program store: " + _misses.source_change(header.get("sources", {}))
            entry = _entries.entry_path(directory, str(header["entry"]))
            with _entries.open_entry(entry) as f:
                program_header = _entries.read_header(f)
                payload = _entries.read_payload(f, program_header)
            in_tree, out_tree = pickle.loads(bytes.fromhex(header["trees"]))  # noqa: S301 - trusted store
        except FileNotFoundError:
            return ""
        except Exception as exc:
            _saying.bad_entry(self.fn, path, exc)
            return ""
        return _Linked(header, program_header, payload, in_tree, out_tree)

    def _check(self, header: dict[str, Any], out_tree: Any, dyn: tuple, kwargs: dict) -> bool:
        """Step 3, ``STATICFIELD_CHECK_STORE=1``: trace anyway; a program other than the
        stored one raises ``StoreCheckError`` naming the first differing equation or constant."""
        with self._hooks.deferred() as tickets:
            traced = self.jitted.trace(*dyn, **kwargs)
        _hooks.counts()["traced"] += 1
        self._hooks.settle(tickets, loaded=True)
        now = _digest.digest(traced.jaxpr)
        if now.hexdigest == header.get("key", {}).get("jaxpr") and traced.out_tree == out_tree:
            return True
        if now.hexdigest == header.get("key", {}).get("jaxpr"):
            raise StoreCheckError(STORE_CHECK.format(
                function=_saying.name(self.fn), what=f"its output's structure differs ({out_tree} stored, "
                                              f"{traced.out_tree} now)"))
        raise StoreCheckError(STORE_CHECK.format(function=_saying.name(self.fn), what=_misses.first_difference(header, now)))

    def _loaded_untraced(self, kept: Any, dyn: tuple, kwargs: dict) -> None:
        """Step 4: a program loaded with no trace agrees with the other processes of a job,
        and counts as a load (with what its trace found when it was stored, ``kept``)."""
        self._hooks.agree(self.jitted, dyn, kwargs, kept)
        self._hooks.loaded_untraced(kept)

    def _relink(self, directory: str, entry: str, traced: Any, sig: Any, kept: dict[str, Any] | None) -> None:
        """``_write_link`` for a program loaded by its trace; never raises."""
        try:
            self._write_link(directory, entry, traced, sig, kept)
        except Exception as exc:  # a program that loaded still runs
            logger.debug("staticfield could not write a trust=\"source\" key: %s", exc)

    def _write_link(self, directory: str, entry: str, traced: Any, sig: Any, kept: dict[str, Any] | None) -> None:
        """The ``trust="source"`` key of this program, for a later zero-trace load, with the
        source of the user's code loaded now (``_sources``) and what its trace found that a
        load without a trace needs (``Hooks.kept``)."""
        if _trace_only(traced.out_tree):  # outputs that come back as the very objects returned
            return
        link = self._source_key(sig)
        sources = _sources.describe(_sources.loaded_files(self.fn)) if link is not None else None
        if link is None or sources is None:
            return
        trees = pickle.dumps((traced.in_tree, traced.out_tree), protocol=4).hex()
        name = os.path.basename(entry)[: -len(_entries.SUFFIX)]
        header = {"link": link, "entry": name, "sources": sources, "trees": trees}
        if kept is not None:
            header["kept"] = kept
        _entries.write(_entries.entry_path(directory, _entries.key_digest(link), _entries.LINK), header, b"")


def _trace_only(tree: Any) -> bool:
    """Whether an output tree holds a node that only a trace fills in (its type says
    ``__sf_trace_only__``: ``static="auto"``'s non-array outputs, which come back as the
    objects the function returned, never as copies unpickled from a link)."""
    todo = [tree]
    while todo:
        node = todo.pop()
        data = node.node_data()
        if data is not None and getattr(data[0], "__sf_trace_only__", False):
            return True
        todo.extend(node.children())
    return False


def _checking() -> bool:
    return os.environ.get(CHECK_ENV, "").strip() not in ("", "0")
