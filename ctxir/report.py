"""``python -m ctxir.report``, the documented command, runs :mod:`ctxir.evaluation.report`.

Imported, this old path gives that same module, with a DeprecationWarning (kept for one release).
"""

from ctxir._moved import alias

alias(__name__, "ctxir.evaluation.report")
