"""The hit paths a function switches to once a large model reached it (DESIGN, "Large models").

``obj.method`` of a large model is bound to the engine's ``large_front`` once per instance
(``_bound``), with no Python on a hit. ``sf.jit(fn)`` and ``Cls.method(obj, ...)`` have no
binding: their C++ front flattens each instance argument on every call. So where a miss
of that front sees a large model (``_fronts._large_reached``, never on a hit), the
function's public hit path becomes ``large_call``: one Python frame that reads each large
instance argument's cached flat leaves and ``Shape`` (``_core._flatform.flat_leaves``) and
calls a front that takes them, the shapes static; a call with no large model goes on to
the front it had. ``jit_large_path`` and ``method_large_path`` prepare that switch
(``engine.go_large``) for the two forms.

Imports: ``_core`` (``compile_functions``, ``SPECS``, ``LEAVES_ATTR``, ``used``, ``hide``) and
``_hitpath``. Called by ``_hitpath_jit.public_function`` and ``_bound.make_method``.
"""

from __future__ import annotations

from typing import Any, Callable

from .._core._flatform import WARM_UPS, used
from .._core._gen import compile_functions
from .._core._registry import SPECS
from .._core._state import LEAVES_ATTR
from .._core._traceback import hide
from ._args import qualname
from ._hitpath import _self_name, as_user, hiding, plain_positional


LARGE_NAMES = ("large", "small", "used")  # more names large_call's code uses


def large_call(fn: Callable, params: list[str], large: Any, small: Any, method: bool) -> Callable[..., Any]:
    """The hit path of ``sf.jit(fn)`` (``method=False``) or ``Cls.method(obj, ...)`` once a
    large model reached it (DESIGN, "Large models"): each large instance argument (only
    ``self`` for a method) passes its cached flat leaves and its interned ``Shape``
    (``_core._flatform.flat_leaves``, read from its dict, where an instance's first
    ``WARM_UPS`` uses are counted; then ``used`` makes it) to the ``large`` front, the
    shapes first (static there); a call with no large instance goes to ``small``, the
    front it had before. One Python frame, and no Python call but that one ``used``."""
    names = params[:1] if method else params
    lines = [f"def call({', '.join(params)}):"]
    for i, p in enumerate(names):
        lines += [
            f"    k{i} = None",
            f"    c{i} = {p}",
            f"    if {p}.__class__ in SPECS:",
            f"        out = {p}._staticfield_dict",
            f"        children = out.get({LEAVES_ATTR!r})",
            "        if children is None:",  # its first uses are counted here, with no Python call
            f"            out[{LEAVES_ATTR!r}] = 1",
            "        elif children.__class__ is int:",
            f"            if children < {WARM_UPS}:",
            f"                out[{LEAVES_ATTR!r}] = children + 1",
            "            else:",
            f"                children = used({p})",
            "        if children.__class__ is tuple and children[2]:",
            f"            k{i} = children[1]",
            f"            c{i} = children[0]",
        ]
    keys = ", ".join(f"k{i}" for i in range(len(names)))
    dyn = ", ".join([*(f"c{i}" for i in range(len(names))), *params[len(names):]])
    lines += [
        f"    if {' and '.join(f'k{i} is None' for i in range(len(names)))}:",
        f"        return small({', '.join(params)})",
        f"    return large({keys}, {dyn})",
    ]
    namespace = {"SPECS": SPECS, "large": large, "small": small, "hide": hide, "used": used}
    call = compile_functions(hiding(lines), ["call"], namespace, what=f"large-model hit path of {qualname(fn)}")["call"]
    return as_user(call, fn)


def jit_large_path(engine: Any, fn: Callable, front: Any, call: Callable[..., Any], home: Any) -> None:
    """Where a large model reaches ``sf.jit(fn)``'s front (its miss tells: ``go_large``), the
    wrapper calls ``large_call`` from then on, in front of a C++ front of its own that takes
    each argument's ``Shape`` (static) and flat leaves (DESIGN, "Large models"); a function
    that never sees one keeps the front alone (no Python frame on a hit)."""
    params = plain_positional(fn, skip_self=False, reserved=LARGE_NAMES)
    if not params or len(params) > 16:
        return
    large = engine.large_front = engine.make_front(engine.large_jit_python(call), engine.large_jit_miss,
                                                   tuple(range(len(params))))
    if large is None:
        return
    path = large_call(fn, params, large, front, method=False)

    def go_large() -> None:
        public = home()
        if public is not None:
            public.__setstate__((path, (), {}, public.__dict__))

    engine.go_large = go_large


def method_large_path(engine: Any, fn: Callable, home: Any) -> None:
    """Where a large model reaches ``Cls.method``'s front, the per-method class (``home``, a
    weak reference) calls ``large_call`` from then on, in front of the engine's
    ``large_front`` (the one ``obj.method`` of a large model is bound to)."""
    params = plain_positional(fn, reserved=LARGE_NAMES)
    if engine.large_front is None or params is None:
        return
    front, names = engine.front, [_self_name(fn, LARGE_NAMES), *params]

    def go_large() -> None:
        owner = home()
        if owner is not None:
            owner.__call__ = staticmethod(large_call(fn, names, engine.large_front, front, method=True))

    engine.go_large = go_large
