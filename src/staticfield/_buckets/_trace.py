"""What JAX traces in place of a bucketed function: the bucket's program, run only once it
is shown to be the program analysed.

``Traced._traced`` runs while JAX traces a bucket's program, in four named steps:

1. ``_flatten``: the bucketed arguments' traced leaves, each with its row axis;
2. the concrete trace of the user's function at the bucket's size (``jax.make_jaxpr``:
   the program that will run, plain ``jax.jit``'s program for the padded batch);
3. ``_judged``: the verdict for the call's non-row key (``_verdict.judge``: the function
   traced with the row count symbolic, analysed; cached per key), and whether the
   concrete program is that program at this size (``_compare``, an exact rule). A
   refusal is a ``BucketError`` naming the line. Once a bucket's program is not the
   analysed one, every call of that key runs at its exact size (``_keys``), and a
   call whose real count a guard excludes runs at its own size: either way a call with
   fewer rows than the bucket is sent back to run unpadded (``Retry``, caught by
   ``_front``, which asks ``fits`` before it pads next time);
4. the program evaluated in the caller's trace (``_run``: callbacks get the real rows,
   row indices read on a pad row are the last real row's, a pad row's scatter write by
   the row index is dropped),
   its outputs wrapped in ``Rows``, a pytree whose metadata is each output's row axis,
   so every program says how its own outputs are sliced.
"""

from __future__ import annotations

import contextlib
import functools
import os
import threading
from typing import Any, Callable, Iterator

import jax
import jax.numpy as jnp
from jax.extend.core import jaxpr_as_fun

from .._core import _compat
from ._run import run, takes_rows
from ._compare import differs
from ._keys import read_key, signature
from ._errors import BucketError
from ._verdict import Leaf, Verdict, judge
from ._symbolic import Guard, available

CHECK_ENV = "STATICFIELD_CHECK_BUCKETS"
_VERDICTS = 256  # verdicts kept per function (one per static key and non-row shapes)
ROWS_KW = "_staticfield_rows"  # the real row count, passed to programs whose callbacks need it
TRACING = threading.local()  # .depth: bucket programs being traced on this thread (``_inside``)


class Retry(Exception):
    """Internal: this call must run at its exact size; raised while its bucket program is
    traced (or loaded from a program store), caught by the front, which calls again.
    ``again``: the rule of bucket sizes changed (a ``shard_map`` splits the rows over more
    devices than the bucket's size is a multiple of): the front picks the bucket anew."""

    def __init__(self, again: bool = False) -> None:
        super().__init__()
        self.again = again


class Rows:
    """A bucket program's outputs (``value``) and each flat output's row axis (``axes``, the
    pytree metadata: part of the program, so each program slices its own outputs)."""

    __slots__ = ("value", "axes")

    def __init__(self, value: Any, axes: tuple) -> None:
        self.value, self.axes = value, axes

    def __repr__(self) -> str:
        return f"Rows({self.value!r}, axes={self.axes})"


jax.tree_util.register_pytree_node(Rows, lambda r: ((r.value,), r.axes), lambda axes, kids: Rows(kids[0], axes))


