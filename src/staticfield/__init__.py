"""staticfield: pytree dataclasses for JAX with safe static fields.

Static fields are frozen, hashable and compared by value (they form the jit cache
key); dynamic fields are the traced children. ``sf.jit_method`` and ``sf.jit``
compile only when something really changed, and explain every recompile.
"""

from ._decorator import dataclass as dataclass
from ._errors import RecompileError as RecompileError
from ._errors import StaticFieldWarning as StaticFieldWarning
from ._explain import Change as Change
from ._explain import Recompile as Recompile
from ._field import Static as Static
from ._field import field as field
from ._field import is_static as is_static
from ._field import static as static
from ._frozendict import FrozenDict as FrozenDict
from ._instance import replace as replace
from ._jit import jit as jit
from ._jit import jit_method as jit_method
from ._serialization import from_state_dict as from_state_dict
from ._serialization import to_state_dict as to_state_dict
from ._sharding import shard as shard
from ._sharding import shardings as shardings
from ._spec import dynamic_fields as dynamic_fields
from ._spec import fields as fields
from ._spec import static_fields as static_fields
from ._stack import stack as stack
from ._struct import Struct as Struct
from ._stack import unstack as unstack
from ._watch import watch as watch

__version__ = "0.1.0"

__all__ = [
    "Change",
    "FrozenDict",
    "Recompile",
    "RecompileError",
    "Static",
    "StaticFieldWarning",
    "Struct",
    "dataclass",
    "dynamic_fields",
    "field",
    "fields",
    "from_state_dict",
    "is_static",
    "jit",
    "jit_method",
    "replace",
    "shard",
    "shardings",
    "stack",
    "static",
    "static_fields",
    "to_state_dict",
    "unstack",
    "watch",
]
