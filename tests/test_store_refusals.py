"""A program the store cannot keep (it calls back into Python) is refused with one
warning per function, located at the user's call and shown under Python's default
warning filters wherever the call is made; and the listing names it."""

from __future__ import annotations

import re
import subprocess
import sys

from _fresh_process import run

MODEL = '''
import jax, jax.numpy as jnp
import staticfield as sf


@sf.jit
def logged(x):
    jax.debug.callback(lambda v: None, x)
    return x + 1


@sf.dataclass
class Env:
    scale: float = sf.static(default=2.0)

    @sf.jit_method
    def step(self, x):
        jax.debug.callback(lambda v: None, x)
        return x * self.scale


def rollout(env, x):
    for _ in range(3):
        x = env.step(x)  # the call a library makes for its user
    return x
'''

SCRIPT = '''
import json
import jax.numpy as jnp
import model
model.logged(jnp.ones(2))
model.logged(jnp.ones(3))
model.rollout(model.Env(), jnp.ones(2))
model.rollout(model.Env(scale=3.0), jnp.ones(2))
print(json.dumps({"compiles": model.logged.compile_count + model.Env.step.compile_count}))
'''


def _warnings(stderr, function):
    return re.findall(rf"^(.*):(\d+): StaticFieldWarning: staticfield: the program store cannot keep the "
                      rf"programs of {re.escape(function)}: it calls back into Python", stderr, re.M)


def test_the_cannot_keep_warning_shows_once_at_the_users_call_under_default_filters(tmp_path):
    """No -W, no PYTHONWARNINGS: each refused function warns once, at the line of the
    user's code that called it (the script's call; the library's call for the method),
    never at a line of staticfield's, whose filters and registry a user cannot reach."""
    out, stderr = run(tmp_path, MODEL, SCRIPT, stderr=True)
    assert out["compiles"] == 4
    assert _warnings(stderr, "model.logged") == [(str(tmp_path / "script.py"), "5")], stderr
    assert _warnings(stderr, "model.Env.step") == [(str(tmp_path / "model.py"), "24")], stderr


def test_the_listing_names_the_refused_functions_and_why(tmp_path):
    """`python -m staticfield store PATH` ends with the functions whose programs the store
    refused (kept when refused), and -v says why in full."""
    run(tmp_path, MODEL, SCRIPT)
    path = str(tmp_path / "store")
    listed = subprocess.run([sys.executable, "-m", "staticfield", "store", path], capture_output=True, text=True,
                            timeout=120)
    assert listed.returncode == 0, listed.stderr
    last = listed.stdout.splitlines()[-1]
    assert last == "refused: model.Env.step, model.logged (it calls back into Python)", listed.stdout
    verbose = subprocess.run([sys.executable, "-m", "staticfield", "store", path, "-v"], capture_output=True,
                             text=True, timeout=120).stdout
    assert "model.logged: it calls back into Python" in verbose, verbose
