"""Encoders: load models and turn text into vectors (first step after the data).

    models.py        load bi-/cross-encoders and transformers, pick a device (was ``ctxir.models``)
    heads.py         the scoring heads and top layers shipped cross-encoders are built from
                     (was ``ctxir.rerank_heads``)
    pooling.py       token vectors to one vector (was ``ctxir.pooling``)
    onnx_backend.py  the ONNX / int8 encoder backend (was ``ctxir.onnx_backend``)
    bi_encoder.py    ``BiEncoder`` and the embedding cache (was ``ctxir.encoders``)
    internals.py     hidden states and attention of one text (was ``ctxir.internals``)

``ctxir.encoders`` was one module before it became this package: it still gives every name that module had
(the same objects, from :mod:`ctxir.encoders.bi_encoder`), its private helpers too, so old imports keep working.
"""

from ctxir._moved import forward_names
from ctxir.encoders.bi_encoder import (  # noqa: F401 -- what the old ``ctxir.encoders`` module held
    BACKENDS,
    FULL_CHECK_ROWS,
    BiEncoder,
    EmbeddingCache,
    cache_root,
    default_backend,
    default_cache_dir,
    hash_texts,
    weights_fingerprint,
)

# the old module's other names (imported helpers, private functions), from where they live now
__getattr__ = forward_names(__name__, "ctxir.encoders.bi_encoder")
