"""Kind names, each spelled once: the registries' keys (here, at the bottom of the import graph)."""

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
