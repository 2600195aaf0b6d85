"""The documentation runs: every ```python block of every page, and the strict site build.

Each page's ```python blocks run in order in one fresh module namespace, so a
page reads top to bottom like a script. Fences with another language (or none)
are shown, not run: ```py is highlighted as Python but never run, for code of
a library that the tests do not install (chex, in the migration guides). A page that contains ``<!-- docs-test: 8-devices -->``
needs 8 devices and is run by the sharding tests instead.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import types
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

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
        if language == "python":
            blocks.append((i + 2, "\n".join(body) + "\n"))
        i = j + 1
    return blocks


def test_python_blocks_are_found():
    """The block extractor finds python fences (indented ones too) and skips others, ```py included."""
    text = "a\n```python\nx = 1\n```\n```text\nnot code\n```\n- item\n\n    ```python\n    y = 2\n    ```\n"
    assert python_blocks(text) == [(3, "x = 1\n"), (11, "y = 2\n")]
    assert python_blocks("```py\nimport chex\n```\n") == []


def test_migration_guides_cover_each_peer():
    """One migration guide per peer library, each with code that runs and a section on deliberate changes."""
    for name in ("flax-struct", "equinox", "register-dataclass", "jax-dataclasses", "chex"):
        page = DOCS / "migration" / f"{name}.md"
        assert page in PAGES, name
        text = page.read_text()
        assert python_blocks(text), f"{name}.md has no python block to run"
        assert "## What changes on purpose, and why" in text, name
        assert re.search(r"^\| .* \| .* \|$", text, re.M), f"{name}.md has no side-by-side table"


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


class _Refs(HTMLParser):
    """Collects the href and src attributes of an HTML page."""

    def __init__(self) -> None:
        super().__init__()
        self.refs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.refs += [v for k, v in attrs if k in ("href", "src") and v]


def local_refs_missing(site: Path) -> list[tuple[str, str]]:
    """(page, reference) for every relative href/src of the site's pages that names no file.

    A browser opening the site from disk resolves each link against the page's own
    folder and shows a file, or a directory listing where a link names a folder.
    The 404 page is left out: it is only ever served, with links from the site root.
    """
    missing = []
    for page in sorted(site.rglob("*.html")):
        if page.name == "404.html":
            continue
        parser = _Refs()
        parser.feed(page.read_text(encoding="utf-8"))
        for ref in parser.refs:
            url = urlsplit(ref)
            if url.scheme or url.netloc or not url.path:
                continue  # another site, or an anchor on this page
            if not (page.parent / unquote(url.path)).is_file():
                missing.append((str(page.relative_to(site)), ref))
    return missing


def test_local_refs_missing_sees_folder_links(tmp_path: Path):
    """The link check flags a link to a folder (a directory listing from disk) and passes a file."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b.html").write_text("")
    (tmp_path / "index.html").write_text('<a href="a/">A</a> <a href="b.html#x">B</a> <a href="#y">Y</a>')
    assert local_refs_missing(tmp_path) == [("index.html", "a/")]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The site built by `mkdocs build --strict`, and everything the build printed."""
    if importlib.util.find_spec("mkdocs") is None:
        pytest.skip("mkdocs is not installed (pip install -e '.[docs]')")
    site_dir = tmp_path_factory.mktemp("docs") / "site"
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site_dir)],
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},  # as `make docs` sets it: see mkdocs.yml
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return site_dir, result.stdout + result.stderr


def test_site_builds_strict_and_quietly(site: tuple[Path, str]):
    """`mkdocs build --strict` succeeds and prints nothing but its INFO lines about the build."""
    _, output = site
    noise = [
        line
        for line in output.splitlines()
        if line.strip() and not re.match(r"INFO +- +(Cleaning site|Building documentation|Documentation built)", line)
    ]
    assert noise == []


def test_api_reference_documents_everything(site: tuple[Path, str]):
    """The API reference has an entry for every name in staticfield.__all__."""
    api = (site[0] / "api.html").read_text(encoding="utf-8")
    documented = set(re.findall(r'id="staticfield\.(\w+)"', api))
    missing = sorted(set(sf.__all__) - documented)
    assert not missing, f"the API reference lacks {missing}"


def test_site_works_opened_from_disk(site: tuple[Path, str]):
    """Every page's relative links name real files, and search needs no server and no network."""
    site_dir, _ = site
    assert (site_dir / "index.html").exists()
    assert (site_dir / "examples" / "scan_params.html").exists()
    assert local_refs_missing(site_dir) == []
    index = (site_dir / "index.html").read_text(encoding="utf-8")
    assert "unpkg.com" not in index and "fonts.googleapis.com" not in index
    assert (site_dir / "search" / "search_index.js").read_text(encoding="utf-8").startswith("var __index")
