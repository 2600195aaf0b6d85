"""``python -m benchmarks``: run the benchmark suite (see ``--help``)."""

from ._cli import main

raise SystemExit(main())
