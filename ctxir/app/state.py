"""``AppState``: what a running app holds (models, public corpus, visitors' uploads), and ``ViewResult``."""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ctxir.app.config import AppConfig, Progress
from ctxir.app.corpus_index import CorpusIndex, Indexing, Owner, UploadStore
from ctxir.app.models import AppModels
from ctxir.data.beir import load_queries
from ctxir.data.demo import demo_corpus, demo_queries
from ctxir.data.user_corpus import load_corpus_any
from ctxir.encoders.bi_encoder import EmbeddingCache
from ctxir.encoders.internals import inspect_text
from ctxir.types import Corpus, CtxirError

logger = logging.getLogger("ctxir.app")


@dataclass
class ViewResult:
    """What one view shows: rows for a table, named figures, the numbers as JSON, and a short text."""

    rows: list[dict] = field(default_factory=list)
    figures: dict[str, Any] = field(default_factory=dict)  # matplotlib figures, by name (the PNG exports)
    data: dict = field(default_factory=dict)
    text: str = ""
    extra_rows: list[dict] = field(default_factory=list)
    html: str = ""  # a standalone HTML document (the attention view)
    plots: dict[str, Any] = field(default_factory=dict)  # interactive (Plotly) figures, by name
    highlights: dict[str, list] = field(default_factory=dict)  # [(text, score in [-1, 1]), ...] per text


def corpus_queries(path: Path, limit: int = 8) -> list[str]:
    """Up to ``limit`` example queries for a BEIR folder (its queries.jsonl); none for a single corpus file."""
    file = Path(path) / "queries.jsonl"
    try:
        return list(load_queries(file).values())[:limit] if file.is_file() else []
    except CtxirError as err:
        logger.warning("no example queries: %s", err)
        return []


class AppState:
    """Models + indexed corpora, shared by every request of one running app."""

    def __init__(
        self,
        models: AppModels,
        config: AppConfig | None = None,
        corpus: Corpus | None = None,
        corpus_name: str = "demo",
        corpus_source: str = "built-in demo corpus",
        progress: Progress | None = None,
        *,
        examples: list[str] | None = None,
        cache: EmbeddingCache | bool | None = True,
        background: bool = False,
    ):
        """``cache``: the startup corpus's embedding cache; ``examples``: its example queries (the demo's own)."""
        self.models, self.config = models, config or AppConfig()
        if examples is None:
            examples = demo_queries()[:8] if corpus is None else []
        self.examples = list(examples)
        self.cache, self.default_corpus = cache, corpus_name
        cfg = self.config
        self.uploads = UploadStore(cfg.max_corpora, cfg.max_total_uploads, cfg.upload_idle_s)
        self._lock = threading.Lock()
        corpus = corpus if corpus is not None else demo_corpus()
        self.default_size = len(corpus)
        self._public: dict[str, CorpusIndex] = {}
        self.indexing = Indexing(corpus_name, len(corpus), progress)

        def index_startup_corpus() -> None:
            try:
                index = self.new_index(corpus_name, corpus, corpus_source, self.indexing.step, cache)
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
        """Models, the startup corpus and its index (built in a thread with ``background``) before any request."""
        started = time.perf_counter()
        models, given = AppModels.load(config, progress), {}  # none: the demo corpus
        if config.corpus:
            (progress or (lambda *_: None))(0.8, f"reading corpus {config.corpus}")
            path = Path(config.corpus)
            name = (path.name if path.is_dir() else path.stem) or "corpus"
            given = dict(
                corpus=load_corpus_any(config.corpus), corpus_name=name, corpus_source=str(config.corpus)
            )
            given["examples"] = corpus_queries(path)
        state = cls(models, config, progress=progress, background=background, **given)
        state.warm_up(index=not background)
        what = "models ready in %.1f s; indexing" if background else "app ready in %.1f s:"
        took = time.perf_counter() - started
        logger.info(f"{what} %d documents of %r", took, state.default_size, state.default_corpus)
        return state

    def new_index(self, name: str, corpus: Corpus, source: str, progress: Progress | None, cache):
        """A ``CorpusIndex`` of ``corpus`` over the bi-encoder, with the app's dense index and backend."""
        m, dense = self.models, {"index": self.config.index, "backend": self.config.backend}
        return CorpusIndex(name, corpus, m.bi_encoder, source, progress, cache, m.bi_encoder_name, **dense)

    @property
    def ready(self) -> bool:
        """The startup corpus is indexed (always, unless it is being indexed in the background)."""
        return self.indexing.done.is_set() and self.indexing.error is None

    def wait_ready(self, timeout: float | None = None) -> bool:
        self.indexing.done.wait(timeout)
        return self.ready

    @staticmethod
    def _warm_index(index: CorpusIndex) -> None:
        for retriever in index.stages.values():
            retriever.query("warm up", 1)

    def warm_up(self, index: bool = True) -> None:
        """One tiny pass through every model so the first user request pays no lazy initialisation."""
        if index:
            self._warm_index(self.index(self.default_corpus))
        for reranker in self.models.rerankers.values():
            reranker.score_pairs("warm up", ["warm up"])
        for item in self.models.inspect.values():
            inspect_text("warm up", model=item.model, tokenizer=item.tokenizer)

    def corpus_names_for(self, owner: Owner = None) -> list[str]:
        """The corpora ``owner`` may choose: the startup corpus (even while indexed), then their own uploads."""
        return [self.default_corpus, *(n for n in self.uploads.names(owner) if n != self.default_corpus)]

    @property
    def corpus_names(self) -> list[str]:
        return self.corpus_names_for(None)

    def index(self, name: str | None, owner: Owner = None) -> CorpusIndex:
        name = name or self.default_corpus
        upload = self.uploads.get(owner, name)  # the owner's own upload of that name comes first
        if upload is not None:
            return upload
        with self._lock:
            if name in self._public:
                return self._public[name]
        visible = [self.default_corpus, *self.uploads.names(owner)]
        if name == self.default_corpus:
            raise CtxirError(self.indexing.refusal())
        idle_min = self.config.upload_idle_s / 60
        raise CtxirError(
            f"corpus {name!r} is not loaded: choose one of {', '.join(map(repr, visible))} or upload a "
            f"corpus file first (an upload is visible only to the session that uploaded it; it is "
            f"released when that session ends, or after {idle_min:g} minutes without use when the app "
            "needs the room: then upload it again)"
        )
