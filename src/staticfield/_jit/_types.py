"""What ``sf.jit`` and ``sf.jit_method`` return, as type checkers should see it.

The runtime objects (a generated function, a descriptor) satisfy these protocols;
they exist so that pyright and mypy check calls against the wrapped signature and
know the counters.
"""

from __future__ import annotations

from typing import Any, Protocol, TypeVar, overload

from typing_extensions import ParamSpec

from .._explain._diff import Recompile

P = ParamSpec("P")
R = TypeVar("R", covariant=True)
S = TypeVar("S", contravariant=True)


class Jitted(Protocol[P, R]):
    """A jitted callable with the wrapped signature, and its compile tracking."""

    compile_count: int
    load_count: int
    recompiles: list[Recompile]
    max_compiles: int | None
    warn_compiles: int | None

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R: ...

    def cache_size(self) -> int: ...

    def lower(self, *args: Any, **kwargs: Any) -> Any: ...

    def trace(self, *args: Any, **kwargs: Any) -> Any: ...

    def eval_shape(self, *args: Any, **kwargs: Any) -> Any: ...

    def clear_cache(self) -> None: ...

    def precompile(self, *args: Any, **kwargs: Any) -> None: ...


class JitMethodDescriptor(Protocol[S, P, R]):
    """``Cls.method`` of an ``@sf.jit_method``; ``obj.method`` is a ``Jitted``."""

    compile_count: int
    load_count: int
    recompiles: list[Recompile]
    max_compiles: int | None
    warn_compiles: int | None

    def __call__(self, obj: S, /, *args: P.args, **kwargs: P.kwargs) -> R: ...

    def cache_size(self) -> int: ...

    def lower(self, *args: Any, **kwargs: Any) -> Any: ...

    def trace(self, *args: Any, **kwargs: Any) -> Any: ...

    def eval_shape(self, *args: Any, **kwargs: Any) -> Any: ...

    def clear_cache(self) -> None: ...

    def precompile(self, *args: Any, **kwargs: Any) -> None: ...

    @overload
    def __get__(self, obj: None, owner: type | None = None) -> JitMethodDescriptor[S, P, R]: ...

    @overload
    def __get__(self, obj: S, owner: type | None = None) -> Jitted[P, R]: ...
