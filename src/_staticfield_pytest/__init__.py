"""staticfield's pytest plugin: compile budgets for the tests of any JAX program.

Installing staticfield registers it (entry point ``pytest11``). It is a top-level module
of its own, not a submodule of ``staticfield``, because importing a submodule runs the
package's ``__init__`` and so imports JAX: every pytest process (every xdist worker) of
any environment where staticfield is installed would pay for that, JAX project or not.
Here nothing is imported at load but pytest and the standard library; ``staticfield``
(and JAX) are imported when a test uses the plugin:  ``@pytest.mark.max_compiles(n)``, ``--sf-max-compiles=N``, the fixture
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
"""

from __future__ import annotations

import contextlib
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


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    state = item.config.stash[_STATE]
    limit = _budget(item, state)
    if limit is None and not state.file:
        return (yield)  # nothing asked of this test: no watcher, no cost
    from staticfield._watch._watcher import watch

    w = watch()
    w.start()
    try:
        result = yield  # the test's own failure propagates from here, untouched
    finally:
        w.stop()
    count = _count(w.functions)
    item.user_properties.append((_COUNT, count))
    before = state.baseline.get(item.nodeid)
    if limit is not None and count > limit:
        _fail(OVER.format(what="this test", count=count, limit=limit), w)
    if before is not None and count > before and not state.update:
        _fail(GREW.format(count=count, extra=count - before, limit=before, file=state.file), w)
    return result


def _count(functions: list[WatchedFunction]) -> int:
    return sum(f.count for f in functions if not f.eager and not f.padding)


def _fail(headline: str, w: watch) -> None:
    __tracebackhide__ = True
    pytest.fail(f"{headline}\n\n{w.report()}", pytrace=False)


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

    ``count`` is how many jit compiles happened so far (single operations outside jit
    do not count), ``functions`` the watched functions (``sf.watch``'s), ``report()``
    the text that explains each. ``with sf_compiles.at_most(k):`` fails the test when
    the block compiles more than ``k`` times, ``with sf_compiles.none():`` when it
    compiles at all; an exception raised inside the block passes through untouched.
    """

    def __init__(self, w: watch) -> None:
        self._watch = w

    @property
    def count(self) -> int:
        return _count(self._watch.functions)

    @property
    def functions(self) -> list[WatchedFunction]:
        return [f for f in self._watch.functions if not f.eager and not f.padding]

    def report(self) -> str:
        return self._watch.report()

    @contextlib.contextmanager
    def at_most(self, k: int) -> Iterator[None]:
        __tracebackhide__ = True
        from staticfield._watch._watcher import watch

        block = watch()
        block.start()
        try:
            yield
        finally:
            block.stop()
        count = _count(block.functions)
        if count > k:
            _fail(OVER.format(what="this block", count=count, limit=k), block)

    def none(self) -> contextlib.AbstractContextManager[None]:
        """A block that must not compile: ``with sf_compiles.none(): step(state)``."""
        return self.at_most(0)


@pytest.fixture
def sf_compiles() -> Iterator[Compiles]:
    """The test's compiles, live: ``.count``, ``.functions``, ``.report()``, ``.none()``,
    ``.at_most(k)`` (staticfield)."""
    from staticfield._watch._watcher import watch

    w = watch()
    w.start()
    try:
        yield Compiles(w)
    finally:
        w.stop()
