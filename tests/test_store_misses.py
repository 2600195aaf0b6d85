"""A store miss is explained per field, as a recompile is (``self.degree: 2 → 4 (static)``),
and ``sf.no_compiles()`` refusing a call after warm-up explains it against the closest
program of that function loaded in this process, else the store's closest one."""

from __future__ import annotations

import pytest
from _fresh_process import run

MODEL = '''
import jax, jax.numpy as jnp
import staticfield as sf


@sf.dataclass
class Poly:
    c: jax.Array
    degree: int = sf.static(default=2)
    mode: str = sf.static(default="sum")

    @sf.jit_method
    def __call__(self, x):
        return (self.c * x ** self.degree).sum() if self.mode == "sum" else self.c * x ** self.degree
'''

SCRIPT = '''
import json, sys
import jax.numpy as jnp
import staticfield as sf
import model

x = jnp.ones(3)
if sys.argv[1] == "record":
    model.Poly(jnp.ones(3))(x)
    print(json.dumps({}))
    sys.exit()
summary = sf.warmup()
try:
    with sf.no_compiles():
        model.Poly(jnp.ones(3), degree=4)(x)
    said = ""
except sf.RecompileError as exc:
    said = str(exc)
print(json.dumps({"said": said, "loaded": summary.loaded}))
'''


@pytest.mark.parametrize("trust", ["trace", "source"])
def test_no_compiles_after_warmup_names_the_field_against_the_loaded_program(tmp_path, trust):
    """Not "first compile" (a program of the function was loaded), and not two reprs:
    the field that differs, as every other explanation says it."""
    run(tmp_path, MODEL, SCRIPT, "record", trust=trust)
    out = run(tmp_path, MODEL, SCRIPT, "warm", trust=trust)
    assert out["loaded"] == 1
    said = out["said"]
    assert said.startswith("Poly.__call__ would compile inside sf.no_compiles()"), said
    assert "self.degree: 2 → 4 (static)" in said, said
    assert "first compile" not in said and "Poly(degree=2" not in said, said
    if trust == "trace":  # warm-up traced the program it loaded: the refusal compares with that
        assert "what changed since its closest earlier compile or load in this process is below" in said
    else:  # loaded with no trace: against the store's closest program
        assert ("not loaded from the program store: the closest stored program differs in self.degree: 2 → 4 "
                "(static)") in said
