"""``sf.no_compiles``: a block, or a function, in which this thread compiles nothing."""

from __future__ import annotations

import functools
from typing import Any, Callable, TypeVar

from . import _hook, _state

F = TypeVar("F", bound=Callable[..., Any])


class no_compiles:
    """Refuse every compile in this thread while inside: ``with sf.no_compiles(): ...``,
    ``@sf.no_compiles()`` or ``@sf.no_compiles``.

    A call that would trace and compile a program of any JAX function (``sf.jit``,
    ``jit_method``, ``jax.jit``, equinox, flax, an eager operation) raises
    ``sf.RecompileError`` before compiling, with the watch explanation (function, call
    site, what changed, else "first compile"); a refused trace of an ``sf`` function is
    neither counted nor cached. Programs loaded from the program store, ``deps="read"``
    reusing a program, and abstract evaluation (``jax.eval_shape``, ``jax.make_jaxpr``,
    ``.lower()`` without ``.compile()``) are allowed. Other threads, and code outside
    the block, are not affected; blocks nest.
    """

    def __new__(cls, fn: Any = None) -> Any:
        self = super().__new__(cls)
        if fn is None:
            return self
        if not callable(fn):
            raise TypeError(f"sf.no_compiles takes no arguments but a function to decorate, got "
                            f"{type(fn).__name__}. Use `with sf.no_compiles():` or `@sf.no_compiles`.")
        return self(fn)

    def __enter__(self) -> "no_compiles":
        _hook.acquire()
        _state.enter()
        return self

    def __exit__(self, *exc: object) -> None:
        _state.leave()
        _hook.release()

    def __call__(self, fn: F) -> F:
        @functools.wraps(fn)
        def inner(*args: Any, **kwargs: Any) -> Any:
            with no_compiles():
                return fn(*args, **kwargs)

        return inner  # type: ignore[return-value]

    def __repr__(self) -> str:
        return "sf.no_compiles()"
