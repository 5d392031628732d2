"""``python -m ctxir.hub``, the documented command, runs :mod:`ctxir.publish.hub`.

Imported, this old path gives that same module, with a DeprecationWarning (kept for one release).
"""

from ctxir._moved import alias

alias(__name__, "ctxir.publish.hub")
