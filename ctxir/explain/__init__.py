"""Explanations: why a model scored a query-document pair as it did (attributions, attention).

attributions.py  integrated gradients, pooling contributions, CLS attention
failures.py      why a failure report's winner outranked the relevant document (BM25, bi-encoder, re-ranker)
"""

from ctxir.explain.attributions import (  # noqa: F401 -- public API
    BASELINES,
    BI_ENCODER_METHODS,
    COMPLETENESS_ATOL,
    COMPLETENESS_TOLERANCE,
    DEFAULT_IG_STEPS,
    EXACT_CHECK_ATOL,
    MAX_IG_STEPS,
    cls_attention,
    explain,
    explain_bi_encoder,
    explain_cls_lr,
    explain_cross_encoder,
    mean_pooling_contributions,
)
