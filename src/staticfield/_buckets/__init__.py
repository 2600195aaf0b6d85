"""Shape buckets (``buckets=`` of ``sf.jit`` and ``@sf.jit_method``): pad a row axis up to a
bucket size so that variable batch sizes compile a handful of programs, soundly.

``_rows`` follows the row axis through a traced program's jaxpr (``_rules``: one rule per
primitive; an operation without a rule counts as mixing rows) and says which outputs carry
it; ``_sizes`` chooses a bucket (``"pow2"``, a list, ``"auto"``); ``_pad`` pads inputs (on
the host for NumPy, by one small program of its own per new size for device arrays) and
slices outputs back; ``_front`` is the call (pad, run, slice, count) and the body JAX
traces (analyse, then evaluate the analysed program), given the engine's call and tracker
as explicit inputs; ``_errors`` holds ``BucketError`` and ``BucketCheckError``.

Imports: ``_core`` and ``_explain`` only; ``_jit`` builds on it, and ``_watch`` recognises
its padding programs by an attribute, without importing it.
"""

from ._errors import BucketCheckError as BucketCheckError
from ._errors import BucketError as BucketError
from ._front import BucketSpec as BucketSpec
from ._front import bucket_spec as bucket_spec
