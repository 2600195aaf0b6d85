"""Recompile explanations: one scenario per Change.kind, hints, closest key, and bad input."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

import staticfield as sf

JAX_VERSION = tuple(int(p) for p in jax.__version__.split(".")[:2])


def changes(f):
    return [(c.path, c.kind, c.old, c.new) for c in f.recompiles[-1].changes]


@sf.dataclass
class Params:
    x_array: jax.Array
    a: sf.Static[int] = 2


def test_kind_static():
    """A static field change is kind 'static' at params.<field>."""
    f = sf.jit(lambda params: params.x_array * params.a)
    f(Params(jnp.ones(2)))
    f(Params(jnp.ones(2), a=3))
    assert changes(f) == [("params.a", "static", "2", "3")]


def test_kind_shape_names_field_and_both_shapes():
    """A shape change is kind 'shape' with both shapes, at the field's path."""
    f = sf.jit(lambda params: params.x_array * params.a)
    f(Params(jnp.ones(2)))
    f(Params(jnp.ones(3)))
    assert changes(f) == [("params.x_array", "shape", "f32[2]", "f32[3]")]


def test_kind_dtype():
    """A dtype change is kind 'dtype'."""
    f = sf.jit(lambda state: state[0] + 1)
    f((jnp.ones(2, jnp.float32),))
    f((jnp.ones(2, jnp.int32),))
    assert changes(f) == [("state[0]", "dtype", "f32[2]", "i32[2]")]


def test_kind_weak_type():
    """A Python float then a float32 array is kind 'weak_type'."""
    f = sf.jit(lambda x: x * 2)
    f(1.0)
    f(jnp.float32(1.0))
    assert changes(f) == [("x", "weak_type", "weak f32[]", "f32[]")]


def test_kind_structure():
    """A changed container structure is kind 'structure', reported once: a dict key added at
    the key (as sf.watch says it), a container of another type at the top."""
    f = sf.jit(lambda state: jax.tree_util.tree_leaves(state)[0])
    f({"a": jnp.ones(1)})
    f({"a": jnp.ones(1), "b": jnp.ones(1)})
    (change,) = f.recompiles[-1].changes
    assert change.path == "state['b']" and change.kind == "structure"
    f([jnp.ones(1), jnp.ones(1)])
    (change,) = f.recompiles[-1].changes
    assert change.path == "state" and change.kind == "structure"


def test_kind_structure_for_none_field():
    """A dynamic field going from an array to None is a structure change at that field."""

    @sf.dataclass
    class Opt:
        w: jax.Array | None

    f = sf.jit(lambda o: 0 if o.w is None else o.w.sum())
    f(Opt(jnp.ones(2)))
    f(Opt(None))
    assert [(c.path, c.kind) for c in f.recompiles[-1].changes] == [("o.w", "structure")]


def test_kind_sharding():
    """With explicit mesh axes the aval carries the sharding: kind 'sharding'."""
    mesh = jax.make_mesh((1,), ("x",), axis_types=(AxisType.Explicit,))
    f = sf.jit(lambda a: a * 2)
    with jax.set_mesh(mesh):
        f(jax.device_put(jnp.ones(4), NamedSharding(mesh, P("x"))))
        f(jax.device_put(jnp.ones(4), NamedSharding(mesh, P())))
    assert changes(f) == [("a", "sharding", "P('x',) on mesh(x=1)", "P(None,) on mesh(x=1)")]


def test_kind_static_arg():
    """A static argument change is kind 'static_arg' under the argument's name."""
    f = sf.jit(lambda x, mode: x if mode == "id" else -x, static_argnames="mode")
    f(jnp.ones(1), mode="id")
    f(jnp.ones(1), mode="neg")
    assert changes(f) == [("mode", "static_arg", "'id'", "'neg'")]


def test_nested_instance_paths():
    """Paths go through nested instances and containers in the user's words."""

    @sf.dataclass
    class Layer:
        w: jax.Array
        act: sf.Static[str] = "relu"

    @sf.dataclass
    class Model:
        layers: tuple
        scale: sf.Static[float] = 1.0

    f = sf.jit(lambda model: model.layers[0].w * model.scale)
    f(Model((Layer(jnp.ones(2)), Layer(jnp.ones(2)))))
    f(Model((Layer(jnp.ones(2)), Layer(jnp.ones(2), act="tanh"))))
    assert changes(f) == [("model.layers[1].act", "static", "'relu'", "'tanh'")]


