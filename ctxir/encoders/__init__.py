"""Encoders: load models and turn text into vectors (first step after the data).

models.py        load bi-/cross-encoders and transformers, pick a device
heads.py         the scoring heads and top layers shipped cross-encoders are built from
reranker_heads.py  the heads' code itself, importing no ctxir: staged Hub repos carry it for trust_remote_code
pooling.py       token vectors to one vector
onnx_export.py   ONNX files made once: the float32 export, int8 copies (all MatMuls or a cross-encoder's base layers)
onnx_backend.py  the ONNX / int8 encoder backend: ONNX Runtime sessions for bi- and cross-encoders
bi_encoder.py    ``BiEncoder`` and the embedding cache
internals.py     hidden states and attention of one text
shards.py        embedding shards on disk: plan, digests, model fingerprint, manifest
sharded.py       ``encode_sharded``: Ray Data encodes a corpus on many workers into shards
"""

from ctxir.encoders.bi_encoder import (  # noqa: F401 -- public API
    BACKENDS,
    FULL_CHECK_ROWS,
    BiEncoder,
    EmbeddingCache,
    cache_root,
    default_cache_dir,
    hash_texts,
    weights_fingerprint,
)
from ctxir.encoders.pooling import pool  # noqa: F401 -- public API
