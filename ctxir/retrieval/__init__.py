"""Retrieval: the first stage — BM25, dense and hybrid retrievers over a corpus.

registry.py           first stages by name: ``FIRST_STAGES``, ``register_first_stage``, ``HybridSettings``
ann.py                approximate nearest-neighbour index for dense retrieval
fusion.py             reciprocal-rank and weighted score fusion
retrievers.py         ``BM25Retriever``, ``DenseRetriever``, ``HybridRetriever``
milvus.py             ``VectorDBRetriever``: dense, BM25 and hybrid search in Milvus (Lite or server)
milvus_collection.py  Milvus collections: connection, schema, indexes, build
"""

from ctxir.retrieval.retrievers import (  # noqa: F401 -- public API
    AUTO_ANN_THRESHOLD,
    BM25_CACHE_MIN_DOCS,
    BM25_FORMAT,
    DENSE_INDEXES,
    BM25Retriever,
    DenseRetriever,
    HybridRetriever,
    Retriever,
)