def test_identity_hint_for_new_lambda():
    """A new lambda with the same code in a static field says so, and how to fix it."""

    @sf.dataclass
    class Act:
        x: jax.Array
        fn: sf.Static[object]

    f = sf.jit(lambda m: m.fn(m.x))
    for _ in range(2):
        f(Act(jnp.ones(2), lambda v: v * 2))
    (change,) = f.recompiles[-1].changes
    assert change.kind == "static" and change.path == "m.fn"
    assert "same code" in change.hint and "define it once" in change.hint
    assert change.hint in str(f.recompiles[-1])


def test_identity_hint_for_identity_hashed_object():
    """A new instance of an identity-hashed class with the same content says so."""

    class Cfg:
        def __init__(self, depth):
            self.depth = depth

    f = sf.jit(lambda x, cfg: x * cfg.depth, static_argnums=1)
    f(jnp.ones(1), Cfg(2))
    f(jnp.ones(1), Cfg(2))
    (change,) = f.recompiles[-1].changes
    assert change.kind == "static_arg"
    assert "Cfg" in change.hint and "identity" in change.hint and "@sf.dataclass" in change.hint


def test_changes_are_against_the_closest_previous_key():
    """The explanation diffs against the most similar earlier compile, not the last one."""
    f = sf.jit(lambda params: params.x_array * params.a)
    f(Params(jnp.ones(2), a=1))
    f(Params(jnp.ones(5), a=7))
    f(Params(jnp.ones(2), a=2))  # closest to the first: only `a` differs
    assert changes(f) == [("params.a", "static", "1", "2")]


def test_recompile_str_is_readable():
    """str(Recompile) names the function, the compile number and each change."""
    f = sf.jit(lambda params: params.x_array * params.a)
    f(Params(jnp.ones(2)))
    f(Params(jnp.ones(2), a=3))
    text = str(f.recompiles[0])
    assert text.startswith("test_recompile_str_is_readable.<locals>.<lambda> recompiled (compile #2) because:")
    assert "  params.a: 2 → 3 (static)" in text


# ----- bad input -------------------------------------------------------------------


def test_jit_method_on_a_non_pytree_class():
    """jit_method on a method of a class that is not an sf.dataclass names both and the fix."""

    class Plain:
        @sf.jit_method
        def f(self, x):
            return x

    with pytest.raises(TypeError, match=r"Plain\.f: @sf\.jit_method .* got \S*Plain\. Decorate the class with @sf\.dataclass"):
        Plain().f(jnp.ones(1))


def test_jit_method_on_staticmethod_or_plain_function():
    """jit_method refuses staticmethods and functions without a self parameter."""
    with pytest.raises(TypeError, match="staticmethod"):
        sf.jit_method(staticmethod(lambda x: x))
    with pytest.raises(TypeError, match="no positional `self` parameter"):
        sf.jit_method(lambda: 0)


def test_static_argnames_naming_an_unknown_parameter():
    """An unknown static_argnames name is a TypeError naming the function and parameters."""

    def step(params, x):
        return x

    with pytest.raises(TypeError, match=r"step: static_argnames names 'n', which is not one of its parameters \(params, x\)\. Fix the name"):
        sf.jit(step, static_argnames="n")


def test_static_argnums_out_of_range():
    """A static_argnums past the last parameter is a TypeError naming the function."""

    def step(params, x):
        return x

    with pytest.raises(TypeError, match=r"step: static_argnums=2 is out of range"):
        sf.jit(step, static_argnums=2)


def test_unhashable_static_argument():
    """An unhashable static argument value names the function and the argument."""

    def step(x, sizes):
        return x

    f = sf.jit(step, static_argnums=1)
    with pytest.raises(TypeError, match=r"step: the static argument `sizes` is an unhashable list.*Pass a tuple"):
        f(jnp.ones(1), [1, 2])


def test_bad_max_compiles():
    """max_compiles must be a positive int."""
    with pytest.raises(TypeError, match="max_compiles must be a positive int"):
        sf.jit(lambda x: x, max_compiles=0)


def test_counters_on_instances_of_numpy_inputs():
    """NumPy inputs are described like arrays (shape/dtype) in explanations."""
    f = sf.jit(lambda x: x + 1)
    f(np.ones(2, np.float32))
    f(np.ones(3, np.float32))
    assert changes(f) == [("x", "shape", "f32[2]", "f32[3]")]


