"""Explanations: why a model scored a query-document pair as it did (attributions, attention).

    attributions.py  integrated gradients, pooling contributions, CLS attention (was ``ctxir.explain``)

``ctxir.explain`` was one module before it became this package: it still gives every name that module had
(the same objects, from :mod:`ctxir.explain.attributions`), its private helpers too, so old imports keep working.
"""

from ctxir._moved import forward_names
from ctxir.explain.attributions import (  # noqa: F401 -- what the old ``ctxir.explain`` module held
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

# the old module's other names (imported helpers, private functions), from where they live now
__getattr__ = forward_names(__name__, "ctxir.explain.attributions")
