"""The source files whose code ran while a program was traced, and their hashes.

``recording()`` notes the file of every Python function that starts while a trace
runs: on Python 3.12+ with ``sys.monitoring`` (each code object reports once, then
is disabled, so a trace costs little more), before that with ``sys.setprofile`` on
the tracing thread. A program depends on exactly that code, wherever it lives (the
method, a helper in another module, a library), so an entry records it:

- a file of an installed distribution stands in by the distribution's name and
  version (JAX's own hundreds of files are one line), the standard library by the
  Python version (already in the key);
- any other file by the SHA-256 of its bytes; generated code (staticfield's own, a
  notebook cell) by the hash of its source in ``linecache``.

Code compiled from a string with no source in ``linecache`` (``exec``, as
``dataclasses`` and ``namedtuple`` make their methods) is not hashed: what made it
is. A file that ran but can no longer be read makes the program unstorable
(``describe`` returns ``None``).
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
import threading
from typing import Any, Iterator

_TOOL_NAME = "staticfield program store"
_PACKAGE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "")
_lock = threading.Lock()
_local = threading.local()
UNRECORDED = "\0 not recorded"  # what ran is unknown: no file by this name, so not storable
_hashes: dict[str, tuple[tuple, str]] = {}  # path -> ((mtime_ns, size, inode), sha256)


@contextlib.contextmanager
def recording() -> Iterator[set[str]]:
    """Collect the filenames of the Python code that starts running inside the block."""
    outer = getattr(_local, "files", None)
    if outer is not None:  # a program compiled while another is traced: the outer hook sees all
        yield outer
        return
    files: set[str] = set()
    with _lock:  # one recording at a time: the hooks are process-wide
        _local.files = files
        try:
            with _monitoring(files) if sys.version_info >= (3, 12) else _profiling(files):
                yield files
        finally:
            _local.files = None


@contextlib.contextmanager
def _monitoring(files: set[str]) -> Iterator[None]:
    mon = sys.monitoring  # type: ignore[attr-defined]
    tool = next((i for i in range(6) if mon.get_tool(i) is None), None)
    if tool is None:  # every tool id taken: fall back to the profile hook
        with _profiling(files):
            yield
        return
    mon.use_tool_id(tool, _TOOL_NAME)
    disable = mon.DISABLE

    def started(code: Any, offset: int) -> Any:
        files.add(code.co_filename)
        return disable

    mon.register_callback(tool, mon.events.PY_START, started)
    mon.set_events(tool, mon.events.PY_START)
    try:
        yield
    finally:
        mon.set_events(tool, 0)
        mon.register_callback(tool, mon.events.PY_START, None)
        mon.free_tool_id(tool)
        mon.restart_events()  # the next recording sees every code object again


@contextlib.contextmanager
def _profiling(files: set[str]) -> Iterator[None]:
    if sys.getprofile() is not None:  # a profiler runs (cProfile): leave it be, store nothing
        files.add(UNRECORDED)
        yield
        return
    seen: set = set()

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event == "call":
            seen.add(frame.f_code)

    sys.setprofile(profile)
    try:
        yield
    finally:
        sys.setprofile(None)
        files.update(code.co_filename for code in seen)


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
    return importlib.metadata.packages_distributions()


@functools.lru_cache(maxsize=None)
def dist_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
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
    digest = file_hash(path)
    return None if digest is None else ("file", path, digest)


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


def describe(filenames: set[str]) -> dict[str, Any] | None:
    """The entry's record of the code a trace ran: ``{"files": {path: sha256},
    "sources": {name: sha256}, "dists": {name: version}}``; ``None`` if unstorable."""
    record: dict[str, dict[str, str]] = {"files": {}, "sources": {}, "dists": {}}
    for filename in filenames:
        found = _classify(filename)
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
            if file_hash(path) != digest:
                return False
        for name, digest in record["sources"].items():
            lines = linecache.cache.get(name)
            if lines is None or hashlib.sha256("".join(lines[2]).encode()).hexdigest() != digest:
                return False
        return all(dist_version(name) == version for name, version in record["dists"].items())
    except (KeyError, AttributeError, TypeError):
        return False
