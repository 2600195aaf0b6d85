"""The documentation runs: every ```python block of every page, and the strict site build.

Each page's ```python blocks run in order in one fresh module namespace, so a
page reads top to bottom like a script. Fences with another language (or none)
are shown, not run. A page that contains ``<!-- docs-test: 8-devices -->``
needs 8 devices and is run by the sharding tests instead.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import types
from pathlib import Path

import pytest

import staticfield as sf

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
PAGES = sorted(DOCS.rglob("*.md"))
EIGHT_DEVICES = "<!-- docs-test: 8-devices -->"

_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^\n`]*)$")


def python_blocks(text: str) -> list[tuple[int, str]]:
    """The ```python blocks of a Markdown page, as (first code line number, source)."""
    blocks = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, fence = m["indent"], m["fence"]
        language = m["info"].strip().split(" ")[0].lower() if m["info"].strip() else ""
        body, j = [], i + 1
        while j < len(lines) and not (
            lines[j].strip().startswith(fence) and lines[j].strip().strip(fence[0]) == ""
        ):
            body.append(lines[j][len(indent):] if lines[j].startswith(indent) else lines[j].lstrip())
            j += 1
        if language in ("python", "py"):
            blocks.append((i + 2, "\n".join(body) + "\n"))
        i = j + 1
    return blocks


def test_python_blocks_are_found():
    """The block extractor finds python fences (indented ones too) and skips other languages."""
    text = "a\n```python\nx = 1\n```\n```text\nnot code\n```\n- item\n\n    ```python\n    y = 2\n    ```\n"
    assert python_blocks(text) == [(3, "x = 1\n"), (11, "y = 2\n")]


def test_docs_have_pages():
    """docs/ has pages to test (the quick start at least)."""
    assert (DOCS / "index.md") in PAGES


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(DOCS)))
def test_page_examples_run(page: Path, monkeypatch: pytest.MonkeyPatch):
    """Every python block of the page runs, in order, in one fresh namespace."""
    text = page.read_text()
    if EIGHT_DEVICES in text:
        pytest.skip("needs 8 devices: run by the sharding tests on 8 virtual CPU devices")
    blocks = python_blocks(text)
    if not blocks:
        pytest.skip("no python blocks")
    name = "docs_" + re.sub(r"\W", "_", str(page.relative_to(DOCS).with_suffix("")))
    module = types.ModuleType(name)
    module.__file__ = str(page)
    monkeypatch.setitem(sys.modules, name, module)  # so pickling and get_type_hints find it
    for first_line, source in blocks:
        code = compile("\n" * (first_line - 1) + source, str(page), "exec")
        exec(code, module.__dict__)


def test_site_builds_strict(tmp_path: Path):
    """`mkdocs build --strict` succeeds: no broken links, missing pages or API reference errors."""
    if importlib.util.find_spec("mkdocs") is None:
        pytest.skip("mkdocs is not installed (pip install -e '.[docs]')")
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert (tmp_path / "site" / "index.html").exists()
    api = (tmp_path / "site" / "api" / "index.html").read_text()
    documented = set(re.findall(r'id="staticfield\.(\w+)"', api))
    missing = sorted(set(sf.__all__) - documented)
    assert not missing, f"the API reference lacks {missing}"
