"""Old path of :mod:`ctxir.encoders.heads`, kept without a warning: saved model folders (the shipped ones in
``ctxir/assets/models``) name their modules ``ctxir.rerank_heads.<Class>`` in ``modules.json``."""

from ctxir._moved import alias

alias(__name__, "ctxir.encoders.heads", warn=False)
