"""What the Gradio app does, as plain functions over an ``AppState`` (models + indexed corpora).

``app.py`` wraps each function in a thin callback (CtxirError → gr.Error, figures → PNG files);
tests call these functions directly. Every function checks its input and raises ``CtxirError``
with a message that names the problem and the fix; each returns a ``ViewResult``: a table, figures
(matplotlib) and the JSON-able numbers behind them.

Models are loaded once, in ``AppState.load`` (or passed in already built), and shared by every request.
"""

from __future__ import annotations

import hashlib
import html
import json
import logging
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ctxir.checks import check_choice, check_int, check_text
from ctxir.models import DEFAULT_BI_ENCODER, DEFAULT_CLS_LR, DEFAULT_CROSS_ENCODER
from ctxir.pipeline import FIRST_STAGES, RERANKERS
from ctxir.types import Corpus, CtxirError, Internals

logger = logging.getLogger("ctxir.app")

ASSETS = Path(__file__).resolve().parent / "assets"
DEMO_CORPUS_NAME = "demo"
POOLINGS = ("mean", "cls", "max")
INSPECT_MODELS = ("bi-encoder", "cross-encoder")
Progress = Callable[[float, str], None]


@dataclass
class AppConfig:
    """Limits and model choices; ``app.py`` fills it from command-line flags / environment variables."""

    corpus: str = ""  # "" = the built-in demo corpus; else a BEIR folder or a corpus file
    bi_encoder: str = DEFAULT_BI_ENCODER
    cross_encoder: str = DEFAULT_CROSS_ENCODER  # "" or "none" = no cross-encoder
    cls_lr: str = DEFAULT_CLS_LR  # a CLS-LR id or folder (ClsLrRanker.save); "" or "none" = none
    device: str = "auto"
    max_query_chars: int = 2_000
    max_text_chars: int = 5_000
    max_documents: int = 32  # pair scoring
    max_sentences: int = 12  # embedding views
    max_inspect_tokens: int = 256  # per sentence in embedding views
    max_attention_tokens: int = 256
    max_upload_mb: float = 20.0
    max_upload_docs: int = 5_000
    max_compare_docs: int = 6_000  # compare pooling encodes the corpus once per (pooling, layer): minutes on CPU
    max_corpora: int = 4  # uploaded corpora one visitor (session) keeps; their own least recently used goes first
    max_total_uploads: int = 16  # uploaded corpora in memory across all visitors
    upload_idle_s: float = 900.0  # a visitor idle this long may lose uploads, and only when the app is full
    rerank_depth: int = 20
    decimals: int = 3


@dataclass
class ViewResult:
    """What one view shows: rows for a table, named figures, the numbers as JSON, and a short text."""

    rows: list[dict] = field(default_factory=list)
    figures: dict[str, Any] = field(default_factory=dict)
    data: dict = field(default_factory=dict)
    text: str = ""
    extra_rows: list[dict] = field(default_factory=list)
    html: str = ""  # a standalone HTML document (the attention view)


# ---------------------------------------------------------------- text shown to a person


def display_text(message: Any) -> str:
    """``message`` as text for a place that renders HTML (Gradio's error and warning pop-ups): ``&``, ``<`` and
    ``>`` are escaped, so user content cannot become a link or an image and the app's own ``<placeholders>`` stay
    readable. Quotes are kept as they are, so API clients read ``'name'`` unchanged."""
    return html.escape(str(message), quote=False)


_MARKDOWN_SPECIAL = re.compile(r"([\\`*_\[\]|~])")


def md_literal(text: Any) -> str:
    """User content inside a Markdown summary (mid-line), shown as typed: the characters that start inline
    Markdown (emphasis, code, links, tables, strike-through) backslash-escaped and HTML escaped. Not a code span,
    which a backtick in the text could end."""
    return display_text(_MARKDOWN_SPECIAL.sub(r"\\\1", str(text)))


