"""The model types ctxir publishes (metrics.json's ``model_type``): a new type is one entry. No torch import.

>>> list(MODEL_TYPES)
['bi-encoder', 'cross-encoder', 'cls-lr']
>>> MODEL_TYPES["cross-encoder"].pipeline_tag({"num_labels": 1}), MODEL_TYPES["cross-encoder"].pipeline_tag({"num_labels": 3})
('text-ranking', 'text-classification')
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ctxir import kinds
from ctxir.files import read_json
from ctxir.names import CLS_LR_CONFIG, PAIR_ORDERS_FILE

SENTENCE_TRANSFORMERS = "sentence-transformers"


@dataclass(frozen=True)
class ModelType:
    """One published model type: how its folder is recognised, what its card states, how it is published."""

    name: str
    template: str  # its card's file in model_cards/
    tags: tuple[str, ...]  # Hub tags (ctxir's and the training datasets' are added)
    library: str  # the card's library_name
    pipeline_tag: Callable[[Mapping], str]  # the Hub task, from the model's facts
    detect: Callable[[Path], bool]  # a folder holds a saved model of this type (loading nothing)
    facts: Callable[[Path], dict]  # what the card states, read by loading the model as its users will
    load_scores: Callable[[str, Sequence[str]], Any]  # (folder, texts) → scores: staging's load-back check
    carries_base: bool = False  # staging copies in the encoder it reads features from

    @property
    def sentence_transformers(self) -> bool:
        return self.library == SENTENCE_TRANSFORMERS


def _sentence_transformers_type(folder: Path) -> str | None:
    # the class sentence-transformers saved the folder from ("SentenceTransformer", "CrossEncoder"); None: not said
    config = folder / "config_sentence_transformers.json"
    return read_json(config, strict=False).get("model_type") if config.is_file() else None


def _is_bi_encoder(folder: Path) -> bool:
    return (folder / "modules.json").is_file() and _sentence_transformers_type(folder) != "CrossEncoder"


def _is_cross_encoder(folder: Path) -> bool:
    if _sentence_transformers_type(folder) == "CrossEncoder":
        return True
    if (folder / "modules.json").is_file() or not (folder / "config.json").is_file():
        return False
    # a pre-v4 sentence-transformers CrossEncoder: a plain transformers folder with a classification head
    archs = read_json(folder / "config.json", strict=False).get("architectures") or []
    return any(a.endswith("ForSequenceClassification") for a in archs)


def _bi_encoder_facts(folder: Path) -> dict:
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(folder), device="cpu", trust_remote_code=False)
    modules = [type(m).__name__ for m in model]
    pooling = next((getattr(m, "pooling_mode", None) for m in model if type(m).__name__ == "Pooling"), None)
    plain = modules[:2] == ["Transformer", "Pooling"] and set(modules[2:]) <= {"Normalize"}
    return {
        "dimension": model.get_embedding_dimension(),
        "pooling": pooling or "custom",
        "normalize": "Normalize" in modules,
        "max_seq_length": model.max_seq_length,
        "modules": " → ".join(modules),
        "plain_transformers": plain and pooling in ("mean", "cls", "max"),
    }


def _cross_encoder_facts(folder: Path) -> dict:
    from ctxir.encoders.models import is_adapter, is_ctxir_modular, load_cross_encoder, top_layers_config
    from ctxir.rerank.stage_fusion import TIE_BREAK_WEIGHT

    load_cross_encoder.cache_clear()
    model = load_cross_encoder(str(folder), "cpu")  # an adapter merged into its base, resolved offline too
    top = top_layers_config(folder)
    return {
        "adapter": is_adapter(folder),
        "num_labels": model.num_labels,
        "max_length": getattr(model, "max_seq_length", None) or model.max_length,
        "activation": type(model.activation_fn).__name__,
        "ctxir_modules": is_ctxir_modular(folder),
        "modules": " → ".join(type(m).__name__ for m in model),
        "term_match": any(getattr(m, "term_match", False) for m in model),
        "trained_layers": (f"{top['trained_from_layer']}–{top['num_hidden_layers'] - 1}" if top else None),
        "fusion": read_json(folder / "fusion.json") or None,
        "tie_break_weight": TIE_BREAK_WEIGHT,
        "passages": read_json(folder / "passages.json") or None,
        "pair_orders": read_json(folder / PAIR_ORDERS_FILE) or None,
    }


def _cls_lr_facts(folder: Path) -> dict:
    config = read_json(folder / CLS_LR_CONFIG)
    meta = config.get("metadata") or {}
    return {
        "hidden_size": config.get("hidden_size"),
        "layer": config.get("layer", -1),
        "max_length": config.get("max_length", 512),
        "C": meta.get("C", "–"),
        "class_weight": meta.get("class_weight"),
        "train_positives": meta.get("train_positives"),
        "base_source": config.get("base_model_source"),
        "score_feature": bool(config.get("score_feature", False)),
        "score_emphasis": meta.get("score_emphasis"),
    }


def _bi_encoder_scores(path: str, texts: Sequence[str]):
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(path, device="cpu", trust_remote_code=False).encode(list(texts))


def _cross_encoder_scores(path: str, texts: Sequence[str]):
    from ctxir.encoders.models import load_cross_encoder

    load_cross_encoder.cache_clear()
    return load_cross_encoder(path, "cpu").predict([tuple(texts[:2])])


def _cls_lr_scores(path: str, texts: Sequence[str]):
    from ctxir.rerank.cls_lr import ClsLrRanker

    return ClsLrRanker.load(path, device="cpu").score_pairs(texts[0], list(texts[1:]))


MODEL_TYPES: dict[str, ModelType] = {
    kind.name: kind
    for kind in (
        ModelType(
            name=kinds.BI_ENCODER,
            template="bi_encoder.md",
            tags=(SENTENCE_TRANSFORMERS, "feature-extraction", "sentence-similarity", "dense-retrieval"),
            library=SENTENCE_TRANSFORMERS,
            pipeline_tag=lambda facts: "sentence-similarity",
            detect=_is_bi_encoder,
            facts=_bi_encoder_facts,
            load_scores=_bi_encoder_scores,
        ),
        ModelType(
            name=kinds.CROSS_ENCODER,
            template="cross_encoder.md",
            tags=(SENTENCE_TRANSFORMERS, "cross-encoder", "reranker", "text-ranking"),
            library=SENTENCE_TRANSFORMERS,
            pipeline_tag=lambda facts: (
                "text-ranking" if facts.get("num_labels", 1) == 1 else "text-classification"
            ),
            detect=_is_cross_encoder,
            facts=_cross_encoder_facts,
            load_scores=_cross_encoder_scores,
        ),
        # CLS-LR scores (query, document) pairs for ranking: that is what text-ranking means on the Hub
        ModelType(
            name=kinds.CLS_LR,
            template="cls_lr.md",
            tags=("reranker", "logistic-regression", "cls-features", "text-ranking"),
            library="ctxir",
            pipeline_tag=lambda facts: "text-ranking",
            detect=lambda folder: (folder / CLS_LR_CONFIG).is_file(),
            facts=_cls_lr_facts,
            load_scores=_cls_lr_scores,
            carries_base=True,
        ),
    )
}
