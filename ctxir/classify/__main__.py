"""``python -m ctxir.classify``: see ``ctxir.classify.ClassifyArgs`` (``--help``)."""

import sys

from ctxir.classify import main

sys.exit(main())