def md_code(text: Any) -> str:
    """User content as a Markdown code span that no backtick in it can end: the fence is one backtick longer than
    the longest run inside (CommonMark), and code spans show HTML as typed."""
    text = str(text).replace("\n", " ")
    fence = "`" * (max((len(run) for run in re.findall(r"`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


# ---------------------------------------------------------------- input checks


def split_lines(text: Any, what: str, max_items: int, max_chars: int, min_items: int = 1) -> list[str]:
    """One item per non-empty line (a list is accepted too, for API users)."""
    if isinstance(text, list | tuple):
        items = [str(t).strip() for t in text if str(t).strip()]
    else:
        items = [line.strip() for line in check_text(text, what, max_chars * max_items).splitlines() if line.strip()]
    if len(items) < min_items:
        raise CtxirError(f"{what} needs at least {min_items} non-empty line(s), got {len(items)}: "
                         "put one per line")
    if len(items) > max_items:
        raise CtxirError(f"{what} has {len(items)} lines but at most {max_items} are accepted: remove some")
    for i, item in enumerate(items, 1):
        check_text(item, f"{what} line {i}", max_chars)
    return items


def _r(x: float | None, decimals: int = 4) -> float | None:
    return None if x is None else round(float(x), decimals)


# ---------------------------------------------------------------- models and corpora


def demo_corpus() -> Corpus:
    from ctxir.data import load_corpus

    return load_corpus(ASSETS / "demo_corpus.jsonl")


def demo_presets() -> dict:
    return json.loads((ASSETS / "demo_sentences.json").read_text(encoding="utf-8"))


def demo_queries() -> list[str]:
    from ctxir.data import load_queries

    return list(load_queries(ASSETS / "demo_queries.jsonl").values())


@dataclass
class Inspectable:
    """A tokenizer + eager-attention transformer body, for token embeddings and attention views."""

    name: str
    tokenizer: Any
    model: Any


@dataclass
class AppModels:
    bi_encoder: Any  # SentenceTransformer
    bi_encoder_name: str
    inspect: dict[str, Inspectable]  # "bi-encoder" (always), "cross-encoder" (when loaded)
    cross_encoder: Any = None  # CrossEncoderReranker
    cross_encoder_error: str = ""
    cls_lr: Any = None  # ClsLrRanker
    cls_lr_error: str = ""

    @classmethod
    def load(cls, config: AppConfig, progress: Progress | None = None) -> AppModels:
        """Load every model once. A missing bi-encoder is fatal; a missing re-ranker only logs a warning."""
        from ctxir.models import load_bi_encoder, load_transformer
        from ctxir.pipeline import load_reranker

        step = progress or (lambda *_: None)
        step(0.0, f"loading bi-encoder {config.bi_encoder}")
        bi = load_bi_encoder(config.bi_encoder, config.device)
        tokenizer, body = load_transformer(config.bi_encoder, config.device, attentions=True)
        inspect = {"bi-encoder": Inspectable(config.bi_encoder, tokenizer, body)}
        models = cls(bi, config.bi_encoder, inspect)
        if config.cross_encoder and config.cross_encoder.lower() != "none":
            step(0.4, f"loading cross-encoder {config.cross_encoder}")
            try:
                models.cross_encoder = load_reranker("cross-encoder", config.cross_encoder, config.device)
                ce_tok, ce_body = load_transformer(config.cross_encoder, config.device, attentions=True)
                inspect["cross-encoder"] = Inspectable(config.cross_encoder, ce_tok, ce_body)
            except CtxirError as err:
                models.cross_encoder_error = str(err)
                logger.warning("cross-encoder re-ranker unavailable, the app starts without it: %s", err)
        else:
            models.cross_encoder_error = "the app was started with --cross-encoder none"
        if config.cls_lr and config.cls_lr.lower() != "none":
            step(0.7, f"loading CLS-LR ranker {config.cls_lr}")
            try:
                models.cls_lr = load_reranker("cls-lr", config.cls_lr, config.device)
            except CtxirError as err:
                models.cls_lr_error = str(err)
                logger.warning("CLS-LR ranker unavailable, the app starts without it: %s", err)
        else:
            models.cls_lr_error = ("the app was started with --cls-lr none" if config.cls_lr else
                                   "no CLS-LR ranker was given and this installation ships none")
        return models

    @classmethod
    def from_objects(cls, bi_encoder, bi_encoder_name: str = "bi-encoder", cross_encoder=None, cls_lr=None,
                     device: str = "cpu") -> AppModels:
        """Wrap models already in memory (tests, notebooks): a SentenceTransformer, a CrossEncoder, a ClsLrRanker."""
        from ctxir.models import load_transformer
        from ctxir.rerank import CrossEncoderReranker

        path = str(bi_encoder[0].auto_model.config._name_or_path or bi_encoder_name)
        tokenizer, body = load_transformer(path, device, attentions=True)
        inspect = {"bi-encoder": Inspectable(bi_encoder_name, tokenizer, body)}
        models = cls(bi_encoder, bi_encoder_name, inspect)
        if cross_encoder is not None:
            models.cross_encoder = (cross_encoder if hasattr(cross_encoder, "score_pairs")
                                    else CrossEncoderReranker(cross_encoder))
            ce = models.cross_encoder.model
            ce_path = str(ce.model.config._name_or_path)
            ce_tok, ce_body = load_transformer(ce_path, device, attentions=True)
            inspect["cross-encoder"] = Inspectable(ce_path, ce_tok, ce_body)
        else:
            models.cross_encoder_error = "no cross-encoder was given"
        models.cls_lr = cls_lr
        models.cls_lr_error = "" if cls_lr is not None else "no CLS-LR ranker was given"
        return models

    def reranker(self, name: str):
        check_choice(name, "re-ranker", RERANKERS)
        if name == "none":
            return None
        if name == "cross-encoder":
            if self.cross_encoder is None:
                raise CtxirError(
                    f"the cross-encoder re-ranker is not available ({self.cross_encoder_error.rstrip('.')}). To provide one, "
                    "train it with `python training/train_cross_encoder.py` and restart the app with "
                    "`--cross-encoder <its output folder>` (or set CTXIR_CROSS_ENCODER), or pass a Hub id that is "
                    "in the local cache. Meanwhile choose re-ranker 'none'.")
            return self.cross_encoder
        if self.cls_lr is None:
            raise CtxirError(
                f"the CLS-LR re-ranker is not available ({self.cls_lr_error.rstrip('.')}). To provide one, train it with "
                "`python training/train_cls_lr.py` (or ClsLrRanker.save) and restart the app with "
                "`--cls-lr <its output folder>` (or set CTXIR_CLS_LR). Meanwhile choose re-ranker 'none'.")
        return self.cls_lr

    def inspectable(self, name: str) -> Inspectable:
        if name not in self.inspect:
            loaded = ", ".join(f"{k!r} ({v.name})" for k, v in self.inspect.items())
            hint = (" The cross-encoder is not loaded: start the app with --cross-encoder PATH."
                    if name == "cross-encoder" else "")
            raise CtxirError(f"model {name!r} is not loaded in this app: choose one of {loaded}.{hint} To inspect "
                             "another model, restart the app with --bi-encoder NAME_OR_FOLDER")
        return self.inspect[name]

    @property
    def num_layers(self) -> int:
        return int(self.inspect["bi-encoder"].model.config.num_hidden_layers)

    @property
    def num_heads(self) -> int:
        return int(self.inspect["bi-encoder"].model.config.num_attention_heads)


class CorpusIndex:
    """One corpus with its BM25, dense and hybrid retrievers (dense embeddings cached on disk)."""

    def __init__(self, name: str, corpus: Corpus, bi_encoder, source: str = "", progress: Progress | None = None,
                 cache=True, model_name: str | None = None):
        from ctxir.pipeline import build_first_stages

        step = progress or (lambda *_: None)
        self.name, self.corpus, self.source, self.cache = name, corpus, source, cache
        self._bi_encoder, self._model_name = bi_encoder, model_name
        step(0.05, f"BM25 index and embeddings of {len(corpus):,} documents (embeddings cached after the first time)")
        # the same builder as `python -m ctxir.evaluate`: hybrid fuses these very BM25 and dense retrievers
        self.stages = build_first_stages(corpus, FIRST_STAGES, [self._encoder()], fusion="rrf", depth=100)
        self.bm25, self.dense, self.hybrid = (self.stages[kind] for kind in FIRST_STAGES)
        self._pooled: dict[tuple[str, int], Any] = {}
        self._lock = threading.Lock()
        step(1.0, "ready")

    def _encoder(self, pooling: str | None = None, layer: int | None = None):
        from ctxir.encoders import BiEncoder

        encoder = BiEncoder(self._bi_encoder, pooling=pooling, layer=layer, cache=self.cache)
        if self._model_name:
            # the name shown in results; the cache key is the weights fingerprint, so the app and
            # `python -m ctxir.evaluate` share corpus embeddings whatever name each gave the model
            encoder.name = self._model_name
        return encoder

    def retriever(self, first_stage: str):
        return self.stages[check_choice(first_stage, "first stage", FIRST_STAGES)]

    def pooled(self, pooling: str, layer: int):
        """A dense retriever over this corpus with another pooling/layer (encoded once, then cached)."""
        from ctxir.retrieval import DenseRetriever

        with self._lock:
            key = (pooling, layer)
            if key not in self._pooled:
                self._pooled[key] = DenseRetriever(self.corpus, self._encoder(pooling, layer), show_progress=True)
            return self._pooled[key]

    def summary(self) -> dict:
        return {"name": self.name, "documents": len(self.corpus), "source": self.source}


Owner = str | None  # whose uploads: a Gradio session hash; None = the local Python caller (tests, notebooks)


class AppState:
    """Models + indexed corpora, shared by every request of one running app.

    The startup corpus is public. An uploaded corpus belongs to its owner (the Gradio session that uploaded it):
    only that owner can list or search it, and error messages list only the public corpus and the owner's own.
    An owner keeps at most ``config.max_corpora`` uploads (their own least recently used is dropped, and the upload
    result says so); the whole app keeps at most ``config.max_total_uploads``. When that is full, room is made only
    from owners idle for ``config.upload_idle_s`` (least recently active first); if nobody is idle the upload is
    refused with a message, so nobody loses a corpus while they use it. ``release(owner)`` (the session ended)
    frees an owner's uploads. Uploaded corpora are encoded without the persistent embedding cache: their vectors
    live in memory and go with the corpus.
    """

    def __init__(self, models: AppModels, config: AppConfig | None = None, corpus: Corpus | None = None,
                 corpus_name: str = DEMO_CORPUS_NAME, corpus_source: str = "built-in demo corpus",
                 progress: Progress | None = None, cache=True):
        self.models, self.config = models, config or AppConfig()
        self.cache = cache
        self.default_corpus = corpus_name
        self.clock: Callable[[], float] = time.monotonic  # tests replace it to age owners
        self._lock = threading.Lock()
        self._uploads: dict[Owner, OrderedDict[str, CorpusIndex]] = {}
        self._last_seen: dict[Owner, float] = {}  # only owners that hold uploads
        corpus = corpus if corpus is not None else demo_corpus()
        self._public: dict[str, CorpusIndex] = {
            corpus_name: CorpusIndex(corpus_name, corpus, models.bi_encoder, corpus_source, progress, cache,
                                     models.bi_encoder_name)}

    @classmethod
    def load(cls, config: AppConfig, progress: Progress | None = None) -> AppState:
        """Everything the app needs before its first request: models, the startup corpus and its index."""
        from ctxir.data import load_corpus_any

        started = time.perf_counter()
        models = AppModels.load(config, progress)
        if config.corpus:
            corpus = load_corpus_any(config.corpus)
            path = Path(config.corpus)
            name, source = (path.name if path.is_dir() else path.stem) or "corpus", str(config.corpus)
        else:
            corpus, name, source = demo_corpus(), DEMO_CORPUS_NAME, "built-in demo corpus"
        state = cls(models, config, corpus, name, source, progress)
        state.warm_up()
        logger.info("app ready in %.1f s: %d documents in %r", time.perf_counter() - started, len(corpus), name)
        return state

    def warm_up(self) -> None:
        """One tiny pass through every model so the first user request pays no lazy initialisation."""
        index = self.index(self.default_corpus)
        index.dense.query("warm up", 1)
        index.bm25._search(["warm up"], 1)
        for reranker in (self.models.cross_encoder, self.models.cls_lr):
            if reranker is not None:
                reranker.score_pairs("warm up", ["warm up"])
        from ctxir.internals import inspect_text

        for item in self.models.inspect.values():
            inspect_text("warm up", model=item.model, tokenizer=item.tokenizer)

    # ------------------------------------------------------------ who sees what

    @property
    def public_names(self) -> list[str]:
        return list(self._public)

    def corpus_names_for(self, owner: Owner = None) -> list[str]:
        """The corpora ``owner`` may choose: the public one(s), then their own uploads (most recent last)."""
        with self._lock:
            own = [n for n in self._uploads.get(owner, {}) if n not in self._public]
            return [*self._public, *own]

    @property
    def corpus_names(self) -> list[str]:
        """The corpora of the local caller (owner None)."""
        return self.corpus_names_for(None)

    def touch(self, owner: Owner) -> None:
        """``owner`` is active (any request): their uploads are not idle."""
        with self._lock:
            if owner in self._uploads:
                self._last_seen[owner] = self.clock()

    def index(self, name: str | None, owner: Owner = None) -> CorpusIndex:
        name = name or self.default_corpus
        with self._lock:
            own = self._uploads.get(owner)
            if own is not None:
                self._last_seen[owner] = self.clock()
                if name in own:
                    own.move_to_end(name)
                    return own[name]
            if name in self._public:
                return self._public[name]
            visible = [*self._public, *(own or {})]
        idle_min = self.config.upload_idle_s / 60
        raise CtxirError(f"corpus {name!r} is not loaded: choose one of {', '.join(map(repr, visible))} or upload a "
                         f"corpus file first (an upload is visible only to the session that uploaded it; it is "
                         f"released when that session ends, or after {idle_min:g} minutes without use when the app "
                         "needs the room: then upload it again)")

    # ------------------------------------------------------------ uploads

    def _plan(self, owner: Owner, name: str) -> tuple[list[str], list[tuple[Owner, str]]]:
        """(the owner's own uploads to drop, other idle owners' uploads to evict) to add ``name``; raises when the
        app is full of corpora of active owners. Changes nothing. Call with the lock held."""
        cfg = self.config
        own = self._uploads.get(owner, OrderedDict())
        if name in own:
            return [], []  # a re-upload replaces itself
        own_drops = list(own)[:max(0, len(own) - cfg.max_corpora + 1)]
        total = sum(len(corpora) for corpora in self._uploads.values()) - len(own_drops)
        excess = total + 1 - cfg.max_total_uploads
        evict: list[tuple[Owner, str]] = []
        if excess > 0:
            now = self.clock()
            idle = sorted((o for o, seen in self._last_seen.items() if o != owner and now - seen >= cfg.upload_idle_s),
                          key=self._last_seen.__getitem__)  # least recently active first
            for other in idle:
                evict.extend((other, n) for n in self._uploads.get(other, {}))
                if len(evict) >= excess:
                    break
            if len(evict) < excess:
                raise CtxirError(
                    f"this app already holds {total} uploaded corpora of visitors who are using them, its limit: "
                    "nothing of theirs is removed while they are active. Try again in a few minutes (uploads are "
                    f"released when a visitor closes the page, or after {cfg.upload_idle_s / 60:g} minutes without "
                    "use when room is needed), or run ctxir on your own machine: `python app.py --corpus YOUR_FILE`")
            evict = evict[:excess]
        return own_drops, evict

    def check_room(self, owner: Owner, name: str = "") -> None:
        """Refuse early (before the minutes of indexing) when an upload by ``owner`` could not be kept."""
        with self._lock:
            self._plan(owner, name)

    def add(self, index: CorpusIndex, owner: Owner = None) -> list[str]:
        """Keep an uploaded corpus for ``owner``; returns the names of the owner's own older uploads dropped to stay
        within ``config.max_corpora``. Raises CtxirError (and keeps everything) when the app is full."""
        with self._lock:
            own_drops, evict = self._plan(owner, index.name)
            for other, name in evict:
                del self._uploads[other][name]
                logger.info("released an upload of an idle visitor (%d left app-wide)", self._upload_count())
                if not self._uploads[other]:
                    del self._uploads[other]
                    self._last_seen.pop(other, None)
            own = self._uploads.setdefault(owner, OrderedDict())
            for name in own_drops:
                del own[name]
            own[index.name] = index
            own.move_to_end(index.name)
            self._last_seen[owner] = self.clock()
            return own_drops

    def release(self, owner: Owner) -> list[str]:
        """Forget every upload of ``owner`` (their session ended); returns the names released."""
        with self._lock:
            released = list(self._uploads.pop(owner, {}))
            self._last_seen.pop(owner, None)
        if released:
            logger.info("released %d upload(s) of a session that ended", len(released))
        return released

    def _upload_count(self) -> int:
        return sum(len(corpora) for corpora in self._uploads.values())

    @property
    def upload_count(self) -> int:
        """Uploaded corpora in memory, all owners together."""
        with self._lock:
            return self._upload_count()


# ---------------------------------------------------------------- search


def _snippet(text: str, limit: int = 160) -> str:
    return text if len(text) <= limit else text[:limit].rsplit(" ", 1)[0] + " …"


def search(state: AppState, query: str, corpus: str | None = None, first_stage: str = "dense",
           reranker: str = "none", k: int = 10, depth: int | None = None, owner: Owner = None) -> ViewResult:
    """First stage (+ optional re-ranker) over a corpus ``owner`` may see; each stage's score, rank and the rank
    change."""
    from ctxir.pipeline import Pipeline

    query = check_text(query, "query", state.config.max_query_chars)
    k = check_int(k, "k", 1, 100)
    depth = check_int(depth if depth is not None else state.config.rerank_depth, "re-rank depth", 1, 200)
    index = state.index(corpus, owner)
    pipeline = Pipeline(index.retriever(first_stage), state.models.reranker(reranker), depth=max(depth, k))
    started = time.perf_counter()
    result = pipeline.search(query, k)
    total = (time.perf_counter() - started) * 1000
    rows = []
    for hit in result.hits:
        doc = index.corpus[hit.doc_id]
        # Scores and ranks first: what each stage did stays in view beside the (wide) text column.
        rows.append({
            "rank": hit.rank, "doc_id": hit.doc_id,
            f"{first_stage}_score": _r(hit.first_stage_score), f"{first_stage}_rank": hit.first_stage_rank,
            "rerank_score": _r(hit.rerank_score), "rerank_rank": hit.rerank_rank,
            "rank_change": hit.rank_change if hit.rerank_rank is not None else None,
            "title": doc.get("title", ""), "text": _snippet(doc.get("text", "")),
        })
    timings = {name: round(ms, 2) for name, ms in result.timings_ms.items()}
    timings["total"] = round(total, 2)
    lines = [f"**{len(rows)} results** from {md_code(index.name)} ({len(index.corpus):,} documents) · "
             + " · ".join(f"{name}: {ms:.1f} ms" for name, ms in timings.items())]
    if reranker != "none":
        moved = sum(1 for r in rows if r["rank_change"])
        lines.append(f"The {reranker} re-scored the first stage's top {max(depth, k)}; {moved} of the shown "
                     "results changed rank (`rank_change` > 0 = moved up).")
    data = {"query": query, "corpus": index.name, "first_stage": first_stage, "reranker": reranker, "k": k,
            "depth": max(depth, k) if reranker != "none" else None, "timings_ms": timings, "hits": rows}
    return ViewResult(rows=rows, data=data, text="\n\n".join(lines))


def compare_pooling(state: AppState, query: str, corpus: str | None = None, layer: int = -1, k: int = 10,
                    progress: Progress | None = None, owner: Owner = None) -> ViewResult:
    """The same query through mean- and CLS-pooled embeddings of one layer: two rankings side by side."""
    query = check_text(query, "query", state.config.max_query_chars)
    n_layers = state.models.num_layers
    layer = check_int(layer, "layer", -1, n_layers)
    layer = n_layers if layer == -1 else layer
    k = check_int(k, "k", 1, 50)
    index = state.index(corpus, owner)
    if len(index.corpus) > state.config.max_compare_docs:
        raise CtxirError(f"compare pooling re-encodes the whole corpus per pooling and layer; {index.name!r} has "
                         f"{len(index.corpus):,} documents, above this app's limit of "
                         f"{state.config.max_compare_docs:,}: use a smaller corpus")
    step = progress or (lambda *_: None)
    rankings = {}
    for i, pooling in enumerate(("mean", "cls")):
        step(0.1 + 0.4 * i, f"{pooling} pooling at layer {layer}: encoding the corpus (cached after the first time)")
        rankings[pooling] = index.pooled(pooling, layer).query(query, k)
    step(1.0, "done")
    rows = []
    for rank in range(k):
        row: dict[str, Any] = {"rank": rank + 1}
        for pooling, hits in rankings.items():
            hit = hits[rank] if rank < len(hits) else None
            row[f"{pooling}_doc_id"] = hit.doc_id if hit else None
            row[f"{pooling}_title"] = index.corpus[hit.doc_id].get("title", "") if hit else None
            row[f"{pooling}_score"] = _r(hit.score) if hit else None
        rows.append(row)
    mean_ids = {h.doc_id for h in rankings["mean"]}
    cls_ids = {h.doc_id for h in rankings["cls"]}
    overlap = len(mean_ids & cls_ids)
    data = {"query": query, "corpus": index.name, "layer": layer, "k": k, "overlap": overlap,
            "rankings": {p: [{"doc_id": h.doc_id, "score": _r(h.score)} for h in hits]
                         for p, hits in rankings.items()}}
    text = (f"Layer {layer}{' (embeddings)' if layer == 0 else ''}: mean and CLS pooling share {overlap} of their "
            f"top {k}. all-MiniLM-L6-v2 was trained with mean pooling, so its CLS vector is not tuned for search.")
    warnings = _cls_warnings("cls", layer, "the CLS ranking is in no particular order (every document ties)")
    data["warnings"] = warnings
    text = "\n\n".join([*(f"⚠️ {w}" for w in warnings), text])
    return ViewResult(rows=rows, data=data, text=text)


def _cls_warnings(pooling: str, layer: int, consequence: str) -> list[str]:
    """CLS pooling at layer 0 reads the [CLS] token before any attention: its embedding + position 0 + token
    type 0, the same vector for every text, so every cosine is 1.0."""
    if pooling != "cls" or layer != 0:
        return []
    return [f"CLS pooling at layer 0 (the embedding layer) gives every text the same vector — the [CLS] token's "
            f"embedding before any attention — so every cosine is 1.0 and {consequence}: choose layer 1 or higher, "
            "or mean pooling"]


def upload_corpus(state: AppState, path: str | Path | None, progress: Progress | None = None,
                  owner: Owner = None) -> ViewResult:
    """Index a user's corpus file (.txt/.jsonl/.csv/.tsv) for ``owner`` (only they can choose it, by the returned
    name). Its embeddings stay in memory, never in the persistent cache."""
    from ctxir.data import USER_CORPUS_SUFFIXES, load_user_corpus

    if not path:
        raise CtxirError(f"no file was uploaded: choose a corpus file ({', '.join(USER_CORPUS_SUFFIXES)})")
    path = Path(path)
    if not path.is_file():
        raise CtxirError(f"uploaded file {str(path)!r} was not found on the server: upload it again")
    size_mb = path.stat().st_size / 2**20
    if size_mb > state.config.max_upload_mb:
        raise CtxirError(f"{path.name} is {size_mb:.1f} MB; this app accepts corpus files up to "
                         f"{state.config.max_upload_mb:g} MB: upload a smaller sample")
    raw = path.read_bytes()
    nul = raw.find(b"\x00")
    if nul >= 0:
        line = raw.count(b"\n", 0, nul) + 1
        raise CtxirError(f"{path.name} contains a NUL byte (line {line}, byte offset {nul}): "
                         "it is a binary file or UTF-16 text, not a UTF-8 text corpus. Save it as UTF-8 text "
                         "(.txt/.jsonl/.csv/.tsv) and upload it again")
    corpus = load_user_corpus(path)
    for doc_id, doc in corpus.items():
        if any("\x00" in str(doc.get(key, "")) for key in ("title", "text")) or "\x00" in str(doc_id):
            raise CtxirError(f"{path.name}: document {str(doc_id).replace(chr(0), '')!r} contains a NUL character "
                             "(\\u0000 in JSON): remove it and upload the file again")
    if len(corpus) > state.config.max_upload_docs:
        raise CtxirError(f"{path.name} has {len(corpus):,} documents; this app indexes at most "
                         f"{state.config.max_upload_docs:,} uploaded documents on its CPU: upload a sample, or start "
                         "the app on the full corpus with --corpus PATH")
    digest = hashlib.sha256(raw).hexdigest()[:8]
    stem = re.sub(r"[^\w.-]+", "_", path.stem)[:40].strip("._") or "upload"
    name = f"{stem}-{digest}"
    state.check_room(owner, name)  # refuse before minutes of encoding, not after
    # cache=None: an upload's vectors live in memory with its index and go with it, never in the user cache
    index = CorpusIndex(name, corpus, state.models.bi_encoder, f"upload {path.name}", progress, None,
                        state.models.bi_encoder_name)
    dropped = state.add(index, owner)
    rows = [{"doc_id": doc_id, "title": doc.get("title", ""), "text": _snippet(doc.get("text", ""))}
            for doc_id, doc in list(corpus.items())[:10]]
    data = {"corpus": name, "documents": len(corpus), "file": path.name, "sample": rows, "dropped": dropped}
    text = (f"Indexed **{len(corpus):,} documents** from {md_code(path.name)} as corpus {md_code(name)} "
            "(visible only to you, for this session).")
    if dropped:
        text += (f" Your older upload(s) {', '.join(md_code(n) for n in dropped)} were removed: each visitor keeps "
                 f"at most {state.config.max_corpora}.")
    return ViewResult(rows=rows, data=data, text=text)


# ---------------------------------------------------------------- pair scoring


def input_formation(tokenizer, query: str, document: str, max_length: int = 512) -> dict:
    """How a cross-encoder reads a pair: ``[CLS] query [SEP] document [SEP]`` with token types 0/1."""
    enc = tokenizer(query, document, truncation="longest_first", max_length=max_length)
    ids = list(enc["input_ids"])
    tokens = tokenizer.convert_ids_to_tokens(ids)
    types = list(enc.get("token_type_ids") or [0] * len(ids))
    return {"text": " ".join(tokens), "tokens": tokens, "token_ids": ids, "token_type_ids": types,
            "num_tokens": len(ids), "truncated": len(tokenizer(query, document)["input_ids"]) > len(ids)}


def score_pairs(state: AppState, query: str, documents: str | Sequence[str]) -> ViewResult:
    """Cross-encoder score, CLS-LR probability and bi-encoder cosine for (query, document) pairs."""
    cfg = state.config
    query = check_text(query, "query", cfg.max_query_chars)
    docs = split_lines(documents, "documents", cfg.max_documents, cfg.max_text_chars)
    models = state.models
    q = models.bi_encoder.encode([query], normalize_embeddings=True, convert_to_numpy=True)  # (1, dim)
    d = models.bi_encoder.encode(docs, normalize_embeddings=True, convert_to_numpy=True)  # (docs, dim)
    cosine = (d @ q[0]).tolist()
    ce = models.cross_encoder.score_pairs(query, docs).tolist() if models.cross_encoder is not None else None
    proba = models.cls_lr.predict_proba(query, docs).tolist() if models.cls_lr is not None else None
    columns = {"cross-encoder score": ce or [None] * len(docs), "CLS-LR probability": proba or [None] * len(docs),
               "bi-encoder cosine": cosine}
    rows = []
    for i, doc in enumerate(docs):
        rows.append({"doc": i + 1, "document": _snippet(doc, 120),
                     "cross_encoder_score": _r(ce[i]) if ce else None,
                     "cls_lr_probability": _r(proba[i]) if proba else None,
                     "bi_encoder_cosine": _r(cosine[i])})
    for key, rank_key in (("cross_encoder_score", "cross_encoder_rank"), ("cls_lr_probability", "cls_lr_rank"),
                          ("bi_encoder_cosine", "cosine_rank")):
        values = [r[key] for r in rows]
        order = np.argsort(-np.asarray(values, dtype=float), kind="stable") if None not in values else []
        ranks = {int(i): rank for rank, i in enumerate(order, 1)}
        for i, row in enumerate(rows):
            row[rank_key] = ranks.get(i)
    reader = models.inspect.get("cross-encoder", models.inspect["bi-encoder"])
    formations = [input_formation(reader.tokenizer, query, doc) for doc in docs]
    first = formations[0]
    token_rows = [{"position": i, "token": t, "token_id": tid, "token_type": tt}
                  for i, (t, tid, tt) in enumerate(zip(first["tokens"], first["token_ids"], first["token_type_ids"],
                                                       strict=True))]
    unavailable = {}
    if ce is None:
        unavailable["cross-encoder"] = models.cross_encoder_error
    if proba is None:
        unavailable["cls-lr"] = models.cls_lr_error
    from ctxir.viz import scores_figure

    text = (f"Input formation ({reader.name} tokenizer), document 1: {md_code(first['text'])} — {first['num_tokens']} "
            "tokens; token type 0 = query segment, 1 = document segment.")
    if unavailable:
        text += "\n\n" + "\n".join(f"- {name} not loaded: {why}" for name, why in unavailable.items())
    data = {"query": query, "documents": docs, "scores": rows, "input_formation": formations,
            "unavailable": unavailable}
    return ViewResult(rows=rows, figures={"scores": scores_figure(docs, columns)}, data=data, text=text,
                      extra_rows=token_rows)


# ---------------------------------------------------------------- token embeddings


def _inspect(state: AppState, model: str, text: str, text_pair: str | None = None,
             max_tokens: int | None = None) -> Internals:
    from ctxir.internals import inspect_text

    item = state.models.inspectable(model)
    limit = max_tokens or state.config.max_inspect_tokens
    n_tokens = len(item.tokenizer(text, text_pair or None)["input_ids"])
    if n_tokens > limit:
        raise CtxirError(f"the input has {n_tokens} tokens but this view accepts at most {limit}: shorten the text"
                         f" (it begins {text[:40]!r})")
    return inspect_text(text, text_pair or None, model=item.model, tokenizer=item.tokenizer, max_tokens=limit)


def _layer(value: Any, n_layers: int, what: str = "layer") -> int:
    """-1 means the last layer; layers count like hidden_states (0 = embeddings)."""
    layer = check_int(value, what, -1, n_layers)
    return n_layers if layer == -1 else layer


def model_info(state: AppState, model: str = "bi-encoder", text: str = "") -> ViewResult:
    """Tokenizer and architecture facts, and the tokens of ``text`` (ids, token types, special or not)."""
    item = state.models.inspectable(model)
    tok, body = item.tokenizer, item.model
    config = body.config
    special = {name: {"token": str(token), "id": tok.convert_tokens_to_ids(token)}
               for name, token in tok.special_tokens_map.items() if isinstance(token, str)}
    info = {
        "model": item.name, "model_type": config.model_type, "tokenizer": type(tok).__name__,
        "vocab_size": int(tok.vocab_size), "special_tokens": special,
        "max_position_embeddings": int(getattr(config, "max_position_embeddings", 0) or 0),
        "layers": int(config.num_hidden_layers), "hidden_size": int(config.hidden_size),
        "ffn_size": int(getattr(config, "intermediate_size", 0) or 0),
        "attention_heads": int(config.num_attention_heads),
        "parameters": int(sum(p.numel() for p in body.parameters())),
        "attention_implementation": getattr(config, "_attn_implementation", None),
    }
    rows = []
    if text and text.strip():
        text = check_text(text, "text", state.config.max_text_chars)
        enc = tok(text)
        special_ids = set(tok.all_special_ids)
        for i, token_id in enumerate(enc["input_ids"]):
            rows.append({"position": i, "token": tok.convert_ids_to_tokens(token_id), "token_id": int(token_id),
                         "token_type": int(enc["token_type_ids"][i]) if "token_type_ids" in enc else 0,
                         "special": token_id in special_ids})
        info["text"] = text
        info["tokens"] = rows
    md = (f"**{item.name}** · {info['model_type']} · {info['layers']} layers · hidden {info['hidden_size']} · "
          f"FFN {info['ffn_size']} · {info['attention_heads']} heads · {info['parameters']:,} parameters · "
          f"vocabulary {info['vocab_size']:,} ({info['tokenizer']}) · up to {info['max_position_embeddings']} "
          "positions · special tokens " + ", ".join(f"`{v['token']}`={v['id']}" for v in special.values()))
    return ViewResult(rows=rows, data=info, text=md)


def token_embeddings(state: AppState, sentences: str | Sequence[str], layer_a: int = 0, layer_b: int = -1,
                     methods: Sequence[str] = ("pca", "tsne"), word: str = "", model: str = "bi-encoder",
                     progress: Progress | None = None) -> ViewResult:
    """2-D projections of every (non-special) token's vector at two layers, and consecutive-layer cosines."""
    from ctxir.internals import word_positions
    from ctxir.viz import consecutive_layer_similarity, heatmap_figure, project, projection_figure

    cfg = state.config
    items = split_lines(sentences, "sentences", cfg.max_sentences, cfg.max_text_chars)
    n_layers = int(state.models.inspectable(model).model.config.num_hidden_layers)
    layers = sorted({_layer(layer_a, n_layers, "layer A"), _layer(layer_b, n_layers, "layer B")})
    methods = [check_choice(m, "projection", ("pca", "tsne")) for m in (methods or ["pca"])]
    step = progress or (lambda *_: None)
    step(0.1, "forward passes")
    internals = [_inspect(state, model, s) for s in items]
    labels, groups, highlight, vectors = [], [], [], {layer: [] for layer in layers}
    token_rows = []
    for g, item in enumerate(internals):
        marked = set()
        if word.strip():
            try:
                marked = set(word_positions(item.tokens, word))
            except CtxirError:
                marked = set()
        for pos, token in enumerate(item.tokens):
            if token in ("[CLS]", "[SEP]", "<s>", "</s>", "[PAD]"):
                continue
            labels.append(token)
            groups.append(g)
            highlight.append(pos in marked)
            for layer in layers:
                vectors[layer].append(item.hidden_states[layer, pos])
            token_rows.append({"sentence": g + 1, "position": pos, "token": token, "token_id": item.token_ids[pos]})
    if word.strip() and not any(highlight):
        raise CtxirError(f"word {word.strip()!r} is in none of the sentences: pick a word that appears, or leave it "
                         "empty")
    points = {}
    for i, method in enumerate(methods):
        step(0.3 + 0.5 * i / len(methods), f"{method} projection")
        for layer in layers:
            points[(method, layer)] = project(np.stack(vectors[layer]), method)
    names = [f"{i + 1}: {s}" for i, s in enumerate(items)]
    projection = projection_figure(points, labels, groups, names, highlight)
    drift = [consecutive_layer_similarity(item.hidden_states) for item in internals]  # each (layers, tokens)
    first = internals[0]
    heat = heatmap_figure(drift[0].T, first.tokens, [f"{i}→{i + 1}" for i in range(drift[0].shape[0])],
                          "cosine between consecutive layers, sentence 1", vmin=None, vmax=1.0,
                          xlabel="layer transition", ylabel="token")
    step(1.0, "done")
    d = cfg.decimals
    data = {
        "layers": layers, "methods": methods, "tokens": token_rows,
        "points": {m: {str(layer): np.round(points[(m, layer)], d).tolist() for layer in layers} for m in methods},
        "consecutive_layer_cosine": [{"sentence": i + 1, "tokens": item.tokens, "cosine": np.round(x, d).tolist()}
                                     for i, (item, x) in enumerate(zip(internals, drift, strict=True))],
    }
    return ViewResult(rows=token_rows, figures={"projection": projection, "consecutive_layers": heat}, data=data,
                      text=f"{len(labels)} tokens from {len(items)} sentence(s); layers {layers[0]} and {layers[-1]}"
                           + (f"; {md_code(word.strip())} circled in red" if word.strip() else ""))


def layer_similarity(state: AppState, sentences: str | Sequence[str], word: str = "bank",
                     model: str = "bi-encoder") -> ViewResult:
    """Per-layer cosine of one word across sentences, and of the whole sentences (mean of their tokens)."""
    from ctxir.internals import word_vectors
    from ctxir.viz import curves_figure, layer_cosines

    cfg = state.config
    items = split_lines(sentences, "sentences", cfg.max_sentences, cfg.max_text_chars, min_items=2)
    word = check_text(word, "word", 50)
    internals = [_inspect(state, model, s) for s in items]
    word_vecs = []
    for i, item in enumerate(internals, 1):
        try:
            word_vecs.append(word_vectors(item, word))  # (layers+1, hidden)
        except CtxirError:
            raise CtxirError(f"word {word!r} is not in sentence {i} ({items[i - 1][:60]!r}): every sentence must "
                             "contain the word to follow") from None
    sentence_vecs = [item.hidden_states.mean(axis=1) for item in internals]  # (layers+1, hidden), mean pooling
    d = cfg.decimals
    word_curves, sentence_curves = {}, {}
    for i in range(len(items)):
        for j in range(i + 1, len(items)):
            key = f"{i + 1} vs {j + 1}"
            word_curves[key] = np.round(layer_cosines(word_vecs[i], word_vecs[j]), d).tolist()
            sentence_curves[key] = np.round(layer_cosines(sentence_vecs[i], sentence_vecs[j]), d).tolist()
    figures = {
        "word": curves_figure(word_curves, f"cosine of {word!r} between sentences, per layer"),
        "sentence": curves_figure(sentence_curves, "cosine of whole sentences (mean of tokens), per layer"),
    }
    data = {"word": word, "sentences": items, "layers": list(range(internals[0].hidden_states.shape[0])),
            "word_cosine": word_curves, "sentence_cosine": sentence_curves}
    legend = "; ".join(f"{i + 1} = {md_literal(repr(s[:50]))}" for i, s in enumerate(items))
    return ViewResult(rows=[{"pair": k, **{f"layer_{li}": v for li, v in enumerate(vals)}}
                            for k, vals in word_curves.items()],
                      figures=figures, data=data, text=f"Sentences: {legend}. Layer 0 is the embedding layer.")


def sentence_similarity(state: AppState, sentences: str | Sequence[str], layer: int = -1,
                        pooling: str = "mean") -> ViewResult:
    """Cosine similarity heatmap of sentence embeddings (bi-encoder, chosen pooling and layer)."""
    from ctxir.encoders import BiEncoder
    from ctxir.viz import cosine_matrix, heatmap_figure

    cfg = state.config
    items = split_lines(sentences, "sentences", cfg.max_sentences, cfg.max_text_chars, min_items=2)
    check_choice(pooling, "pooling", POOLINGS)
    layer = _layer(layer, state.models.num_layers)
    encoder = BiEncoder(state.models.bi_encoder, pooling=pooling, layer=layer, cache=None)
    sim = cosine_matrix(encoder.encode(items))  # (sentences, sentences)
    labels = [f"{i + 1}. {s[:45]}" for i, s in enumerate(items)]
    fig = heatmap_figure(sim, labels, [str(i + 1) for i in range(len(items))],
                         f"sentence cosine similarity ({pooling} pooling, layer {layer})", vmin=-0.2, vmax=1.0)
    d = cfg.decimals
    warnings = _cls_warnings(pooling, layer, "the heatmap shows nothing about the sentences")
    data = {"sentences": items, "layer": layer, "pooling": pooling, "similarity": np.round(sim, d).tolist(),
            "warnings": warnings}
    rows = [{"sentence": labels[i], **{str(j + 1): round(float(sim[i, j]), d) for j in range(len(items))}}
            for i in range(len(items))]
    return ViewResult(rows=rows, figures={"similarity": fig}, data=data, text="\n\n".join(f"⚠️ {w}" for w in warnings))


# ---------------------------------------------------------------- attention


def parse_indices(value: Any, what: str) -> list[int]:
    """[0, 2], "0,2", "0-3" or "" (all) → sorted ints."""
    if value is None or value == "" or value == []:
        return []
    if isinstance(value, int | float):
        value = [value]
    if isinstance(value, str):
        out = []
        for part in value.replace(" ", "").split(","):
            if not part:
                continue
            try:
                if "-" in part[1:]:
                    low, high = part.split("-", 1)
                    out.extend(range(int(low), int(high) + 1))
                else:
                    out.append(int(part))
            except ValueError:
                raise CtxirError(f"{what} {value!r} is not a list of numbers: write e.g. '0,2' or '0-3', or leave it "
                                 "empty for all") from None
        return sorted(set(out))
    try:
        return sorted({int(v) for v in value})
    except (TypeError, ValueError):
        raise CtxirError(f"{what} {value!r} is not a list of numbers: e.g. [0, 2], or empty for all") from None


def attention(state: AppState, text: str, text_pair: str = "", view: str = "head", layers: Any = None,
              heads: Any = None, heatmap_layer: int = 0, heatmap_head: int = 0,
              model: str = "bi-encoder") -> ViewResult:
    """bertviz head/model view (offline HTML), a heatmap of one layer/head, and a per-head summary."""
    from ctxir.viz import (
        attention_heatmap,
        bertviz_document,
        check_attention_size,
        head_summary,
        head_summary_figure,
    )

    cfg = state.config
    text = check_text(text, "text", cfg.max_text_chars)
    text_pair = check_text(text_pair, "second text", cfg.max_text_chars, required=False) or None
    check_choice(view, "view", ("head", "model"))
    internals = _inspect(state, model, text, text_pair, max_tokens=cfg.max_attention_tokens)
    n_layers, n_heads = internals.attentions.shape[:2]
    layers_, heads_ = check_attention_size(internals, parse_indices(layers, "layers"), parse_indices(heads, "heads"),
                                           cfg.max_attention_tokens)
    heatmap_layer = check_int(heatmap_layer, "heatmap layer", 0, n_layers - 1)
    heatmap_head = check_int(heatmap_head, "heatmap head", 0, n_heads - 1)
    started = time.perf_counter()
    document = bertviz_document(internals, view, layers_, heads_, decimals=cfg.decimals,
                                max_tokens=cfg.max_attention_tokens)
    build_ms = (time.perf_counter() - started) * 1000
    summary = head_summary(internals, cfg.decimals)
    figures = {"heatmap": attention_heatmap(internals, heatmap_layer, heatmap_head),
               "head_summary": head_summary_figure(summary)}
    d = cfg.decimals
    data = {
        "tokens": internals.tokens, "token_ids": internals.token_ids, "token_type_ids": internals.token_type_ids,
        "sentence_b_start": internals.sentence_b_start, "view": view, "layers": layers_, "heads": heads_,
        "html_bytes": len(document.encode()), "build_ms": round(build_ms, 1),
        "heatmap": {"layer": heatmap_layer, "head": heatmap_head,
                    "weights": np.round(internals.attentions[heatmap_layer, heatmap_head].astype(np.float64), d).tolist()},
        "head_summary": summary,
    }
    text_out = (f"{len(internals.tokens)} tokens · {view} view of layers {layers_} and {len(heads_)} head(s) · "
                f"{len(document.encode()) / 2**20:.2f} MiB of HTML (weights rounded to {d} decimals), built in "
                f"{build_ms:.0f} ms; drawn in the frame below with no internet access.")
    return ViewResult(rows=summary, figures=figures, data=data, text=text_out, html=document)
