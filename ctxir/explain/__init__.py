"""Explanations: why a model scored a query-document pair as it did (attributions, attention).

bi_encoder.py            a bi-encoder's cosine split over tokens: exact for mean pooling, else integrated gradients
rerankers.py             integrated gradients of a cross-encoder's or a CLS-LR ranker's score
integrated_gradients.py  the integrated-gradients core: baseline, adaptive steps, completeness; input checks
attention.py             the attention [CLS] pays to each token, per layer
pair.py                  ``explain``: one pair explained by every model given (the ``/explain`` answer)
failures.py              why a failure report's winner outranked the relevant document (BM25, bi-encoder, re-ranker)
"""

from ctxir.explain.attention import cls_attention  # noqa: F401 -- public API
from ctxir.explain.bi_encoder import (  # noqa: F401 -- public API
    BI_ENCODER_METHODS,
    EXACT_CHECK_ATOL,
    explain_bi_encoder,
    mean_pooling_contributions,
)
from ctxir.explain.integrated_gradients import (  # noqa: F401 -- public API
    BASELINES,
    COMPLETENESS_ATOL,
    COMPLETENESS_TOLERANCE,
    DEFAULT_IG_STEPS,
    MAX_IG_STEPS,
)
from ctxir.explain.pair import explain  # noqa: F401 -- public API
from ctxir.explain.rerankers import explain_cls_lr, explain_cross_encoder  # noqa: F401 -- public API
