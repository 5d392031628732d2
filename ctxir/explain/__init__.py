"""Explanations: why a model scored a query-document pair as it did (attributions, attention)."""

from ctxir.explain.attention import cls_attention  # noqa: F401 -- public API
from ctxir.explain.bi_encoder import explain_bi_encoder, mean_pooling_contributions  # noqa: F401 -- public API
from ctxir.explain.integrated_gradients import COMPLETENESS_TOLERANCE, DEFAULT_IG_STEPS  # noqa: F401 -- public API
from ctxir.explain.pair import explain  # noqa: F401 -- public API
from ctxir.explain.rerankers import explain_cls_lr, explain_cross_encoder  # noqa: F401 -- public API
