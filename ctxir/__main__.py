"""``python -m ctxir COMMAND``: the ``ctxir`` console script where it is not on PATH (see ``ctxir.cli``)."""

import sys

from ctxir.cli import main

sys.exit(main())