def test_shape_and_weak_type_change_on_one_leaf_is_one_line():
    """A leaf changing shape and weak type at once gives one change whose texts show both."""
    f = sf.jit(lambda x: x)
    f(jnp.ones(3))
    f(1.0)
    assert changes(f) == [("x", "shape", "f32[3]", "weak f32[]")]


def test_structure_text_is_not_quoted():
    """Structure changes print the tree structure as text, not as a quoted string."""
    f = sf.jit(lambda d: 0)
    f((jnp.ones(1),))
    f([jnp.ones(1)])
    assert changes(f) == [("d", "structure", "PyTreeDef((*,))", "PyTreeDef([*])")]


def test_static_argument_left_to_its_default():
    """A keyword-only static argument given once and left to its default once is a
    static_arg change (such a signature takes the general path, which sees it missing)."""
    f = sf.jit(lambda x, *, normalize=False: x, static_argnames="normalize")
    f(jnp.ones(1))
    f(jnp.ones(1), normalize=True)
    assert changes(f) == [("normalize", "static_arg", "(default)", "True")]


def test_static_argument_default_is_its_value():
    """Where the static hit path takes the user's parameters, a default is bound as Python
    binds it: leaving it out and passing the default are one program, and a change is
    explained with the default's value."""
    f = sf.jit(lambda x, normalize=False: x, static_argnames="normalize")
    f(jnp.ones(1))
    f(jnp.ones(1), normalize=False)
    assert f.compile_count == 1
    f(jnp.ones(1), normalize=True)
    assert changes(f) == [("normalize", "static_arg", "False", "True")]


def _two_classes_named_state():
    """Two @sf.dataclass classes called EnvState, as if from two modules."""
    made = []
    for module in ("envs.cartpole", "envs.pendulum"):
        @sf.dataclass
        class EnvState:
            x: jax.Array

        EnvState.__module__, EnvState.__qualname__ = module, "EnvState"
        made.append(EnvState)
    return made


def test_same_named_classes_are_qualified_by_module():
    """A structure change between two classes of the same name names their modules."""
    A, B = _two_classes_named_state()
    f = sf.jit(lambda state: state.x + 1)
    f(A(jnp.ones(2)))
    f(B(jnp.ones(2)))
    (change,) = f.recompiles[0].changes
    assert (change.path, change.kind) == ("state", "structure")
    assert (change.old, change.new) == ("envs.cartpole.EnvState", "envs.pendulum.EnvState")


def test_shape_and_dtype_change_is_one_change():
    """A leaf whose shape and dtype both changed is reported once."""
    f = sf.jit(lambda x: x)
    f(jnp.ones(2, jnp.float32))
    f(jnp.ones(3, jnp.int32))
    (change,) = f.recompiles[0].changes
    assert (change.path, change.kind, change.old, change.new) == ("x", "shape", "f32[2]", "i32[3]")


def test_equal_static_of_another_type_has_a_hint():
    """np.int64(2) → 2 recompiles (type-strict on purpose) and the hint says how to convert."""
    f = sf.jit(lambda x, n: x * n, static_argnames="n")
    f(1.0, n=np.int64(2))
    f(1.0, n=2)
    (change,) = f.recompiles[0].changes
    assert (change.path, change.kind, change.old, change.new) == ("n", "static_arg", "2 (numpy.int64)", "2 (int)")
    assert "equal value, another type" in change.hint
    assert "numpy.int64 → int" in change.hint and "int(n)" in change.hint


def test_weak_type_change_has_a_hint():
    """A weak_type recompile (a Python scalar, then a strong array) says what weak typing is."""
    f = sf.jit(lambda x: x * 2)
    f(jnp.full(2, 0.5))
    f(jnp.asarray(jnp.full(2, 0.5), jnp.float32))
    (change,) = f.recompiles[0].changes
    assert (change.kind, change.old, change.new) == ("weak_type", "weak f32[2]", "f32[2]")
    assert "jnp.asarray(x, dtype)" in change.hint


def test_static_passed_by_keyword_or_position_is_one_program():
    """Where the static hit path takes the user's parameters, `f(x, 2)` and `f(x, n=2)`
    bind alike: one program (plain jax.jit compiles two)."""
    f = sf.jit(lambda x, n: x * n, static_argnums=1)
    assert f(1.0, 2) == f(1.0, n=2) == 2.0
    assert f.compile_count == 1


