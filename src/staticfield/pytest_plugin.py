"""The pytest plugin under the name ``pytest -p staticfield.pytest_plugin`` takes.

The plugin lives in the top-level module ``_staticfield_pytest``, which the ``pytest11``
entry point names, so that loading it imports nothing heavy (this package's
``__init__`` imports JAX). This name is the same module object, so pytest never sees
two plugins.
"""

import sys

import _staticfield_pytest

sys.modules[__name__] = _staticfield_pytest
