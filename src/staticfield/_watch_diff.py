"""What a traced call depends on, in the user's words, and the diff of two of them.

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

``diff`` lists the ``Change``s between two descriptions; ``closest`` picks the
earlier description with the fewest changes (the newest on a tie), so a dtype
change is explained as a dtype change even when a static value also differed
from the most recent compile.
"""

from __future__ import annotations

import dataclasses
import inspect
import types
from typing import Any, Callable, NamedTuple, Sequence

import jax

from ._explain import Change

HINTS = {
    "shape": "every new shape compiles once; pad or bucket inputs to a few fixed shapes",
    "dtype": "pass one dtype on every call, e.g. x.astype(jnp.float32) before the call",
    "weak_type": (
        "a Python scalar is weakly typed and compiles apart from an array of the same dtype; "
        "pass the same kind each time, e.g. jnp.asarray(x, jnp.float32)"
    ),
    "static": (
        "a static value is part of the cache key, so each new value compiles once; "
        "if it takes many values, make it a dynamic (traced) field"
    ),
    "static_arg": (
        "static_argnums/static_argnames values are part of the cache key; "
        "if it takes many values, pass it as an array instead"
    ),
    "structure": (
        "the pytree structure changed (keys, lengths, None vs array, node type); "
        "pass the same structure on every call"
    ),
    "sharding": "inputs with another sharding compile again; device_put them with one sharding",
    "new function": (
        "a new function object with the same code (a lambda or closure made on each call) "
        "misses the cache; define it once and reuse it, e.g. at module level"
    ),
}
HINT_HELD_STATIC = (
    "equinox's filter_jit holds every non-array argument static, so each new value "
    "compiles once; pass an array (jnp.asarray(...)) to trace it instead"
)
HINT_IDENTITY = (
    "the old and new values print the same but are not equal (compared by identity); "
    "reuse one object, or give {type} value-based __eq__/__hash__"
)


class Leaf(NamedTuple):
    shape: tuple[int, ...]
    dtype: str
    weak_type: bool
    sharding: str

    def show(self) -> str:
        return f"{self.dtype}[{','.join(map(str, self.shape))}]"


class Node(NamedTuple):
    type_name: str


class Static(NamedTuple):
    kind: str  # "static" or "static_arg"
    value: Any
    hint: str = ""  # instead of HINTS[kind]


Description = dict  # path -> Leaf | Node | Static


def _repr(value: Any) -> str:
    try:
        return " ".join(repr(value).split())  # one line
    except Exception:
        return f"<{type(value).__name__}>"


def short(value: Any, limit: int = 50) -> str:
    text = _repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def argument_names(fun: Callable, n_args: int) -> list[str]:
    """The names of the first ``n_args`` positional parameters (``args[i]`` past them)."""
    code = getattr(fun, "__code__", None)
    names: list[str]
    if isinstance(fun, types.FunctionType) and code is not None:  # fast: no inspect
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
    out: Description = {}
    names = argument_names(fun, len(args))
    for i, (name, value) in enumerate(zip(names, args)):
        if i in static_argnums:
            out[name] = Static("static_arg", value)
        else:
            _walk(value, name, out, static_leaf)
    for name, value in kwargs.items():
        if name in static_argnames:
            out[name] = Static("static_arg", value)
        else:
            _walk(value, name, out, static_leaf)
    return out


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


def _walk(x: Any, path: str, out: Description, static_leaf: Callable | None) -> None:
    if isinstance(x, jax.Array) and static_leaf is None:  # the common leaf, without a flatten
        aval = x.aval
        out[path] = Leaf(tuple(aval.shape), _dtype_name(aval.dtype), aval.weak_type, placement(x))
        return
    children, treedef = jax.tree_util.tree_flatten_with_path(x, is_leaf=lambda y: y is not x)
    if jax.tree_util.treedef_is_leaf(treedef) and treedef.num_leaves == 1:  # type: ignore[attr-defined]
        held = static_leaf is not None and static_leaf(x)
        out[path] = Static("static", x, HINT_HELD_STATIC) if held else _leaf(x)
        return
    node_type, aux = treedef.node_data()  # type: ignore[attr-defined,misc]
    out[path] = Node(getattr(node_type, "__qualname__", str(node_type)))
    keys = [kp[0] for kp, _ in children]
    _statics(node_type, aux, keys, path, out)
    for (kp, child) in children:
        _walk(child, path + _key(kp[0]), out, static_leaf)


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
    return Leaf(shape, dtype, weak, placement(x))


