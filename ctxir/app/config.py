"""``AppConfig``: the app's limits and model choices, set by ``app.py``'s flags; the ``Progress`` type."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field

from ctxir.encoders.models import DEFAULT_BI_ENCODER, DEFAULT_CLS_LR, DEFAULT_CROSS_ENCODER
from ctxir.rerank.registry import CLS_LR, CROSS_ENCODER, STS_CROSS_ENCODER, RerankerKind
from ctxir.rerank.registry import RERANKERS as KINDS

# (fraction done, what is happening): what loaders and slow views report to
Progress = Callable[[float, str], None]


def short_name(kind: RerankerKind) -> str:
    """The kind's name in table headers ("CE rank")."""
    short = {CROSS_ENCODER.name: "CE", CLS_LR.name: "LR", STS_CROSS_ENCODER.name: "STS"}
    return short.get(kind.name) or kind.label


def flag(kind: RerankerKind) -> str:
    """app.py's flag for its model, e.g. ``--cls-lr``."""
    return "--" + kind.key.replace("_", "-")


def env(kind: RerankerKind) -> str:
    """The environment variable that sets its model, e.g. ``CTXIR_CLS_LR``."""
    return "CTXIR_" + kind.key.upper()


def unavailable_hint(kind: RerankerKind) -> str:
    """How to give the app one (said after why it is not available)."""
    return (
        f"To provide one, {kind.how_to_get} and restart the app with `{flag(kind)} <its output folder>` (or set "
        f"{env(kind)}), or pass a Hub id that is in the local cache"
    )


@dataclass
class AppConfig:
    """Limits and model choices; ``app.py`` fills it from command-line flags / environment variables."""

    corpus: str = ""  # "" = the built-in demo corpus; else a BEIR folder or a corpus file
    bi_encoder: str = DEFAULT_BI_ENCODER
    cross_encoder: str = DEFAULT_CROSS_ENCODER  # "" or "none" = no cross-encoder
    cls_lr: str = DEFAULT_CLS_LR  # a CLS-LR id or folder (ClsLrRanker.save); "" or "none" = none
    device: str = "auto"
    index: str = "auto"  # the dense index of every corpus searched: "auto", "exact", "ann"
    backend: str = "torch"  # how the search encoder encodes the corpora and queries: "torch", "onnx-int8"
    rerank_backend: str | None = None  # how the start's cross-encoders score: "torch", "onnx", "onnx-int8"
    max_query_chars: int = 2_000
    max_text_chars: int = 5_000
    max_documents: int = 32  # pair scoring
    max_sentences: int = 12  # embedding views
    max_inspect_tokens: int = 256  # per sentence in embedding views
    max_attention_tokens: int = 256
    max_upload_mb: float = 20.0
    max_upload_docs: int = 5_000
    max_compare_docs: int = 6_000  # compare pooling encodes the corpus per (pooling, layer): minutes on CPU
    max_corpora: int = 4  # uploaded corpora one visitor (session) keeps, their least recently used out first
    max_total_uploads: int = 16  # uploaded corpora in memory across all visitors
    upload_idle_s: float = 900.0  # a visitor idle this long may lose uploads, and only when the app is full
    rerank_depth: int = 20
    decimals: int = 3
    explain_steps: int = 32  # integrated-gradients steps to start with (ctxir.explain doubles them if needed)
    explain_max_steps: int = 128  # ... up to this many
    max_movers: int = 5  # "what moved" explains at most this many re-ranked documents (one IG run each)
    # kind → model ("none"), over cross_encoder, cls_lr
    rerankers: dict[str, str] = field(default_factory=dict)
    # the most results a view shows and the deepest re-ranking: its input's maximum and its view's check
    max_k: int = 50
    max_rerank_depth: int = 100
    max_extra_models: int = 2  # models visitors load by Hub id or folder (ModelCache) kept, LRU out first
    max_extra_mb: float = 1024  # MiB of weights those hold in all (the start's models not counted)
    allow_remote_code: bool = False  # a model that needs its repository's code (an auto_map) may load
    allow_model_paths: bool = True  # a visitor may type a local folder (off on a Space: the server's files)

    def any_model_note(self) -> str:
        """What a visitor may type where a model is chosen, and the limits it loads under (the pages' notes)."""
        paths = " or folder" if self.allow_model_paths else ""
        return (
            f"or type any model's Hub id{paths}: loaded on first use, at most {self.max_extra_models} such "
            f"models kept ({self.max_extra_mb:,.0f} MiB), the least recently used goes first"
        )

    def reranker_model(self, kind: str) -> str:
        """The model the app loads for re-ranker ``kind`` ("" or "none" = none): ``rerankers[kind]``."""
        if kind in self.rerankers:
            return self.rerankers[kind]
        own = getattr(self, KINDS[kind].key, None)
        return own if isinstance(own, str) else KINDS[kind].default_model()

    @classmethod
    def reranker_settings(cls, models: dict[str, str]) -> dict:
        """AppConfig keywords for {kind: model}: a kind's own field where it has one, else ``rerankers``."""
        own = {f.name for f in dataclasses.fields(cls)}
        out: dict = {KINDS[k].key: m for k, m in models.items() if KINDS[k].key in own}
        out["rerankers"] = {k: m for k, m in models.items() if KINDS[k].key not in own}
        return out
