"""PRNG implementations and typed key arrays, as the program store writes them.

A jaxpr names a key's PRNG implementation in two places: the ``impl`` parameter of
``random_seed`` and ``random_wrap``, and the element type of every key array
(``key<fry>``), from which ``random_split``, ``random_fold_in`` and ``random_bits`` take
the implementation whose functions they lower. An implementation is a named tuple of
four Python functions (``seed``, ``split``, ``random_bits``, ``fold_in``) with a name,
a tag and a key shape. The digest writes it:

- **built in** (each function a plain module-level function of the ``jax`` package:
  threefry2x32, rbg, unsafe_rbg, the philox and threefry4x32 ones): by its name, tag,
  key shape and its functions' qualified names; the entry's JAX version covers their
  code;
- **any other** (``jax.extend.random.define_prng_impl``, a registered one of the
  user's): by its name, tag and key shape, and, in each equation that lowers one of its
  functions, by the jaxpr of that function at the key shape and the equation's
  parameters (``lowered``): what lowering compiles. One that cannot be traced alone
  cannot be written (``Unwritable``), and the program is not stored.

The argument signature takes a typed key array (it has no weak type), and a record
names a key element type by its implementation's registered name, so that warm-up
rebuilds it.
"""

from __future__ import annotations

import functools
import os
import pickle
import types
from typing import Any, Callable

import jax
import numpy as np

from .._core import _compat

JAX_DIR = os.path.join(os.path.dirname(os.path.abspath(jax.__file__)), "")
_FUNCTIONS = ("seed", "split", "random_bits", "fold_in")
# The primitives whose lowering calls one of the implementation's functions.
_LOWERED = {"random_seed": "seed", "random_split": "split", "random_fold_in": "fold_in",
            "random_bits": "random_bits"}


class Unwritable(Exception):
    """An implementation function that cannot be traced on its own."""


@functools.lru_cache(maxsize=1)
def _impl_class() -> type:
    return type(jax.extend.random.threefry_prng_impl)  # PRNGImpl, through JAX's public extend API


def is_impl(value: Any) -> bool:
    """Whether ``value`` is a PRNG implementation."""
    return type(value) is _impl_class()


def impl_of(dtype: Any) -> Any:
    """The implementation of a key element type (``key<fry>``); ``None`` for another dtype."""
    if isinstance(dtype, np.dtype):
        return None
    return _compat.key_impl(dtype)


def is_key_dtype(dtype: Any) -> bool:
    return not isinstance(dtype, np.dtype) and jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key)


def built_in(impl: Any) -> bool:
    """Whether every function of ``impl`` is JAX's own, whose code JAX's version names."""
    return all(_jax_function(getattr(impl, name, None)) for name in _FUNCTIONS)


def _jax_function(fn: Any) -> bool:
    return (isinstance(fn, types.FunctionType) and not fn.__closure__
            and str(getattr(fn, "__module__", "")).startswith("jax.")
            and fn.__code__.co_filename.startswith(JAX_DIR))


def impl_text(impl: Any) -> str:
    """``impl`` as the digest writes it (see the module docstring); ``Unwritable`` for a
    user-defined one that does not come back from a pickle equal to itself (a stored
    program's argument types are pickled, and JAX calls a program only with keys of an
    equal implementation)."""
    head = f"{impl.name!r}:{impl.tag!r}:{tuple(impl.key_shape)}"
    if built_in(impl):
        return "prng:" + head + ":" + ",".join(
            f"{fn.__module__}.{fn.__qualname__}" for fn in (getattr(impl, n) for n in _FUNCTIONS))
    try:
        same = pickle.loads(pickle.dumps(impl, protocol=4)) == impl  # noqa: S301 - our own bytes
    except Exception:
        same = False
    if not same:
        raise Unwritable(f"the PRNG implementation {impl.name!r} does not pickle to an equal one (its "
                         "functions are not all module-level functions: a functools.partial, a "
                         "lambda or a closure); define them at module level")
    return "prng-user:" + head


def lowered(eqn: Any) -> Any:
    """The closed jaxpr of the user-defined implementation function that ``eqn``'s lowering
    compiles, at the key shape and ``eqn``'s parameters; ``None`` when ``eqn`` lowers no
    such function (another primitive, or a built-in implementation)."""
    name = _LOWERED.get(eqn.primitive.name)
    if name is None:
        return None
    avals = [v.aval for v in eqn.invars]
    impl = eqn.params.get("impl") if name == "seed" else impl_of(avals[0].dtype)
    if impl is None or not is_impl(impl) or built_in(impl):
        return None
    return _traced(impl, name, avals, eqn.params)


def _traced(impl: Any, name: str, avals: list, params: dict) -> Any:
    key = jax.ShapeDtypeStruct(tuple(impl.key_shape), np.dtype("uint32"))
    fn: Callable = getattr(impl, name)
    if name == "seed":
        call, args = fn, (jax.ShapeDtypeStruct((), avals[0].dtype),)
    elif name == "split":
        call, args = (lambda k: fn(k, params["shape"])), (key,)
    elif name == "fold_in":
        call, args = fn, (key, jax.ShapeDtypeStruct((), avals[1].dtype))
    else:
        call, args = (lambda k: fn(k, params["bit_width"], params["shape"])), (key,)
    try:
        return jax.make_jaxpr(call)(*args)
    except Exception as exc:
        raise Unwritable(f"the PRNG implementation {impl.name!r}'s {name} cannot be traced on its own "
                         f"({type(exc).__name__}: {exc})") from None


# ----- signatures and records ----------------------------------------------------------------
def key_signature(leaf: Any) -> tuple:
    """A typed key array's signature, as ``_key.array_signature`` writes an array's (a key
    array is never weakly typed)."""
    return (leaf.shape, leaf.dtype, False, leaf.sharding, leaf.committed)


def dtype_text(dtype: Any) -> str:
    """A dtype as the key and listings write it: a key type by its implementation's name
    (``key<threefry2x32>``: tags need not be unique)."""
    impl = impl_of(dtype)
    return f"key<{impl.name}>" if impl is not None else str(dtype)


def dtype_name(dtype: Any) -> str | None:
    """A dtype as a record writes it, for ``dtype_named`` to rebuild; ``None`` for a key
    type whose implementation is not registered under its name (it cannot be rebuilt)."""
    if not is_key_dtype(dtype):
        return str(np.dtype(dtype))
    impl = impl_of(dtype)
    if impl is None:
        return None
    try:
        same = dtype_named(f"key<{impl.name}>") == dtype
    except Exception:
        return None
    return f"key<{impl.name}>" if same else None


def dtype_named(name: str) -> Any:
    """The dtype a record names (``float32``, ``key<rbg>``)."""
    if name.startswith("key<") and name.endswith(">"):
        return _key_dtype(name[4:-1])
    return jax.numpy.dtype(name)


@functools.lru_cache(maxsize=64)
def _key_dtype(impl: str) -> Any:
    return jax.eval_shape(functools.partial(jax.random.key, 0, impl=impl)).dtype
