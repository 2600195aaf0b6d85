"""The package's layout: subpackages import one way, no module imports itself through
others, no module outgrows a room, one launcher starts the tests' processes, and pickles
made by 0.1 still load."""

from __future__ import annotations

import ast
import pathlib
import subprocess
import sys

import pytest

import staticfield

PACKAGE = pathlib.Path(staticfield.__file__).parent
SRC = PACKAGE.parent
TESTS = pathlib.Path(__file__).parent
DATA = TESTS / "data"

# The most lines a module under src/ may hold: past that it holds more than one idea, and
# is split along them (the house style's "about 300 lines, each with one job").
MAX_LINES = 350
# Modules allowed past MAX_LINES, each with the reason: only a generated-code template
# (source text that must stay in one piece to read like the code it produces) may be
# here. None is today.
LONG_MODULES: dict[str, str] = {}

# Each subpackage and the subpackages it may import (the rooms, bottom to top).
ALLOWED = {
    "_core": set(),
    "_tree": {"_core"},
    "_explain": {"_core"},
    "_deps": {"_core", "_explain"},
    "_store": {"_core", "_explain"},
    "_buckets": {"_core", "_explain"},
    "_watch": {"_core", "_explain", "_store"},
    "_stance": {"_core", "_explain", "_watch"},
    "_agree": {"_core"},
    "_jit": {"_core", "_explain", "_deps", "_store", "_buckets", "_stance", "_agree"},
    "_warmup": {"_core", "_store", "_jit"},
}


def _imported_subpackages(path: pathlib.Path, own: str) -> set[str]:
    """The staticfield subpackages that the module at ``path`` (in subpackage ``own``) imports."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level:
            parts = (node.module or "").split(".")
            if node.level == 1:
                target = own if parts != [""] or own else None
            else:  # ..x.y from inside a subpackage: x is the subpackage
                target = parts[0]
            if target and target != own:
                found.add(target)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("staticfield."):
            found.add(node.module.split(".")[1])
    return found


@pytest.mark.parametrize("subpackage", sorted(ALLOWED))
def test_subpackages_import_only_the_layers_below(subpackage):
    """Dependencies run one way: _core imports nothing of staticfield, tools sit on top."""
    bad = {}
    for path in sorted((PACKAGE / subpackage).glob("*.py")):
        extra = _imported_subpackages(path, subpackage) - ALLOWED[subpackage]
        if extra:
            bad[path.name] = sorted(extra)
    assert not bad, f"{subpackage} imports layers it may not: {bad}"


def test_every_subpackage_says_what_it_owns_and_imports():
    """Each subpackage's docstring says what it owns and what it may import."""
    for name in ALLOWED:
        module = __import__(f"staticfield.{name}", fromlist=["_"])
        doc = module.__doc__ or ""
        assert len(doc.split()) > 20 and "Imports:" in doc, name


def test_no_module_outside_the_rooms():
    """Every implementation module lives in a subpackage; the root holds only entry points."""
    root = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert root == ["__init__.py", "__main__.py", "_moved.py", "pytest_plugin.py"]
    assert sorted(p.name for p in PACKAGE.iterdir() if p.is_dir() and p.name != "__pycache__") == sorted(
        [*ALLOWED, "examples"])


def test_pytest_plugin_imports_only_watch_and_nothing_at_import():
    """The pytest plugin sits on top: it imports `staticfield._watch` only, and only inside
    functions (loading it must not import the package, and so JAX)."""
    tree = ast.parse((PACKAGE.parent / "_staticfield_pytest" / "__init__.py").read_text())
    ours = {
        node.module
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("staticfield")
    }
    assert {m.split(".")[1] for m in ours} == {"_watch"}
    top = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))
           and any((a.name if isinstance(n, ast.Import) else n.module or "").startswith(("staticfield", "jax"))
                   for a in n.names)]
    assert not top  # only inside the functions that need them


