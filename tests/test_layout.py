"""The package's layout: subpackages import one way, and pickles made by 0.1 still load."""

from __future__ import annotations

import ast
import pathlib
import subprocess
import sys

import pytest

import staticfield

PACKAGE = pathlib.Path(staticfield.__file__).parent
DATA = pathlib.Path(__file__).parent / "data"

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
