"""What a trace depended on, and how two traces differ, in the user's words.

``_describe`` turns the arguments of one trace into a flat map by user path
(``self.depth``, ``params.w``); ``_diff`` compares two such maps into ``Change`` and
``Recompile`` events and their hints; ``_names`` names a changed function, bound method
or class the same way for both (and for ``sf.watch``); ``_text`` says how a value reads
(``weak f32[3]``); ``_transform`` how a transformation around a call changed (``vmap:
batch 4 → 8``); ``_advice`` finds the one cause behind every compile of a function, for
the compile-count warning. Used on the miss path only.

Imports: ``_core`` only. ``_jit``, ``_deps`` and ``_watch`` read these events.
"""

from ._diff import Change as Change
from ._diff import Recompile as Recompile  # 0.1 defined them in staticfield._explain
