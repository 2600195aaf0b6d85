"""How instances look: ``repr`` (arrays summarised as ``f32[2,3]``, 0-d values shown as
``f32[](1.5)``), IPython's pretty printer and treescope, with static fields marked.

Both show one field per line with ``# static`` after each static field, so a
notebook user sees at a glance which values are part of the jit cache key::

    Layer(
      w=f32[2,3],
      b=f32[3],
      act='tanh',  # static
    )

Neither IPython nor treescope is imported here: each hook receives the
printer or renderer it needs, and treescope's parts are imported only when
treescope itself calls ``__treescope_repr__``.
"""

from __future__ import annotations

import reprlib
from typing import Any

import jax
import numpy as np

from . import _compat
from ._slots import used_whole
from ._spec import Spec, spec_of
from ._registry import SPEC_ATTR, is_instance

_DTYPE_SHORT = {"float": "f", "int": "i", "uint": "u", "complex": "c", "bfloat": "bf"}

def short_dtype(dtype: Any) -> str:
    """``float32`` → ``f32``, ``bfloat16`` → ``bf16``, ``bool`` → ``bool``; an extended
    dtype (a typed PRNG key) keeps its own name, ``key<fry>``."""
    try:
        name = np.dtype(dtype).name
    except TypeError:
        return str(dtype)
    for long, short in _DTYPE_SHORT.items():
        if name.startswith(long) and name[len(long):].isdigit():
            return short + name[len(long):]
    return name


def mesh_text(mesh: Any) -> str:
    """``mesh(data=2,model=4)``, with the device ids when they are not in order
    (``mesh(i=8, devices 7..0)``): two meshes that differ only there compile apart."""
    axes = ",".join(f"{name}={size}" for name, size in mesh.shape.items())
    try:
        ids = [int(d.id) for d in np.asarray(mesh.devices).flat]
    except Exception:  # an abstract mesh: no devices
        return f"mesh({axes})"
    if ids == sorted(ids) and ids == list(range(ids[0], ids[0] + len(ids))):
        return f"mesh({axes})"
    if ids == list(range(ids[0], ids[0] - len(ids), -1)):
        return f"mesh({axes}, devices {ids[0]}..{ids[-1]})"
    shown = ",".join(map(str, ids[:8])) + (",…" if len(ids) > 8 else "")
    return f"mesh({axes}, devices {shown})"


def sharding_text(s: Any) -> str | None:
    """A sharding in the user's words: ``P(None, 'model') on mesh(data=2,model=4)``; the
    class name for one without a mesh (``SingleDeviceSharding``); None for none."""
    if s is None:
        return None
    mesh, spec = getattr(s, "mesh", None), getattr(s, "spec", None)
    if mesh is None or spec is None or getattr(mesh, "empty", False):
        return type(s).__name__
    return f"{spec} on {mesh_text(mesh)}"


def summary(leaf: Any, value: bool = False) -> str:
    """``f32[2,3]`` for an array-like leaf, ``repr`` for anything else. With ``value``, a
    concrete 0-d leaf shows its value too, ``f32[](1.5)``: scalar states such as a step
    count or a loss are worth seeing in a ``repr``."""
    if hasattr(leaf, "shape") and hasattr(leaf, "dtype"):
        try:
            text = f"{short_dtype(leaf.dtype)}[{','.join(map(str, leaf.shape))}]"
        except TypeError:
            return repr(leaf)
        if value and leaf.shape == () and not isinstance(leaf, (_compat.Tracer, jax.ShapeDtypeStruct)):
            try:
                text += f"({np.asarray(leaf).item()!r})"
            except Exception:  # a deleted buffer, an extended dtype: the summary alone
                pass
        return text
    return repr(leaf)


class _Shown:
    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return self.text


def _summarize(value: Any) -> str:
    if hasattr(value, "shape") and hasattr(value, "dtype"):
        return summary(value, value=True)
    return repr(jax.tree_util.tree_map(lambda leaf: _Shown(summary(leaf, value=True)), value))


