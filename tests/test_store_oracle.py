"""Oracle: random small programs give the same bits with and without a program store.

Hypothesis writes a module of random programs (chains of elementwise ops, reductions,
matrix products and module-level constants, with a static repeat count), and fresh
processes run it without a store, with a store that is written, with the store read
back (``trust="trace"``), and with ``trust="source"`` under the checking mode. Every
result must be the same to the bit.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

UNARY = ["jnp.sin(x)", "jnp.tanh(x)", "jnp.exp(jnp.clip(x, -3.0, 3.0))", "jnp.sqrt(jnp.abs(x) + 1.0)",
         "x * {c}", "x + {c}", "jnp.cumsum(x, axis=-1)", "x - jnp.mean(x, axis=-1, keepdims=True)",
         "x @ {m}", "jnp.maximum(x, {c})", "jax.nn.softmax(x, axis=-1)"]

program = st.tuples(
    st.lists(st.sampled_from(UNARY), min_size=1, max_size=5),
    st.sampled_from([(3,), (2, 3), (4, 3)]),
    st.integers(1, 3),
    st.lists(st.floats(-2, 2, width=32), min_size=3, max_size=3),
)


def _module(programs) -> str:
    lines = ["import jax", "import jax.numpy as jnp", "import numpy as np", "import staticfield as sf", "",
             "TRACES = [0]", ""]
    for i, (ops, _, _, values) in enumerate(programs):
        lines.append(f"C{i} = np.array({values!r}, dtype=np.float32)")
        lines.append(f"M{i} = np.arange(9, dtype=np.float32).reshape(3, 3) / 9 + C{i}[0]")
        lines.append("")
        lines.append("@sf.jit(static_argnums=1)")
        lines.append(f"def p{i}(x, k):")
        lines.append("    TRACES[0] += 1")
        lines.append("    for _ in range(k):")
        for op in ops:
            lines.append("        x = " + op.format(c=f"C{i}", m=f"M{i}"))
        lines.append("    return x")
        lines.append("")
    return "\n".join(lines)


SCRIPT = '''
import json, sys
import numpy as np
import jax.numpy as jnp
import oracle_user as u
cases = json.loads(sys.argv[1])
out = []
for i, (shape, k) in enumerate(cases):
    x = jnp.linspace(-1.5, 1.5, int(np.prod(shape)), dtype=jnp.float32).reshape(shape)
    out.append(np.asarray(getattr(u, f"p{i}")(x, k)).tobytes().hex())
fs = [getattr(u, f"p{i}") for i in range(len(cases))]
print(json.dumps({"out": out, "traces": u.TRACES[0], "compiles": sum(f.compile_count for f in fs), "loads": sum(f.load_count for f in fs)}))
'''


def _run(folder, cases, **env):
    full = dict(os.environ, PYTHONDONTWRITEBYTECODE="1",
                PYTHONPATH=os.pathsep.join([str(folder), os.environ.get("PYTHONPATH", "")]))
    for name in ("STATICFIELD_PROGRAM_STORE", "STATICFIELD_PROGRAM_STORE_TRUST", "STATICFIELD_CHECK_STORE",
                 "XLA_FLAGS"):
        full.pop(name, None)
    full.update(env)
    proc = subprocess.run([sys.executable, "-c", SCRIPT, json.dumps(cases)], env=full, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@settings(max_examples=2, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(program, min_size=2, max_size=6))
def test_random_programs_give_the_same_bits_with_and_without_a_store(tmp_path_factory, programs):
    folder = tmp_path_factory.mktemp("oracle")
    (folder / "oracle_user.py").write_text(_module(programs))
    cases = [(list(shape), k) for _, shape, k, _ in programs]
    plain = _run(folder, cases)
    store = str(folder / "store")
    written = _run(folder, cases, STATICFIELD_PROGRAM_STORE=store)
    read = _run(folder, cases, STATICFIELD_PROGRAM_STORE=store)
    source = _run(folder, cases, STATICFIELD_PROGRAM_STORE=store, STATICFIELD_PROGRAM_STORE_TRUST="source",
                  STATICFIELD_CHECK_STORE="1")
    again = _run(folder, cases, STATICFIELD_PROGRAM_STORE=store, STATICFIELD_PROGRAM_STORE_TRUST="source")
    assert written["out"] == read["out"] == source["out"] == again["out"] == plain["out"]
    assert again["traces"] == 0  # every function found its program without tracing
    # Two functions that trace to the same program share one entry, even in the writer.
    assert written["compiles"] + written["loads"] == len(cases)
    assert (read["compiles"], read["loads"]) == (source["compiles"], source["loads"]) == (0, len(cases))
    assert np.isfinite(np.frombuffer(bytes.fromhex(plain["out"][0]), np.float32)).all()
