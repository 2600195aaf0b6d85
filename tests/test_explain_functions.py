"""A function, a method or a class that changed is named as the user knows it (issue 39,
cases 1 and 4): two factory-made functions by their names (``max_norm → rms_norm``), a
method bound to another instance of a plain class as such, and two classes of one name by
their modules; the lambda advice only for a closure really made again. In ``sf.Recompile``
and in ``sf.watch`` alike.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import pytest

import staticfield as sf


def _wrap(fn):
    """optimistix's ``_wrap``: one code object for every function it makes, each renamed."""

    def wrapped_fn(*args, **kwargs):
        return fn(*args, **kwargs)

    wrapped_fn.__name__ = wrapped_fn.__qualname__ = fn.__name__.lstrip("_")
    return wrapped_fn


def _max_norm(x):
    return jnp.max(jnp.abs(x))


def _rms_norm(x):
    return jnp.sqrt(jnp.mean(x**2))


max_norm, rms_norm = _wrap(_max_norm), _wrap(_rms_norm)


def jitted(w: sf.watch) -> list:
    return [f for f in w.functions if not f.eager]


def said(change) -> tuple[str, str, str, str]:
    return change.path, change.kind, change.old, change.new


def assert_choice_hint(hint: str) -> None:
    assert "define it once" not in hint and "lambda" not in hint, hint
    assert "dynamic" not in hint and "pass it as an array" not in hint, hint
    assert "a function cannot be traced" in hint, hint


# ---------------------------------------------------------------- case 1: factory functions
def test_factory_functions_as_a_static_argument_are_named_in_the_watch():
    """jax.jit(..., static_argnames="norm"): max_norm → rms_norm, not a new closure."""

    def solve(x, norm):
        return norm(x)

    f = jax.jit(solve, static_argnames="norm")
    with sf.watch() as w:
        f(jnp.ones(3), norm=max_norm)
        f(jnp.ones(3), norm=rms_norm)
    (change,) = jitted(w)[0].compiles[1].changes
    assert said(change) == ("norm", "static_arg", "max_norm", "rms_norm"), w.report()
    assert_choice_hint(change.hint)


def test_factory_functions_held_static_by_filter_jit_are_named():
    """eqx.filter_jit holds the function static: max_norm → rms_norm, and the hint does not
    say to pass an array."""
    eqx = pytest.importorskip("equinox")

    @eqx.filter_jit
    def solve(x, norm):
        return norm(x)

    with sf.watch() as w:
        solve(jnp.ones(3), max_norm)
        solve(jnp.ones(3), rms_norm)
    (change,) = jitted(w)[0].compiles[1].changes
    assert said(change) == ("norm", "static", "max_norm", "rms_norm"), w.report()
    assert_choice_hint(change.hint)


def switch_norm(first, second) -> tuple:
    """A static field switched from ``first`` to ``second``: (sf.Recompile's change, sf.watch's)."""

    class Solver(sf.Struct):
        norm: sf.Static[object]

        @sf.jit_method(warn_compiles=None)
        def size(self, x):
            return self.norm(x)

    with sf.watch() as w:
        Solver(first).size(jnp.ones(3))
        Solver(second).size(jnp.ones(3))
    (event,) = Solver.size.recompiles
    (change,) = event.changes
    (watched,) = jitted(w)[0].compiles[1].changes
    return change, watched


def test_factory_functions_in_a_static_field_in_recompile_and_watch():
    """A static field switched from max_norm to rms_norm: sf.Recompile and sf.watch both say
    `self.norm: max_norm → rms_norm`."""
    change, watched = switch_norm(max_norm, rms_norm)
    assert said(change) == ("self.norm", "static", "max_norm", "rms_norm")
    assert_choice_hint(change.hint)
    assert said(watched) == said(change) and watched.hint == change.hint


def test_factory_functions_under_static_auto_in_recompile_and_watch():
    """sf.jit(static="auto"): `norm: max_norm → rms_norm (static_arg)` in both."""

    def solve(x, norm):
        return norm(x)

    f = sf.jit(solve, static="auto", warn_compiles=None)
    with sf.watch() as w:
        f(jnp.ones(3), max_norm)
        f(jnp.ones(3), rms_norm)
    (change,) = f.recompiles[0].changes
    assert said(change) == ("norm", "static_arg", "max_norm", "rms_norm")
    assert_choice_hint(change.hint)
    (watched,) = jitted(w)[0].compiles[1].changes
    assert said(watched) == said(change), w.report()


def test_a_closure_made_again_keeps_the_lambda_advice():
    """The same function made again (one code, one name): a new function object, same code,
    and the advice to define it once, in both."""

    def make():
        def norm(x):
            return jnp.sum(x)

        return norm

    change, watched = switch_norm(make(), make())
    assert (change.old, change.new) == ("an earlier function object", "a new function object, same code")
    assert "define it once" in change.hint
    assert (watched.old, watched.new) == (change.old, change.new) and "define it once" in watched.hint