@reprlib.recursive_repr()
def __repr__(self: Any) -> str:
    used_whole(self, "repr")
    spec = spec_of(self)
    d = self._staticfield_dict
    parts = []
    for f in spec.fields:
        if not f.repr:
            continue
        if f.name not in d:
            parts.append(f"{f.name}=<unset>")
        elif f.name in spec.static_set:
            parts.append(f"{f.name}={d[f.name]!r}")
        else:
            parts.append(f"{f.name}={_summarize(d[f.name])}")
    return f"{spec.cls.__qualname__}({', '.join(parts)})"


STATIC_COMMENT = "  # static"


def _shown_fields(obj: Any) -> tuple[Spec, list[tuple[str, bool]]]:
    spec: Spec = type(obj).__dict__[SPEC_ATTR]
    return spec, [(f.name, f.name in spec.static_set) for f in spec.fields if f.repr]


def _summarized(value: Any) -> Any:
    """``value`` with array leaves replaced by ``f32[2,3]``-style stand-ins (instances kept)."""
    if is_instance(value):
        return value
    if hasattr(value, "shape") and hasattr(value, "dtype"):
        return _Shown(summary(value, value=True))
    return jax.tree_util.tree_map(
        lambda leaf: leaf if is_instance(leaf) else _Shown(summary(leaf, value=True)), value, is_leaf=is_instance
    )


def _repr_pretty_(self: Any, p: Any, cycle: bool = False) -> None:
    """IPython pretty printer: one field per line, static fields marked ``# static``.

    A class without static fields prints like its ``repr`` when that fits. Field
    values are rendered on their own and written with ``p.break_()`` between
    lines, since IPython's ``break_`` would also break any still-open group.
    """
    spec, shown = _shown_fields(self)
    name = spec.cls.__qualname__
    if cycle:
        p.text(f"{name}(...)")
        return
    d = self._staticfield_dict
    if not any(is_static for _, is_static in shown):
        with p.group(len(name) + 1, f"{name}(", ")"):
            for i, (field, _) in enumerate(shown):
                if i:
                    p.text(",")
                    p.breakable()
                p.text(f"{field}=")
                p.pretty(_summarized(d[field]) if field in d else _Shown("<unset>"))
        return
    try:
        from IPython.lib.pretty import pretty
    except ImportError:  # a printer that speaks IPython's protocol without IPython
        pretty = repr  # type: ignore[assignment]
    with p.indent(2):
        p.text(f"{name}(")
        for field, is_static in shown:
            value = d[field] if field in d else _Shown("<unset>")
            width = max(20, p.max_width - p.indentation - len(field) - 1)
            text = pretty(value if is_static else _summarized(value), max_width=width)
            p.break_()
            p.text(f"{field}=")
            for i, line in enumerate(text.split("\n")):
                if i:
                    p.break_()
                p.text(line)
            p.text("," + (STATIC_COMMENT if is_static else ""))
    p.break_()
    p.text(")")


def __treescope_repr__(self: Any, path: str | None, subtree_renderer: Any) -> Any:
    """treescope rendering: a foldable constructor whose static fields carry ``# static``."""
    from treescope import rendering_parts as rp

    spec, shown = _shown_fields(self)
    d = self._staticfield_dict
    children = []
    for i, (field, is_static) in enumerate(shown):
        child_path = None if path is None else f"{path}.{field}"
        if i < len(shown) - 1:
            after = rp.siblings(",", rp.fold_condition(collapsed=rp.text(" ")))
        else:
            after = rp.fold_condition(expanded=rp.text(","))
        if is_static:
            after = rp.siblings(
                after, rp.fold_condition(expanded=rp.comment_color(rp.text(STATIC_COMMENT)))
            )
        value = (
            subtree_renderer(d[field], path=child_path)
            if field in d
            else rp.comment_color(rp.text("<unset>"))
        )
        children.append(
            rp.build_full_line_with_annotations(
                rp.siblings_with_annotations(f"{field}=", value), after
            )
        )
    return rp.build_foldable_tree_node_from_children(
        prefix=rp.siblings(rp.maybe_qualified_type_name(spec.cls), "("),
        children=children,
        suffix=")",
        path=path,
    )


METHODS = {"_repr_pretty_": _repr_pretty_, "__treescope_repr__": __treescope_repr__}
