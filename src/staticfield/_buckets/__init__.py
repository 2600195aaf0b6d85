"""Shape buckets (``buckets=`` of ``sf.jit`` and ``@sf.jit_method``): pad a row axis up to a
bucket size so that variable batch sizes compile a handful of programs, soundly.

The call: ``_front`` (pad, run, slice, count; given the engine's call as an explicit
input), ``_args`` (which arguments are bucketed, their rows, the bucket, the arguments
padded to it), ``_sizes`` (the bucket: ``"pow2"``, a list, ``"auto"``) and ``_pad`` (on
the host for NumPy, by one small program of its own per new size for device arrays;
outputs sliced back). The trace: ``_trace`` is the body JAX traces in place of the user's
function, in named steps: ``_verdict`` judges the function for one non-row key (traced
with the row count a symbol, ``_symbolic``, every decision on it recorded where the code
outside JAX makes it, ``_frames``; analysed by ``_analysis`` over the states of
``_lattice``, with one rule per primitive in ``_rules``, ``_indexing`` for indexing,
``_control`` for calls, branches and loops and ``_shards`` for a ``shard_map`` that splits
the rows over devices; an operation without a rule counts as mixing rows), ``_compare`` shows that the program that runs is the program analysed (by an exact
rule, with the forms of ``_forms`` normalised; where it is not, ``_keys`` keeps that key's
calls at their exact size), and ``_run`` runs it with its callbacks
handed the real rows. Around them: ``_report`` (the checking mode; under a
transformation, ``_inside``: the comparison inside the caller's program), ``_explanations`` (the
``"bucket"`` explanations and the near miss), ``_recorded`` (what a program store record
keeps of a bucket, for ``sf.warmup``), ``_ahead`` (the arguments and results of
``lower``/``trace``/``eval_shape``/``precompile``) and ``_errors`` (``BucketError``,
``BucketCheckError`` and the messages).

Imports: ``_core`` and ``_explain`` only; ``_jit`` builds on it, and ``_watch`` recognises
its padding programs by an attribute, without importing it.
"""

from ._errors import BucketCheckError as BucketCheckError
from ._errors import BucketError as BucketError
from ._front import BucketSpec as BucketSpec
from ._front import bucket_spec as bucket_spec
from ._trace import ROWS_KW as ROWS_KW
