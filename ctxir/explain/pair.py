"""``explain``: one (query, document) pair explained by every model given, as one JSON-able dict (``/explain``)."""

from __future__ import annotations

from collections.abc import Mapping

from ctxir.checks import check_choice
from ctxir.encoders.models import DEFAULT_BI_ENCODER
from ctxir.explain.bi_encoder import explain_bi_encoder
from ctxir.explain.integrated_gradients import (
    BASELINES,
    DEFAULT_IG_STEPS,
    MAX_IG_STEPS,
    check_pair_text,
    check_steps,
)
from ctxir.explain.rerankers import explainer_for
from ctxir.rerank.registry import get_reranker
from ctxir.types import CtxirError


def explain(
    query: str,
    document: str,
    bi_encoder=DEFAULT_BI_ENCODER,
    rerankers: Mapping[str, object] | None = None,
    n_steps: int = DEFAULT_IG_STEPS,
    max_steps: int = MAX_IG_STEPS,
    baseline: str = "pad",
    attention: bool = True,
    title: str = "",
) -> dict:
    """Explain one (query, document) pair with every model given; a JSON-able dict (the ``/explain`` answer).
    ``rerankers``: {kind: model}, each explained under the kind's key; ``cross_encoder`` holds the first's."""
    query, document = check_pair_text(query, "query"), check_pair_text(document, "document")
    if bi_encoder is None:
        raise CtxirError(
            "bi_encoder is None: pass a SentenceTransformer, a ctxir.BiEncoder or a model name "
            f"such as {DEFAULT_BI_ENCODER!r}"
        )
    check_steps(n_steps, max_steps)
    check_choice(baseline, "baseline", BASELINES)
    given = {kind: model for kind, model in (rerankers or {}).items() if model is not None}
    kinds = [get_reranker(kind) for kind in given]  # an unknown kind fails before any model runs
    options = {"n_steps": n_steps, "max_steps": max_steps, "baseline": baseline}
    result = {
        "query": query,
        "document": document,
        "bi_encoder": explain_bi_encoder(bi_encoder, query, document, **options),
    }
    for kind in kinds:
        result[kind.key] = explainer_for(kind)(
            given[kind.name], query, document, attention=attention, title=title, **options
        )
        result.setdefault("cross_encoder", result[kind.key])
    return result
