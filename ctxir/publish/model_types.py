"""The model types ctxir publishes (metrics.json's ``model_type``): one entry each, read by the cards and the checks.

An entry says which template renders its card and the Hub tags, library and pipeline tag it is published under. A
re-ranker kind names its type in ``RerankerKind.card`` (the STS pair scorer is published as a cross-encoder).

>>> list(MODEL_TYPES)
['bi-encoder', 'cross-encoder', 'cls-lr']
>>> MODEL_TYPES["cross-encoder"].pipeline_tag({"num_labels": 1}), MODEL_TYPES["cross-encoder"].pipeline_tag({"num_labels": 3})
('text-ranking', 'text-classification')
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

SENTENCE_TRANSFORMERS = "sentence-transformers"


@dataclass(frozen=True)
class ModelType:
    """One published model type: ``template`` its card's file in model_cards/, ``tags`` the Hub tags (ctxir's and
    the training datasets' are added), ``library`` the card's ``library_name`` (sentence-transformers: the card
    cites Sentence-BERT), ``pipeline_tag`` the Hub task from the facts ``model_facts`` read off the model;
    ``carries_base``: its folder names the encoder it reads features from (bundled or by path), which staging copies
    in beside it, recording that encoder's license."""

    name: str
    template: str
    tags: tuple[str, ...]
    library: str
    pipeline_tag: Callable[[Mapping], str]
    carries_base: bool = False

    @property
    def sentence_transformers(self) -> bool:
        return self.library == SENTENCE_TRANSFORMERS


def _ranking_or_classes(facts: Mapping) -> str:
    # one logit ranks pairs; several are the classes of a pair classifier
    return "text-ranking" if facts.get("num_labels", 1) == 1 else "text-classification"


MODEL_TYPES: dict[str, ModelType] = {
    kind.name: kind
    for kind in (
        ModelType(
            name="bi-encoder",
            template="bi_encoder.md",
            tags=(SENTENCE_TRANSFORMERS, "feature-extraction", "sentence-similarity", "dense-retrieval"),
            library=SENTENCE_TRANSFORMERS,
            pipeline_tag=lambda facts: "sentence-similarity",
        ),
        ModelType(
            name="cross-encoder",
            template="cross_encoder.md",
            tags=(SENTENCE_TRANSFORMERS, "cross-encoder", "reranker", "text-ranking"),
            library=SENTENCE_TRANSFORMERS,
            pipeline_tag=_ranking_or_classes,
        ),
        # CLS-LR scores (query, document) pairs for ranking: that is what text-ranking means on the Hub
        ModelType(
            name="cls-lr",
            template="cls_lr.md",
            tags=("reranker", "logistic-regression", "cls-features", "text-ranking"),
            library="ctxir",
            pipeline_tag=lambda facts: "text-ranking",
            carries_base=True,
        ),
    )
}
