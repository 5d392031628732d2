"""The model types ctxir publishes (metrics.json's ``model_type``): a new type is one entry. No torch import."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from ctxir import kinds
from ctxir.files import read_json
from ctxir.names import CLS_LR_CONFIG, PAIR_ORDERS_FILE

SENTENCE_TRANSFORMERS = "sentence-transformers"


class ModelType:
    """One published model type: ``detect(folder)`` loads nothing, ``facts(folder)`` and ``load_scores`` load it."""

    name = ""
    template = ""  # its card's file in model_cards/
    tags: tuple[str, ...] = ()  # Hub tags (ctxir's and the training datasets' are added)
    library = SENTENCE_TRANSFORMERS  # the card's library_name
    carries_base = False  # staging copies in the encoder it reads features from

    def pipeline_tag(self, facts: Mapping) -> str:
        """The Hub task, from the model's facts; CLS-LR scores (query, document) pairs: text-ranking on the Hub."""
        return "text-ranking"


def _sentence_transformers_type(folder: Path) -> str | None:
    # the class sentence-transformers saved the folder from ("SentenceTransformer", "CrossEncoder"); None: not said
    config = folder / "config_sentence_transformers.json"
    return read_json(config, strict=False).get("model_type") if config.is_file() else None


class BiEncoderType(ModelType):
    name = kinds.BI_ENCODER
    template = "bi_encoder.md"
    tags = (SENTENCE_TRANSFORMERS, "feature-extraction", "sentence-similarity", "dense-retrieval")

    def pipeline_tag(self, facts):
        return "sentence-similarity"

    def detect(self, folder):
        return (folder / "modules.json").is_file() and _sentence_transformers_type(folder) != "CrossEncoder"

    def facts(self, folder):
        from sentence_transformers import SentenceTransformer

        model = SentenceTransformer(str(folder), device="cpu", trust_remote_code=False)
        modules = [type(m).__name__ for m in model]
        pooling = next(
            (getattr(m, "pooling_mode", None) for m in model if type(m).__name__ == "Pooling"), None
        )
        plain = modules[:2] == ["Transformer", "Pooling"] and set(modules[2:]) <= {"Normalize"}
        return {
            "dimension": model.get_embedding_dimension(),
            "pooling": pooling or "custom",
            "normalize": "Normalize" in modules,
            "max_seq_length": model.max_seq_length,
            "modules": " → ".join(modules),
            "plain_transformers": plain and pooling in ("mean", "cls", "max"),
        }

    def load_scores(self, path, texts):
        from sentence_transformers import SentenceTransformer

        return SentenceTransformer(path, device="cpu", trust_remote_code=False).encode(list(texts))


class CrossEncoderType(ModelType):
    name = kinds.CROSS_ENCODER
    template = "cross_encoder.md"
    tags = (SENTENCE_TRANSFORMERS, "cross-encoder", "reranker", "text-ranking")

    def pipeline_tag(self, facts):
        return "text-ranking" if facts.get("num_labels", 1) == 1 else "text-classification"

    def detect(self, folder):
        if _sentence_transformers_type(folder) == "CrossEncoder":
            return True
        if (folder / "modules.json").is_file() or not (folder / "config.json").is_file():
            return False
        # a pre-v4 sentence-transformers CrossEncoder: a plain transformers folder with a classification head
        archs = read_json(folder / "config.json", strict=False).get("architectures") or []
        return any(a.endswith("ForSequenceClassification") for a in archs)

    def facts(self, folder):
        from ctxir.encoders.models import is_adapter, is_ctxir_modular, load_cross_encoder, top_layers_config
        from ctxir.rerank.stage_fusion import TIE_BREAK_WEIGHT

        load_cross_encoder.cache_clear()
        # an adapter merged into its base, resolved offline too
        model = load_cross_encoder(str(folder), "cpu")
        top = top_layers_config(folder)
        return {
            "adapter": is_adapter(folder),
            "num_labels": model.num_labels,
            "max_length": getattr(model, "max_seq_length", None) or model.max_length,
            "activation": type(model.activation_fn).__name__,
            "ctxir_modules": is_ctxir_modular(folder),
            "modules": " → ".join(type(m).__name__ for m in model),
            "term_match": any(getattr(m, "term_match", False) for m in model),
            "trained_layers": f"{top['trained_from_layer']}–{top['num_hidden_layers'] - 1}" if top else None,
            "fusion": read_json(folder / "fusion.json") or None,
            "tie_break_weight": TIE_BREAK_WEIGHT,
            "passages": read_json(folder / "passages.json") or None,
            "pair_orders": read_json(folder / PAIR_ORDERS_FILE) or None,
        }

    def load_scores(self, path, texts):
        from ctxir.encoders.models import load_cross_encoder

        load_cross_encoder.cache_clear()
        return load_cross_encoder(path, "cpu").predict([tuple(texts[:2])])


class ClsLrType(ModelType):
    name = kinds.CLS_LR
    template = "cls_lr.md"
    tags = ("reranker", "logistic-regression", "cls-features", "text-ranking")
    library = "ctxir"
    carries_base = True

    def detect(self, folder):
        return (folder / CLS_LR_CONFIG).is_file()

    def facts(self, folder):
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

    def load_scores(self, path, texts):
        from ctxir.rerank.cls_lr import ClsLrRanker

        return ClsLrRanker.load(path, device="cpu").score_pairs(texts[0], list(texts[1:]))


MODEL_TYPES: dict[str, ModelType] = {
    kind.name: kind for kind in (BiEncoderType(), CrossEncoderType(), ClsLrType())
}
