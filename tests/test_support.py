"""The versions staticfield states are the versions CI proves: pyproject.toml's floor is the
JAX that `make test` pins, and the support page names it and every private name used."""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

import jax
import pytest

from staticfield._core import _compat

ROOT = Path(__file__).resolve().parent.parent


def floor_pins() -> dict[str, str]:
    """``.ci/floor.txt`` as {package: version}."""
    pins = {}
    for line in (ROOT / ".ci" / "floor.txt").read_text().splitlines():
        m = re.fullmatch(r"([\w-]+)==([\w.]+)", line.strip())
        if m:
            pins[m.group(1)] = m.group(2)
    return pins


def test_pyproject_states_the_floor_that_make_test_installs():
    """pyproject.toml's lowest jax and jaxlib are the versions .ci/floor.txt pins, and its
    Python floor is 3.11, the Python of CI's floor end."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pins = floor_pins()
    assert set(pins) == {"jax", "jaxlib"}
    for name, version in pins.items():
        assert f"{name}>={version}" in project["dependencies"]
    assert project["requires-python"] == ">=3.11"
    assert "-c .ci/floor.txt" in (ROOT / "Makefile").read_text()


def test_compat_and_the_support_page_name_the_tested_versions():
    """The sentence a disabled feature says, and the support page, name the floor CI proves."""
    floor = floor_pins()["jax"]
    assert _compat.TESTED.startswith(f"jax {floor} to ")
    newest = _compat.TESTED.split(" to ")[1]
    page = (ROOT / "docs" / "support.md").read_text()
    assert f"**{floor}**" in page and f"**{newest}**" in page


def test_support_page_lists_every_private_name():
    """Each private name staticfield takes from JAX appears in the support page's feature table."""
    page = (ROOT / "docs" / "support.md").read_text()
    missing = [p.path for p in _compat.PRIVATE if p.attr.split(".")[-1] not in page]
    assert not missing, f"docs/support.md does not say which feature needs {missing}"


@pytest.mark.skipif(sys.version_info[:2] != (3, 11), reason="CI's floor end runs on Python 3.11; "
                    "the newest end installs the newest JAX")
def test_floor_end_runs_the_floor():
    """On Python 3.11 (CI's floor end) the installed JAX is the pinned floor, not another."""
    assert jax.__version__ == floor_pins()["jax"]
