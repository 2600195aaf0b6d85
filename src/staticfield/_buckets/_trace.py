"""What JAX traces in place of a bucketed function: trace it once to a jaxpr, follow the
row axis through it (``_rows``), refuse a row-mixing function, remember which outputs carry
the rows, and evaluate the jaxpr in the caller's trace (so the user's function is traced
exactly once per program). ``Traced`` is a base of ``_front.BucketSpec``, kept apart so
that ``_front`` holds the call path only.
"""

from __future__ import annotations

import functools
import os
from typing import Any, Callable

import jax
import numpy as np
from jax.extend.core import jaxpr_as_fun

from .._core import _compat
from ._errors import MIXES_ROWS, NO_ROW_OUTPUT, BucketError, output_name
from ._rows import Analysis, Mixed, Mixing, Row

CHECK_ENV = "STATICFIELD_CHECK_BUCKETS"
AMBIGUOUS_AXES = object()  # two programs disagree on an output's row axis


class Traced:
    """The trace of a bucketed function (see the module docstring)."""

    # Set by BucketSpec: what these methods read.
    fn: Callable
    function: str
    axes: dict
    positions: dict
    mask: Any
    params: list
    static_names: frozenset
    _out_axes: dict
    _local: Any
    _lock: Any
    _found: Callable
    _leaves: Callable
    _path: Callable

    def body(self, fn: Callable) -> Callable:
        """What JAX traces in place of ``fn`` (see the module docstring)."""
        spec = self

        @functools.wraps(fn)
        def traced(*args: Any, **kwargs: Any) -> Any:
            return spec._traced(fn, args, kwargs)

        return traced

    def _traced(self, fn: Callable, args: tuple, kwargs: dict) -> Any:
        state = getattr(self._local, "call", None)
        if state is not None:
            state.traced = True
            state.check = os.environ.get(CHECK_ENV, "") not in ("", "0")
        args, kwargs = list(args), dict(kwargs)
        slots: list[tuple[str, bool, Any, list, list]] = []  # name, positional, treedef, leaves, states
        inputs: list[Any] = []
        states: list[Any] = []
        for name, value, positional in self._found(tuple(args), kwargs):
            leaves, treedef = jax.tree_util.tree_flatten(value)
            axes = self._leaves(name, value, strict=False)[2]
            places = []
            for i, (leaf, axis) in enumerate(zip(leaves, axes)):
                if isinstance(leaf, _compat.Tracer):
                    places.append(len(inputs))
                    inputs.append(leaf)
                    states.append(None if axis is None else Row(axis, self._path(name, value, i).strip("`")))
                else:
                    places.append(None)
            slots.append((name, positional, treedef, leaves, places))
        if self.mask and isinstance(kwargs.get("valid"), _compat.Tracer):
            slots.append(("valid", False, None, [kwargs["valid"]], [len(inputs)]))
            inputs.append(kwargs["valid"])
            states.append(Row(0, "valid"))

        def flat_fn(*xs: Any) -> Any:
            a, k = list(args), dict(kwargs)
            for name, positional, treedef, leaves, places in slots:
                filled = [xs[p] if p is not None else leaf for leaf, p in zip(leaves, places)]
                value = filled[0] if treedef is None else treedef.unflatten(filled)
                if positional:
                    a[self.positions[name]] = value
                else:
                    k[name] = value
            return fn(*a, **k)

        closed, out_shape = jax.make_jaxpr(flat_fn, return_shape=True)(*inputs)
        try:
            outs = Analysis(lenient=bool(self.mask)).run(closed.jaxpr, [None] * len(closed.jaxpr.constvars), states)
        except Mixing as exc:
            raise BucketError(self._mixing_message(exc)) from None
        shapes, out_tree = jax.tree_util.tree_flatten(out_shape)
        axes = [s.axis if isinstance(s, Row) else self._mixed_axis(s, a, inputs, states)
                for s, a in zip(outs, shapes)]
        if not self.mask:
            for (path, aval), axis in zip(jax.tree_util.tree_flatten_with_path(out_shape)[0], axes):
                if axis is None:
                    names = ", ".join(f"`{n}`" for n in self.axes)
                    text = f"{aval.dtype}{list(aval.shape)}"
                    raise BucketError(NO_ROW_OUTPUT.format(function=self.function, output=output_name(path),
                                                           aval=text, names=names))
        key = (out_tree, tuple((tuple(s.shape), s.dtype) for s in shapes))
        self._learn(key, axes)
        self._local.last_out = (key, axes)  # for the program store's key of this program
        flat_out = jaxpr_as_fun(closed)(*inputs)
        return out_tree.unflatten(flat_out)

    def _learn(self, key: Any, axes: list) -> None:
        """Which outputs of a program (by its outputs' tree, shapes and dtypes) carry the rows."""
        with self._lock:
            known = self._out_axes.get(key)
            self._out_axes[key] = axes if known is None or known == axes else AMBIGUOUS_AXES

    def _mixed_axis(self, state: Any, aval: Any, inputs: list, states: list) -> int | None:
        """``mask=``: a ``Mixed`` output is sliced on its declared row axis when it still has
        the bucket's size there."""
        if not isinstance(state, Mixed):
            return None
        root = state.origin.split(".", 1)[0].split("[", 1)[0]
        axis = self.axes.get(root, 0) if root != "valid" else next(iter(self.axes.values()))
        bucket = next((np.shape(x)[s.axis] for x, s in zip(inputs, states) if isinstance(s, Row)), None)
        ndim = len(aval.shape)
        if bucket is None or not -ndim <= axis < ndim or aval.shape[axis % ndim] != bucket:
            return None
        return axis % ndim

    def _mixing_message(self, exc: Mixing) -> str:
        summarize = _compat.get("source_summary")  # the user's line of an equation
        where = "an unknown line"
        for eqn in (exc.eqn, *exc.outer) if summarize is not None else ():  # in a library's jit: its call
            try:
                text = summarize(eqn.source_info)
            except Exception:
                continue
            if text and not text.startswith("unknown") and ":" in text:
                where = text
                break
        name = exc.eqn.primitive.name
        params = {k: v for k, v in exc.eqn.params.items() if k in ("axes", "dimension", "axis", "dimensions")
                  and v is not None}
        operation = f"`{name}`" + (f" ({', '.join(f'{k}={v}' for k, v in params.items())})" if params else "")
        root = exc.row.origin.split(".", 1)[0].split("[", 1)[0]
        declared = self.axes.get(root, exc.row.axis)
        if declared != exc.row.axis:
            operation += f" (where the rows are on axis {exc.row.axis})"
        return MIXES_ROWS.format(function=self.function, origin=exc.row.origin, axis=declared,
                                 operation=operation, where=where, why=exc.why)

    def _derive(self, args: list, kwargs: dict) -> None:
        """Trace the body abstractly (no compile, not counted) to learn which outputs carry
        the rows, for a program that was not traced in this process."""
        static = {i for i, name in enumerate(self.params) if name in self.static_names}
        fixed = {i: a for i, a in enumerate(args) if i in static}
        fixed_kw = {k: v for k, v in kwargs.items() if k in self.static_names}
        dyn = [a for i, a in enumerate(args) if i not in static]
        dyn_kw = {k: v for k, v in kwargs.items() if k not in self.static_names}
        body = self.body(self.fn)

        def abstract(dyn: list, dyn_kw: dict) -> Any:
            it = iter(dyn)
            full = [fixed[i] if i in fixed else next(it) for i in range(len(args))]
            return body(*full, **dyn_kw, **fixed_kw)

        outer = getattr(self._local, "call", None)
        self._local.call = None
        try:
            jax.eval_shape(abstract, dyn, dyn_kw)
        finally:
            self._local.call = outer