def placement(x: Any) -> str:
    """A jax.Array's sharding, short (``NamedSharding(PartitionSpec('i',))``); else ''."""
    if not isinstance(x, jax.Array):
        return ""
    try:
        s = x.sharding
    except Exception:
        return ""
    spec = getattr(s, "spec", None)
    return f"{type(s).__name__}({spec})" if spec is not None else type(s).__name__


def placement_changes(old: Sequence[tuple[str, str]], new: Sequence[tuple[str, str]]) -> list[Change]:
    """Sharding changes between two flat lists of (argument path, placement)."""
    if len(old) != len(new):
        return []
    return [
        Change(path, "sharding", a, b, HINTS["sharding"])
        for (path, a), (_, b) in zip(old, new)
        if a and b and a != b
    ]


def _same(a: Any, b: Any) -> bool:
    if a is b:
        return True
    try:
        return type(a) is type(b) and bool(a == b)
    except Exception:
        return False


def diff(old: Description, new: Description) -> list[Change]:
    """The changes from ``old`` to ``new``: added or removed paths count once, at the top."""
    changes: list[Change] = []
    gone = [p for p in old if p not in new]
    came = [p for p in new if p not in old]
    for p in _tops(gone):
        changes.append(Change(p, "structure", _show(old[p]), "absent", HINTS["structure"]))
    for p in _tops(came):
        changes.append(Change(p, "structure", "absent", _show(new[p]), HINTS["structure"]))
    for p, a in old.items():
        b = new.get(p)
        if b is None:
            continue
        changes += _entry_changes(p, a, b)
    return changes


def _entry_changes(path: str, a: Any, b: Any) -> list[Change]:
    if isinstance(a, Leaf) and isinstance(b, Leaf):
        out = []
        for kind, x, y in (("shape", a.shape, b.shape), ("dtype", a.dtype, b.dtype)):
            if x != y:
                out.append(Change(path, kind, a.show(), b.show(), HINTS[kind]))
        if a.weak_type != b.weak_type:
            show = lambda leaf: leaf.show() + (" (weak, a Python scalar)" if leaf.weak_type else "")
            out.append(Change(path, "weak_type", show(a), show(b), HINTS["weak_type"]))
        if a.sharding and b.sharding and a.sharding != b.sharding:
            out.append(Change(path, "sharding", a.sharding, b.sharding, HINTS["sharding"]))
        return out
    if isinstance(a, Static) and isinstance(b, Static) and a.kind == b.kind:
        if _same(a.value, b.value):
            return []
        old, new = short(a.value), short(b.value)
        hint = b.hint or HINTS[a.kind]
        if _repr(a.value) == _repr(b.value):
            hint = HINT_IDENTITY.format(type=type(b.value).__name__)
        return [Change(path, a.kind, old, new, hint)]
    if a != b:
        return [Change(path, "structure", _show(a), _show(b), HINTS["structure"])]
    return []


def _show(entry: Any) -> str:
    if isinstance(entry, Leaf):
        return entry.show()
    if isinstance(entry, Node):
        return entry.type_name
    return short(entry.value)


def _tops(paths: list[str]) -> list[str]:
    """Drop paths whose ancestor is also listed (report a removed subtree once)."""
    chosen = set(paths)

    def has_ancestor(p: str) -> bool:
        return any(p != q and p.startswith(q) and p[len(q)] in ".[" for q in chosen)

    return [p for p in paths if not has_ancestor(p)]


CLOSEST_WINDOW = 64  # compare with at most this many of the latest compiles


def closest(earlier: Sequence[Description], new: Description) -> tuple[int, list[Change]]:
    """Index of the earlier description with the fewest changes (newest on a tie), and them.

    Only the latest ``CLOSEST_WINDOW`` are compared, and an identical one ends the
    search, so a function compiled thousands of times costs no more per compile.
    """
    best: tuple[int, list[Change]] = (-1, [])
    for i in range(len(earlier) - 1, max(-1, len(earlier) - 1 - CLOSEST_WINDOW), -1):
        changes = diff(earlier[i], new)
        if best[0] < 0 or len(changes) < len(best[1]):
            best = (i, changes)
            if not changes:
                break
    return best
