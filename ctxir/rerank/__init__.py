"""Re-ranking: score the first stage's hits again, and the pipeline that chains both stages.

rankers.py       ``Reranker``, ``CrossEncoderReranker``
cls_lr.py        ``ClsLrRanker``: logistic regression on a cross-encoder's [CLS] (and its own score)
passages.py      ``Passages``: a long document read by its best window (a folder's passages.json)
registry.py      re-ranker kinds by name: ``load_reranker``, ``register_reranker``, ``rank`` (texts in one call)
pipeline.py      ``Pipeline``: retrievers, fusion, a re-ranker
stage_fusion.py  ``StageFusion``: a re-ranker's scores fused with the first stage's (also given by pipeline.py)
calibration.py   ``Calibration``: a cross-encoder's raw scores as probabilities (a folder's calibration.json)
"""

from ctxir.rerank.calibration import Calibration, calibration_for, fit_calibration  # noqa: F401 -- public API
from ctxir.rerank.cls_lr import ClsLrRanker, cls_features, head_scores  # noqa: F401 -- public API
from ctxir.rerank.passages import Passages  # noqa: F401 -- public API
from ctxir.rerank.rankers import (  # noqa: F401 -- public API
    RERANK_BACKENDS,
    CrossEncoderReranker,
    Reranker,
)
