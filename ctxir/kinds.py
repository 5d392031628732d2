"""Kind names, each spelled once: the keys of the re-ranker, first-stage and model-type registries, and the classes'
``name``. Here, at the bottom of the import graph, so registered modules never import their registry; everything else
names a kind by these or a registry entry, never by a literal (tests/test_layout.py). Files and the API carry them.

>>> CROSS_ENCODER, CLS_LR, BI_ENCODER, HYBRID
('cross-encoder', 'cls-lr', 'bi-encoder', 'hybrid')
"""

from __future__ import annotations

# re-ranker kinds; the first two, with BI_ENCODER, are also the published model types (metrics.json's "model_type")
CROSS_ENCODER = "cross-encoder"
CLS_LR = "cls-lr"
STS_CROSS_ENCODER = "sts-cross-encoder"  # the sentence-pair (STS-B) scorer, published as a cross-encoder
BI_ENCODER = "bi-encoder"  # also the app's and explanations' name for the bi-encoder beside the re-rankers

# first stages (ctxir.retrieval.registry)
BM25 = "bm25"
DENSE = "dense"
HYBRID = "hybrid"
