"""Generated ``__init__``, flatten and unflatten: one compile per class, through ``_gen``.

The source looks like the code a careful person would write by hand; ``_gen``
keeps it in ``linecache`` (so tracebacks, pdb and ``inspect.getsource`` show it)
and on each function as ``__source__``. What the functions write into an
instance follows the rules, and the table, of ``_state``.
"""

from __future__ import annotations

import dataclasses
import operator
import sys
from typing import Any, Callable

import jax

from . import _anyleaves, _state
from ._checks import LEAF_OK, check_dynamic
from ._freeze import ATOMIC, freeze
from ._gen import compile_functions
from ._keys import StaticKey
from ._spec import Spec
from ._state import FLAT_ATTR, KEY_ATTR

_INTERN = frozenset({int, str, bool, bytes, float, type(None)})


class _HasFactory:
    def __repr__(self) -> str:
        return "<factory>"


HAS_FACTORY = _HasFactory()


def _init_lines(spec: Spec, initvars: list[dataclasses.Field], ns: dict[str, Any]) -> list[str]:
    """Source lines of ``__init__`` (signature first)."""
    cls = spec.cls
    positional, kw_only, body = [], [], []
    body.append("    __sf_d = __sf_self._staticfield_dict")
    body.append("    __sf_mode = 0")
    body.append("    if __sf_self.__class__ is not __sf_cls or __sf_d:")
    body.append("        __sf_mode = __sf_prepare(__sf_self, __sf_cls)")
    params = [f for f in spec.fields if f.init] + initvars
    seen_default = None
    for f in params:
        if f.default is not dataclasses.MISSING:
            ns[f"__sf_dflt_{f.name}"] = f.default
            param = f"{f.name}=__sf_dflt_{f.name}"
        elif f.default_factory is not dataclasses.MISSING:
            ns[f"__sf_factory_{f.name}"] = f.default_factory
            param = f"{f.name}=__sf_HAS_FACTORY"
            body.append(f"    if {f.name} is __sf_HAS_FACTORY: {f.name} = __sf_factory_{f.name}()")
        else:
            param = f.name
        if f.kw_only:
            kw_only.append(param)
            continue
        if "=" in param:
            seen_default = f.name
        elif seen_default is not None:
            raise TypeError(
                f"{cls.__qualname__}: non-default field {f.name!r} follows default field "
                f"{seen_default!r}. Give {f.name!r} a default, or make it keyword-only "
                f"(sf.field(kw_only=True) or @sf.dataclass(kw_only=True))."
            )
        positional.append(param)
    for f in spec.fields:
        name = f.name
        if not f.init:
            if f.default is not dataclasses.MISSING:
                ns[f"__sf_dflt_{name}"] = f.default
                body.append(f"    {name} = __sf_dflt_{name}")
            elif f.default_factory is not dataclasses.MISSING:
                ns[f"__sf_factory_{name}"] = f.default_factory
                body.append(f"    {name} = __sf_factory_{name}()")
            else:
                continue  # must be set by __post_init__; the seal checks it
        if name in spec.converters:
            ns[f"__sf_conv_{name}"] = spec.converters[name]
            body.append(f"    {name} = __sf_conv_{name}({name})")
        if name in spec.static_set:
            body.append(f"    if {name}.__class__ not in __sf_ATOMIC:")
            body.append(f"        {name} = __sf_freeze({name}, {cls.__qualname__ + '.' + name!r}, {name!r})")
        elif spec.check and name not in spec.any_set:
            body.append(f"    if {name}.__class__ not in __sf_LEAF_OK:")
            body.append(f"        __sf_check_dynamic(__sf_cls, {name!r}, {name})")
        body.append(f"    __sf_d[{name!r}] = {name}")
    args = "".join(f"{f.name}, " for f in initvars)
    body.append("    if __sf_mode:")
    body.append(f"        return __sf_finish_other(__sf_self, __sf_mode, ({args}))")
    if spec.constant_key is not None:
        body.append(f"    __sf_d[{KEY_ATTR!r}] = __sf_KEY0")
        if all(f.init or f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
               for f in spec.fields):  # every field is a local here: fill the flatten cache now
            reads = "".join(f"{_child(spec, n, n)}, " for n in spec.dynamic_names)
            body.append(f"    __sf_d[{FLAT_ATTR!r}] = ({reads}), __sf_KEY0")
    if hasattr(cls, "__post_init__"):
        body.append(f"    __sf_build(__sf_self, __sf_self.__post_init__, ({args}))")
    else:
        uninit = [f.name for f in spec.fields if not f.init and f.default is dataclasses.MISSING
                  and f.default_factory is dataclasses.MISSING]
        if uninit:
            raise TypeError(
                f"{cls.__qualname__}: field(s) {', '.join(map(repr, uninit))} have init=False "
                "and no default, and the class has no __post_init__ to set them. Give them a "
                "default or default_factory, or set them in __post_init__."
            )
        if spec.check_inits:
            body.append("    __sf_check_init(__sf_spec, __sf_self)")
    sig = ", ".join(["__sf_self", *positional, *(["*", *kw_only] if kw_only else [])])
    return [f"def __init__({sig}):", *body]


