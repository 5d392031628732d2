"""The re-ranker registry: one ``RerankerKind`` per kind, read by everything that offers, loads or scores one.

>>> list(RERANKERS)
['cross-encoder', 'cls-lr', 'sts-cross-encoder']
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from sentence_transformers import CrossEncoder

from ctxir import kinds
from ctxir.checks import LiveChoices, check_choice
from ctxir.encoders.models import (
    DEFAULT_BI_ENCODER,
    MS_MARCO_CROSS_ENCODER,
    SHIPPED_CLS_LR,
    SHIPPED_CROSS_ENCODER,
    SHIPPED_MODELS,
    SHIPPED_STS_CROSS_ENCODER,
    packaged_minilm_path,
)
from ctxir.files import read_json
from ctxir.names import CLS_LR_CONFIG, PASSAGES_FILE, looks_like_hub_id
from ctxir.rerank.cls_lr import ClsLrRanker
from ctxir.rerank.passages import Passages
from ctxir.rerank.rankers import CrossEncoderReranker, Reranker, check_ranking, short_repr
from ctxir.rerank.stage_fusion import StageFusion
from ctxir.types import CtxirError

FUSION_FILE = "fusion.json"  # in a re-ranker's folder: how the fused mode combines it with the first stage
EVALUATION_FILE = "evaluation.json"  # in a re-ranker's folder: its test figures (training.evaluate_reranker)
RERANK_MODES = ("fused", "alone")
DEFAULT_RERANK_MODE = "fused"


@dataclass(frozen=True)
class RerankerKind:
    """One re-ranker kind: its names, its default model, how it loads (``load``) and what it accepts (``accepts``).

    >>> kind = RERANKERS["cross-encoder"]
    >>> kind.key, kind.pair_column, kind.rank_column
    ('cross_encoder', 'cross_encoder_score', 'cross_encoder_rank')
    >>> kind.default_model() in (kind.shipped, kind.fallback)
    True
    """

    name: str  # "cross-encoder": --rerank NAME, the app's radio value
    label: str  # what messages call it: "CLS-LR"
    card: str  # the model type it is published as (ctxir.publish.model_types.MODEL_TYPES)
    shipped: str  # the name it ships under inside ctxir (ctxir.encoders.models.SHIPPED_MODELS)
    fallback: str  # the default model while none is shipped ("" = none)
    how_to_get: str  # what to run to have one
    pair_value: str = "score"  # what ``pair_scores`` are: "score", "probability"
    inspectable: bool = False  # its body is offered to the attention and embedding views
    # (model, query, document, **options) → dict; None: ctxir.explain.rerankers.EXPLAINERS[name]
    explain: Callable[..., dict] | None = None
    scores: str = "relevance"  # or "similarity": offered for pair scoring only

    def load(self, model: str, device: str, batch_size: int) -> Reranker:
        raise NotImplementedError(f"re-ranker kind {self.name!r} does not say how to load a model")

    def accepts(self, obj: Any) -> bool:
        """Whether an object in memory (a re-ranker or the model it wraps) is of this kind."""
        return False

    def wrap(self, obj: Any) -> Reranker:
        return obj

    def pair_scores(self, reranker: Reranker, query: str, texts: Sequence[str]) -> np.ndarray:
        """(N,) what pair scoring shows for ``query`` against each of ``texts``."""
        return reranker.score_pairs(query, texts)

    @property
    def key(self) -> str:
        return self.name.replace("-", "_")

    @property
    def pair_column(self) -> str:
        return f"{self.key}_{self.pair_value}"

    @property
    def rank_column(self) -> str:
        return f"{self.key}_rank"

    def default_model(self) -> str:
        """The shipped model when this install has it, else ``fallback``."""
        shipped = self.shipped in SHIPPED_MODELS and SHIPPED_MODELS[self.shipped].is_dir()
        return self.shipped if shipped else self.fallback

    def available(self, model: str | None = "") -> tuple[bool, str]:
        """(True, "") when ``model`` ("" = the default) is on this machine (no network), else (False, why)."""
        model = (model or "").strip()
        if model.lower() == "none":
            return False, "turned off with 'none'"
        model = model or self.default_model()
        if not model:
            return (
                False,
                f"this installation ships no {self.label} re-ranker and none was given: {self.how_to_get}",
            )
        if local_model_folder(model) is not None:
            return True, ""
        if model in SHIPPED_MODELS:
            return False, f"the shipped model {model!r} is missing from this installation: reinstall ctxir"
        if model.startswith((".", "/", "~")) or model.count("/") != 1:
            return False, f"model folder {model!r} does not exist"
        from huggingface_hub import constants

        return False, (
            f"model {model!r} is neither a local folder nor in the local Hugging Face cache "
            f"({constants.HF_HUB_CACHE}); nothing is downloaded while an evaluation runs, or while the app starts "
            "offline (HF_HUB_OFFLINE=1)"
        )


def local_model_folder(name: str) -> Path | None:
    """The folder holding ``name`` on this machine (shipped, local, or a Hub id in the cache), or None; no network."""
    name = (name or "").strip()
    if not name:
        return None
    if name in SHIPPED_MODELS:
        return SHIPPED_MODELS[name] if SHIPPED_MODELS[name].is_dir() else None
    local = Path(name).expanduser()
    if local.is_dir():
        return local.resolve()
    if local.exists() or name.startswith((".", "/", "~")) or name.count("/") != 1:
        return None
    if name in (DEFAULT_BI_ENCODER, "all-MiniLM-L6-v2"):
        return packaged_minilm_path()
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HFValidationError, LocalEntryNotFoundError

    try:
        return Path(snapshot_download(name, local_files_only=True))
    except (LocalEntryNotFoundError, HFValidationError, OSError, ValueError):
        return None


def _folder_file(model, name: str) -> Path | None:
    folder = local_model_folder(model) if isinstance(model, str) else None
    return folder / name if folder is not None and (folder / name).is_file() else None


def passages_for(model: str):
    """How ``model`` reads a long document: its folder's passages.json as ``Passages``, else None (FirstP)."""
    path = _folder_file(model, PASSAGES_FILE)
    return Passages.from_file(path) if path else None


