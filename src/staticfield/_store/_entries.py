"""The store's directory and its entry files: format, atomic writes, listing, clearing.

One entry is one file, ``<digest>.sfprog``, written whole to a temporary name in
the same directory and moved into place with ``os.replace``, so a reader (another
process too) sees an old entry or a new one, never half of one. Its layout:

    staticfield program store 1\\n
    <one line of JSON: key, sources, display, payload size and SHA-256>\\n
    <payload: the serialized program and its argument and result trees>

The JSON line is everything needed to decide whether an entry applies, so reading
a key never unpickles anything; the payload is unpickled only for an entry whose
key matched and whose bytes are the ones its JSON names. A store holds executable
programs and is trusted like the code that uses it: a directory other users may
write to is refused.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import time
import uuid
from typing import Any, Iterator

MAGIC = b"staticfield program store 1\n"
SUFFIX = ".sfprog"
LINK = ".sfsrc"  # trust="source": the key found without tracing -> the program's entry
_MAX_HEADER = 16 << 20


class BadEntry(Exception):
    """An entry that cannot be used: corrupt, truncated, or not one of ours."""


def check_directory(path: str | os.PathLike, who: str = "sf.set_program_store") -> str:
    """``path``, made with mode 0700 if missing; refused (``PermissionError``,
    ``NotADirectoryError``) before anything in it is read when it is not a directory
    only this user may write to."""
    path = os.path.abspath(os.path.expanduser(os.fspath(path)))
    if not os.path.lexists(path):
        try:
            os.makedirs(path, mode=0o700)
            os.chmod(path, 0o700)  # whatever the umask
        except FileExistsError:
            pass
        except OSError as exc:
            raise OSError(exc.errno, f"{who}: cannot create the program store directory {path} "
                          f"({exc.strerror}). Choose a path you can create.") from None
    if not os.path.isdir(path):
        raise NotADirectoryError(f"{who}: {path} is not a directory. Choose a directory (or a "
                                 "path to create) for the program store.")
    st = os.stat(path)
    problem = unsafe(st)
    if problem:
        raise PermissionError(
            f"{who}: the program store directory {path} is {problem}, and a program store "
            "holds programs this process runs. Use a directory of your own that only you can "
            f"write to (chmod go-w {path}), or another path."
        )
    if not os.access(path, os.W_OK | os.X_OK):
        raise PermissionError(f"{who}: the program store directory {path} is not writable. "
                              "Choose a directory you can write to.")
    return path


def unsafe(st: os.stat_result) -> str:
    """Why a store file or directory must not be trusted (``""``: it may)."""
    if hasattr(os, "geteuid") and st.st_uid != os.geteuid():
        return "owned by another user"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return "writable by other users" if st.st_mode & stat.S_IWOTH else "writable by its group"
    return ""


def open_entry(path: str) -> Any:
    """``path`` opened for reading, or ``BadEntry`` when it is not safe to trust (another
    user's, or writable by others); ``FileNotFoundError`` when it is missing."""
    f = open(path, "rb")
    problem = unsafe(os.fstat(f.fileno()))
    if problem:
        f.close()
        raise BadEntry(f"{problem}, so it is not trusted")
    return f


def entry_path(directory: str, digest: str, suffix: str = SUFFIX) -> str:
    return os.path.join(directory, digest + suffix)


def key_digest(key: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()


def write(path: str, header: dict[str, Any], payload: bytes) -> None:
    """Write an entry atomically: a temporary file in the same folder, then ``os.replace``."""
    header = dict(header, payload_size=len(payload), payload_sha256=hashlib.sha256(payload).hexdigest(),
                  created=time.time())
    line = json.dumps(header, sort_keys=True).encode() + b"\n"
    folder, name = os.path.split(path)
    tmp = os.path.join(folder, f".{name}.{os.getpid()}.{uuid.uuid4().hex}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.fchmod(fd, 0o600)  # whatever the umask
        with os.fdopen(fd, "wb") as f:
            f.write(MAGIC)
            f.write(line)
            f.write(payload)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def read_header(f: Any) -> dict[str, Any]:
    """The JSON line of an open entry (positioned at its start); ``BadEntry`` if it is not one."""
    if f.read(len(MAGIC)) != MAGIC:
        raise BadEntry("not a staticfield program store entry")
    line = f.readline(_MAX_HEADER)
    if not line.endswith(b"\n"):
        raise BadEntry("truncated")
    try:
        header = json.loads(line)
    except ValueError:
        raise BadEntry("corrupt") from None
    if not isinstance(header, dict):
        raise BadEntry("corrupt")
    return header


def read_payload(f: Any, header: dict[str, Any]) -> bytes:
    """The payload after the header, checked against the size and hash the header names."""
    payload = f.read()
    if len(payload) != header.get("payload_size"):
        raise BadEntry("truncated")
    if hashlib.sha256(payload).hexdigest() != header.get("payload_sha256"):
        raise BadEntry("corrupt")
    return payload


def entries(directory: str) -> Iterator[tuple[str, dict[str, Any] | None, int]]:
    """Each entry's path, header (``None`` if unreadable) and size, oldest first."""
    try:
        names = sorted(n for n in os.listdir(directory) if n.endswith(SUFFIX) and not n.startswith("."))
    except FileNotFoundError:
        return
    found = []
    for name in names:
        path = os.path.join(directory, name)
        size = 0
        try:
            size = os.path.getsize(path)
            with open(path, "rb") as f:
                header: dict[str, Any] | None = read_header(f)
        except (OSError, BadEntry):
            header = None
        found.append((path, header, size))
    found.sort(key=lambda e: (e[1] or {}).get("created", 0))
    yield from found


def headers(directory: str, suffix: str, part: str) -> Iterator[dict[str, Any]]:
    """The ``part`` of the JSON line of each trusted, readable file of ``directory`` ending
    in ``suffix`` (records, refusals, ``trust="source"`` keys), by file name; others are
    left out."""
    try:
        names = sorted(n for n in os.listdir(directory) if n.endswith(suffix) and not n.startswith("."))
    except OSError:
        return
    for name in names:
        try:
            with open_entry(os.path.join(directory, name)) as f:
                found = read_header(f)[part]
        except (OSError, BadEntry, KeyError):
            continue
        yield found


RECORD = ".sfrec"  # what sf.warmup needs to make a program again (``_records``)
REFUSED = ".sfref"  # a function whose programs the store refused, and why (``_saying``)


def clear(directory: str, records: bool = True) -> int:
    """Remove every entry, every refusal (a new JAX may serve them) and leftover temporary
    files, and the records unless ``records=False``; the number of programs removed."""
    removed = 0
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return 0
    for name in names:
        if name.endswith((SUFFIX, LINK, REFUSED)) or (records and name.endswith(RECORD)) or (
                name.startswith(".") and name.endswith(".tmp")):
            try:
                os.unlink(os.path.join(directory, name))
                removed += name.endswith(SUFFIX) and not name.startswith(".")
            except OSError:
                pass
    return removed
