"""What the app holds while it runs: its limits (``AppConfig``), its models (``AppModels``) and its corpora
(``AppState``: the public startup corpus and each visitor's uploads), plus the ``ViewResult`` every view returns.

Models are loaded once, in ``AppState.load`` (or passed in already built), and shared by every request.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ctxir.checks import check_choice, check_int, grouped_options
from ctxir.data.demo import demo_corpus, demo_queries
from ctxir.data.loaders import load_corpus_any, load_queries
from ctxir.encoders.bi_encoder import BiEncoder, EmbeddingCache, default_backend
from ctxir.encoders.internals import inspect_text
from ctxir.encoders.models import (
    DEFAULT_BI_ENCODER,
    DEFAULT_CLS_LR,
    DEFAULT_CROSS_ENCODER,
    load_bi_encoder,
    load_transformer,
)
from ctxir.rerank.pipeline import FIRST_STAGES, HybridSettings, build_first_stages
from ctxir.rerank.registry import RERANKERS as KINDS
from ctxir.rerank.registry import load_reranker, reranker_choices
from ctxir.retrieval.retrievers import DenseRetriever
from ctxir.types import Corpus, CtxirError, Internals, doc_text

logger = logging.getLogger("ctxir.app")

DEMO_CORPUS_NAME = "demo"
POOLINGS = ("mean", "cls", "max")
INSPECT_MODELS = ("bi-encoder", "cross-encoder")
Progress = Callable[[float, str], None]

ENCODE_CHUNK = 256  # documents per progress step of a first start's encoding


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
    max_compare_docs: int = (
        6_000  # compare pooling encodes the corpus once per (pooling, layer): minutes on CPU
    )
    max_corpora: int = (
        4  # uploaded corpora one visitor (session) keeps; their own least recently used goes first
    )
    max_total_uploads: int = 16  # uploaded corpora in memory across all visitors
    upload_idle_s: float = 900.0  # a visitor idle this long may lose uploads, and only when the app is full
    rerank_depth: int = 20
    decimals: int = 3
    explain_steps: int = 32  # integrated-gradients steps to start with (ctxir.explain doubles them if needed)
    explain_max_steps: int = 128  # ... up to this many
    max_movers: int = 5  # "what moved" explains at most this many re-ranked documents (one IG run each)
    # any kind of ctxir.rerank.registry: kind → model id or folder ("none" = not loaded); wins over cross_encoder
    # and cls_lr; a kind named nowhere loads its default model
    rerankers: dict[str, str] = field(default_factory=dict)
    # the most results a search, compare pooling or "what moved" shows, and the deepest re-ranking: each is the
    # maximum of its input on the page and the limit its view checks (one number, one message)
    max_k: int = 50
    max_rerank_depth: int = 100

    def reranker_model(self, kind: str) -> str:
        """The model the app loads for re-ranker ``kind`` ("" or "none" = none): ``rerankers[kind]``, else the field
        named by the kind's ``setting`` (``cross_encoder``, ``cls_lr``), else the kind's default."""
        if kind in self.rerankers:
            return self.rerankers[kind]
        own = getattr(self, KINDS[kind].setting, None)
        return own if isinstance(own, str) else KINDS[kind].default_model()

    @classmethod
    def reranker_settings(cls, models: dict[str, str]) -> dict:
        """AppConfig keywords for {kind: model}: a kind's own field where it has one, else ``rerankers``."""
        own = {f.name for f in dataclasses.fields(cls)}
        out: dict = {KINDS[k].setting: m for k, m in models.items() if KINDS[k].setting in own}
        out["rerankers"] = {k: m for k, m in models.items() if KINDS[k].setting not in own}
        return out


@dataclass
class ViewResult:
    """What one view shows: rows for a table, named figures, the numbers as JSON, and a short text."""

    rows: list[dict] = field(default_factory=list)
    figures: dict[str, Any] = field(default_factory=dict)
    data: dict = field(default_factory=dict)
    text: str = ""
    extra_rows: list[dict] = field(default_factory=list)
    html: str = ""  # a standalone HTML document (the attention view)
    plots: dict[str, Any] = field(default_factory=dict)  # interactive (Plotly) figures, by name
    highlights: dict[str, list] = field(
        default_factory=dict
    )  # [(text, score in [-1, 1]), ...] per highlighted text


