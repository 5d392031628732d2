"""Explanations: why a model scored a query-document pair as it did (attributions, attention)."""

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
