"""Shared fixtures: a ``jax.jit`` wrapper that counts traces with its own counter."""

from __future__ import annotations

import os
from typing import Any, Callable

import jax
import pytest
from hypothesis import settings

# HYPOTHESIS_PROFILE=ci (.ci/run sets it): every property test draws the same examples on
# every run, so that a CI result depends on the commit alone. A developer's `make test`
# draws new examples each run, and keeps the failing ones in .hypothesis/.
settings.register_profile("ci", derandomize=True, database=None, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


class Traced:
    """``jax.jit(fn, **kw)`` plus ``.traces``: how many times JAX traced ``fn``."""

    def __init__(self, fn: Callable[..., Any], **jit_kwargs: Any) -> None:
        self.traces = 0

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.traces += 1
            return fn(*args, **kwargs)

        self.jitted = jax.jit(counted, **jit_kwargs)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.jitted(*args, **kwargs)


@pytest.fixture
def counted_jit() -> Callable[..., Traced]:
    """Factory: ``counted_jit(fn, **jit_kwargs)`` → a jitted ``fn`` that counts its traces."""
    return Traced


@pytest.fixture(scope="module")
def check_deps():
    """deps="read" in its checking mode (STATICFIELD_CHECK_DEPS=1) for a whole test module:
    every program shared with a new key is traced again for that key and compared."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("STATICFIELD_CHECK_DEPS", "1")
        yield


@pytest.fixture(scope="module")
def check_buckets():
    """Shape buckets in their checking mode (STATICFIELD_CHECK_BUCKETS=1) for a whole test
    module: every call that traced is compared with the unpadded call, outputs and gradients."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("STATICFIELD_CHECK_BUCKETS", "1")
        yield


@pytest.fixture
def no_check_buckets(monkeypatch):
    """Checking mode off for one test that counts the user's function's traces itself (the
    checking mode traces it again for the reference call, on purpose)."""
    monkeypatch.delenv("STATICFIELD_CHECK_BUCKETS", raising=False)


@pytest.fixture
def no_check_deps(monkeypatch):
    """Checking mode off for one test that counts the user's function's traces itself (the
    checking mode traces it again for every shared key, on purpose)."""
    monkeypatch.delenv("STATICFIELD_CHECK_DEPS", raising=False)
