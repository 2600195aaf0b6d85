"""The source of the user's code loaded when a program was traced, and its hashes.

``trust="source"`` finds a stored program without tracing, so the entry records the
code that could have shaped the trace: every module loaded at that moment (not only
code that ran: a constant imported from another module, a helper whose trace JAX
had cached), the function's own file, and the cells of a notebook:

- a file of a distribution installed without ``-e`` stands in by the distribution's
  name and version (JAX's own hundreds of files are one line), the standard library
  by the Python version (already in the key);
- any other file by the SHA-256 of its bytes (an editable install, the user's
  project, a script); a file that is gone is recorded as gone; a source that lives
  only in ``linecache`` (a notebook cell) by the hash of its text.

An entry applies only while each recorded file, source and distribution is as it
was (``unchanged``). What no file shows (the environment, files read at run time,
state changed at run time) is the user's promise in this trust mode.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.metadata
import linecache
import os
import sys
import sysconfig
from typing import Any, Callable

_PACKAGE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "")
_hashes: dict[str, tuple[tuple, str]] = {}  # path -> ((mtime_ns, size, inode), sha256)


def loaded_files(fn: Callable) -> set[str]:
    """The file of every module loaded now, the function's own file, and the sources
    that live in ``linecache`` only (notebook cells)."""
    files = {f for m in list(sys.modules.values()) if isinstance(f := getattr(m, "__file__", None), str)}
    code = getattr(fn, "__code__", None)
    if code is not None:
        files.add(code.co_filename)
    for name, entry in list(linecache.cache.items()):
        if len(entry) > 2 and entry[2] and not os.path.isfile(name):
            files.add(name)
    return files


@functools.lru_cache(maxsize=None)
def _library_roots() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(site-packages folders, standard-library folders), as absolute prefixes."""
    paths = sysconfig.get_paths()
    stdlib = {paths.get("stdlib"), paths.get("platstdlib")}
    site_dirs = {paths.get("purelib"), paths.get("platlib")}
    with contextlib.suppress(Exception):
        import site

        site_dirs.update(site.getsitepackages())
        site_dirs.add(site.getusersitepackages())
    norm = lambda ps: tuple(sorted({os.path.join(os.path.realpath(p), "") for p in ps if p}))  # noqa: E731
    return norm(site_dirs), norm(stdlib)


@functools.lru_cache(maxsize=None)
def _distributions() -> dict[str, list[str]]:
    """Top-level name -> the installed distributions that provide it, read from each
    ``*.dist-info``'s ``top_level.txt`` or the first parts of its ``RECORD`` (as
    ``importlib.metadata.packages_distributions`` does, without a path object per file)."""
    owners: dict[str, list[str]] = {}
    for root in _library_roots()[0]:
        try:
            names = os.listdir(root)
        except OSError:
            continue
        for entry in names:
            if not entry.endswith(".dist-info"):
                continue
            dist = entry[: -len(".dist-info")].rsplit("-", 1)[0]
            tops: set[str] = set()
            for listing in ("top_level.txt", "RECORD"):
                try:
                    with open(os.path.join(root, entry, listing), encoding="utf-8") as f:
                        lines = f.read().splitlines()
                except OSError:
                    continue
                if listing == "top_level.txt":
                    tops = {line.strip() for line in lines if line.strip()}
                else:
                    tops = {line.split(",", 1)[0].split("/", 1)[0] for line in lines if line}
                    tops = {t[:-3] if t.endswith(".py") else t for t in tops if not t.endswith(".dist-info")}
                break
            for top in tops:
                owners.setdefault(top, []).append(dist)
    return owners


@functools.lru_cache(maxsize=None)
def dist_version(name: str) -> str | None:
    """An installed distribution's version, read once per process from the ``Version:``
    line of its metadata (``importlib.metadata.version`` parses the whole header as an
    e-mail message: 2 ms a distribution, on every restart's first load)."""
    try:
        dist = importlib.metadata.distribution(name)
        for line in (dist.read_text("METADATA") or dist.read_text("PKG-INFO") or "").splitlines():
            if line.startswith("Version:"):
                return line[len("Version:"):].strip()
            if not line:  # the end of the header
                break
        return dist.version
    except Exception:
        return None


def _classify(filename: str) -> tuple[str, str, str] | None:
    """``("dist", name, version)``, ``("stdlib", "", "")``, ``("file", path, sha256)``,
    or ``None`` when the code's source cannot be checked."""
    if filename.startswith("<frozen "):
        return ("stdlib", "", "")
    if filename.startswith(_PACKAGE) and os.path.basename(filename).startswith("<generated "):  # staticfield's generated code: its version and the
        return ("stdlib", "", "")  # user's classes (in their files) decide it
    if not os.path.isfile(filename):
        lines = linecache.cache.get(filename)
        if lines is None or not lines[2]:
            # exec of a string (dataclasses' and namedtuple's generated methods): made by
            # code that is itself in the key; a real file that is gone cannot be checked
            return ("stdlib", "", "") if filename.startswith("<") else None
        return ("source", filename, hashlib.sha256("".join(lines[2]).encode()).hexdigest())
    path = os.path.realpath(filename)
    site_dirs, stdlib = _library_roots()
    for root in site_dirs:
        if path.startswith(root):
            top = path[len(root):].split(os.sep, 1)[0]
            top = top[:-3] if top.endswith(".py") else top
            dists = _distributions().get(top)
            if dists:
                version = dist_version(dists[0])
                if version is not None:
                    return ("dist", dists[0], version)
            break
    else:
        if any(path.startswith(root) for root in stdlib):
            return ("stdlib", "", "")
    return ("file", path, file_hash(path) or "")  # "": gone, and recorded as gone


def file_hash(path: str) -> str | None:
    """SHA-256 of a file's bytes, remembered while its size, mtime and inode stay."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    stamp = (st.st_mtime_ns, st.st_size, st.st_ino)
    known = _hashes.get(path)
    if known is not None and known[0] == stamp:
        return known[1]
    try:
        with open(path, "rb") as f:
            digest = hashlib.sha256(f.read()).hexdigest()
    except OSError:
        return None
    _hashes[path] = (stamp, digest)
    return digest


_SETTLED: dict[str, tuple[str, str, str]] = {}  # filename -> its distribution or the stdlib


def describe(filenames: set[str]) -> dict[str, Any] | None:
    """The entry's record of the user's code loaded now: ``{"files": {path: sha256},
    "sources": {name: sha256}, "dists": {name: version}}``; ``None`` if unstorable.
    A file of a distribution or of the standard library is classified once per process."""
    record: dict[str, dict[str, str]] = {"files": {}, "sources": {}, "dists": {}}
    for filename in filenames:
        found = _SETTLED.get(filename) or _classify(filename)
        if found is not None and found[0] in ("dist", "stdlib"):
            _SETTLED[filename] = found
        if found is None:
            return None
        kind, name, value = found
        if kind != "stdlib":
            record[{"file": "files", "source": "sources", "dist": "dists"}[kind]][name] = value
    return record


def unchanged(record: dict[str, Any]) -> bool:
    """Whether every file, source and distribution a trace ran is as it was then."""
    try:
        for path, digest in record["files"].items():
            if (file_hash(path) or "") != digest:
                return False
        for name, digest in record["sources"].items():
            lines = linecache.cache.get(name)
            if lines is None or hashlib.sha256("".join(lines[2]).encode()).hexdigest() != digest:
                return False
        return all(dist_version(name) == version for name, version in record["dists"].items())
    except (KeyError, AttributeError, TypeError):
        return False
