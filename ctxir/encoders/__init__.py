"""Encoders: load models and turn text into vectors (``BiEncoder``, ``pool``), heads, ONNX backends, sharding."""

from ctxir.encoders.bi_encoder import (  # noqa: F401 -- public API
    BACKENDS,
    FULL_CHECK_ROWS,
    BiEncoder,
    EmbeddingCache,
    cache_root,
    hash_texts,
    weights_fingerprint,
)
from ctxir.encoders.pooling import pool  # noqa: F401 -- public API
