"""Re-ranking: score the first stage's hits again, and the pipeline that chains both stages.

    rankers.py       ``Reranker``, ``CrossEncoderReranker`` (``Passages``: long documents by their best window),
                     ``ClsLrRanker`` (was ``ctxir.rerank``)
    registry.py      re-ranker kinds by name: ``load_reranker``, ``register_reranker`` (was ``ctxir.rerankers``)
    pipeline.py      ``Pipeline``: retrievers, fusion, a re-ranker (was ``ctxir.pipeline``)
    stage_fusion.py  ``StageFusion``: a re-ranker's scores fused with the first stage's (also given by pipeline.py)
    calibration.py   ``Calibration``: a cross-encoder's raw scores as probabilities (a folder's calibration.json)

``ctxir.rerank`` was one module before it became this package: it still gives every name that module had
(the same objects, from :mod:`ctxir.rerank.rankers`), its private helpers too, so old imports keep working.
"""

from ctxir._moved import forward_names
from ctxir.rerank.calibration import Calibration, calibration_for, fit_calibration  # noqa: F401 -- public API
from ctxir.rerank.rankers import (  # noqa: F401 -- what the old ``ctxir.rerank`` module held
    RERANK_BACKENDS,
    ClsLrRanker,
    CrossEncoderReranker,
    Passages,
    Reranker,
    cls_features,
    default_rerank_backend,
)

# the old module's other names (imported helpers, private functions), from where they live now
__getattr__ = forward_names(__name__, "ctxir.rerank.rankers")
