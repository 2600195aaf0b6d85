"""The forms JAX itself writes otherwise for a symbolic row count than for a number, for
one computation: the only differences the exact rule (``_compare``) normalises away, listed
here in one place, each tested to compute the same (``tests/test_buckets_exact.py``).

- ``dim_as_value``: the symbolic trace reads the count as a value (``dim_as_value``, then
  perhaps ``convert_element_type`` to another integer type) where the concrete trace has
  the literal; the symbolic value stands for the literal ``count`` (JAX's negative-index
  fix-up ``i + n`` of ``x[jnp.arange(n), labels]``);
- ``identity``: ``i * 1`` and ``i + 0`` on integers, ``v * 1.0`` on floats and ``v + 0.0``
  on a float ``iota`` (never -0.0), on both sides (``jnp.arange(n)`` at a symbol is
  ``0 + 1 * iota``, at a number ``iota``);
- ``constant index``: an integer index JAX computes from constants at a symbol only
  (``iota``, ``broadcast_in_dim``, ``mul``, ``add``, ``rev`` of literals) is computed here and stands
  for the literal or the slice bounds the concrete trace has;
- ``gather as static slice``: a gather of a constant index along one non-row axis,
  promised in bounds (``x[:, j]``, ``x[:, a:b]``, ``x[:, ::k]`` at a symbol) against the
  ``slice`` (and ``squeeze``; no slice at all for a whole axis) JAX writes at a number,
  picking the same elements (a gather of the whole array, as ``x[:, ::-1]`` makes before
  its ``rev``, is its operand).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import numpy as np

from ._symbolic import at

NORMALISATIONS = ("dim_as_value", "identity", "constant index", "gather as static slice")


class Count(NamedTuple):
    """A value of the count in the symbolic trace: stands for the literal ``value``."""

    value: int
    dtype: Any


def array_same(c: Any, s: Any) -> bool:
    if getattr(c, "dtype", None) != getattr(s, "dtype", None) and np.asarray(c).dtype != np.asarray(s).dtype:
        return False
    ca, sa = np.asarray(c), np.asarray(s)
    if ca.shape != sa.shape or ca.dtype != sa.dtype:
        return False
    if ca.dtype.kind == "V" or ca.dtype == object:
        return bool(np.array_equal(ca, sa))
    return ca.tobytes() == sa.tobytes()  # -0.0 and NaN payloads included


def is_literal(v: Any) -> bool:
    return hasattr(v, "val") and not hasattr(v, "count")


def is_int(dtype: Any) -> bool:
    try:
        return np.dtype(dtype).kind in "iu"
    except TypeError:
        return False


class Side:
    """One trace's equations, read with the listed normalisations: aliases (a variable that
    stands for another operand, or for a ``Count``) and known integer constants."""

    def __init__(self, jaxpr: Any, symbolic: bool, count: int) -> None:
        self.eqns, self.symbolic, self.count = list(jaxpr.eqns), symbolic, count
        self.alias: dict = {}
        self.known: dict = {}  # variable -> its value (an integer index computed from constants)
        self.iota: set = set()  # float variables made by ``iota`` (never -0.0: ``+ 0.0`` keeps them)
        self.i = 0

    def resolve(self, v: Any) -> Any:
        return v if is_literal(v) else self.alias.get(v, v)

    def value(self, v: Any) -> Any:
        v = self.resolve(v)
        if isinstance(v, Count):
            return np.asarray(v.value, v.dtype)
        if is_literal(v):
            return np.asarray(v.val, v.aval.dtype) if is_int(v.aval.dtype) else None
        return self.known.get(v)

    def peek(self) -> Any:
        return self.eqns[self.i] if self.i < len(self.eqns) else None

    def drop(self, eqn: Any) -> bool:
        """Whether ``eqn`` is a form one side has and the other not (then noted, not compared)."""
        name = eqn.primitive.name
        ops = [self.resolve(v) for v in eqn.invars]
        out = eqn.outvars[0] if len(eqn.outvars) == 1 else None
        if out is None:
            return False
        if self.symbolic and name == "dim_as_value":  # normalisation: dim_as_value
            value = at(eqn.params.get("dimension", eqn.params.get("dim")), self.count)
            if isinstance(value, int):
                self.alias[out] = Count(value, out.aval.dtype)
                return True
        if self.symbolic and name == "convert_element_type" and ops and isinstance(ops[0], Count) and \
                is_int(eqn.params.get("new_dtype")):
            self.alias[out] = Count(ops[0].value, out.aval.dtype)
            return True
        if self.symbolic and name == "gather" and not isinstance(ops[0], Count):  # gather of a whole array
            form = as_slice(eqn, self, self.count)
            if form is not None and form[3] is None and alike_at(ops[0].aval, out.aval, self.count) and \
                    [range(a, b, k) for a, b, k in zip(*form[:3])] == \
                    [range(at(d, self.count)) for d in ops[0].aval.shape]:
                self.alias[out] = ops[0]
                return True
        if name in ("mul", "add") and len(ops) == 2:  # normalisation: identity
            unit = 1 if name == "mul" else 0
            for k in (0, 1):
                lit, other = ops[k], ops[1 - k]
                if is_literal(lit) and not is_literal(other) and not isinstance(other, Count) and \
                        np.shape(lit.val) == () and float(lit.val) == unit and \
                        np.asarray(lit.val).dtype.kind in "iuf" and alike(other.aval, out.aval) and \
                        (is_int(out.aval.dtype) or name == "mul" or other in self.iota):
                    self.alias[out] = other
                    return True
        return False

    def note(self, eqn: Any) -> None:
        """What a compared equation makes: a known integer constant, a float iota."""
        out = eqn.outvars[0] if len(eqn.outvars) == 1 else None
        if out is None:
            return
        name = eqn.primitive.name
        if name == "iota" and not is_int(out.aval.dtype):
            self.iota.add(out)
        value = fold(eqn, [self.value(v) for v in eqn.invars]) if is_int(getattr(out.aval, "dtype", None)) else None
        if value is not None:
            self.known[out] = value


FOLDED = 4096  # the largest constant index folded


def alike(a: Any, b: Any) -> bool:
    return tuple(a.shape) == tuple(b.shape) and a.dtype == b.dtype and \
        getattr(a, "weak_type", False) == getattr(b, "weak_type", False)


def alike_at(a: Any, b: Any, count: int) -> bool:
    return [at(d, count) for d in a.shape] == [at(d, count) for d in b.shape] and a.dtype == b.dtype


def fold(eqn: Any, values: list) -> Any:
    """An integer equation on known values, computed exactly (``None`` where it is not one)."""
    if any(v is None for v in values):
        return None
    out = eqn.outvars[0].aval
    shape = tuple(out.shape)
    if not all(isinstance(d, int) for d in shape) or int(np.prod(shape)) > FOLDED:
        return None
    name, p = eqn.primitive.name, eqn.params
    dtype = np.dtype(out.dtype)
    with np.errstate(all="ignore"):
        if name == "iota":
            return np.broadcast_to(np.arange(shape[p["dimension"]], dtype=dtype).reshape(
                [-1 if k == p["dimension"] else 1 for k in range(len(shape))]), shape).copy()
        if name == "broadcast_in_dim":
            src = values[0]
            expanded = np.reshape(src, [src.shape[p["broadcast_dimensions"].index(k)]
                                        if k in p["broadcast_dimensions"] else 1 for k in range(len(shape))])
            return np.broadcast_to(expanded, shape).astype(dtype)
        if name in ("mul", "add", "sub") and len(values) == 2:
            a, b = (np.asarray(v).astype(dtype) for v in values)
            return {"mul": np.multiply, "add": np.add, "sub": np.subtract}[name](a, b).astype(dtype)
        if name == "convert_element_type":
            return np.asarray(values[0]).astype(dtype)
        if name == "concatenate":
            return np.concatenate([np.asarray(v) for v in values], axis=p["dimension"]).astype(dtype)
        if name == "rev":
            return np.flip(values[0], axis=tuple(p["dimensions"])).astype(dtype)
        if name == "reshape":
            return np.reshape(values[0], shape).astype(dtype)
    return None


def as_slice(se: Any, side: Side, count: int) -> tuple | None:
    """Normalisation: gather as static slice. A gather of a constant index along one
    axis, promised in bounds (JAX's ``x[:, j]``, ``x[:, a:b]``, ``x[:, ::k]`` at a symbol),
    as the ``slice`` (and ``squeeze``) JAX writes for them at a number: its start, limit
    and stride per axis, and the axis squeezed (or ``None``); ``None`` where it is not one."""
    p = se.params
    dn = p["dimension_numbers"]
    mode = str(p.get("mode", ""))
    if "PROMISE_IN_BOUNDS" not in mode and "CLIP" not in mode:
        return None
    if getattr(dn, "operand_batching_dims", ()) or len(dn.start_index_map) != 1:
        return None
    idx = side.value(se.invars[1])
    operand = [at(d, count) for d in se.invars[0].aval.shape]
    sizes = [at(d, count) for d in p["slice_sizes"]]
    if idx is None or not all(isinstance(d, int) for d in (*operand, *sizes)):
        return None
    (d,) = dn.start_index_map
    rank = len(operand)
    idx = np.asarray(idx).reshape(-1)  # the index vector last, of length 1
    out_rank = len(se.outvars[0].aval.shape)
    batch_out = [k for k in range(out_rank) if k not in dn.offset_dims]
    collapsed = tuple(dn.collapsed_slice_dims)
    if list(dn.offset_dims) != sorted(dn.offset_dims) or collapsed not in ((), (d,)):
        return None
    start, limit, stride = [0] * rank, list(operand), [1] * rank
    if np.ndim(side.value(se.invars[1])) <= 1:  # one index: a window (``x[:, a:b]``, ``x[:, j]``)
        if len(idx) != 1 or batch_out:
            return None
        start[d], limit[d] = int(idx[0]), int(idx[0]) + sizes[d]
        if start[d] < 0 or limit[d] > operand[d]:
            return None
        return start, limit, stride, (d if collapsed else None)
    if not collapsed or batch_out != [d]:  # the picked columns where the axis was
        return None
    if len(idx) < 2 or sizes[d] != 1:
        return None
    step = int(idx[1] - idx[0])
    if step <= 0 or np.any(np.diff(idx) != step):
        return None
    start[d], limit[d], stride[d] = int(idx[0]), int(idx[-1]) + 1, step
    if limit[d] > operand[d] or start[d] < 0:
        return None
    return start, limit, stride, None


class Eqn:
    """A whole-array slice JAX did not write (before a ``squeeze``): its operand as its result."""

    def __init__(self, operand: Any, squeeze: Any) -> None:
        self.invars, self.outvars, self.squeeze = [operand], [operand], squeeze
        self.params = {"start_indices": [0] * len(operand.aval.shape), "limit_indices": list(operand.aval.shape),
                       "strides": None}


def match_slice(ce: Any, se: Any, c: Side, s: Side, env: dict, count: int) -> bool:
    """Normalisation: gather as static slice (``as_slice``), matched and noted."""
    form = as_slice(se, s, count)
    if form is None or env.get(s.resolve(se.invars[0])) is not c.resolve(ce.invars[0]):
        return False
    start, limit, stride, squeezed = form
    operand = [at(d, count) for d in se.invars[0].aval.shape]
    if ce.primitive.name == "squeeze":  # the whole array: JAX writes no slice at a number
        if squeezed is None or tuple(ce.params["dimensions"]) != (squeezed,) or \
                [range(a, b, k) for a, b, k in zip(start, limit, stride)] != [range(d) for d in operand]:
            return False
        ce = Eqn(c.resolve(ce.invars[0]), ce)
    p = ce.params
    strides = list(p.get("strides") or [1] * len(start))
    if len(p["start_indices"]) != len(start) or any(  # the same elements picked on each axis
            range(a, b, k) != range(a2, b2, k2) for a, b, k, a2, b2, k2 in zip(
                p["start_indices"], p["limit_indices"], strides, start, limit, stride)):
        return False
    out = ce.outvars[0]
    if squeezed is not None and isinstance(ce, Eqn):
        out = ce.squeeze.outvars[0]
    elif squeezed is not None:
        nxt = c.eqns[c.i + 1] if c.i + 1 < len(c.eqns) else None
        if nxt is None or nxt.primitive.name != "squeeze" or tuple(nxt.params["dimensions"]) != (squeezed,) or \
                c.resolve(nxt.invars[0]) is not out:
            return False
        out = nxt.outvars[0]
    if not aval_of(out.aval, se.outvars[0].aval, count):
        return False
    env[se.outvars[0]] = out
    c.i += 1 if isinstance(ce, Eqn) or squeezed is None else 2
    s.i += 1
    return True


def aval_of(ca: Any, sa: Any, count: int) -> bool:
    return same_aval(ca, sa, count, count)


def same_aval(ca: Any, sa: Any, count: int, _: int) -> bool:
    if ca is None or sa is None:
        return ca is sa
    cs, ss = tuple(getattr(ca, "shape", ())), tuple(getattr(sa, "shape", ()))
    return (type(ca) is type(sa) or isinstance(sa, jax.ShapeDtypeStruct)) and len(cs) == len(ss) and \
        all(x == at(y, count) for x, y in zip(cs, ss)) and \
        getattr(ca, "dtype", None) == getattr(sa, "dtype", None) and \
        getattr(ca, "weak_type", False) == getattr(sa, "weak_type", False)


