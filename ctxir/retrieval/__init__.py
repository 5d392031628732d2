"""Retrieval: the first stage — BM25, dense and hybrid retrievers over a corpus.

    ann.py           approximate nearest-neighbour index for dense retrieval (was ``ctxir.ann``)
    fusion.py        reciprocal-rank and weighted score fusion (was ``ctxir.fusion``)
    retrievers.py    ``BM25Retriever``, ``DenseRetriever``, ``HybridRetriever`` (was ``ctxir.retrieval``)
    engines.py       corpus encoding engines: local processes, Ray (was ``ctxir.engines``)

``ctxir.retrieval`` was one module before it became this package: it still gives every name that module had
(the same objects, from :mod:`ctxir.retrieval.retrievers`), its private helpers too, so old imports keep working.
"""

from ctxir._moved import forward_names
from ctxir.retrieval.retrievers import (  # noqa: F401 -- what the old ``ctxir.retrieval`` module held
    AUTO_ANN_THRESHOLD,
    BM25_CACHE_MIN_DOCS,
    BM25_FORMAT,
    DENSE_INDEXES,
    BM25Retriever,
    DenseRetriever,
    HybridRetriever,
    Retriever,
    dense_index_default,
)

# the old module's other names (imported helpers, private functions), from where they live now
__getattr__ = forward_names(__name__, "ctxir.retrieval.retrievers")
