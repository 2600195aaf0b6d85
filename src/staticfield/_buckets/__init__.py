"""Shape buckets (``buckets=`` of ``sf.jit`` and ``@sf.jit_method``): pad a row axis up to a
bucket size so that variable batch sizes compile a handful of programs, soundly.

``_rows`` follows the row axis through a traced program's jaxpr (``_rules``: one rule per
primitive, ``_control`` for calls, branches and loops; an operation without a rule counts
as mixing rows) and says which outputs carry it; ``_sizes`` chooses a bucket (``"pow2"``,
a list, ``"auto"``); ``_pad`` pads inputs (on the host for NumPy, by one small program of
its own per new size for device arrays) and slices outputs back; ``_front`` is the call
(pad, run, slice, count), given the engine's call as an explicit input; ``_trace`` the
body JAX traces in place of the user's function (analyse, then evaluate the analysed
program); ``_report`` the checking mode and the ``"bucket"`` explanations; ``_recorded``
what a program store record keeps of a bucket (for ``sf.warmup``); ``_ahead`` the
arguments and results of ``lower``/``trace``/``eval_shape``/``precompile``; ``_errors``
holds ``BucketError``, ``BucketCheckError`` and the messages.

Imports: ``_core`` and ``_explain`` only; ``_jit`` builds on it, and ``_watch`` recognises
its padding programs by an attribute, without importing it.
"""

from ._errors import BucketCheckError as BucketCheckError
from ._errors import BucketError as BucketError
from ._front import BucketSpec as BucketSpec
from ._front import bucket_spec as bucket_spec
from ._trace import ROWS_KW as ROWS_KW
