"""staticfield's pytest plugin: compile budgets for the tests of any JAX program.

Installing staticfield registers it (entry point ``pytest11``). It is a top-level module
of its own, not a submodule of ``staticfield``, because importing a submodule runs the
package's ``__init__`` and so imports JAX: every pytest process (every xdist worker) of
any environment where staticfield is installed would pay for that, JAX project or not.
Here nothing is imported at load but pytest and the standard library; ``staticfield``
(and JAX) are imported when a test uses the plugin: ``@pytest.mark.max_compiles(n)``,
``--sf-max-compiles=N``, the fixture
``sf_compiles``, or ``--sf-baseline=FILE`` / ``--sf-baseline-update``. A test over its
budget fails with ``sf.watch``'s report of its compiles (each recompile explained, at
the test's own line); a test that fails for its own reasons is reported as itself.

Only jit compiles count: a jitted function of the user's, equinox's, flax's or
staticfield's, ``jax.pmap`` included; single operations run outside jit (eager
op-by-op) do not, nor do the pad and slice programs of ``buckets=``. Compiles are per process, as JAX's caches are: a function that an
earlier test compiled is a cache hit here. Under pytest-xdist each worker counts its
own tests. Imports ``staticfield._watch`` only (it sits on top of the package), and only
inside the functions that need it. ``staticfield.pytest_plugin`` is this module under
the name pytest's ``-p`` takes.

The rule for fixtures: a test's count is the compiles made while the test function
runs (pytest's call phase). Compiles in fixtures, at setup or teardown, are warm-up and
never count, whatever the order the fixtures are set up in. One watcher per test runs
from its setup to its teardown, so explanations (of the test, and of a failing
``sf_compiles.none()`` block) compare with every compile the test made, fixtures'
included.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
from typing import TYPE_CHECKING, Iterator

import pytest

if TYPE_CHECKING:
    from staticfield._watch._watcher import WatchedFunction, watch

MARKER = (
    "max_compiles(n): fail the test if more than n jit compiles happen while it runs "
    "(staticfield); the failure shows why each one happened"
)
OVER = "{what} compiled {count} time(s), over its budget of {limit}"
GREW = (
    "this test compiled {count} time(s), {extra} more than the {limit} in --sf-baseline {file}; "
    "if that is expected, run with --sf-baseline-update and commit the file"
)
BAD_MARKER = "@pytest.mark.max_compiles(n) takes one int n >= 0, not {args!r}"
BAD_BASELINE = "--sf-baseline {file} is not a staticfield baseline: {error}"
_COUNT = "staticfield compiles"  # the user_properties key a test's count travels under
_STATE = pytest.StashKey["_State"]()
_WATCH = pytest.StashKey["_Watched"]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("staticfield", "compile budgets (staticfield)")
    group.addoption("--sf-max-compiles", type=int, metavar="N", default=None,
                    help="fail every test without a max_compiles marker that compiles "
                    "more than N times")
    group.addoption("--sf-baseline", metavar="FILE", default=None,
                    help="fail the tests that compile more often than FILE records")
    group.addoption("--sf-baseline-update", action="store_true", default=False,
                    help="write each test's compile count to the --sf-baseline FILE")


class _State:
    """What the options asked for, and the counts seen (the baseline's new content)."""

    def __init__(self, config: pytest.Config) -> None:
        self.max_compiles: int | None = config.getoption("--sf-max-compiles")
        self.file: str | None = config.getoption("--sf-baseline")
        self.update: bool = config.getoption("--sf-baseline-update")
        if self.update and not self.file:
            raise pytest.UsageError("--sf-baseline-update needs --sf-baseline=FILE")
        self.baseline = _read(self.file) if self.file else {}
        self.seen: dict[str, int] = {}


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", MARKER)
    state = config.stash[_STATE] = _State(config)
    if state.update:
        config.pluginmanager.register(_Baseline(state), "staticfield-baseline")


def _read(file: str) -> dict[str, int]:
    if not os.path.exists(file):
        return {}
    try:
        with open(file) as f:
            data = json.load(f)
        counts = data["compiles"]
        if not all(isinstance(v, int) for v in counts.values()):
            raise ValueError("every count must be an int")
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise pytest.UsageError(BAD_BASELINE.format(file=file, error=e)) from None
    return dict(counts)


def _budget(item: pytest.Item, state: _State) -> int | None:
    marker = item.get_closest_marker("max_compiles")
    if marker is None:
        return state.max_compiles
    args = (*marker.args, *marker.kwargs.values())
    if len(args) != 1 or not isinstance(args[0], int) or isinstance(args[0], bool) or args[0] < 0:
        pytest.fail(BAD_MARKER.format(args=args), pytrace=False)
    return args[0]


class _Watched:
    """The watcher of one test, from its setup to its teardown, and where its call began."""

    def __init__(self) -> None:
        from staticfield._watch._watcher import watch

        self.watch = watch()
        self.call: dict[int, int] | None = None  # compiles per function when the call began

    def mark(self) -> dict[int, int]:
        return {id(f): len(f.compiles) for f in self.watch.functions}

    def since(self, mark: dict[int, int] | None) -> list[WatchedFunction]:
        """The functions with only the compiles made after ``mark`` (none before the call)."""
        if mark is None:
            return []
        out = []
        for f in self.watch.functions:
            new = f.compiles[mark.get(id(f), 0):]
            if new or (f.failed_traces and id(f) not in mark):
                out.append(dataclasses.replace(f, compiles=list(new)))
        return out


def _uses_plugin(item: pytest.Item, state: _State) -> bool:
    return (item.get_closest_marker("max_compiles") is not None  # checked at the call
            or state.max_compiles is not None or bool(state.file)
            or "sf_compiles" in getattr(item, "fixturenames", ()))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    state = item.config.stash[_STATE]
    if _uses_plugin(item, state):  # else nothing asked of this test: no watcher, no cost
        watched = item.stash[_WATCH] = _Watched()
        watched.watch.start()
    return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Iterator[None]:
    try:
        return (yield)
    finally:
        watched = item.stash.get(_WATCH, None)
        if watched is not None:
            watched.watch.stop()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    state = item.config.stash[_STATE]
    limit = _budget(item, state)
    watched = item.stash.get(_WATCH, None)
    if watched is None:
        return (yield)
    mark = watched.call = watched.mark()
    result = yield  # the test's own failure propagates from here, untouched
    functions = watched.since(mark)
    count = _count(functions)
    if limit is None and not state.file:
        return result  # the fixture alone: its blocks keep their own budgets
    item.user_properties.append((_COUNT, count))
    before = state.baseline.get(item.nodeid)
    if limit is not None and count > limit:
        _fail(OVER.format(what="this test", count=count, limit=limit), functions, watched.watch)
    if before is not None and count > before and not state.update:
        _fail(GREW.format(count=count, extra=count - before, limit=before, file=state.file),
              functions, watched.watch)
    return result


def _count(functions: list[WatchedFunction]) -> int:
    return sum(f.count for f in functions if not f.eager and not f.padding)


def _fail(headline: str, functions: list[WatchedFunction], w: watch) -> None:
    __tracebackhide__ = True
    from staticfield._watch._report import render

    pytest.fail(f"{headline}\n\n{render(functions, w.notices)}", pytrace=False)


class _Baseline:
    """Registered with --sf-baseline-update only: collects each test's count (from
    pytest-xdist's workers too, on the controller) and writes the file at the end."""

    def __init__(self, state: _State) -> None:
        self.state = state

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when == "call":
            for key, value in report.user_properties:
                if key == _COUNT and isinstance(value, int):
                    self.state.seen[report.nodeid] = value

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if hasattr(session.config, "workerinput"):
            return  # an xdist worker: the controller writes the file
        counts = {**self.state.baseline, **self.state.seen}
        with open(self.state.file, "w") as f:  # type: ignore[arg-type]
            json.dump({"compiles": counts}, f, indent=2, sort_keys=True)
            f.write("\n")


class Compiles:
    """The fixture ``sf_compiles``: the compiles of the running test, watched live.

    ``count`` is how many jit compiles the test function made so far (single operations
    outside jit do not count, nor do fixtures' compiles: see the module docstring),
    ``functions`` the watched functions (``sf.watch``'s), ``report()`` the text that
    explains each. ``with sf_compiles.at_most(k):`` fails the test when the block
    compiles more than ``k`` times, ``with sf_compiles.none():`` when it compiles at all;
    an exception raised inside the block passes through untouched.
    """

    def __init__(self, watched: _Watched) -> None:
        self._watched = watched

    @property
    def count(self) -> int:
        return _count(self._watched.since(self._watched.call))

    @property
    def functions(self) -> list[WatchedFunction]:
        return [f for f in self._watched.since(self._watched.call) if not f.eager and not f.padding]

    def report(self) -> str:
        from staticfield._watch._report import render

        return render(self._watched.since(self._watched.call), self._watched.watch.notices)

    @contextlib.contextmanager
    def at_most(self, k: int) -> Iterator[None]:
        __tracebackhide__ = True
        mark = self._watched.mark()
        yield
        functions = self._watched.since(mark)
        count = _count(functions)
        if count > k:
            _fail(OVER.format(what="this block", count=count, limit=k), functions, self._watched.watch)

    def none(self) -> contextlib.AbstractContextManager[None]:
        """A block that must not compile: ``with sf_compiles.none(): step(state)``."""
        return self.at_most(0)


@pytest.fixture
def sf_compiles(request: pytest.FixtureRequest) -> Compiles:
    """The test's compiles, live: ``.count``, ``.functions``, ``.report()``, ``.none()``,
    ``.at_most(k)`` (staticfield)."""
    watched = request.node.stash.get(_WATCH, None)
    if watched is None:  # requested dynamically (request.getfixturevalue): watch from now
        watched = request.node.stash[_WATCH] = _Watched()
        watched.watch.start()
        watched.call = watched.mark()
    return Compiles(watched)