def stage_fusion_for(model: str) -> StageFusion:
    """How the fused mode combines ``model`` with the first stage: its folder's fusion.json, else RRF k=60."""
    path = _folder_file(model, FUSION_FILE)
    return StageFusion.from_file(path) if path else StageFusion.default()


@dataclass(frozen=True)
class CrossEncoderKind(RerankerKind):
    """A sentence-transformers cross-encoder, read with its folder's passages.json."""

    def load(self, model: str, device: str, batch_size: int) -> Reranker:
        return CrossEncoderReranker(model, device, batch_size, passages=passages_for(model))

    def accepts(self, obj: Any) -> bool:
        return isinstance(obj, CrossEncoderReranker | CrossEncoder)

    def wrap(self, obj: Any) -> Reranker:
        return obj if isinstance(obj, CrossEncoderReranker) else CrossEncoderReranker(obj)


@dataclass(frozen=True)
class StsCrossEncoderKind(CrossEncoderKind):
    """A sentence-pair similarity scorer (STS-B): the cross-encoder loaded by the pair scorer's shipped name."""

    def accepts(self, obj: Any) -> bool:
        return super().accepts(obj) and getattr(obj, "model_name", "") == self.shipped


@dataclass(frozen=True)
class ClsLrKind(RerankerKind):
    """Logistic regression on a cross-encoder's [CLS] vector; pair scoring shows its probability."""

    def load(self, model: str, device: str, batch_size: int) -> Reranker:
        return ClsLrRanker.load(model, device)

    def accepts(self, obj: Any) -> bool:
        return isinstance(obj, ClsLrRanker)

    def pair_scores(self, reranker: Reranker, query: str, texts: Sequence[str]) -> np.ndarray:
        return reranker.predict_proba(query, texts)


