"""Re-ranking: score the first stage's hits again, and the pipeline that chains both stages.

    rankers.py       ``Reranker``, ``CrossEncoderReranker`` (``Passages``: long documents by their best window),
                     ``ClsLrRanker`` (was ``ctxir.rerank``)
    registry.py      re-ranker kinds by name: ``load_reranker``, ``register_reranker`` (was ``ctxir.rerankers``)
    pipeline.py      ``Pipeline``: retrievers, fusion, a re-ranker (was ``ctxir.pipeline``)
    stage_fusion.py  ``StageFusion``: a re-ranker's scores fused with the first stage's (also given by pipeline.py)

``ctxir.rerank`` was one module before it became this package: it still gives every name that module had
(the same objects, from :mod:`ctxir.rerank.rankers`), its private helpers too, so old imports keep working.
"""

from ctxir.rerank.rankers import (  # noqa: F401 -- what the old ``ctxir.rerank`` module held
    ClsLrRanker,
    CrossEncoderReranker,
    Passages,
    Reranker,
    cls_features,
)


def __getattr__(name: str):
    # The old module's other names (imported helpers, private functions), from the module that holds them now.
    import ctxir.rerank.rankers as module

    try:
        return getattr(module, name)
    except AttributeError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
