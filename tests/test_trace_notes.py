"""Errors raised while tracing name the dynamic fields that held Python bools or ints
(DESIGN.md, "Any exception raised while tracing ... gets a note"): the field is named where
the failure shows, whoever raised it (JAX, a library's own check, the user's code)."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import pytest

import staticfield as sf


def _notes(info: pytest.ExceptionInfo) -> str:
    return "\n".join(getattr(info.value, "__notes__", []))


class Solver(sf.Struct):
    rtol: float
    use_inverse: bool

    @sf.jit_method
    def solve(self, x):
        if self.use_inverse:  # a traced bool: TracerBoolConversionError
            return 1 / x
        return x


def test_a_bool_in_a_dynamic_field_is_named_on_a_tracer_bool_error():
    """A user subclass with `use_inverse: bool` unmarked: the TracerBoolConversionError says
    self.use_inverse is a Python bool in a dynamic field of Solver and how to mark it."""
    with pytest.raises(jax.errors.TracerBoolConversionError) as info:
        Solver(1e-3, True).solve(jnp.ones(2))
    notes = _notes(info)
    assert "self.use_inverse: a Python bool in a dynamic field of Solver is traced" in notes
    assert "mark it `use_inverse: sf.Static[bool]`" in notes
    assert "rtol" not in notes  # a Python float is a traced number, as intended


def test_an_int_used_as_a_count_is_named_in_sf_jit():
    """sf.jit with an instance argument: a library's own error (here a ValueError raised on
    the tracer) carries the note naming params.steps."""

    class Params(sf.Struct):
        w: jax.Array
        steps: int

    @sf.jit
    def run(params, x):
        if not isinstance(params.steps, int):
            raise ValueError(f"Invalid value steps={params.steps}")
        return x * params.w

    with pytest.raises(ValueError, match="Invalid value steps") as info:
        run(Params(jnp.ones(2), 3), jnp.ones(2))
    assert re.search(r"params\.steps: a Python int in a dynamic field of \S*Params is traced", _notes(info))


def test_a_bool_in_a_nested_module_names_the_path_and_leaves_any():
    """An equinox Module nested in a field (lineax's AutoLinearSolver(well_posed=False)): its
    bool is traced and the library's check fails; the note names the whole path and says
    to mark the field sf.field(leaves="any")."""
    eqx = pytest.importorskip("equinox")

    class AutoLinearSolver(eqx.Module):
        well_posed: bool

        def check(self):
            if not isinstance(self.well_posed, (bool, type(None))):
                raise ValueError(f"Invalid value well_posed={self.well_posed}")

    class Newton(sf.Struct, check=False):
        rtol: jax.Array
        linear_solver: AutoLinearSolver

        @sf.jit_method
        def step(self, x):
            self.linear_solver.check()
            return x * self.rtol

    with pytest.raises(ValueError, match="Invalid value well_posed") as info:
        Newton(jnp.asarray(1e-3), AutoLinearSolver(False)).step(jnp.ones(2))
    notes = _notes(info)
    assert re.search(r"self\.linear_solver\.well_posed: a Python bool inside \S*Newton\.linear_solver", notes)
    assert 'mark `linear_solver` sf.field(leaves="any")' in notes


def test_no_note_without_python_scalars():
    """An error that has nothing to do with Python scalars in fields gets no note."""

    class Arrays(sf.Struct):
        w: jax.Array

        @sf.jit_method
        def f(self, x):
            raise RuntimeError("the user's own error")

    with pytest.raises(RuntimeError, match="the user's own error") as info:
        Arrays(jnp.ones(2)).f(1.0)
    assert "staticfield" not in _notes(info)


def test_a_marked_field_fixes_it():
    """The fix the note gives works: the same solver with use_inverse static."""

    class Fixed(sf.Struct):
        rtol: float
        use_inverse: sf.Static[bool]

        @sf.jit_method
        def solve(self, x):
            return 1 / x if self.use_inverse else x

    assert Fixed(1e-3, True).solve(jnp.full(2, 2.0)).tolist() == [0.5, 0.5]