CROSS_ENCODER = CrossEncoderKind(
    name=kinds.CROSS_ENCODER,
    label="cross-encoder",
    card=kinds.CROSS_ENCODER,
    shipped=SHIPPED_CROSS_ENCODER,
    fallback=MS_MARCO_CROSS_ENCODER,
    how_to_get="train one with `python training/train_cross_encoder.py`",
    inspectable=True,
)
CLS_LR = ClsLrKind(
    name=kinds.CLS_LR,
    label="CLS-LR",
    card=kinds.CLS_LR,
    shipped=SHIPPED_CLS_LR,
    fallback="",
    how_to_get="train one with `python training/train_cls_lr.py` (or ClsLrRanker.save)",
    pair_value="probability",
)
# last, so the app's "auto" explanation (the first available kind) stays the cross-encoder's
STS_CROSS_ENCODER = StsCrossEncoderKind(
    name=kinds.STS_CROSS_ENCODER,
    label="STS similarity",
    card=kinds.CROSS_ENCODER,
    shipped=SHIPPED_STS_CROSS_ENCODER,
    fallback="",
    how_to_get="train one with `python training/train_pair_scorer.py`",
    scores="similarity",
)

RERANKERS: dict[str, RerankerKind] = {kind.name: kind for kind in (CROSS_ENCODER, CLS_LR, STS_CROSS_ENCODER)}
DEFAULT_RERANKER = CROSS_ENCODER.name


def register_reranker(kind: RerankerKind) -> RerankerKind:
    """Add (or replace) a kind; everything that reads the registry offers it from then on.

    >>> from dataclasses import replace
    >>> register_reranker(replace(RERANKERS["cls-lr"], name="none"))
    Traceback (most recent call last):
        ...
    ctxir.types.CtxirError: re-ranker kind name 'none' must be letters, digits and '-', and not 'none'
    """
    if not kind.name or kind.name == "none" or not kind.name.replace("-", "").isalnum():
        raise CtxirError(f"re-ranker kind name {kind.name!r} must be letters, digits and '-', and not 'none'")
    RERANKERS[kind.name] = kind
    return kind


def search_rerankers(kinds) -> list[str]:
    """Of ``kinds`` (names), those that score relevance: what a search may be re-ranked with."""
    return [k for k in kinds if k in RERANKERS and RERANKERS[k].scores == "relevance"]


def reranker_choices() -> tuple[str, ...]:
    return ("none", *RERANKERS)


def get_reranker(name: str) -> RerankerKind:
    check_choice(name, "re-ranker", reranker_choices())
    if name == "none":
        raise CtxirError("re-ranker 'none' is no re-ranker: choose one of " + ", ".join(map(repr, RERANKERS)))
    return RERANKERS[name]


def kind_of(obj: Any) -> RerankerKind:
    """The kind of a re-ranker object in memory (a ``ctxir.Reranker`` or the model it wraps)."""
    kind = next((kind for kind in RERANKERS.values() if kind.accepts(obj)), None)
    if kind is not None:
        return kind
    raise CtxirError(
        f"{type(obj).__name__!r} is no re-ranker ctxir knows: pass one of the kinds "
        f"{', '.join(map(repr, RERANKERS))} (a CrossEncoderReranker, CrossEncoder or ClsLrRanker)"
    )


def available_rerankers() -> dict[str, tuple[bool, str]]:
    """{kind: (available, why not)} for each kind's default model on this install (no model loaded).

    >>> {kind: (type(ok).__name__, type(why).__name__) for kind, (ok, why) in available_rerankers().items()}
    {'cross-encoder': ('bool', 'str'), 'cls-lr': ('bool', 'str'), 'sts-cross-encoder': ('bool', 'str')}
    """
    return {name: kind.available() for name, kind in RERANKERS.items()}


def load_reranker(
    kind: str, model: str = "", device: str = "auto", batch_size: int = 32, *, download: bool = False
) -> Reranker | None:
    """The re-ranker of ``kind`` ("none" → None) with ``model`` ("" = the kind's default) and its folder's fusion
    settings; a model not on this machine fails at once, unless ``download`` and it is a Hub id.

    >>> load_reranker("none") is None
    True
    >>> load_reranker("cross-encoder", "./no-such-folder")
    Traceback (most recent call last):
        ...
    ctxir.types.CtxirError: the cross-encoder re-ranker is not available: model folder './no-such-folder' does not exist. To provide one, train one with `python training/train_cross_encoder.py` and pass its output folder as model, or a Hub id that is in the local cache
    """
    check_choice(kind, "re-ranker", reranker_choices())
    if kind == "none":
        return None
    spec = RERANKERS[kind]
    model = model or spec.default_model()
    ok, why = spec.available(model)
    hub_id = model.count("/") == 1 and not model.startswith((".", "/", "~")) and model not in SHIPPED_MODELS
    if not ok and not (download and hub_id):
        raise CtxirError(
            f"the {spec.label} re-ranker is not available: {why}. To provide one, {spec.how_to_get} and pass its "
            "output folder as model, or a Hub id that is in the local cache"
        )
    reranker = spec.load(model, device, batch_size)
    reranker.stage_fusion = stage_fusion_for(model)
    reranker.fused_only = alone_below_bm25(model)
    return reranker


