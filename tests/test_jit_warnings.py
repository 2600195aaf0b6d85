"""The compile-count warning and Recompile.location: where a recompile came from."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings

import jax.numpy as jnp
import pytest

import staticfield as sf


def test_recompile_location_is_the_user_call_site():
    """Recompile.location is the file and line of the user's call that caused the compile."""
    f = sf.jit(lambda x: x + 1)
    f(1.0)
    f(jnp.ones(2)); line = sys._getframe().f_lineno  # noqa: E702
    (event,) = f.recompiles
    assert event.location == f"{__file__}:{line}"


def test_warning_at_the_tenth_compile_with_explanation_and_call_site(monkeypatch):
    """The 10th compile warns once, with the latest explanation and the call site; the 11th does not."""
    monkeypatch.delenv("STATICFIELD_WARN_COMPILES", raising=False)
    f = sf.jit(lambda x: x * 2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for n in range(1, 12):
            f(jnp.ones(n))
    (w,) = [w for w in caught if issubclass(w.category, sf.StaticFieldWarning)]
    text = str(w.message)
    assert "<lambda> has compiled 10 times" in text
    assert "x: f32[9] → f32[10] (shape)" in text
    assert w.filename == __file__
    assert "warn_compiles=None" in text


def test_warn_compiles_sets_the_threshold_or_turns_it_off():
    """warn_compiles=2 warns at 2, 20, 200 compiles; warn_compiles=None never warns."""
    f = sf.jit(lambda x: x * 3, warn_compiles=2)
    g = sf.jit(lambda x: x * 4, warn_compiles=None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for n in range(1, 22):
            f(jnp.ones(n))
            g(jnp.ones(n))
    texts = [str(w.message) for w in caught if issubclass(w.category, sf.StaticFieldWarning)]
    assert len(texts) == 2
    assert "compiled 2 times" in texts[0] and "compiled 20 times" in texts[1]


def test_warn_compiles_must_be_positive():
    """warn_compiles=0 is refused, naming the function and the fix (None turns it off)."""
    with pytest.raises(TypeError, match=r"step: warn_compiles must be a positive int or None, got 0\. Pass a count such as warn_compiles=10, or warn_compiles=None"):

        @sf.jit(warn_compiles=0)
        def step(x):
            return x


def test_environment_variable_sets_the_default():
    """STATICFIELD_WARN_COMPILES=0 turns the warning off; =3 warns at the third compile."""
    code = (
        "import warnings, jax.numpy as jnp, staticfield as sf\n"
        "warnings.simplefilter('error', sf.StaticFieldWarning)\n"
        "f = sf.jit(lambda x: x)\n"
        "try:\n"
        "    [f(jnp.ones(n)) for n in range(1, 13)]\n"
        "    print('quiet', f.compile_count)\n"
        "except sf.StaticFieldWarning:\n"
        "    print('warned', f.compile_count)\n"
    )
    out = {}
    for value in ("0", "3"):
        env = dict(os.environ, STATICFIELD_WARN_COMPILES=value, JAX_PLATFORMS="cpu")
        run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
        out[value] = run.stdout.strip()
    assert out == {"0": "quiet 12", "3": "warned 3"}


# ------------------------------------------ issue 39, case 7: a float static changed every time
def _warned(run) -> str:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run()
    (w,) = [w for w in caught if issubclass(w.category, sf.StaticFieldWarning)]
    return str(w.message)


def test_a_float_static_field_changed_by_every_compile_is_named_first_with_the_fix():
    """A learning rate marked static, new at every call: the warning's first sentence names
    the field and says to make it a dynamic field (a float traces), before the rest."""
    import jax

    class Opt(sf.Struct):
        w: jax.Array
        lr: sf.Static[float] = 0.1

        @sf.jit_method(warn_compiles=4)
        def step(self, g):
            return self.w - self.lr * g

    text = _warned(lambda: [Opt(jnp.ones(2), lr=0.1 / (i + 1)).step(jnp.ones(2)) for i in range(4)])
    first = text.split("\n")[0]
    assert "Opt.step has compiled 4 times" in first and "self.lr" in first, text
    assert "make it a dynamic field" in first and "a float traces" in first, text
    assert "sf.Static" in first
    assert "Latest:" in text and "warn_compiles=None" in text


def test_a_float_static_argument_changed_by_every_compile_is_named_first():
    """The same for a static argument (static_argnames): pass it traced."""
    f = sf.jit(lambda x, lr: x * lr, static_argnames="lr", warn_compiles=3)
    text = _warned(lambda: [f(jnp.ones(2), lr=0.5 + i) for i in range(3)])
    first = text.split("\n")[0]
    assert "`lr`" in first and "a float traces" in first and "static_argnames" in first, text


def test_no_float_lead_when_the_static_is_an_int_or_not_changed_every_time():
    """An int static (a depth: it may set a shape) and a float that changed in only some of
    the compiles get no such first sentence."""
    f = sf.jit(lambda x, n: x * n, static_argnames="n", warn_compiles=3)
    text = _warned(lambda: [f(jnp.ones(2), n=i) for i in range(3)])
    assert "a float traces" not in text
    g = sf.jit(lambda x, lr: x * lr, static_argnames="lr", warn_compiles=3)
    text = _warned(lambda: [g(jnp.ones(2), lr=0.5), g(jnp.ones(2), lr=0.25), g(jnp.ones(3), lr=0.25)])
    assert "a float traces" not in text
