"""Re-ranking: score the first stage's hits again (cross-encoder, CLS-LR, their registry), and the pipeline of both stages."""

from ctxir.rerank.calibration import Calibration, calibration_for, fit_calibration  # noqa: F401 -- public API
from ctxir.rerank.cls_lr import ClsLrRanker, cls_features, head_scores  # noqa: F401 -- public API
from ctxir.rerank.passages import Passages  # noqa: F401 -- public API
from ctxir.rerank.rankers import (  # noqa: F401 -- public API
    RERANK_BACKENDS,
    CrossEncoderReranker,
    Reranker,
)
