"""Why a program was not loaded from the store: the key part that differs from the
closest entry of the same function, in the user's words.

Run on a miss only (a program is about to be compiled), so it may read every entry's
JSON line (never a payload). An entry keeps what its call was by the user's paths
(``as_text``: ``self.depth`` → ``static 2``, ``x`` → ``f32[3]``), so the closest entry is
the one with the same static values and avals first, then the fewest differing paths,
then the most key parts in common; the first differing part in the order below is
named in the user's terms: a version, ``XLA_FLAGS``, the devices or process, a JAX
option or setting, a ``jax.jit`` option, the static values and arguments by field, as
a recompile says them (``self.depth: 2 → 4 (static)``), a source file
(``trust="source"``), or the traced program itself (its first differing equation,
with the source line).
"""

from __future__ import annotations

from typing import Any

from .._explain._diff import Change, short
from . import _digest, _entries, _sources

_PARTS = ("statics", "avals", "tree", "options", "context", "jaxpr")
_STRUCTURE = ("class", "tree", "passing")


def why(directory: str, function: str, statics: str, key: dict[str, Any],
        now: _digest.Digest | None, described: dict[str, list] | None = None) -> str:
    """One sentence, or ``""`` when the store holds no entry of ``function``."""
    found = [h for _, h, _ in _entries.entries(directory)
             if h is not None and h.get("display", {}).get("function") == function]
    if not found:
        return ""
    best = max(found, key=lambda h: _score(h, statics, key, described))
    return "not loaded from the program store: " + _difference(best, statics, key, now, described)


def _score(header: dict[str, Any], statics: str, key: dict[str, Any], described: dict[str, list] | None) -> tuple:
    then = header.get("key", {})
    same = header.get("display", {}).get("statics") == statics
    changes = field_changes(header.get("display", {}).get("described"), described)
    return (same and then.get("avals") == key.get("avals"), same, -len(changes) if changes is not None else 0,
            sum(then.get(p) == key.get(p) for p in _PARTS) + (then.get("environment") == key.get("environment")),
            header.get("created", 0))


# ----- a call by the user's paths ------------------------------------------------------------
def as_text(description: dict[str, tuple] | None) -> dict[str, list] | None:
    """A trace's description (``_explain._describe``: path → entry) as JSON-ready text, path
    → ``[kind, text]`` (a leaf: ``["leaf", "f32[3]", sharding]``), kept in the entry."""
    if not description:
        return None
    out: dict[str, list] = {}
    try:
        for path, entry in description.items():
            kind = entry[0]
            if kind == "leaf":
                out[path] = ["leaf", _aval(entry), entry[4]]
            elif kind == "class":
                out[path] = [kind, getattr(entry[1], "__qualname__", str(entry[1]))]
            elif kind == "passing":
                out[path] = [kind, ", ".join(sorted(entry[1]))]
            elif kind == "tree":
                out[path] = [kind, str(entry[1])]
            else:  # static, static_arg, context
                out[path] = [kind, short(entry[1])]
    except Exception:  # an explanation must never break a call
        return None
    return out


def _aval(entry: tuple) -> str:
    from .._core._display import short_dtype

    _, shape, dtype, weak, _ = entry
    return f"{'weak ' if weak else ''}{short_dtype(dtype)}[{','.join(map(str, shape))}]"


def field_changes(then: dict[str, list] | None, now: dict[str, list] | None) -> list[str] | None:
    """What differs from ``then`` to ``now``, one ``path: old → new (kind)`` per change, as a
    recompile says it; ``None`` when either is unknown."""
    if not isinstance(then, dict) or not isinstance(now, dict):
        return None
    changes = []
    for path, entry in now.items():
        old = then.get(path)
        if old is None:
            changes.append(Change(path, "structure", "absent", str(entry[1])))
        elif list(old) != list(entry):
            changes.append(_change(path, old, entry))
    changes += [Change(path, "structure", str(old[1]), "absent") for path, old in then.items() if path not in now]
    tops = [c.path for c in changes if c.kind == "structure"]  # a new structure explains what is below it
    return [f"{c.path}: {c.old} → {c.new} ({c.kind})" for c in changes
            if not any(c.path != t and c.path.startswith(t) and c.path[len(t)] in ".[" for t in tops)]


