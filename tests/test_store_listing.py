"""``python -m staticfield store PATH``: one line per program of at most 100 columns, with
the bucket of a bucketed program and how each can be found (by its trace, or both by
trace and by source); ``-v`` for the rest."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import staticfield as sf
from staticfield import _store
from staticfield.__main__ import main


@pytest.fixture
def store(tmp_path):
    saved = dict(_store._state)
    sf.set_program_store(tmp_path / "store", trust="source")
    yield str(tmp_path / "store")
    _store._state.update(saved)


def _listed(path, capsys, *flags):
    assert main(["store", path, *flags]) == 0
    return capsys.readouterr().out.splitlines()


def test_bucket_programs_list_one_line_each_with_their_bucket(store, capsys):
    """Eleven bucket programs are eleven lines (they were 156), each naming its bucket."""
    @sf.jit(buckets={"x": 0}, warn_compiles=None)
    def total(x, w):
        return (x * w).sum(axis=1)

    w = jnp.ones(3)
    for rows in (1, 2, 3, 5, 9, 17, 33, 65, 129, 257, 513):
        total(jnp.ones((rows, 3)), w)
    lines = _listed(store, capsys)
    programs = [line for line in lines if " bucket " in line]
    assert len(lines) == 13 and len(programs) == 11, lines
    assert all(len(line) <= 100 for line in lines)
    assert sorted(int(line.split(" bucket ")[1].split()[0]) for line in programs) == [
        1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]


def test_each_program_says_how_it_is_found(store, capsys):
    """A program written with trust="source" is found by its trace and by its source
    ("both"); one whose closure holds a value with no identity across processes (an
    object hashed by identity) only by its trace."""
    @sf.jit
    def plain(x):
        return x + 1

    class Scale:
        factor = 2

    unwritable = Scale()  # hashed by identity: no identity across processes

    @sf.jit
    def closes_over(x):
        return x * unwritable.factor

    plain(jnp.ones(2))
    with pytest.warns(sf.StaticFieldWarning, match="cannot find its programs without tracing"):
        closes_over(jnp.ones(2))
    found = {line.split()[0].rpartition(".")[2]: line.split()[3] for line in _listed(store, capsys)[:2]}
    assert found == {"plain": "both", "closes_over": "trace"}


def test_verbose_adds_every_aval_and_sharding_under_its_program(store, capsys):
    """-v: under each program line, each aval with its sharding, and the devices."""
    @sf.jit
    def pair(a, b):
        return a @ b

    pair(jnp.ones((2, 3)), np.ones((3, 4), np.float32))
    lines = _listed(store, capsys, "-v")
    assert lines[0].split()[0].endswith("<locals>.pair") and lines[0].split()[1:3] == ["(none)", "f32[2,3],"]
    assert lines[1].startswith("    avals: float32[2,3] SingleDeviceSharding")
    assert lines[2].startswith("    avals: numpy float32[3,4]")
    assert lines[3].startswith(f"    devices 0 of process 0 of 1; jax {jax.__version__}")
