"""Retrieval, the first stage: BM25, dense (exact or ANN) and hybrid retrievers (retrievers.py), their registry,
rank fusion, and Milvus (milvus.py)."""

from ctxir.retrieval.retrievers import (  # noqa: F401 -- public API
    AUTO_ANN_THRESHOLD,
    DENSE_INDEXES,
    BM25Retriever,
    DenseRetriever,
    HybridRetriever,
    Retriever,
)
