"""The data layer: what an ``sf`` class and its instances are.

Owns the decorator and ``Struct``; how a field is marked (``_field``, and ``_marks`` for
what a class body's annotations and defaults become) and the per-class facts computed
once at decoration (``_spec``); which classes are decorated, and their registration with
JAX (``_registry``: ``SPECS``, the hit paths' one-lookup test); the generated
``__init__``, flatten and unflatten (``_codegen``, through the one code-generation helper
``_gen``); construction checks and freezing of static values (``_checks``, ``_freeze``,
``FrozenDict``); the one identity of static values (``_identity``, written for another
process by ``_portable``) and the type-strict static keys made of it (``_keys``); abstract methods,
``AbstractVar`` and ``AbstractClassVar`` (``_abstract``); ``leaves="any"`` fields' split
of array and other leaves (``_anyleaves``); per-instance state, with one table of who
writes what (``_state``: the table, construction and the flatten cache; ``_sealed``:
``replace``, copy, pickling and ``object.__setattr__`` on a built instance) and what
``vars(obj)`` shows of it (``_vars``: the fields alone); ``mappable=True`` instances as
``Mapping``s (``_mapping``); instance semantics and display (``_instance``,
``_display``); the exception classes (``_errors``); the hiding of staticfield's frames
from tracebacks (``_traceback``); the class attribute of each static field (``_slots``)
and ``deps="read"``'s flatten with nested statics lifted (``_deep``); a large model's flat
form, every leaf in one tuple and one interned shape (``_flatform``); JAX's C++ dispatch
in front of a function's variants (``_front``); the settings every program is lowered
under, one program on every process of a job (``_lowering``); work of staticfield's own inside a
call, whose compiles are not the user's (``_own``); and the one place for JAX's private
names, each checked at import (``_compat``, from the table of them and of the features
that need them in ``_private``).

Imports: JAX, NumPy and the standard library only; nothing else of staticfield. Every
other subpackage stands on this one.
"""
