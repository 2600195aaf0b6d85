"""``f.lower(...).compile()`` that runs with the user's arguments, as ``jax.jit``'s does.

JAX's ``Lowered`` and ``Compiled`` of a variant take what JAX was handed: an instance's
dynamic children, a ``static="auto"`` call's arrays alone, and return a ``static="auto"``
program's outputs without the objects it put back. ``Lowered`` and ``Compiled`` here wrap
them: every attribute is JAX's (``as_text``, ``cost_analysis``, ``memory_analysis``,
``compiler_ir``, ...), and calling a ``Compiled`` takes the arguments a call of the
function takes (instances, static values), prepares them as a call would, and runs this
program. Arguments that select another variant (another static value, another call
shape) are a ``TypeError`` naming the function, never another program's result; arrays
of other shapes are JAX's own ``TypeError``.

``prepare(args, kwargs)`` is the owner's (``_programs`` or ``_auto``): it returns
``(variant, dynamic args, dynamic kwargs, finish)``, where ``variant`` identifies the
program the call selects and ``finish`` turns the program's output into the user's.

Imports: nothing of staticfield's. Called by ``_programs`` and ``_auto``.
"""

from __future__ import annotations

from typing import Any, Callable

Prepare = Callable[[tuple, dict], tuple[Any, tuple, dict, Callable[[Any], Any]]]


def _other_variant(name: str) -> TypeError:
    return TypeError(
        f"{name}: this program was compiled ahead of time (`.lower(...).compile()`) for "
        "other static values or another call shape than these arguments select. Call it "
        "with the arguments a call of the function takes (static ones included, as given to "
        "`.lower(...)`); for other static values lower again, or call the function itself.")


def prefixed(lowered: Any, prefix: tuple) -> Any:
    """``lowered`` for a bound method (its compiled program takes the arguments after
    ``prefix``: ``obj.method.lower(x).compile()(x)``); JAX's own ``Lowered`` (a bucket's
    or a ``deps="read"`` program, which take what JAX is handed) as it is."""
    if lowered.__class__ is not Lowered:
        return lowered
    return Lowered(lowered._lowered, lambda args, kwargs: lowered._prepare((*prefix, *args), kwargs),
                   lowered._variant, lowered._name)


class Compiled:
    """JAX's ``Compiled`` for one variant, called with the function's own arguments."""

    __slots__ = ("_compiled", "_prepare", "_variant", "_name")

    def __init__(self, compiled: Any, prepare: Prepare, variant: Any, name: str) -> None:
        self._compiled = compiled
        self._prepare = prepare
        self._variant = variant
        self._name = name

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        variant, dyn, dyn_kwargs, finish = self._prepare(args, kwargs)
        if variant is not self._variant:
            raise _other_variant(self._name)
        return finish(self._compiled(*dyn, **dyn_kwargs))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._compiled, name)

    def __repr__(self) -> str:
        return f"<staticfield Compiled of {self._name}: {self._compiled!r}>"


class Lowered:
    """JAX's ``Lowered`` for one variant; ``compile()`` gives a ``Compiled`` above."""

    __slots__ = ("_lowered", "_prepare", "_variant", "_name")

    def __init__(self, lowered: Any, prepare: Prepare, variant: Any, name: str) -> None:
        self._lowered = lowered
        self._prepare = prepare
        self._variant = variant
        self._name = name

    def compile(self, *args: Any, **kwargs: Any) -> Compiled:
        """JAX's ``Lowered.compile``; the result runs with the function's arguments."""
        return Compiled(self._lowered.compile(*args, **kwargs), self._prepare, self._variant, self._name)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._lowered, name)

    def __repr__(self) -> str:
        return f"<staticfield Lowered of {self._name}: {self._lowered!r}>"