def _make_key_lines(spec: Spec) -> list[str]:
    """``make_key(o)``: build (or reuse) the instance's static key and cache it on ``o``.

    Keys of atomic static values (exact int/str/bool/None/bytes, and floats other than
    zero and NaN, whose == is not identity-like) are interned per class, so constructing
    instances with the same statics costs one dict lookup, not a new key.
    """
    names = spec.static_names
    if not names:
        return ["def make_key(o):", f"    o._staticfield_dict[{KEY_ATTR!r}] = __sf_KEY0", "    return __sf_KEY0"]
    values = [f"v{i}" for i in range(len(names))]
    lines = ["def make_key(o):", "    __sf_d = o._staticfield_dict"]
    lines += [f"    {v} = __sf_d[{n!r}]" for v, n in zip(values, names)]
    internable = " and ".join(
        f"({v}.__class__ in __sf_INTERN and ({v}.__class__ is not __sf_float or ({v} == {v} and {v} != 0.0)))"
        for v in values
    )
    probe = "".join(f"{v}, {v}.__class__, " for v in values)
    make = f"__sf_StaticKey(__sf_cls, __sf_static_names, ({', '.join(values)},))"
    lines += [
        f"    if {internable}:",
        f"        probe = ({probe})",
        "        k = __sf_keys.get(probe)",
        "        if k is None:",
        "            if len(__sf_keys) > 4096:",
        "                __sf_keys.clear()",
        f"            k = __sf_keys[probe] = {make}",
        "    else:",
        f"        k = {make}",
        f"    __sf_d[{KEY_ATTR!r}] = k",
        "    return k",
    ]
    return lines


def _child(spec: Spec, name: str, expr: str) -> str:
    """What flatten gives JAX for field ``name`` whose value is ``expr``: the value, or for a
    leaves="any" field its node (see _anyleaves)."""
    return f"__sf_wrap({expr}, {spec.cls.__qualname__ + '.' + name!r})" if name in spec.any_set else expr