def _modules(src: pathlib.Path) -> dict[str, pathlib.Path]:
    """Every module under ``src`` by its dotted name (a package by its ``__init__.py``)."""
    found = {}
    for path in sorted(src.rglob("*.py")):
        parts = list(path.relative_to(src).with_suffix("").parts)
        if "__pycache__" not in parts:
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _import_nodes(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    """Every import that can run: at module level, in classes and in functions (an import
    deferred into a function still closes a circle, it only hides it), but not under
    ``if TYPE_CHECKING:``, which never runs."""
    found, todo = [], list(tree.body)
    while todo:
        node = todo.pop()
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            todo.extend(node.orelse)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
        else:
            todo.extend(ast.iter_child_nodes(node))
    return found


def _imports(name: str, path: pathlib.Path, modules: dict[str, pathlib.Path]) -> set[str]:
    """The modules of ``modules`` that the module ``name`` imports: ``from .x import y`` is
    the module ``x.y`` where there is one, else ``x`` itself."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in _import_nodes(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name in modules)
            continue
        base = node.module or ""
        if node.level:
            up = package.split(".")[: len(package.split(".")) - node.level + 1]
            base = ".".join([*up, *([node.module] if node.module else [])])
        for alias in node.names:
            module = f"{base}.{alias.name}" if base else alias.name
            target = module if module in modules else base
            if target in modules and target != name:
                found.add(target)
    return found


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import circles of ``graph`` (module: the modules it imports): each strongly
    connected set of more than one module, sorted (Tarjan's algorithm, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            step = next(edges, None)
            if step is not None:
                if step not in index:
                    index[step] = low[step] = len(index)
                    stack.append(step)
                    on_stack.add(step)
                    work.append((step, iter(sorted(graph.get(step, ())))))
                elif step in on_stack:
                    low[node] = min(low[node], index[step])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                members = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    members.append(member)
                    if member == node:
                        break
                if len(members) > 1:
                    circles.append(sorted(members))
    return sorted(circles)


def test_no_import_circle_under_src():
    """No module under src/ imports itself through others, within a subpackage or across
    them, not even through an import deferred into a function."""
    modules = _modules(SRC)
    graph = {name: _imports(name, path, modules) for name, path in modules.items()}
    assert len(modules) > 100 and sum(map(len, graph.values())) > 300  # the graph was read
    assert not _circles(graph), f"import circles: {_circles(graph)}"


def test_the_subpackages_have_an_order():
    """The rooms' allowed imports have no circle either: each subpackage can be placed above
    every subpackage it may import."""
    graph = {name: set(allowed) for name, allowed in ALLOWED.items()}
    assert not _circles(graph) and all(name not in allowed for name, allowed in graph.items())


def test_the_circle_finder_finds_circles(tmp_path):
    """The checks above can fail: a circle through a deferred import, a package's
    ``__init__`` and ``from . import``, found; one under ``TYPE_CHECKING`` is not."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("from ._a import A\n")
    (pkg / "_a.py").write_text("from ._b import B\nA = 1\n")
    (pkg / "_b.py").write_text("def f():\n    from . import _c\nB = 2\n")
    (pkg / "_c.py").write_text("from ._a import A\n")
    (pkg / "_d.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from . import _e\n")
    (pkg / "_e.py").write_text("from pkg import _d\n")
    (pkg / "_f.py").write_text("from . import _g\n")
    (pkg / "_g.py").write_text("from .. import pkg\n")
    modules = _modules(tmp_path)
    graph = {name: _imports(name, path, modules) for name, path in modules.items()}
    assert _circles(graph) == [["pkg._a", "pkg._b", "pkg._c"]]
    assert graph["pkg"] == {"pkg._a"} and graph["pkg._g"] == {"pkg"} and graph["pkg._e"] == {"pkg._d"}
    graph["pkg"].add("pkg._f")
    assert _circles(graph) == [["pkg", "pkg._f", "pkg._g"], ["pkg._a", "pkg._b", "pkg._c"]]


def test_no_module_outgrows_a_room():
    """Every module under src/ holds at most MAX_LINES lines (LONG_MODULES names the only
    exceptions, and each must still need its exception)."""
    lengths = {str(p.relative_to(SRC)): len(p.read_text().splitlines()) for p in _modules(SRC).values()}
    long = {path: n for path, n in lengths.items() if n > MAX_LINES and path not in LONG_MODULES}
    assert not long, f"modules over {MAX_LINES} lines (split each along the ideas it holds): {long}"
    assert all(lengths.get(path, 0) > MAX_LINES for path in LONG_MODULES), "an exception no longer needed"


def test_one_launcher_starts_the_tests_processes():
    """Processes that run together (a jax.distributed job, or writers sharing a store) are
    started by tests/_launch.py alone, where their timeouts and cleanup live."""
    starters = ("subprocess.Popen", "Popen(", "killpg", "start_new_session", "free_port()")
    others = sorted(p for p in TESTS.rglob("*.py") if p.name != "_launch.py" and p.name != pathlib.Path(__file__).name)
    found = {str(p.relative_to(TESTS)): [s for s in starters if s in p.read_text()] for p in others}
    assert not {path: hits for path, hits in found.items() if hits}


_LOAD = """
import pickle, sys
import numpy as np
Model, Cfg, m, apply, step, scaled_k, fd = pickle.loads(open(sys.argv[1], "rb").read())
x = np.float32(2.0)
print(m.apply(x).tolist(), apply(x).tolist(), step(m, x).tolist(), float(scaled_k(x, k=3)))
print(m.scaled(1.0).tolist(), Model(np.zeros(2, np.float32)).scaled(1.0).tolist(), dict(fd))
print(m.cfg.table["a"], m.cfg.grid.tolist(), m == pickle.loads(pickle.dumps(m)), Cfg().n)
print(type(Model).__name__, Model.apply.compile_count, scaled_k.compile_count)
"""


@pytest.mark.skipif(
    sys.version_info[:2] != (3, 11),
    reason="the file holds functions cloudpickled by value, as Python 3.11 bytecode, which "
    "only Python 3.11 can load (CI loads it at the floor end, on 3.11)",
)
def test_pickles_made_by_0_1_load_and_run():
    """Instances, FrozenDict, classes with jit methods (sent by value) and sf.jit functions
    pickled by staticfield 0.1's flat modules load and run (tests/data/make_pickles_0_1.py)."""
    pytest.importorskip("cloudpickle")
    proc = subprocess.run([sys.executable, "-c", _LOAD, str(DATA / "pickles_0_1.bin")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        "[4.0, 4.0] [4.0, 4.0] [5.0, 5.0] 6.0",
        "[2.0, 2.0] [1.0, 1.0] {'k': 1}",
        "(1, 2) [0, 1, 2] True 2",
        "type 1 1",
    ]
