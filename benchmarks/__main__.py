"""``python -m benchmarks KIND --flags``: see ``benchmarks`` (the package docstring)."""

import sys

from benchmarks import main

sys.exit(main())