def rank(query: str, documents: Sequence[str], model: Any = None, top_k: int | None = None) -> list[dict]:
    """``documents`` ranked for ``query`` as ``CrossEncoder.rank(..., return_documents=True)`` ranks them.

    ``model``: None (the shipped cross-encoder), a kind, a model folder or Hub id, or a loaded re-ranker.

    >>> ranked = rank("where do otters live?", ["Banks lend money.", "Otters dig dens by rivers."])  # doctest: +SKIP
    >>> [(r["corpus_id"], r["text"]) for r in ranked]  # doctest: +SKIP
    [(1, 'Otters dig dens by rivers.'), (0, 'Banks lend money.')]
    >>> rank("otters", ["Otters dig dens by rivers."], model="colbert")
    Traceback (most recent call last):
        ...
    ctxir.types.CtxirError: model 'colbert' is no re-ranker kind, model folder or Hub id: use one of 'cross-encoder', 'cls-lr', 'sts-cross-encoder' (its default model), the path of a folder that exists, a Hub id 'owner/name', or None for the shipped cross-encoder
    """
    query, documents, top_k = check_ranking(query, documents, top_k)  # before any model loads
    return _ranker(model).rank(query, documents, top_k)


def _ranker(model: Any) -> Reranker:
    if model is None or (isinstance(model, str) and not model.strip()):
        return load_reranker(DEFAULT_RERANKER)
    if isinstance(model, Reranker):
        return model
    if not isinstance(model, str):
        try:
            return kind_of(model).wrap(model)
        except CtxirError:
            raise CtxirError(
                f"model must be None, a re-ranker kind, a model folder, a Hub id or a loaded re-ranker, got "
                f"{short_repr(model)} (type {type(model).__name__}): pass e.g. {DEFAULT_RERANKER!r} or a "
                "ctxir.Reranker"
            ) from None
    name = model.strip()
    if name in RERANKERS:
        return load_reranker(name)
    shipped = next((kind.name for kind in RERANKERS.values() if kind.shipped == name), None)
    folder = local_model_folder(name)
    if shipped is None and folder is None and not looks_like_hub_id(name):
        raise CtxirError(
            f"model {name!r} is no re-ranker kind, model folder or Hub id: use one of "
            f"{', '.join(map(repr, RERANKERS))} (its default model), the path of a folder that exists, a Hub id "
            "'owner/name', or None for the shipped cross-encoder"
        )
    cls_lr = folder is not None and (folder / CLS_LR_CONFIG).is_file()
    kind = shipped or (CLS_LR.name if cls_lr else CROSS_ENCODER.name)
    return load_reranker(kind, name, download=True)


def alone_below_bm25(model: str) -> str | None:
    """Why ``model`` is offered fused only: where in its evaluation.json it alone scored below BM25 (None: nowhere)."""
    path = _folder_file(str(model), EVALUATION_FILE)
    below = []
    for name, figures in ((read_json(path) if path else None) or {}).items():
        bm25 = (figures or {}).get("bm25@20") if isinstance(figures, dict) else None
        bm25 = bm25.get("all") if isinstance(bm25, dict) and "all" in bm25 else bm25
        if isinstance(bm25, dict) and "alone" in bm25:
            alone, first = bm25["alone"]["nDCG@10"], bm25["first_stage"]["nDCG@10"]
            if alone < first:
                below.append(f"{name.removesuffix('_test')} (nDCG@10 {alone} vs {first})")
    return (
        f"alone it scored below BM25 on {', '.join(below)}; evaluation.json, docs/results.md"
        if below
        else None
    )


RERANKER_CHOICES = LiveChoices(reranker_choices)  # live: "none" + every registered kind