def test_two_lambdas_of_one_name_say_where_each_was_written():
    """Two different lambdas: `<lambda> (file:line) → <lambda> (file:line)`, no 0x addresses."""
    f = sf.jit(lambda x, fn: fn(x), static="auto", warn_compiles=None)
    one, two = (lambda y: y + 1), (
        lambda y: y * 2)
    f(jnp.ones(2), one)
    f(jnp.ones(2), two)
    (change,) = f.recompiles[0].changes
    line = one.__code__.co_firstlineno
    assert (change.old, change.new) == (f"<lambda> (test_explain_functions.py:{line})",
                                        f"<lambda> (test_explain_functions.py:{line + 1})")
    assert "0x" not in str(f.recompiles[0])


# --------------------------------------------------- case 4: methods of plain instances
class Env:
    """A plain (non-pytree) class, as RL libraries write environments."""

    def __init__(self, size: int) -> None:
        self.size = size

    def step(self, x):
        return x * self.size

    def reset(self, x):
        return x * 0


class Snake(Env):
    pass


class Game2048(Env):
    pass


def test_a_method_of_another_plain_instance_is_named_as_such():
    """jax.jit(env2.step) after jax.jit(env.step): the method of another Env instance, keyed
    by that instance on purpose; not 'a new function object ... define it once'."""
    env, env2 = Env(2), Env(3)
    with sf.watch() as w:
        jax.jit(env.step)(jnp.ones(2))
        jax.jit(env2.step)(jnp.ones(2))
    (entry,) = jitted(w)
    (change,) = entry.compiles[1].changes
    assert said(change) == ("(the function)", "new function", "Env.step of an earlier Env instance",
                            "Env.step of another Env instance"), w.report()
    assert "define it once" not in change.hint and "reuse one instance" in change.hint
    assert "keyed by its instance" in change.hint and "sf.Struct" in change.hint


def test_one_inherited_method_of_two_classes_names_both_classes():
    """reset inherited by two environments: `Env.reset of a Snake instance → ... Game2048`."""
    with sf.watch() as w:
        jax.jit(Snake(2).reset)(jnp.ones(2))
        jax.jit(Game2048(2).reset)(jnp.ones(2))
    (entry,) = jitted(w)
    (change,) = entry.compiles[1].changes
    assert (change.old, change.new) == ("Env.reset of a Snake instance", "Env.reset of a Game2048 instance")


def _two_state_classes() -> list[type]:
    made = []
    for module in ("envs.snake.types", "envs.game_2048.types"):

        @dataclasses.dataclass
        class State:
            grid: jax.Array
            step: jax.Array
            key: jax.Array
            score: jax.Array

        State.__module__, State.__qualname__ = module, "State"
        jax.tree_util.register_dataclass(State, data_fields=["grid", "step", "key", "score"], meta_fields=[])
        made.append(State)
    return made


def test_two_node_types_of_one_name_are_one_change_naming_their_modules():
    """Two environments' State classes (one name, two modules): the node type changed, in
    one line, instead of a line per field."""
    snake, game = _two_state_classes()
    f = jax.jit(lambda state: state.grid + state.step)
    with sf.watch() as w:
        f(snake(jnp.ones(4), jnp.ones(()), jnp.ones(2), jnp.ones(())))
        f(game(jnp.ones(16), jnp.ones(()), jnp.ones(2), jnp.ones(())))
    (entry,) = jitted(w)
    assert [said(c) for c in entry.compiles[1].changes] == [
        ("state", "structure", "envs.snake.types.State", "envs.game_2048.types.State")], w.report()


def test_two_node_types_of_one_name_in_recompile():
    """The same change through sf.jit: one structure change naming the modules."""
    snake, game = _two_state_classes()
    f = sf.jit(lambda state: state.grid + state.step, warn_compiles=None)
    f(snake(jnp.ones(4), jnp.ones(()), jnp.ones(2), jnp.ones(())))
    f(game(jnp.ones(16), jnp.ones(()), jnp.ones(2), jnp.ones(())))
    assert [said(c) for c in f.recompiles[0].changes] == [
        ("state", "structure", "envs.snake.types.State", "envs.game_2048.types.State")]



def test_a_jitted_function_then_a_lambda_are_named_with_the_function_hint():
    """jnp.sin (a jax.jit function) then a lambda: `fn: sin → <lambda>`, with the hint for a
    function, in sf.Recompile as in the watch."""
    f = sf.jit(lambda x, fn: fn(x), static="auto", warn_compiles=None)
    with sf.watch() as w:
        f(jnp.ones(2), jnp.sin)
        f(jnp.ones(2), lambda y: y)
    (change,) = f.recompiles[0].changes
    assert said(change) == ("fn", "static_arg", "sin", "<lambda>")
    assert_choice_hint(change.hint)
    (watched,) = jitted(w)[0].compiles[1].changes
    assert said(watched) == said(change) and watched.hint == change.hint, w.report()
