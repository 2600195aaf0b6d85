"""What a traced call depends on, in the user's words: a flat map by user path.

``describe`` turns the arguments of one trace into a flat map from a user path
(``params.w``, ``state[0]``, ``batch['x']``, ``self.depth``) to an entry:

=============  ==========================================  =======================
entry          what it records                             change kinds it yields
=============  ==========================================  =======================
``Leaf``       shape, dtype, weak_type, sharding of a leaf  shape, dtype, weak_type,
                                                            sharding
``Node``       the pytree node type at that path            structure
``Static``     a static value (field or static argument)    static, static_arg
=============  ==========================================  =======================

``_diff`` compares two of them.
"""

from __future__ import annotations

import dataclasses
import inspect
import types
from typing import Any, Callable, NamedTuple, Sequence

import jax

from .._core._anyleaves import ARRAY_LEAVES, AnyLeaves
from .._core._compat import Tracer
from .._core._display import sharding_text, short_dtype

HINT_HELD_STATIC = (
    "equinox's filter_jit holds every non-array argument static, so each new value "
    "compiles once; pass an array (jnp.asarray(...)) to trace it instead"
)


class Leaf(NamedTuple):
    shape: tuple[int, ...]
    dtype: str
    weak_type: bool
    sharding: str
    scalar: str = ""  # the Python type passed (``float``), for a Python scalar
    committed: str = ""  # a jax.Array's: ``committed to cpu:0`` or ``uncommitted``

    def show(self) -> str:
        return f"{short_dtype(self.dtype)}[{','.join(map(str, self.shape))}]"  # f32[3], as JAX

    def show_weak(self) -> str:
        """``f32[]``, ``weak f32[]`` (a weakly typed array), ``weak f32[] (a Python float)``."""
        text = f"weak {self.show()}" if self.weak_type else self.show()
        return f"{text} (a Python {self.scalar})" if self.scalar else text


class Node(NamedTuple):
    type_name: str
    node_type: Any = None  # the class itself: two classes of one name are two node types


class Static(NamedTuple):
    kind: str  # "static" or "static_arg"
    value: Any
    hint: str = ""  # instead of HINTS[kind]


Description = dict  # path -> Leaf | Node | Static


def one_line(value: Any) -> str:
    try:
        return " ".join(repr(value).split())  # one line
    except Exception:
        return f"<{type(value).__name__}>"