def corpus_queries(path: Path, limit: int = 8) -> list[str]:
    """Up to ``limit`` example queries for a BEIR folder (its queries.jsonl); none for a single corpus file."""

    file = Path(path) / "queries.jsonl"
    if not file.is_file():
        return []
    try:
        return list(load_queries(file).values())[:limit]
    except CtxirError as err:
        logger.warning("no example queries: %s", err)
        return []


@dataclass
class Inspectable:
    """A tokenizer + eager-attention transformer body, for token embeddings and attention views."""

    name: str
    tokenizer: Any
    model: Any


@dataclass
class AppModels:
    """The loaded models. ``rerankers``: {kind: re-ranker} of ``ctxir.rerank.registry.RERANKERS`` that loaded;
    ``unavailable``: {kind: why not} for every other kind (offered nowhere in the app, shown with that reason)."""

    bi_encoder: Any  # SentenceTransformer
    bi_encoder_name: str
    inspect: dict[str, Inspectable]  # "bi-encoder" (always), "cross-encoder" (when loaded)
    rerankers: dict[str, Any] = field(default_factory=dict)  # kind → ctxir.Reranker
    unavailable: dict[str, str] = field(default_factory=dict)  # kind → why it is not loaded

    @property
    def loaded(self) -> list[str]:
        """The kinds loaded, in the registry's order: what the app offers."""
        return [kind for kind in KINDS if kind in self.rerankers]

    def why_not(self, kind: str) -> str:
        """'' when ``kind`` is loaded, else why it is not."""
        if kind in self.rerankers:
            return ""
        return self.unavailable.get(kind) or f"no {KINDS[kind].label} re-ranker was given"

    @classmethod
    def load(cls, config: AppConfig, progress: Progress | None = None) -> AppModels:
        """Load every model once. A missing bi-encoder is fatal; a missing re-ranker only logs a warning, and one
        that is not on this machine is not tried (nothing is downloaded)."""

        step = progress or (lambda *_: None)
        step(0.0, f"loading bi-encoder {config.bi_encoder}")
        bi = load_bi_encoder(config.bi_encoder, config.device)
        tokenizer, body = load_transformer(config.bi_encoder, config.device, attentions=True)
        inspect = {"bi-encoder": Inspectable(config.bi_encoder, tokenizer, body)}
        models = cls(bi, config.bi_encoder, inspect)
        for i, kind in enumerate(KINDS.values()):
            model = config.reranker_model(kind.name)
            if not model or model.lower() == "none":
                models.unavailable[kind.name] = (
                    f"the app was started with {kind.flag} none"
                    if model
                    else f"no {kind.label} re-ranker was given and this installation ships none"
                )
                continue
            ok, why = kind.available(model)
            if not ok:  # not on this machine: nothing is downloaded, the kind is not offered
                models.unavailable[kind.name] = why
                logger.warning("%s re-ranker unavailable, the app starts without it: %s", kind.label, why)
                continue
            step(0.4 + 0.3 * i / len(KINDS), f"loading {kind.label} re-ranker {model}")
            try:
                models.rerankers[kind.name] = load_reranker(kind.name, model, config.device)
                # an onnx backend (app.py --rerank-backend): exported (first start only, ~10 s a model) and opened
                # now, before serving, not on a visitor's first search; an export in a thread beside the served
                # requests is what this avoids (torch's exporter is not safe to run beside other threads' work)
                if getattr(models.rerankers[kind.name], "backend", "torch").startswith("onnx"):
                    step(
                        0.4 + 0.3 * (i + 0.5) / len(KINDS),
                        f"preparing {kind.label} re-ranker for ONNX Runtime",
                    )
                    models.rerankers[kind.name].onnx_scorer()
                if kind.inspectable:
                    inspect[kind.name] = Inspectable(
                        model, *load_transformer(model, config.device, attentions=True)
                    )
            except CtxirError as err:
                models.rerankers.pop(kind.name, None)
                models.unavailable[kind.name] = str(err)
                logger.warning("%s re-ranker unavailable, the app starts without it: %s", kind.label, err)
        return models

    @classmethod
    def from_objects(
        cls,
        bi_encoder,
        bi_encoder_name: str = "bi-encoder",
        cross_encoder=None,
        cls_lr=None,
        device: str = "cpu",
        rerankers: dict[str, Any] | None = None,
    ) -> AppModels:
        """Wrap models already in memory (tests, notebooks): a SentenceTransformer, and re-rankers by kind
        (``rerankers={"cross-encoder": a CrossEncoder, "cls-lr": a ClsLrRanker, ...}``; ``cross_encoder=`` and
        ``cls_lr=`` are the same for those two)."""

        path = str(bi_encoder[0].auto_model.config._name_or_path or bi_encoder_name)
        tokenizer, body = load_transformer(path, device, attentions=True)
        inspect = {"bi-encoder": Inspectable(bi_encoder_name, tokenizer, body)}
        models = cls(bi_encoder, bi_encoder_name, inspect)
        given = {"cross-encoder": cross_encoder, "cls-lr": cls_lr, **(rerankers or {})}
        for kind in KINDS.values():
            if given.get(kind.name) is None:
                models.unavailable[kind.name] = f"no {kind.label} re-ranker was given"
                continue
            models.rerankers[kind.name] = kind.wrap(given[kind.name])
            if kind.inspectable:
                inspect[kind.name] = _inspectable_body(models.rerankers[kind.name], device)
        unknown = set(given) - set(KINDS)
        if unknown:
            raise CtxirError(
                f"re-ranker kind {sorted(unknown)[0]!r} is not known: use one of "
                f"{', '.join(map(repr, KINDS))}"
            )
        return models

    def reranker(self, name: str):
        """The loaded re-ranker ``name`` ("none" → None); one that is not loaded fails with why and what to do."""
        check_choice(name, "re-ranker", reranker_choices())
        if name == "none":
            return None
        if name not in self.rerankers:
            kind = KINDS[name]
            raise CtxirError(
                f"the {kind.label} re-ranker is not available ({self.why_not(name).rstrip('.')}). "
                f"{kind.unavailable_hint('app')}. Meanwhile "
                f"choose re-ranker {' or '.join(map(repr, ['none', *self.loaded]))}."
            )
        return self.rerankers[name]

    def inspectable(self, name: str) -> Inspectable:
        if name not in self.inspect:
            loaded = ", ".join(f"{k!r} ({v.name})" for k, v in self.inspect.items())
            hint = (
                " The cross-encoder is not loaded: start the app with --cross-encoder PATH."
                if name == "cross-encoder"
                else ""
            )
            raise CtxirError(
                f"model {name!r} is not loaded in this app: choose one of {loaded}.{hint} To inspect "
                "another model, restart the app with --bi-encoder NAME_OR_FOLDER"
            )
        return self.inspect[name]

    @property
    def num_layers(self) -> int:
        return int(self.inspect["bi-encoder"].model.config.num_hidden_layers)

    @property
    def num_heads(self) -> int:
        return int(self.inspect["bi-encoder"].model.config.num_attention_heads)