def test_static_passed_by_keyword_then_position_is_explained():
    """On the general path (here a function with *rest), a static argument passed by
    keyword after a positional call names that difference."""
    f = sf.jit(lambda x, n, *rest: x * n, static_argnums=1)
    f(1.0, 2)
    f(1.0, n=2)
    (change,) = f.recompiles[0].changes
    assert (change.path, change.old, change.new) == ("n", "passed by position", "passed by keyword")
    assert "same way" in change.hint


def test_recompile_error_fix_fits_a_shape_change():
    """RecompileError for a shape change suggests padding or bucketing, not keeping a value dynamic."""
    f = sf.jit(lambda x: x, max_compiles=1)
    f(jnp.ones(2))
    with pytest.raises(sf.RecompileError, match="Pad or bucket") as info:
        f(jnp.ones(3))
    assert "Keep the changing value dynamic" not in str(info.value)


def test_retrace_with_identical_arguments_names_the_usual_causes():
    """A trace with no differing argument (after jax.clear_caches()) lists the usual causes."""
    traces = 0

    @sf.jit
    def f(params):
        nonlocal traces
        traces += 1
        return params.x_array * params.a

    f(Params(jnp.ones(2)))
    jax.clear_caches()
    f(Params(jnp.ones(2)))
    assert traces == 2 and f.compile_count == 2
    (event,) = f.recompiles
    assert event.changes == []
    assert "no argument differs from an earlier compile" in str(event)
    assert "jax.clear_caches()" in str(event)
    assert "jax_enable_x64" not in str(event)  # a changed setting is named as a change


def _grad_through_custom_vjp_twice():
    """jax.grad, twice, of a custom_vjp whose forward and backward rules call a jit_method;
    the method's class and an independent count of its traces."""
    traces = []

    @sf.dataclass
    class M:
        w: jax.Array

        @sf.jit_method
        def f(self, x):
            traces.append(1)
            return self.w * x

    @jax.custom_vjp
    def g(m, x):
        return m.f(x)

    def fwd(m, x):
        return m.f(x), (m, x)

    def bwd(res, ct):
        m, x = res
        return jax.tree.map(jnp.zeros_like, m), ct * m.f(x)

    g.defvjp(fwd, bwd)
    m = M(jnp.ones(2))
    for _ in range(2):
        grad = jax.grad(lambda x: g(m, x).sum())(jnp.ones(2))
    np.testing.assert_array_equal(grad, [1.0, 1.0])
    return M, len(traces)


@pytest.mark.skipif(JAX_VERSION >= (0, 12), reason="from jax 0.12, JAX does not trace a jitted "
                    "call in a custom_vjp backward pass again: there is no retrace to explain")
def test_custom_vjp_backward_pass_retrace_is_named():
    """Up to jax 0.11 JAX traces the backward pass's call again, with the same arguments: the
    recompile says no argument differs and names the custom_vjp backward pass."""
    M, traces = _grad_through_custom_vjp_twice()
    assert traces == 2 and M.f.compile_count == 2
    (event,) = M.f.recompiles
    assert event.changes == []
    assert "no argument differs" in str(event) and "backward pass of a custom_vjp" in str(event)


@pytest.mark.skipif(JAX_VERSION < (0, 12), reason="up to jax 0.11, JAX traces a jitted call in "
                    "a custom_vjp backward pass once more (see the test above)")
def test_custom_vjp_backward_pass_is_not_traced_again():
    """From jax 0.12 the backward pass reuses the forward trace: one compile, nothing to explain."""
    M, traces = _grad_through_custom_vjp_twice()
    assert traces == 1 and M.f.compile_count == 1 and M.f.recompiles == []


def test_concrete_leaves_are_described_like_their_traced_form():
    """A NumPy array or Python scalar leaf is described by its abstract value, as a tracer of it is."""
    from staticfield._explain._describe import describe

    concrete = describe(["x", "y"], (np.ones((2, 3), np.float32), 1.5), {}, frozenset(), frozenset())
    traced = {}
    jax.jit(lambda x, y: traced.update(describe(["x", "y"], (x, y), {}, frozenset(), frozenset())))(
        np.ones((2, 3), np.float32), 1.5
    )
    assert concrete == traced
    assert concrete["x"][:3] == ("leaf", (2, 3), np.float32)
