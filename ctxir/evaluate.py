"""``python -m ctxir.evaluate``, the documented command, runs :mod:`ctxir.evaluation.evaluate`.

Imported, this old path gives that same module, with a DeprecationWarning (kept for one release).
"""

from ctxir._moved import alias

alias(__name__, "ctxir.evaluation.evaluate")