def short(value: Any, limit: int = 50) -> str:
    text = one_line(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def argument_names(fun: Callable, n_args: int) -> list[str]:
    """The names of the first ``n_args`` positional parameters (``args[i]`` past them)."""
    code = getattr(fun, "__code__", None)
    names: list[str]
    if isinstance(fun, types.FunctionType) and code is not None and not hasattr(fun, "__wrapped__"):
        # fast: no inspect (a wrapper, such as shard_map's, is read through __wrapped__)
        names = list(code.co_varnames[: code.co_argcount])
        if code.co_flags & inspect.CO_VARARGS and n_args > len(names):
            star = code.co_varnames[code.co_argcount + code.co_kwonlyargcount]
            names += [f"{star}[{i}]" for i in range(n_args - len(names))]
        names = names[:n_args]
        return names + [f"args[{i}]" for i in range(len(names), n_args)]
    try:
        params = list(inspect.signature(fun).parameters.values())
    except (TypeError, ValueError):
        params = []
    names = []
    for p in params:
        if p.kind == p.VAR_POSITIONAL:
            names += [f"{p.name}[{i}]" for i in range(n_args - len(names))]
            break
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            names.append(p.name)
    names = names[:n_args]
    return names + [f"args[{i}]" for i in range(len(names), n_args)]


def describe(
    fun: Callable,
    args: Sequence[Any],
    kwargs: dict[str, Any],
    static_argnums: Sequence[int] = (),
    static_argnames: Sequence[str] = (),
    static_leaf: Callable[[Any], bool] | None = None,
) -> Description:
    """The flat map from user path to entry for one call of ``fun``.

    ``static_leaf(x)`` true marks a leaf as held static (equinox's filter_jit does so
    for every non-array leaf).
    """
    out: Description = {name: Static("context", read()) for name, read in SETTINGS}
    names = argument_names(fun, len(args))
    for i, (name, value) in enumerate(zip(names, args)):
        if i in static_argnums:
            out[name] = Static("static_arg", value)
        else:
            _argument(value, name, out, static_leaf)
    for name, value in kwargs.items():
        if name in static_argnames:
            out[name] = Static("static_arg", value)
        else:
            _argument(value, name, out, static_leaf)
    return out


# The JAX settings in a trace's context that change its program, by the name a user sets.
SETTINGS = tuple(
    (name, (lambda name=name: getattr(jax.config, name, None)))
    for name in ("jax_enable_x64", "jax_numpy_dtype_promotion", "jax_default_matmul_precision")
)


def _key(k: Any) -> str:
    if isinstance(k, jax.tree_util.GetAttrKey):
        return f".{k.name}"
    if isinstance(k, jax.tree_util.DictKey):
        return f"[{k.key!r}]"
    if isinstance(k, jax.tree_util.SequenceKey):
        return f"[{k.idx}]"
    if isinstance(k, jax.tree_util.FlattenedIndexKey):
        return f"[{k.key}]"
    return str(k)


def _walk(x: Any, path: str, out: Description, static_leaf: Callable | None,
          held: tuple[str, str] = ("static", HINT_HELD_STATIC)) -> None:
    """Describe ``x`` at ``path``; a leaf ``static_leaf`` holds static is ``Static(*held)``."""
    if isinstance(x, jax.Array) and static_leaf is None:  # the common leaf, without a flatten
        aval = x.aval
        out[path] = Leaf(tuple(aval.shape), _dtype_name(aval.dtype), aval.weak_type, placement(x), "",
                         commitment(x))
        return
    if x.__class__ is AnyLeaves:  # a leaves="any" field: its non-array leaves are static
        _walk(x.value, path, out, _not_array, ("static", ""))
        return
    children, treedef = jax.tree_util.tree_flatten_with_path(x, is_leaf=lambda y: y is not x)
    if jax.tree_util.treedef_is_leaf(treedef) and treedef.num_leaves == 1:  # type: ignore[attr-defined]
        out[path] = Static(held[0], x, held[1]) if static_leaf is not None and static_leaf(x) else _leaf(x)
        return
    node_type, aux = treedef.node_data()  # type: ignore[attr-defined,misc]
    out[path] = Node(getattr(node_type, "__qualname__", str(node_type)), node_type)
    keys = [kp[0] for kp, _ in children]
    _statics(node_type, aux, keys, path, out)
    for (kp, child) in children:
        _walk(child, path + _key(kp[0]), out, static_leaf, held)


def _argument(value: Any, name: str, out: Description, static_leaf: Callable | None) -> None:
    """One argument: an ``AnyLeaves`` node is an argument of ``sf.jit(static="auto")``, whose
    non-array leaves are static arguments (as ``sf.Recompile`` names them)."""
    if value.__class__ is AnyLeaves:
        _walk(value.value, name, out, _not_array, ("static_arg", ""))
    else:
        _walk(value, name, out, static_leaf)


def _not_array(x: Any) -> bool:
    return not isinstance(x, ARRAY_LEAVES)


def _statics(node_type: type, aux: Any, keys: list, path: str, out: Description) -> None:
    """Static values kept in a node's aux_data, named by field where it can tell."""
    if aux is None or node_type in (dict, list, tuple) or _is_namedtuple(node_type):
        return  # their aux is the keys, already part of the children's paths
    names, values = getattr(aux, "names", None), getattr(aux, "values", None)
    if isinstance(names, tuple) and isinstance(values, tuple) and len(names) == len(values):
        pairs = list(zip(names, values))  # staticfield's StaticKey
    elif dataclasses.is_dataclass(node_type) and isinstance(aux, tuple):
        fields = [f.name for f in dataclasses.fields(node_type)]
        dynamic = {k.name for k in keys if isinstance(k, jax.tree_util.GetAttrKey)}
        static = [n for n in fields if n not in dynamic]
        if len(aux) == len(static):  # flax.struct, jax.tree_util.register_dataclass
            pairs = list(zip(static, aux))
        elif len(aux) == len(fields):  # equinox: one slot per field
            pairs = [(n, v) for n, v in zip(fields, aux) if n not in dynamic]
        else:
            pairs = [(f" ({node_type.__name__} metadata)", aux)]
    else:
        pairs = [(f" ({node_type.__name__} metadata)", aux)]
    for name, value in pairs:
        sep = "" if name.startswith(" ") else "."
        out[f"{path}{sep}{name}" if path else name] = Static("static", value)


def _is_namedtuple(t: type) -> bool:
    return isinstance(t, type) and issubclass(t, tuple) and hasattr(t, "_fields")


_typeof = getattr(jax, "typeof", None) or getattr(getattr(jax, "core"), "get_aval")  # newer JAX has typeof


_DTYPE_NAMES: dict[Any, str] = {}


def _dtype_name(dtype: Any) -> str:
    name = _DTYPE_NAMES.get(dtype)
    if name is None:
        name = _DTYPE_NAMES[dtype] = str(dtype)
    return name


def _leaf(x: Any) -> Any:
    try:
        aval = _typeof(x)
        shape, dtype, weak = tuple(aval.shape), _dtype_name(aval.dtype), bool(aval.weak_type)
    except Exception:
        return Static("static", x)  # not an array: jit would reject it; show its value
    scalar = type(x).__name__ if type(x) in (bool, int, float, complex) else ""
    return Leaf(shape, dtype, weak, placement(x), scalar, commitment(x))


def placement(x: Any) -> str:
    """A jax.Array's sharding, short (``NamedSharding(PartitionSpec('i',))``); else ''."""
    if not isinstance(x, jax.Array):
        return ""
    try:
        s = x.sharding
    except Exception:
        return ""
    text = sharding_text(s) or ""
    return f"{type(s).__name__}({text})" if getattr(s, "spec", None) is not None else text


def commitment(x: Any) -> str:
    """A concrete jax.Array's commitment (JAX keys its programs by it): ``committed to
    cpu:0`` (``jax.device_put(x, device)``), ``uncommitted`` (made by jnp); else ''."""
    if not isinstance(x, jax.Array) or isinstance(x, Tracer):
        return ""
    try:
        if not x.committed:
            return "uncommitted"
        devices = list(x.devices())
    except Exception:
        return ""
    if len(devices) == 1:
        return f"committed to {devices[0].platform}:{devices[0].id}"
    return f"committed to {len(devices)} devices"


def flat_args(args: tuple, dbg: Any) -> Description:
    """A flat call's arguments by name (``Leaf`` each: shape, dtype, weak type, placement);
    JAX puts closed-over constants first."""
    names = tuple(dbg.arg_names or ())
    flat = args[len(args) - len(names):] if names else args
    return dict(zip(names or [f"args[{i}]" for i in range(len(flat))], map(_leaf, flat)))


def source_line(dbg: Any) -> tuple[str, str, int] | None:
    """(name, file, line) of a traced function from JAX's ``func_src_info``
    (``f at /path/prog.py:4``), or None."""
    name, _, where = str(getattr(dbg, "func_src_info", "") or "").partition(" at ")
    file, _, line = where.rpartition(":")
    return (name, file, int(line)) if file and line.isdigit() else None