def _pytree_lines(spec: Spec) -> list[str]:
    dyn = spec.dynamic_names
    get_key = [
        "    __sf_d = o._staticfield_dict",
        "    try:",
        f"        k = __sf_d[{KEY_ATTR!r}]",
        "    except KeyError:",
        "        k = make_key(o)",
    ]
    reads = "".join(f"{_child(spec, n, f'__sf_d[{n!r}]')}, " for n in dyn)
    lines = [*_make_key_lines(spec), ""]
    if spec.any_set:  # the nodes of the flatten cache: an unflattened instance keeps its split
        keyed = "".join(f"(__sf_K_{i}, __sf_c[{i}]), " for i in range(len(dyn)))
        lines += ["def flatten_with_keys(o):", f"    __sf_c, k = o._staticfield_dict.get({FLAT_ATTR!r}) or flat(o)",
                  f"    return ({keyed}), k", ""]
    else:
        keyed = "".join(f"(__sf_K_{i}, __sf_d[{n!r}]), " for i, n in enumerate(dyn))
        lines += ["def flatten_with_keys(o):", *get_key, f"    return ({keyed}), k", ""]
    lines += ["def flat(o):", *get_key, f"    f = __sf_d[{FLAT_ATTR!r}] = ({reads}), k", "    return f", ""]
    lines += [
        "def unflatten(k, children):",
        "    o = __sf_new(__sf_cls)",
        "    __sf_d = o._staticfield_dict",
        "    __sf_d.update(k.state)",
        f"    __sf_d[{KEY_ATTR!r}] = k",
    ]
    if dyn:
        targets = "".join(f"__sf_d[{n!r}], " for n in dyn)
        lines.append(f"    {targets} = children")
    for n in sorted(spec.any_set):
        lines.append(f"    __sf_d[{n!r}] = __sf_unwrap(__sf_d[{n!r}])")
    lines.append(f"    __sf_d[{FLAT_ATTR!r}] = (children, k)")
    lines.append("    return o")
    return lines


def generate(spec: Spec, initvars: list[dataclasses.Field], make_init: bool) -> dict[str, Callable]:
    """Build the class's generated functions with one compile; return them by name."""
    ns: dict[str, Any] = {
        "__sf_cls": spec.cls,
        "__sf_spec": spec,
        "__sf_prepare": _state.prepare,
        "__sf_finish_other": _state.finish_other,
        "__sf_build": _state.build,
        "__sf_check_init": _state.check_init,
        "__sf_ATOMIC": ATOMIC,
        "__sf_LEAF_OK": LEAF_OK,
        "__sf_freeze": freeze,
        "__sf_check_dynamic": check_dynamic,
        "__sf_HAS_FACTORY": HAS_FACTORY,
        "__sf_KEY0": spec.constant_key,
        "__sf_new": object.__new__,
        "__sf_StaticKey": StaticKey,
        "__sf_static_names": spec.static_names,
        "__sf_INTERN": _INTERN,
        "__sf_keys": {},
        "__sf_len": len,
        "__sf_float": float,
        "__sf_wrap": _anyleaves.wrap,
        "__sf_unwrap": _anyleaves.unwrap,
    }
    for i, n in enumerate(spec.dynamic_names):
        ns[f"__sf_K_{i}"] = jax.tree_util.GetAttrKey(n)
    lines = _pytree_lines(spec)
    if make_init:
        lines += ["", *_init_lines(spec, initvars, ns)]
    names = ["make_key", "flatten_with_keys", "flat", "unflatten"] + (["__init__"] if make_init else [])
    # Like stdlib dataclasses, the functions' __globals__ is the class's module, so
    # annotations in __init__ resolve there (beartype, jaxtyping, get_type_hints);
    # _gen passes every helper and builtin in as a closure variable.
    module = sys.modules.get(spec.cls.__module__)
    out = compile_functions(
        lines, names, ns, what=f"{spec.cls.__module__}.{spec.cls.__qualname__}",
        module_globals=module.__dict__ if module else None,
    )
    for name, fn in out.items():
        fn.__qualname__ = f"{spec.cls.__qualname__}.{name}"
    out["flatten"] = operator.attrgetter(FLAT_ATTR)
    if make_init:
        annotations = {f.name: f.type for f in spec.fields if f.init}
        annotations.update({f.name: f.type for f in initvars})
        annotations["return"] = None
        out["__init__"].__annotations__ = annotations
        out["__init__"].__staticfield_generated__ = True
    return out