class CorpusIndex:
    """One corpus with its BM25, dense and hybrid retrievers (dense embeddings cached on disk)."""

    def __init__(
        self,
        name: str,
        corpus: Corpus,
        bi_encoder,
        source: str = "",
        progress: Progress | None = None,
        cache=True,
        model_name: str | None = None,
    ):
        step = progress or (lambda *_: None)
        self.name, self.corpus, self.source, self.cache = name, corpus, source, cache
        self._bi_encoder, self._model_name = bi_encoder, model_name
        encoder = self._encoder()
        if progress is not None:
            self._encode_in_steps(encoder, step)
        step(0.95, f"BM25 index and dense index of {len(corpus):,} documents")
        # the same builder as `ctxir evaluate`: hybrid fuses these very BM25 and dense retrievers
        self.stages = build_first_stages(
            corpus, FIRST_STAGES, [encoder], hybrid=HybridSettings(fusion="rrf", depth=100)
        )
        self.bm25, self.dense, self.hybrid = (self.stages[kind] for kind in FIRST_STAGES)
        self._pooled: dict[tuple[str, int], Any] = {}
        self._lock = threading.Lock()
        step(1.0, "ready")

    def _encode_in_steps(self, encoder, step: Progress, chunk: int | None = None) -> None:
        """Encode the corpus into the embedding cache ``chunk`` documents at a time, reporting each, so a first
        start on a large corpus shows how far it has got (minutes on a CPU); the retrievers then read the cache.
        Nothing to do when the vectors are cached; without a cache (uploads) the retriever encodes in one pass."""

        if encoder.cache is None:
            step(0.1, f"encoding {len(self.corpus):,} documents")
            return
        texts = [doc_text(self.corpus[doc_id]) for doc_id in self.corpus]  # the order encode_corpus uses
        key = encoder.cache_key(texts)
        if encoder.cache.get(key, mmap=True) is not None:  # mapped, not read: a 1M matrix is 1.5 GB
            step(0.9, f"embeddings of {len(texts):,} documents read from the cache")
            return
        parts, chunk = [], chunk or ENCODE_CHUNK
        for start in range(0, len(texts), chunk):
            step(
                0.9 * start / len(texts),
                f"encoding documents: {start:,} of {len(texts):,} done (first start "
                "only: the vectors are cached)",
            )
            parts.append(encoder.encode(texts[start : start + chunk]))
        encoder.cache.put(key, np.concatenate(parts) if parts else encoder.encode([]))

    def _encoder(self, pooling: str | None = None, layer: int | None = None):
        # the search encoder (the model's own pooling) runs on $CTXIR_BACKEND (app.py --backend); another pooling or
        # layer (compare pooling) on torch, which alone supports them
        backend = default_backend() if pooling is None and layer is None else "torch"
        encoder = BiEncoder(self._bi_encoder, pooling=pooling, layer=layer, cache=self.cache, backend=backend)
        if self._model_name:
            # the name shown in results; the cache key is the weights fingerprint, so the app and
            # `ctxir evaluate` share corpus embeddings whatever name each gave the model
            encoder.name = self._model_name
        return encoder

    def retriever(self, first_stage: str):
        return self.stages[check_choice(first_stage, "first stage", FIRST_STAGES)]

    def pooled(self, pooling: str, layer: int):
        """A dense retriever over this corpus with another pooling/layer (encoded once, then cached)."""

        with self._lock:
            key = (pooling, layer)
            if key not in self._pooled:
                self._pooled[key] = DenseRetriever(
                    self.corpus, self._encoder(pooling, layer), show_progress=True
                )
            return self._pooled[key]

    def summary(self) -> dict:
        return {"name": self.name, "documents": len(self.corpus), "source": self.source}


