"""The re-ranker registry: one entry per re-ranker kind, read by everything that offers, loads, scores or explains one.

An entry (a ``RerankerKind``) says what the kind is called (``--rerank`` choice and the name messages give it),
which model it loads by default (the one shipped inside ctxir, else a fallback), how it loads and scores pairs
(its methods), and whether it is available on this install (``available()``: no model is loaded, no network).
How a kind is explained is registered on the explain side (``ctxir.explain.rerankers.EXPLAINERS``), which reads
this registry, never the other way; so are the app's words for it (``ctxir.app.reranker_labels``: table headers,
its flag and environment variable). The CLI's ``--rerank`` choices, the app's flags, radio buttons, pair-scoring columns, explanation
models, status line and the failure report all read ``RERANKERS``; adding a kind is one entry here (and its tests).
``rank(query, documents, model)`` ranks a list of texts in one call with any kind, folder or Hub id.

>>> list(RERANKERS)
['cross-encoder', 'cls-lr', 'sts-cross-encoder']
>>> reranker_choices()
('none', 'cross-encoder', 'cls-lr', 'sts-cross-encoder')
>>> RERANKERS["cls-lr"].key, RERANKERS["cls-lr"].pair_column
('cls_lr', 'cls_lr_probability')
>>> RERANKERS["cross-encoder"].available("none")
(False, "turned off with 'none'")
>>> get_reranker("colbert")
Traceback (most recent call last):
    ...
ctxir.types.CtxirError: re-ranker 'colbert' is not known: use one of 'none', 'cross-encoder', 'cls-lr', 'sts-cross-encoder'

Imports no torch: the app and the CLIs read the registry before any model loads.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ctxir import kinds
from ctxir.checks import LiveChoices, check_choice
from ctxir.names import CLS_LR_CONFIG, PASSAGES_FILE, looks_like_hub_id
from ctxir.types import CtxirError

if TYPE_CHECKING:
    import numpy as np

    from ctxir.rerank.rankers import Reranker
    from ctxir.rerank.stage_fusion import StageFusion

FUSION_FILE = "fusion.json"  # in a re-ranker's folder: how the fused mode combines it with the first stage
EVALUATION_FILE = "evaluation.json"  # in a re-ranker's folder: its test figures (training.evaluate_reranker)
RERANK_MODES = ("fused", "alone")
DEFAULT_RERANK_MODE = "fused"


@dataclass(frozen=True)
class RerankerKind:
    """One re-ranker kind: what it is called, its default model, and how it loads and scores (its methods; a new
    kind subclasses this and overrides ``load`` and ``accepts``). ``name`` is its key everywhere (``--rerank NAME``,
    the app's radio value, the explain model); ``key``, the same as a JSON key, also names its model setting in
    the app (``AppConfig.cross_encoder``, app flag ``--cross-encoder``: ``ctxir.app.reranker_labels``).

    >>> kind = RERANKERS["cross-encoder"]
    >>> kind.key, kind.pair_column, kind.rank_column
    ('cross_encoder', 'cross_encoder_score', 'cross_encoder_rank')
    >>> kind.default_model() in (kind.shipped, kind.fallback)  # the shipped model once it is in the package
    True
    """

    name: str  # "cross-encoder"
    label: str  # what messages and pages call it: "cross-encoder", "CLS-LR"
    card: str  # the model type it is published as (ctxir.publish.model_types.MODEL_TYPES)
    shipped: str  # the name it ships under inside ctxir (ctxir.encoders.models.SHIPPED_MODELS)
    fallback: str  # the default model while none is shipped ("" = none)
    how_to_get: str  # what to run to have one, e.g. "train it with `python training/train_cls_lr.py`"
    pair_value: str = "score"  # what ``pair_scores`` are: "score", "probability"
    inspectable: bool = False  # its transformer body is offered to the attention and embedding views
    # (model, query, document, n_steps=, max_steps=, baseline=, attention=, title=) → dict, for a kind that brings
    # its own; None: the one registered for its name on the explain side (ctxir.explain.rerankers.EXPLAINERS)
    explain: Callable[..., dict] | None = None
    # "relevance": whether a document answers a query (offered to re-rank a search); "similarity": how alike two
    # texts are (offered for pair scoring only, where similarity is what is asked)
    scores: str = "relevance"

    def load(self, model: str, device: str, batch_size: int) -> Reranker:
        """The re-ranker of this kind in ``model`` (a folder or Hub id)."""
        raise NotImplementedError(f"re-ranker kind {self.name!r} does not say how to load a model")

    def accepts(self, obj: Any) -> bool:
        """Whether an object in memory is of this kind (the re-ranker or the model it wraps)."""
        return False

    def wrap(self, obj: Any) -> Reranker:
        """Such an object as a ctxir re-ranker."""
        return obj

    def pair_scores(self, reranker: Reranker, query: str, texts: Sequence[str]) -> np.ndarray:
        """(N,) what pair scoring shows for ``query`` against each of ``texts``."""
        return reranker.score_pairs(query, texts)

    def score_pair_list(
        self, reranker: Reranker, pairs: Sequence[tuple[str, str]], batch_size: int
    ) -> list[float] | np.ndarray:
        """(N,) scores of pairs that share no query (an STS benchmark): a pair at a time."""
        return [float(self.pair_scores(reranker, a, [b])[0]) for a, b in pairs]

    @property
    def key(self) -> str:
        """Its name as a JSON key: ``explain()``'s result key, the pair-scoring columns' prefix."""
        return self.name.replace("-", "_")

    @property
    def pair_column(self) -> str:
        return f"{self.key}_{self.pair_value}"

    @property
    def rank_column(self) -> str:
        return f"{self.key}_rank"

    def default_model(self) -> str:
        """The shipped model when this install has it (looked up now, not at import), else ``fallback``."""
        from ctxir.encoders.models import SHIPPED_MODELS

        return (
            self.shipped
            if self.shipped in SHIPPED_MODELS and SHIPPED_MODELS[self.shipped].is_dir()
            else self.fallback
        )

    def available(self, model: str | None = "") -> tuple[bool, str]:
        """(True, "") when ``model`` ("" = the default) can be loaded here without the network, else (False, why).

        Only where the files are is checked (the shipped folder, a local folder, the Hugging Face cache); a folder
        that is there but broken is found when it is loaded."""
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
        from ctxir.encoders.models import SHIPPED_MODELS

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
    """The folder holding ``name`` on this machine — shipped inside ctxir, a local folder, or a Hub id's copy in the
    Hugging Face cache (or the packaged all-MiniLM-L6-v2) — or None; never touches the network."""
    from ctxir.encoders.models import DEFAULT_BI_ENCODER, SHIPPED_MODELS, packaged_minilm_path

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


# ---------------------------------------------------------------- the kinds ctxir has


def passages_for(model: str):
    """How ``model`` reads a document longer than its max length: its folder's passages.json (chosen on held-out
    training claims when it shipped: ``ctxir.rerank.Passages``, the best window's score), else None (the first
    max-length tokens, as any sentence-transformers cross-encoder)."""
    from ctxir.rerank.passages import Passages

    folder = local_model_folder(model) if isinstance(model, str) else None
    if folder is not None and (folder / PASSAGES_FILE).is_file():
        return Passages.from_file(folder / PASSAGES_FILE)
    return None


def _shipped(attribute: str) -> str:
    from ctxir.encoders import models

    return getattr(models, attribute)


@dataclass(frozen=True)
class CrossEncoderKind(RerankerKind):
    """A sentence-transformers cross-encoder (ctxir's or any on the Hub), read with its folder's passages.json."""

    def load(self, model: str, device: str, batch_size: int) -> Reranker:
        from ctxir.rerank.rankers import CrossEncoderReranker

        return CrossEncoderReranker(model, device, batch_size, passages=passages_for(model))

    def accepts(self, obj: Any) -> bool:
        from sentence_transformers import CrossEncoder

        from ctxir.rerank.rankers import CrossEncoderReranker

        return isinstance(obj, CrossEncoderReranker | CrossEncoder)

    def wrap(self, obj: Any) -> Reranker:
        from ctxir.rerank.rankers import CrossEncoderReranker

        return obj if isinstance(obj, CrossEncoderReranker) else CrossEncoderReranker(obj)

    def score_pair_list(
        self, reranker: Reranker, pairs: Sequence[tuple[str, str]], batch_size: int
    ) -> np.ndarray:
        """The sentence-transformers model's own batched ``predict``: the pairs' scores as the model gives them."""
        return reranker.model.predict(list(pairs), batch_size=batch_size, show_progress_bar=True)


@dataclass(frozen=True)
class StsCrossEncoderKind(CrossEncoderKind):
    """A sentence-pair similarity scorer (STS-B), not a relevance model: the cross-encoder loaded by the pair
    scorer's shipped name (``kind_of`` asks "cross-encoder" first, which takes any)."""

    def accepts(self, obj: Any) -> bool:
        return super().accepts(obj) and getattr(obj, "model_name", "") == self.shipped

    score_pair_list = RerankerKind.score_pair_list


@dataclass(frozen=True)
class ClsLrKind(RerankerKind):
    """Logistic regression on a cross-encoder's [CLS] vector; pair scoring shows its probability."""

    def load(self, model: str, device: str, batch_size: int) -> Reranker:
        from ctxir.rerank.cls_lr import ClsLrRanker

        return ClsLrRanker.load(model, device)

    def accepts(self, obj: Any) -> bool:
        from ctxir.rerank.cls_lr import ClsLrRanker

        return isinstance(obj, ClsLrRanker)

    def pair_scores(self, reranker: Reranker, query: str, texts: Sequence[str]) -> np.ndarray:
        return reranker.predict_proba(query, texts)


CROSS_ENCODER = CrossEncoderKind(
    name=kinds.CROSS_ENCODER,
    label="cross-encoder",
    card=kinds.CROSS_ENCODER,
    shipped=_shipped("SHIPPED_CROSS_ENCODER"),
    fallback=_shipped("MS_MARCO_CROSS_ENCODER"),
    how_to_get="train one with `python training/train_cross_encoder.py`",
    inspectable=True,
)
CLS_LR = ClsLrKind(
    name=kinds.CLS_LR,
    label="CLS-LR",
    card=kinds.CLS_LR,
    shipped=_shipped("SHIPPED_CLS_LR"),
    fallback="",
    how_to_get="train one with `python training/train_cls_lr.py` (or ClsLrRanker.save)",
    pair_value="probability",
)
# Offered beside the two for pair scoring; as a re-ranker it scores how alike the query and a document are. Last,
# so the app's "auto" explanation is unchanged.
STS_CROSS_ENCODER = StsCrossEncoderKind(
    name=kinds.STS_CROSS_ENCODER,
    label="STS similarity",
    card=kinds.CROSS_ENCODER,
    shipped=_shipped("SHIPPED_STS_CROSS_ENCODER"),
    fallback="",
    how_to_get="train one with `python training/train_pair_scorer.py`",
    scores="similarity",
)

# name → kind, in the order they are offered (the first available one is the app's "auto" explanation)
RERANKERS: dict[str, RerankerKind] = {kind.name: kind for kind in (CROSS_ENCODER, CLS_LR, STS_CROSS_ENCODER)}
DEFAULT_RERANKER = CROSS_ENCODER.name  # what ``what_moved`` re-ranks with when none is named


def register_reranker(kind: RerankerKind) -> RerankerKind:
    """Add (or replace) a kind; everything that reads the registry offers it from then on.

    >>> from dataclasses import replace
    >>> register_reranker(replace(RERANKERS["cls-lr"], name="none"))
    Traceback (most recent call last):
        ...
    ctxir.types.CtxirError: re-ranker kind name 'none' must be letters, digits and '-', and not 'none'

    tests/test_rerankers.py registers a word-overlap kind and finds it in the CLI, the app's choices, pair scoring
    and explanations.
    """
    if not kind.name or kind.name == "none" or not kind.name.replace("-", "").isalnum():
        raise CtxirError(f"re-ranker kind name {kind.name!r} must be letters, digits and '-', and not 'none'")
    RERANKERS[kind.name] = kind
    return kind


def search_rerankers(kinds) -> list[str]:
    """Of ``kinds`` (names), those that score relevance: what a search may be re-ranked with.

    >>> search_rerankers(["cross-encoder", "cls-lr", "sts-cross-encoder"])
    ['cross-encoder', 'cls-lr']
    """
    return [k for k in kinds if k in RERANKERS and RERANKERS[k].scores == "relevance"]


def reranker_choices() -> tuple[str, ...]:
    """("none", every registered kind) — what ``--rerank`` accepts."""
    return ("none", *RERANKERS)


def get_reranker(name: str) -> RerankerKind:
    """The kind called ``name``; a clear error listing the choices otherwise."""
    check_choice(name, "re-ranker", reranker_choices())
    if name == "none":
        raise CtxirError("re-ranker 'none' is no re-ranker: choose one of " + ", ".join(map(repr, RERANKERS)))
    return RERANKERS[name]


def kind_of(obj: Any) -> RerankerKind:
    """The kind of a re-ranker object in memory (a ``ctxir.Reranker`` or the model it wraps)."""
    for kind in RERANKERS.values():
        if kind.accepts(obj):
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
    """The re-ranker of ``kind`` ("none" → None) with ``model`` ("" = the kind's default: the one shipped in ctxir);
    its ``stage_fusion`` is read from the model folder's fusion.json (else RRF k=60, equal weights).

    Checked before loading: a model that is not on this machine fails at once with how to provide one, unless
    ``download`` and it is a Hub id (``org/name``): then it is downloaded into the Hugging Face cache (the app's
    deployer names one with ``CTXIR_CROSS_ENCODER=you/...``; offline, the download fails with what to do).

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
    hub_id = model.count("/") == 1 and not model.startswith((".", "/", "~")) and model not in _shipped_names()
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
    """``documents`` ranked for ``query`` in one call: ``[{"corpus_id": int, "score": float, "text": str}, ...]``
    best first, as sentence-transformers' ``CrossEncoder.rank(..., return_documents=True)`` (``Reranker.rank``).

    ``model``: None (the shipped cross-encoder), a kind of ``RERANKERS`` (its default model), a model folder or Hub
    id (CLS-LR when it holds cls_lr_config.json, else a cross-encoder; a Hub id not cached here is downloaded), or
    a loaded re-ranker. By name, the weights load once per process: the loaders keep them.

    >>> ranked = rank("where do otters live?", ["Banks lend money.", "Otters dig dens by rivers."])  # doctest: +SKIP
    >>> [(r["corpus_id"], r["text"]) for r in ranked]  # doctest: +SKIP
    [(1, 'Otters dig dens by rivers.'), (0, 'Banks lend money.')]
    >>> rank("otters", ["Otters dig dens by rivers."], model="colbert")
    Traceback (most recent call last):
        ...
    ctxir.types.CtxirError: model 'colbert' is no re-ranker kind, model folder or Hub id: use one of 'cross-encoder', 'cls-lr', 'sts-cross-encoder' (its default model), the path of a folder that exists, a Hub id 'owner/name', or None for the shipped cross-encoder
    """
    from ctxir.rerank.rankers import check_ranking

    query, documents, top_k = check_ranking(query, documents, top_k)  # before any model loads
    return _ranker(model).rank(query, documents, top_k)


def _ranker(model: Any) -> Reranker:
    """The re-ranker ``rank`` scores with (see there for what ``model`` may be)."""
    from ctxir.rerank.rankers import Reranker, short_repr

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


def _shipped_names() -> set[str]:
    from ctxir.encoders.models import SHIPPED_MODELS

    return set(SHIPPED_MODELS)


def alone_below_bm25(model: str) -> str | None:
    """Why ``model`` should only be used fused with its first stage: the collections of its folder's
    evaluation.json (``python -m training.evaluate_reranker --suite true``) where the re-ranker alone scored below BM25
    alone (nDCG@10, same queries); None where it never did, or where the folder records no figures.

    >>> import json, tempfile
    >>> folder = Path(tempfile.mkdtemp())
    >>> part = lambda first, alone: {"queries": 3, "first_stage": {"nDCG@10": first}, "alone": {"nDCG@10": alone}}
    >>> _ = (folder / "config.json").write_text("{}")
    >>> _ = (folder / EVALUATION_FILE).write_text(json.dumps({"med": {"bm25@20": part(0.5, 0.4)},
    ...     "scifact_test": {"bm25@20": {"all": part(0.68, 0.73)}}, "demo": {"bm25@20": part(0.86, 0.88)}}))
    >>> alone_below_bm25(str(folder))
    'alone it scored below BM25 on med (nDCG@10 0.4 vs 0.5); evaluation.json, docs/results.md'
    """
    from ctxir.files import read_json

    folder = (
        Path(str(model)).expanduser() if Path(str(model)).expanduser().is_dir() else local_model_folder(model)
    )
    record = (
        read_json(folder / EVALUATION_FILE)
        if folder is not None and (folder / EVALUATION_FILE).is_file()
        else None
    )
    below = []
    for name, figures in (record or {}).items():
        bm25 = (figures or {}).get("bm25@20") if isinstance(figures, dict) else None
        bm25 = bm25.get("all") if isinstance(bm25, dict) and "all" in bm25 else bm25
        if (
            isinstance(bm25, dict)
            and "alone" in bm25
            and bm25["alone"]["nDCG@10"] < bm25["first_stage"]["nDCG@10"]
        ):
            below.append(
                f"{name.removesuffix('_test')} (nDCG@10 {bm25['alone']['nDCG@10']} vs "
                f"{bm25['first_stage']['nDCG@10']})"
            )
    return (
        f"alone it scored below BM25 on {', '.join(below)}; evaluation.json, docs/results.md"
        if below
        else None
    )


def stage_fusion_for(model: str) -> StageFusion:
    """How the fused mode combines ``model``'s scores with the first stage: its folder's fusion.json (chosen on
    training queries when it shipped), else reciprocal-rank fusion, k=60, equal weights, which needs no tuning."""
    from ctxir.rerank.stage_fusion import StageFusion

    folder = local_model_folder(model) if isinstance(model, str) else None
    if folder is not None and (folder / FUSION_FILE).is_file():
        return StageFusion.from_file(folder / FUSION_FILE)
    return StageFusion.default()


RERANKER_CHOICES = LiveChoices(reranker_choices)  # live: "none" + every registered kind
