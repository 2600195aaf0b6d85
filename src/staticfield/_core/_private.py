"""Every name staticfield takes from JAX's private modules, and the feature that needs it.

The table ``_compat`` checks at import: each ``Private`` says where a name lives, the
parameters staticfield passes or reads, and which feature stops without it; ``FEATURES``
says, for each feature, what is lost without it, in the words ``_compat.unavailable``
tells the user. A capability that needs a new private name adds its row here (and to the
table of ``docs/support.md``, which ``tests/test_support.py`` holds to this one); nothing
else reads this module.

Imports: the standard library only. Called by ``_compat`` alone.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Private:
    """One private name: where it lives, the parameters staticfield relies on, and
    which feature stops working without it.

    ``params`` are the names of the leading parameters staticfield passes or reads,
    in order (``*args`` for a variable positional one); ``None`` for a class or an
    attribute that is not called.
    """

    key: str
    module: str
    attr: str
    params: tuple[str, ...] | None
    feature: str

    @property
    def path(self) -> str:
        return f"{self.module}.{self.attr}"


# What each feature is, as a sentence's subject, and what is lost without it.
FEATURES = {
    "watch": "sf.watch cannot explain recompiles (it still counts and times them)",
    "watch_placement": "sf.watch cannot explain a recompile caused by a new sharding alone",
    "tracebacks": "staticfield's own frames stay in the tracebacks of errors raised through it",
    "cache_size": "cache_size() cannot count compiled programs (compile_count still counts compiles)",
    "store": "the program store stays off",
    "store_layout": ("the arrays a program loaded from the program store returns have avals that JAX's "
                     "trace cache has not seen, so a function called on them inside another "
                     "function's trace is traced again, once"),
    "store_random": ("the program store cannot keep programs whose PRNG keys use an implementation "
                     "defined outside JAX (jax.extend.random.define_prng_impl)"),
    "no_compiles": ("sf.no_compiles() cannot refuse the compiles of functions other than "
                    "staticfield's (sf.jit and jit_method are still refused)"),
    "no_compiles_cache": ("sf.no_compiles() also refuses a program that JAX's persistent compilation "
                          "cache holds (which compiles nothing)"),
    "host_check": ("the processes of a multi-process job do not check that they compile the "
                   "same programs (a mismatch hangs in the first collective)"),
    "process_lowering": ("in a job of several processes, staticfield's programs keep their source "
                         "locations, so a program loaded from the program store, compiled at another "
                         "call site or shared with another function by its trace can wait forever in "
                         "its first collective on XLA's CPU collectives (jax 0.12.1 and later)"),
    "fast_check": "",  # a faster construction check only: without it, isinstance does the work
    "bucket_lines": "sf.BucketError cannot name the source line of the operation that mixes rows",
    "bucket_rules": ("shape buckets refuse, as mixing rows, every primitive staticfield has no rule "
                     "of its own for (JAX's elementwise classification is not there to ask)"),
    "buckets": ("buckets= cannot see how a function uses its row count, so every bucketed call "
                "runs at its exact size (a program per size, as plain jax.jit)"),
    "hit_path": ("a cache hit of sf.jit, and of Cls.method(obj, ...), runs one Python frame of "
                 "staticfield's before JAX (results are the same; calls are a little slower)"),
}

PRIVATE: tuple[Private, ...] = (
    Private("trace_for_jit", "jax._src.pjit", "_trace_for_jit",
            ("fun", "ji", "ctx_mesh", "dbg", "avals", "args", "kwargs"), "watch"),
    Private("trace_state_clean", "jax._src.core", "trace_state_clean", (), "watch"),
    Private("debug_info_source", "jax._src.core", "DebugInfo.func_src_info", None, "watch"),
    Private("call_impl_python", "jax._src.pjit", "_pjit_call_impl_python",
            ("*args", "jaxpr"), "watch_placement"),
    Private("tb_register_exclusion", "jax._src.traceback_util", "register_exclusion", ("path",), "tracebacks"),
    Private("tb_filter", "jax._src.traceback_util", "filter_traceback", ("tb",), "tracebacks"),
    Private("tb_filtering_mode", "jax._src.traceback_util", "_filtering_mode", (), "tracebacks"),
    Private("tb_hide_frames", "jax._src.traceback_util", "_add_tracebackhide_to_hidden_frames",
            ("tb",), "tracebacks"),
    Private("source_register_exclusion", "jax._src.source_info_util", "register_exclusion",
            ("path",), "tracebacks"),
    Private("jitted_cache_size", "jaxlib", "PjitFunction._cache_size", None, "cache_size"),
    Private("array_impl", "jax._src.array", "ArrayImpl", None, "fast_check"),
    # The program store: programs keyed by the trace context, as jax.jit keys its own;
    # LAPACK kernels registered before a program that calls them is loaded (JAX does
    # it while lowering, which a loaded program skips; jax.export does the same).
    Private("trace_context", "jax._src.config", "trace_context", None, "store"),
    Private("trace_context_names", "jax._src.config", "trace_context_names", None, "store"),
    Private("initialize_lapack", "jax._src.lax.linalg", "initialize_lapack", (), "store"),
    # In a job of several processes, programs are lowered without source locations for this
    # thread (see _core._lowering): JAX's setting as a context, not jax.config.update.
    Private("locations_limit", "jax._src.config", "traceback_in_locations_limit", None, "process_lowering"),
    # A typed key's element type (key<fry>) holds its PRNG implementation, whose functions
    # the random primitives lower; a user-defined one is digested by what they compute.
    Private("prng_key_type", "jax._src.random.prng", "KeyTy", None, "store_random"),
    # JAX's "no layout chosen" marker, a singleton that its executables' pickles (which the
    # store writes) would make a new object of: every output aval of a loaded program
    # would then be new to JAX's trace caches (avals hold it from JAX 0.12).
    Private("auto_layout", "jax._src.layout", "AutoLayout", None, "store_layout"),
    Private("source_summary", "jax._src.source_info_util", "summarize", ("source_info",), "bucket_lines"),
    # Shape buckets trace with a symbolic row count; every comparison and hash of it that
    # the user's code makes is recorded (a guard), through these two methods.
    Private("dim_expr", "jax._src.export.shape_poly", "_DimExpr", None, "buckets"),
    Private("dim_expr_evaluate", "jax._src.export.shape_poly", "_DimExpr._evaluate", ("self", "env"), "buckets"),
    # A primitive JAX batches as elementwise (its own classification) is row-wise: the rule
    # for primitives staticfield has no rule of its own for (new ones in a JAX release).
    Private("primitive_batchers", "jax._src.interpreters.batching", "fancy_primitive_batchers", None,
            "bucket_rules"),
    Private("broadcast_batcher", "jax._src.interpreters.batching", "broadcast_batcher",
            ("prim", "axis_data", "args", "dims"), "bucket_rules"),
    Private("vectorized_batcher", "jax._src.interpreters.batching", "vectorized_batcher",
            ("prim", "axis_data", "batched_args", "batch_dims"), "bucket_rules"),
    # A bucket's program run with its callbacks rewired keeps each equation's source line.
    Private("user_context", "jax._src.source_info_util", "user_context", None, "bucket_lines"),
    # sf.no_compiles(): every XLA compile of any JAX function passes through it, after
    # the trace and lowering, before XLA runs (the stance refuses there).
    Private("compile_or_get_cached", "jax._src.compiler", "compile_or_get_cached",
            ("backend", "computation", "devices", "compile_options"), "no_compiles"),
    # ... and inside it, the XLA compile itself, which a persistent-cache hit never reaches.
    Private("backend_compile_and_load", "jax._src.compiler", "backend_compile_and_load",
            ("backend", "module", "executable_devices", "options"), "no_compiles_cache"),
    # The C++ hit path (_jit/_front): a jit object of JAX's own kind whose miss handler is
    # staticfield's, which answers with what a variant's jax.jit answers from its own.
    Private("pjit_function", "jax._src.lib", "_jax.pjit",
            ("function_name", "fun", "cache_miss", "static_argnums", "static_argnames", "global_cache_key",
             "pytree_registry", "shard_arg_fallback", "cache"), "hit_path"),
    Private("pjit_function_cache", "jax._src.lib", "_jax.PjitFunctionCache", None, "hit_path"),
    Private("dispatch_registry", "jax._src.tree_util", "dispatch_registry", None, "hit_path"),
    Private("cc_shard_arg", "jax._src.interpreters.pxla", "cc_shard_arg", None, "hit_path"),
    Private("jitted_cache_miss", "jaxlib", "PjitFunction._cache_miss", None, "hit_path"),
    Private("jitted_clear_cache", "jaxlib", "PjitFunction._clear_cache", None, "hit_path"),
    # Agreement between processes: jax.distributed's client, for its key-value store.
    Private("distributed_state", "jax._src.distributed", "global_state", None, "host_check"),
)
