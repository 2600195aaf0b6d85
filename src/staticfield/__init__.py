"""staticfield: pytree dataclasses for JAX with safe static fields.

Static fields are frozen, hashable and compared by value (they form the jit cache
key); dynamic fields are the traced children. ``sf.jit_method`` and ``sf.jit``
compile only when something really changed, and explain every recompile.
"""

from ._core._abstract import AbstractClassVar as AbstractClassVar
from ._core._abstract import AbstractVar as AbstractVar
from ._buckets import BucketCheckError as BucketCheckError
from ._buckets import BucketError as BucketError
from ._core._decorator import dataclass as dataclass
from ._core._errors import DepsCheckError as DepsCheckError
from ._core._errors import HostMismatchError as HostMismatchError
from ._core._errors import RecompileError as RecompileError
from ._core._errors import StaticFieldWarning as StaticFieldWarning
from ._core._errors import StoreCheckError as StoreCheckError
from ._core._field import Static as Static
from ._core._field import field as field
from ._core._field import is_static as is_static
from ._core._field import static as static
from ._core._freeze import identity_hashed as identity_hashed
from ._core._frozendict import FrozenDict as FrozenDict
from ._core._instance import replace as replace
from ._core._spec import dynamic_fields as dynamic_fields
from ._core._spec import fields as fields
from ._core._spec import static_fields as static_fields
from ._core._struct import Struct as Struct
from ._explain._diff import Change as Change
from ._explain._diff import Recompile as Recompile
from ._jit._api import jit as jit
from ._jit._api import jit_method as jit_method
from ._stance import no_compiles as no_compiles
from ._store import set_program_store as set_program_store
from ._tree._serialization import from_state_dict as from_state_dict
from ._tree._serialization import to_state_dict as to_state_dict
from ._tree._sharding import shard as shard
from ._tree._sharding import shardings as shardings
from ._tree._stack import stack as stack
from ._tree._stack import unstack as unstack
from ._warmup import warmup as warmup
from ._watch._watcher import watch as watch

from ._moved import install as _install_moved
from ._tree._flax import watch as _watch_flax

_install_moved(__name__)
_watch_flax()  # flax.serialization knows sf classes, whichever is imported first

__version__ = "0.1.0"

__all__ = [
    "AbstractClassVar",
    "AbstractVar",
    "BucketCheckError",
    "BucketError",
    "Change",
    "DepsCheckError",
    "FrozenDict",
    "HostMismatchError",
    "Recompile",
    "RecompileError",
    "Static",
    "StaticFieldWarning",
    "StoreCheckError",
    "Struct",
    "dataclass",
    "dynamic_fields",
    "field",
    "fields",
    "from_state_dict",
    "identity_hashed",
    "is_static",
    "jit",
    "jit_method",
    "no_compiles",
    "replace",
    "set_program_store",
    "shard",
    "shardings",
    "stack",
    "static",
    "static_fields",
    "to_state_dict",
    "unstack",
    "warmup",
    "watch",
]