class Indexing:
    """How far the startup corpus's index has got: what the page shows while it is built in the background, and
    what a search of that corpus is told before it is ready. Also forwards each step to ``progress``."""

    def __init__(
        self,
        name: str,
        documents: int,
        progress: Progress | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.name, self.documents, self.clock = name, documents, clock
        self.started = clock()
        self.fraction, self.message = 0.0, "starting"
        self.error: str | None = None
        self.done = threading.Event()
        self._progress = progress

    def step(self, fraction: float, message: str) -> None:
        self.fraction, self.message = float(fraction), message
        if self._progress is not None:
            self._progress(fraction, message)

    def finish(self, error: BaseException | None = None) -> None:
        if error is not None:
            self.error = str(error) if isinstance(error, CtxirError) else f"{type(error).__name__}: {error}"
        self.done.set()

    def text(self) -> str:
        """One line for the page: '' once ready."""
        if self.error is not None:
            return (
                f"⚠️ Indexing corpus {self.name!r} failed: {self.error}. The other tabs work; restart the app "
                "to try again (the log has the details)."
            )
        if self.done.is_set():
            return ""
        elapsed = self.clock() - self.started
        return (
            f"Indexing corpus {self.name!r} ({self.documents:,} documents): {self.message} · "
            f"{self.fraction:.0%} · {elapsed:.0f} s so far. Searching it works when this is done; the other "
            "tabs work now."
        )

    def refusal(self) -> str:
        """A search of the startup corpus before it is ready (or after its indexing failed)."""
        if self.error is not None:
            return (
                f"corpus {self.name!r} could not be indexed ({self.error}): restart the app, or upload a corpus "
                "file and search that"
            )
        return (
            f"corpus {self.name!r} is still being indexed ({self.message}; {self.fraction:.0%} after "
            f"{self.clock() - self.started:.0f} s): try again when the line at the top of the page is gone. "
            "Pair scoring, Explain, Token embeddings and Attention work meanwhile"
        )


Owner = str | None  # whose uploads: a Gradio session hash; None = the local Python caller (tests, notebooks)


@dataclass(frozen=True)
class IndexBuild:
    """How ``AppState`` indexes its startup corpus: ``cache`` the embedding cache (True: the default folder, None:
    none, or an ``EmbeddingCache``), ``background`` whether in a thread (see ``AppState.__init__``)."""

    cache: EmbeddingCache | bool | None = True
    background: bool = False


def _index_build(build: IndexBuild | None, options: dict) -> IndexBuild:
    return grouped_options(IndexBuild, build, options, "AppState", "build", ("examples", "build"))


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

    def __init__(
        self,
        models: AppModels,
        config: AppConfig | None = None,
        corpus: Corpus | None = None,
        corpus_name: str = DEMO_CORPUS_NAME,
        corpus_source: str = "built-in demo corpus",
        progress: Progress | None = None,
        *,
        examples: list[str] | None = None,
        build: IndexBuild | None = None,
        **build_options,
    ):
        """``build``: how the startup corpus is indexed (:class:`IndexBuild`); ``build_options``: its fields as
        keywords (``cache=None``, ``background=True``), as before they were grouped, overriding ``build``'s.
        background=True indexes the startup corpus in a thread and returns at once: the app serves its page
        meanwhile (``indexing.text()`` says how far it has got) and a search of that corpus before it is ready is
        refused with that progress; ``wait_ready()`` blocks until it is."""
        build = _index_build(build, build_options)
        cache, background = build.cache, build.background
        self.models, self.config = models, config or AppConfig()
        # example queries offered for the startup corpus (the demo corpus's own when none are given)
        self.examples = (
            list(examples) if examples is not None else demo_queries()[:8] if corpus is None else []
        )
        self.cache = cache
        self.default_corpus = corpus_name
        self.clock: Callable[[], float] = time.monotonic  # tests replace it to age owners
        self._lock = threading.Lock()
        self._uploads: dict[Owner, OrderedDict[str, CorpusIndex]] = {}
        self._last_seen: dict[Owner, float] = {}  # only owners that hold uploads
        corpus = corpus if corpus is not None else demo_corpus()
        self.default_size = len(corpus)
        self._public: dict[str, CorpusIndex] = {}
        self.indexing = Indexing(corpus_name, len(corpus), progress)

        def index_startup_corpus() -> None:
            try:
                index = CorpusIndex(
                    corpus_name,
                    corpus,
                    models.bi_encoder,
                    corpus_source,
                    self.indexing.step,
                    cache,
                    models.bi_encoder_name,
                )
                if background:
                    self._warm_index(index)  # in this thread, so the first search after "ready" pays nothing
                with self._lock:
                    self._public[corpus_name] = index
                self.indexing.finish()
            except Exception as err:  # reported on the page and by every search of this corpus, never raised
                if not background:
                    raise
                logger.exception("indexing the startup corpus %r failed", corpus_name)
                self.indexing.finish(err)

        if background:
            threading.Thread(
                target=index_startup_corpus, name=f"ctxir-index-{corpus_name}", daemon=True
            ).start()
        else:
            index_startup_corpus()

    @classmethod
    def load(cls, config: AppConfig, progress: Progress | None = None, background: bool = False) -> AppState:
        """Everything the app needs before its first request: models, the startup corpus and its index
        (background=True: the index is built in a thread, see ``__init__``; the models are loaded here)."""

        started = time.perf_counter()
        models = AppModels.load(config, progress)
        if config.corpus:
            step = progress or (lambda *_: None)
            step(0.8, f"reading corpus {config.corpus}")
            corpus = load_corpus_any(config.corpus)
            path = Path(config.corpus)
            name, source = (path.name if path.is_dir() else path.stem) or "corpus", str(config.corpus)
            examples = corpus_queries(path)
        else:
            corpus, name, source = demo_corpus(), DEMO_CORPUS_NAME, "built-in demo corpus"
            examples = demo_queries()[:8]
        state = cls(
            models,
            config,
            corpus,
            name,
            source,
            progress,
            examples=examples,
            build=IndexBuild(background=background),
        )
        state.warm_up(index=not background)
        if background:
            logger.info(
                "models ready in %.1f s; indexing %d documents of %r in the background",
                time.perf_counter() - started,
                len(corpus),
                name,
            )
        else:
            logger.info(
                "app ready in %.1f s: %d documents in %r", time.perf_counter() - started, len(corpus), name
            )
        return state

    @property
    def ready(self) -> bool:
        """The startup corpus is indexed (always, unless it is being indexed in the background)."""
        return self.indexing.done.is_set() and self.indexing.error is None

    def wait_ready(self, timeout: float | None = None) -> bool:
        self.indexing.done.wait(timeout)
        return self.ready

    @staticmethod
    def _warm_index(index: CorpusIndex) -> None:
        index.dense.query("warm up", 1)
        index.bm25._search(["warm up"], 1)

    def warm_up(self, index: bool = True) -> None:
        """One tiny pass through every model so the first user request pays no lazy initialisation."""
        if index:
            self._warm_index(self.index(self.default_corpus))
        for reranker in self.models.rerankers.values():
            reranker.score_pairs("warm up", ["warm up"])

        for item in self.models.inspect.values():
            inspect_text("warm up", model=item.model, tokenizer=item.tokenizer)

    # ------------------------------------------------------------ who sees what

    @property
    def public_names(self) -> list[str]:
        """The startup corpus (listed while it is still being indexed: choosing it then says how far it is)."""
        return [self.default_corpus]

    def corpus_names_for(self, owner: Owner = None) -> list[str]:
        """The corpora ``owner`` may choose: the public one(s), then their own uploads (most recent last)."""
        with self._lock:
            own = [n for n in self._uploads.get(owner, {}) if n not in self.public_names]
            return [*self.public_names, *own]

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
            visible = [*self.public_names, *(own or {})]
        if name == self.default_corpus:
            raise CtxirError(self.indexing.refusal())
        idle_min = self.config.upload_idle_s / 60
        raise CtxirError(
            f"corpus {name!r} is not loaded: choose one of {', '.join(map(repr, visible))} or upload a "
            f"corpus file first (an upload is visible only to the session that uploaded it; it is "
            f"released when that session ends, or after {idle_min:g} minutes without use when the app "
            "needs the room: then upload it again)"
        )

    # ------------------------------------------------------------ uploads

    def _plan(self, owner: Owner, name: str) -> tuple[list[str], list[tuple[Owner, str]]]:
        """(the owner's own uploads to drop, other idle owners' uploads to evict) to add ``name``; raises when the
        app is full of corpora of active owners. Changes nothing. Call with the lock held."""
        cfg = self.config
        own = self._uploads.get(owner, OrderedDict())
        if name in own:
            return [], []  # a re-upload replaces itself
        own_drops = list(own)[: max(0, len(own) - cfg.max_corpora + 1)]
        total = sum(len(corpora) for corpora in self._uploads.values()) - len(own_drops)
        excess = total + 1 - cfg.max_total_uploads
        evict: list[tuple[Owner, str]] = []
        if excess > 0:
            now = self.clock()
            idle = sorted(
                (o for o, seen in self._last_seen.items() if o != owner and now - seen >= cfg.upload_idle_s),
                key=self._last_seen.__getitem__,
            )  # least recently active first
            for other in idle:
                evict.extend((other, n) for n in self._uploads.get(other, {}))
                if len(evict) >= excess:
                    break
            if len(evict) < excess:
                raise CtxirError(
                    f"this app already holds {total} uploaded corpora of visitors who are using them, its limit: "
                    "nothing of theirs is removed while they are active. Try again in a few minutes (uploads are "
                    f"released when a visitor closes the page, or after {cfg.upload_idle_s / 60:g} minutes without "
                    "use when room is needed), or run ctxir on your own machine: `python app.py --corpus YOUR_FILE`"
                )
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


# ---------------------------------------------------------------- model inputs shared by the inspection views


def inspect_input(
    state: AppState, model: str, text: str, text_pair: str | None = None, max_tokens: int | None = None
) -> Internals:
    """One forward pass of a loaded model over ``text`` (and ``text_pair``), refused above the token limit."""

    item = state.models.inspectable(model)
    limit = max_tokens or state.config.max_inspect_tokens
    n_tokens = len(item.tokenizer(text, text_pair or None)["input_ids"])
    if n_tokens > limit:
        raise CtxirError(
            f"the input has {n_tokens} tokens but this view accepts at most {limit}: shorten the text"
            f" (it begins {text[:40]!r})"
        )
    return inspect_text(text, text_pair or None, model=item.model, tokenizer=item.tokenizer, max_tokens=limit)


def check_layer(value: Any, n_layers: int, what: str = "layer") -> int:
    """-1 means the last layer; layers count like hidden_states (0 = embeddings)."""
    layer = check_int(value, what, -1, n_layers)
    return n_layers if layer == -1 else layer


def _inspectable_body(reranker, device: str) -> Inspectable:
    """A cross-encoder's transformer body with eager attention, for the attention and embedding views: reloaded by
    name (a ctxir modular cross-encoder's folder holds its trained top layers, which load_transformer applies)."""

    body = reranker.model[0].auto_model
    by_name = (
        isinstance(getattr(reranker, "model_name", None), str)
        and reranker.model_name != type(reranker.model).__name__
    )  # CrossEncoderReranker names an object by its class
    path = reranker.model_name if by_name else str(body.config._name_or_path)
    try:
        return Inspectable(path, *load_transformer(path, device, attentions=True))
    except CtxirError:  # not loadable by name (built in memory): its own body, attention switched when read
        return Inspectable(path, reranker.model.tokenizer, body)