class Traced:
    """The trace of a bucketed function (see the module docstring)."""

    # Set by BucketSpec: what these methods read.
    fn: Callable
    function: str
    axes: dict
    positions: dict
    mask: Any
    params: list
    _local: Any
    _lock: Any
    _leaves: Callable
    _found: Callable
    exact_program: Callable
    reads_statics: bool
    static_names: frozenset

    def _init_traced(self) -> None:
        self._verdicts: dict[Any, Verdict] = {}
        self.exact: set[int] = set()  # bucket sizes whose program serves their own size only
        self.exact_why: str | None = None  # a program that was not the one analysed: every bucket exact
        self._exact_keys: dict[Any, str] = {}  # non-row keys whose buckets are exact -> why
        self.exact_calls: dict = {}  # the front's keys of the calls of those keys (``call_key``) -> why
        self.guards: list[Guard] = []  # every guard of every verdict (the front checks each count)
        self._fits: dict[int, bool] = {}
        self.needs_count = False  # a program's callback takes rows: calls pass ROWS_KW
        self._sound = available()  # else every call runs at its exact size
        self._sizes_seen: set = set()  # (non-row key, bucket) of the programs made (warn_compiles)
        self._exact_sizes: set = set()  # sizes of programs made for one row count (explanations)

    def body(self, fn: Callable) -> Callable:
        """What JAX traces in place of ``fn`` (see the module docstring)."""
        spec = self

        @functools.wraps(fn)
        def traced(*args: Any, **kwargs: Any) -> Any:
            return spec._traced(fn, args, kwargs)

        return traced

    def _traced(self, fn: Callable, args: tuple, kwargs: dict) -> Any:
        TRACING.depth = getattr(TRACING, "depth", 0) + 1
        try:
            return self._trace(fn, args, kwargs)
        finally:
            TRACING.depth -= 1

    def _trace(self, fn: Callable, args: tuple, kwargs: dict) -> Any:
        state = getattr(self._local, "call", None)
        if state is not None:
            state.traced = True
            state.check = os.environ.get(CHECK_ENV, "") not in ("", "0")
        kwargs = dict(kwargs)
        count = kwargs.pop(ROWS_KW, None)
        rebuild, dyn, leaves, key = self._flatten(args, kwargs)

        def flat_fn(*xs: Any) -> Any:
            a, k = rebuild(xs)
            return fn(*a, **k)

        bucket = next((leaf.aval.shape[leaf.axis] for leaf in leaves if leaf.axis is not None), None)
        rows = state.rows if state is not None and state.bucket == bucket else bucket
        if state is not None:
            self._last_rows = state.rows  # (the near miss: a side argument at the real count)
        try:
            closed, out_shape = jax.make_jaxpr(flat_fn, return_shape=True)(*dyn)
        except Exception:
            if bucket is None or not self._sound or not isinstance(bucket, int):
                raise
            if rows == bucket:  # the exact size fails: unless a shard_map needs more rows, the user's error
                try:
                    verdict = self._judge(flat_fn, leaves, None)
                except Exception:
                    verdict = None
                if verdict is not None and bucket % verdict.multiple and self.sizes.require(verdict.multiple):
                    raise Retry(again=True) from None
                raise
            with self._side_hint(args, kwargs, rows, bucket):
                verdict = self._judge(flat_fn, leaves, None, rows)  # a refusal says why, naming the line
            if bucket % verdict.multiple and self.sizes.require(verdict.multiple):  # rows split over devices
                raise Retry(again=True) from None
            with self._lock:  # else the bucket's size itself fails (a split in 3 of 4 rows)
                self.exact.add(bucket)
            raise Retry() from None
        out_tree = jax.tree_util.tree_structure(out_shape)
        unread = key
        if self.reads_statics and key is not None:  # what the concrete trace read of self
            key = read_key(unread, args)
        if bucket is None or not self._sound or not isinstance(bucket, int):  # no rows, no analysis, or
            # the row count of an enclosing bucketed function's analysis: plain jax.jit
            return Rows(out_tree.unflatten(jaxpr_as_fun(closed)(*dyn)), (None,) * out_tree.num_leaves)
        iotas: list = []
        drops: dict = {}
        with self._side_hint(args, kwargs, rows, bucket):
            verdict, why = self._judged(key, flat_fn, leaves, closed, bucket, iotas, drops,
                                        (lambda: read_key(unread, args)) if key is not unread else None)
        if verdict.multiple > 1:  # a shard_map splits the rows: every bucket a multiple of its devices
            self.sizes.require(verdict.multiple)
        if verdict.caught is not None and why is None:  # a decision on the count no guard can state
            why = verdict.caught
        with self._lock:
            for guard in verdict.guards:
                if guard not in self.guards:
                    self.guards.append(guard)
                    self._fits.clear()
            if why is not None and key is not None and state is not None and state.bucket == bucket and bucket > 1:
                self._exact_keys[key] = why  # this key's buckets are exact: the front keeps this call's
                state.exact_why = why  # key (``exact_calls``), other keys keep their buckets
            elif why is not None:  # no call to learn the key from (ahead of time), or a key that cannot be
                self.exact.add(bucket)  # hashed: every bucket exact
                if self.exact_why is None and bucket > 1:  # (0 and 1 row: only ever their own size,
                    self.exact_why = why  # where JAX specialises size-1 axes; the symbol is >= 1)
        if state is not None and state.bucket == bucket and key is not None and key in self._exact_keys:
            state.exact_why = state.exact_why or self._exact_keys[key]
        callbacks = (takes_rows(verdict.callbacks) or bool(iotas) or bool(drops)) and not self.mask  # takes the count
        if callbacks and count is None:
            self.needs_count = True
        if rows != bucket and (why is not None or not all(g.holds(rows) for g in verdict.guards)
                               or (callbacks and count is None)):
            raise Retry()
        if self.mask and takes_rows(verdict.callbacks):
            count = jnp.sum(dyn[next(i for i, leaf in enumerate(leaves) if leaf.origin == "valid")], dtype=jnp.int32)
        flat_out = run(closed, dyn, verdict.callbacks, count if why is None else None, bucket,
                       frozenset(iotas) if not self.mask else frozenset(), drops if not self.mask else {})
        if state is not None:
            state.program = verdict
        self._local.last_verdict = (verdict, why is None)  # for the program store's record of it
        if self.exact_program(rows, bucket):
            self._exact_sizes.add(bucket)
        with self._lock:  # another bucket size of statics and shapes already compiled
            self._local.new_bucket = (key, bucket) not in self._sizes_seen and \
                any(seen == key for seen, _ in self._sizes_seen)
            self._sizes_seen.add((key, bucket))
        return Rows(out_tree.unflatten(flat_out), verdict.outputs)

    def _flatten(self, args: tuple, kwargs: dict) -> tuple[Callable, list, list[Leaf], Any]:
        """The bucketed arguments' traced leaves (``dyn``; with ``mask=``, ``valid`` too),
        each as a ``Leaf`` with its row axis, a function putting new leaves back into
        ``(args, kwargs)``, and the call's non-row key (``None`` where it cannot be
        hashed). The other arguments stay where they are: the traces close over them (an
        instance is never flattened here, so a ``deps="read"`` method reads only what it
        reads)."""
        found = list(self._found(args, kwargs))
        if self.mask:  # the row mask, by keyword or (as JAX may pass it) by position
            pos = self.params.index("valid") if "valid" in self.params else -1
            if 0 <= pos < len(args):
                found.append(("valid", args[pos], True))
            elif "valid" in kwargs:
                found.append(("valid", kwargs["valid"], False))
        trees, places, dyn, leaves, statics = [], [], [], [], []
        for name, value, positional in found:
            flat, tree = jax.tree_util.tree_flatten(value)
            axes = self._leaves(name, value, strict=False)[2] if name != "valid" else [0]
            paths = None
            slots = []
            for i, (leaf, axis) in enumerate(zip(flat, axes)):
                if isinstance(leaf, _compat.Tracer):
                    if axis is not None and paths is None:
                        paths = jax.tree_util.tree_flatten_with_path(value)[0]
                    origin = "" if axis is None else (name if not paths[i][0]
                                                      else name + jax.tree_util.keystr(paths[i][0]))
                    slots.append(len(dyn))
                    dyn.append(leaf)
                    leaves.append(Leaf(leaf.aval, axis, origin))
                else:
                    slots.append(None)
                    statics.append((type(leaf), leaf))
            trees.append((name, positional, tree, flat))
            places.append(slots)

        def rebuild(xs: tuple) -> tuple[list, dict]:
            a, k = list(args), dict(kwargs)
            for (name, positional, tree, flat), slots in zip(trees, places):
                value = tree.unflatten([xs[s] if s is not None else leaf for leaf, s in zip(flat, slots)])
                if positional:
                    a[self.positions[name] if name != "valid" else self.params.index("valid")] = value
                else:
                    k[name] = value
            return a, k

        shapes = tuple((tuple(None if k == leaf.axis else d for k, d in enumerate(leaf.aval.shape)),
                        str(leaf.aval.dtype), getattr(leaf.aval, "weak_type", False)) for leaf in leaves)
        bucketed = {name for name, _, _ in found}
        reads = self.reads_statics
        others = tuple(signature(v, reads and i == 0) for i, v in enumerate(args)
                       if i >= len(self.params) or self.params[i] not in bucketed)
        others += tuple((k, signature(v)) for k, v in sorted(kwargs.items()) if k not in bucketed)
        key: Any = (tuple((name, tree) for name, _, tree, _ in trees), tuple(statics), shapes, others)
        try:
            hash(key)
        except TypeError:
            key = None
        return rebuild, dyn, leaves, key

    def _judged(self, key: Any, flat_fn: Callable, leaves: list[Leaf], closed: Any,
                bucket: int, iotas: list, drops: dict, rekey: Callable | None = None) -> tuple[Verdict, str | None]:
        """The verdict for ``key`` (cached; judged again when the cached one's program is not
        this one), and why the concrete program ``closed`` is not the analysed one at
        ``bucket`` rows (``None``: it is); ``iotas`` receives its row indices (``differs``).
        ``rekey``: the key to keep a new verdict under, once judged (a ``deps="read"``
        method's: the statics its symbolic trace read too)."""
        cached = self._verdicts.get(key) if key is not None else None
        if cached is not None and closed is not None:
            drops.update(cached.drops or {})
            why = differs(closed, cached.jaxpr, bucket, iotas, drops)
            if why is None:
                return cached, None
            iotas.clear()
            drops.clear()
        verdict = self._judge(flat_fn, leaves, closed)
        drops.update(verdict.drops or {})
        why = (differs(closed, verdict.jaxpr, bucket, iotas, drops) if closed is not None
               else "the bucket's trace failed")
        key = rekey() if rekey is not None and key is not None else key
        if key is not None:
            with self._lock:
                if len(self._verdicts) >= _VERDICTS:
                    self._verdicts.pop(next(iter(self._verdicts)))
                self._verdicts[key] = verdict
        return verdict, why

    def _judge(self, flat_fn: Callable, leaves: list[Leaf], closed: Any, rows: int | None = None) -> Verdict:
        """The verdict; where the symbolic trace fails and a concrete one at the call's real
        ``rows`` fails too, the user's own error, as plain ``jax.jit`` raises it."""
        names = ", ".join(f"`{n}`" for n in self.axes)
        try:
            return judge(flat_fn, leaves, bool(self.mask), self.function, names, closed, self.axes)
        except BucketError as exc:
            if exc.__cause__ is None or rows is None:
                raise
            real = [jax.ShapeDtypeStruct(tuple(rows if k == leaf.axis else d for k, d in enumerate(leaf.aval.shape)),
                                         leaf.aval.dtype, weak_type=getattr(leaf.aval, "weak_type", False))
                    for leaf in leaves]
            try:
                jax.make_jaxpr(flat_fn)(*real)
            except Exception as own:
                raise own from None
            raise

    @contextlib.contextmanager
    def _side_hint(self, args: tuple, kwargs: dict, rows: int, bucket: int) -> Iterator[None]:
        """A refusal for a count the code needs, where an argument left out of ``buckets=``
        has the real row count (the near miss: ``x * lengths[:, None]``): it says which
        argument to add."""
        try:
            yield
        except BucketError as exc:
            if rows == bucket or "needs a concrete row count" not in str(exc):
                raise
            named = [(self.params[i] if i < len(self.params) else str(i), v) for i, v in enumerate(args)]
            for name, value in [*named, *kwargs.items()]:
                shape = tuple(getattr(getattr(value, "aval", None), "shape", None) or ())
                if name in self.axes or rows not in shape:
                    continue
                k = shape.index(rows)
                raise BucketError(f"{exc} `{name}` has the real row count ({rows}) on axis {k} but is not "
                                  f"in buckets=, so it was not padded: add \"{name}\": {k} to buckets=.") from None
            raise

    def took_new_bucket(self) -> bool:
        """Whether the program traced last on this thread is another bucket size of statics and
        other shapes already compiled (``warn_compiles`` does not count it)."""
        new = getattr(self._local, "new_bucket", False)
        self._local.new_bucket = False
        return new
