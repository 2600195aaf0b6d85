"""What a watch records: a ``WatchedFunction`` per jitted function (by code location)
and a ``Compile`` per trace, with the per-compile facts its explanations compare.

``_watcher`` writes these; ``_report`` renders them; nothing else changes them.
"""

from __future__ import annotations

import dataclasses
import weakref
from typing import Any

from .._explain._diff import Change
from .._explain._names import bound_to


@dataclasses.dataclass
class Compile:
    """One trace (and usually one compile) of a function: where it was called and why.

    ``via`` is ``".lower"``, ``".trace"`` or ``".eval_shape"`` for a trace made by one
    of those (ahead of time, or to inspect), ``""`` for a call; such a trace compiles
    nothing until its program is compiled (``compiled``). ``inside`` names the function
    whose trace was in progress on this thread when this one began (a primitive's rule
    that runs ``eval_shape`` of its implementation, as lineax's ``linear_solve`` does, while
    the solver calling it is traced): ``""`` for a trace of its own.
    """

    number: int
    call_site: str
    changes: list[Change]
    trace_s: float = 0.0
    lower_s: float = 0.0
    compile_s: float = 0.0
    via: str = ""
    compiled_later: bool = False
    store: str = ""  # with a program store set: why it had no program for this compile
    inside: str = ""  # the function whose trace this one began inside, if any
    first: bool = False  # the first compile of another sf wrapper of the function (other options)
    # sf functions: (their recompiles(), how many there were when this trace began), so a
    # compile this watcher saw first but staticfield counted as a recompile says why
    history: Any = dataclasses.field(default=None, repr=False, compare=False)

    def take_history(self) -> None:
        """No change of its own to name: take the one staticfield's counters recorded."""
        history, self.history = self.history, None
        if history is not None and not self.changes and not self.first:
            events = history[0]()[history[1]:]
            if events:
                self.changes = list(events[0].changes)

    @property
    def compiled(self) -> bool:
        return not self.via or self.compiled_later


@dataclasses.dataclass
class WatchedFunction:
    """A jitted function, identified by its code location, and its compiles."""

    name: str
    location: str
    compiles: list[Compile] = dataclasses.field(default_factory=list)
    eager: bool = False  # an op-by-op primitive (jnp.ones(3) outside jit)
    padding: bool = False  # a pad or slice program of buckets= (staticfield's, not the user's)
    note: str = ""  # why a recompile may show no changed argument
    failed_traces: int = 0  # traces that raised (nothing compiled)
    loads: int = 0  # programs loaded from the program store (no trace, no compile)
    _descriptions: list = dataclasses.field(default_factory=list, repr=False)
    _owners: list = dataclasses.field(default_factory=list, repr=False)  # id of the function
    _functions: Any = dataclasses.field(default_factory=weakref.WeakSet, repr=False)
    _bound: list = dataclasses.field(default_factory=list, repr=False)  # (method, class) compiled
    _flat: list = dataclasses.field(default_factory=list, repr=False)  # per compile: flat_args
    _transformed: list = dataclasses.field(default_factory=list, repr=False)  # per compile

    @property
    def count(self) -> int:
        """Compiles: traces by a call, and traces by ``.lower`` etc. that were compiled."""
        return sum(c.compiled for c in self.compiles)

    @property
    def uncompiled(self) -> int:
        """Traces by ``.lower``/``.trace``/``.eval_shape`` that compiled nothing."""
        return len(self.compiles) - self.count

    @property
    def inline(self) -> list[Compile]:
        """Traces made inside another function's trace that compiled nothing of their own."""
        return [c for c in self.compiles if c.inside and not c.compiled]

    def seconds(self, field: str) -> float:
        return sum(getattr(c, field) for c in self.compiles)

    def seen(self, fun: Any) -> bool:
        """Whether this function object (or an equal one) was compiled before."""
        try:
            return fun in self._functions
        except TypeError:
            return True  # cannot be weakly referenced: cannot tell, so do not blame it

    def remember(self, fun: Any) -> None:
        bound = bound_to(fun)  # a method of an object: which method, of which class
        if bound is not None and bound not in self._bound:
            self._bound = [*self._bound[-15:], bound]
        try:
            self._functions.add(fun)
        except TypeError:
            pass
