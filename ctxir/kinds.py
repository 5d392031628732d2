"""Kind names, each spelled once: the keys the registries file their entries under.

The re-ranker registry (``ctxir.rerank.registry.RERANKERS``), the first-stage registry
(``ctxir.retrieval.registry.FIRST_STAGES``) and the published model types (``ctxir.publish.model_types.MODEL_TYPES``)
key their entries by these names, and the classes beneath those registries carry them as their ``name``
(``CrossEncoderReranker.name``, ``BM25Retriever.name``), as a sentence-transformers model carries its type: the class
says what it is, the registry says what is offered. A registry imports the modules it registers (on use), so those
modules read their names here, at the bottom of the import graph, never from the registry; everything else names a
kind through these constants or a registry entry (``RERANKERS[kinds.CLS_LR]``, ``registry.CLS_LR.name``), never by a
literal (tests/test_layout.py checks). The strings are what files on disk and the API carry (metrics.json's
``model_type``, ``--rerank``, ``/search``'s ``first_stage``), so they do not change. Imports nothing.

>>> CROSS_ENCODER, CLS_LR, BI_ENCODER, HYBRID
('cross-encoder', 'cls-lr', 'bi-encoder', 'hybrid')
"""

from __future__ import annotations

# re-ranker kinds (ctxir.rerank.registry); the first two, with BI_ENCODER, are also the published model types
# (ctxir.publish.model_types: metrics.json's "model_type")
CROSS_ENCODER = "cross-encoder"
CLS_LR = "cls-lr"
STS_CROSS_ENCODER = "sts-cross-encoder"  # the sentence-pair (STS-B) scorer, published as a cross-encoder
# a bi-encoder: the published model type, and the app's and explanations' name for the bi-encoder beside the
# re-ranker kinds ("Explain with", the inspectable models)
BI_ENCODER = "bi-encoder"

# first stages (ctxir.retrieval.registry)
BM25 = "bm25"
DENSE = "dense"
HYBRID = "hybrid"
