"""Old path of :mod:`ctxir.publish.cards`, kept for one release.

Imported, it gives that same module, with a DeprecationWarning.
"""

from ctxir._moved import alias

alias(__name__, "ctxir.publish.cards")