def _change(path: str, old: list, new: list) -> Change:
    if old[0] != new[0] or new[0] in _STRUCTURE:
        return Change(path, "structure", str(old[1]), str(new[1]))
    if new[0] != "leaf":
        return Change(path, new[0], str(old[1]), str(new[1]))
    if old[1] == new[1]:
        return Change(path, "sharding", str(old[2]), str(new[2]))
    o, n = str(old[1]).removeprefix("weak "), str(new[1]).removeprefix("weak ")
    kind = "weak_type" if o == n else "dtype" if o.split("[")[1:] == n.split("[")[1:] else "shape"
    return Change(path, kind, str(old[1]), str(new[1]))


# ----- the difference ------------------------------------------------------------------------
def _difference(header: dict[str, Any], statics: str, key: dict[str, Any], now: _digest.Digest | None,
                described: dict[str, list] | None = None) -> str:
    then = header.get("key", {})
    env_then, env_now = then.get("environment", {}), key.get("environment", {})
    for name, version in env_now.get("versions", {}).items():
        if env_then.get("versions", {}).get(name) != version:
            old = env_then.get("versions", {}).get(name, "?")
            return f"the stored program was made with {name} {_short(old)}, this process has {_short(version)}"
    if env_then.get("xla_flags") != env_now.get("xla_flags"):
        return f"XLA_FLAGS changed ({env_then.get('xla_flags')!r} → {env_now.get('xla_flags')!r})"
    for part, words in (("backend", "the backend"), ("platform_version", "the backend's version"),
                        ("host", "the machine (architecture or CPU features)"),
                        ("devices", "the devices"), ("process_index", "the process index"),
                        ("process_count", "the number of processes")):
        if env_then.get(part) != env_now.get(part):
            return f"{words} changed ({_short(env_then.get(part))} → {_short(env_now.get(part))})"
    options = _changed_names(env_then.get("config", {}), env_now.get("config", {}))
    if options:
        return f"the JAX option {options} changed"
    if then.get("context") != key.get("context"):
        settings = _changed_names(_split(then.get("context")), _split(key.get("context")))
        return f"JAX's setting {settings or 'context'} differs (x64, default device, mesh, ...)"
    if then.get("options") != key.get("options"):
        return "the jax.jit options differ (donate_argnums, shardings, ...)"
    shown = header.get("display", {}).get("statics")
    arguments = then.get("avals") != key.get("avals") or then.get("tree") != key.get("tree")
    changes = field_changes(header.get("display", {}).get("described"), described)
    if (shown != statics or arguments) and changes:
        return "the closest stored program differs in " + "; ".join(changes)
    if shown != statics:
        return f"a static value differs ({shown} → {statics})"
    if arguments:
        return "the arguments' shapes, dtypes or shardings differ from every stored program's"
    if key.get("trust") == "trace" and then.get("jaxpr") != key.get("jaxpr") and now is not None:
        return "the traced program differs: " + first_difference(header, now)
    return "its key differs"


def source_change(record: dict[str, Any]) -> str:
    """The first of a ``trust="source"`` entry's files or distributions that changed."""
    for path, digest in record.get("files", {}).items():
        if (_sources.file_hash(path) or "") != digest:
            return f"{path} changed" if digest else f"{path} exists now"
    for name, version in record.get("dists", {}).items():
        if _sources.dist_version(name) != version:
            return f"{name} {version} is now {_sources.dist_version(name)}"
    return "a notebook cell or generated source changed"


def first_difference(header: dict[str, Any], now: _digest.Digest) -> str:
    """The first equation or constant where the stored program and ``now`` differ."""
    stored = [tuple(e) for e in header.get("equations", [])]
    for i, (then, current) in enumerate(zip(stored, now.equations)):
        if then[0] != current[0]:
            return (f"equation {i + 1} ({current[1]} at {current[2]}) differs from the stored one "
                    f"({then[1]} at {then[2]})")
    if len(stored) != len(now.equations):
        i = min(len(stored), len(now.equations))
        where = now.equations[i] if i < len(now.equations) else stored[i]
        return (f"the trace has {len(now.equations)} equations, the stored program {len(stored)} "
                f"(from {where[1]} at {where[2]})")
    for i, (stored_const, const) in enumerate(zip(header.get("consts", []), now.consts)):
        if stored_const != const:
            return f"constant {i + 1} (a value the function closes over or reads) has other values"
    return "a constant, a sub-program or an output differs"


def _changed_names(then: dict[str, Any], now: dict[str, Any]) -> str:
    names = sorted(n for n in set(then) | set(now) if then.get(n) != now.get(n))
    return ", ".join(names[:3]) + (" and more" if len(names) > 3 else "")


def _split(context: Any) -> dict[str, str]:
    if not isinstance(context, str):
        return {}
    return dict(part.partition("=")[::2] for part in context.split(";"))


def _short(value: Any, limit: int = 60) -> str:
    text = str(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"
