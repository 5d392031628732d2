"""``CorpusIndex``: a corpus and its retrievers; ``Indexing``: its progress; ``UploadStore``: visitors' uploads."""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import numpy as np

from ctxir.app.config import Progress
from ctxir.encoders.bi_encoder import BiEncoder
from ctxir.retrieval.registry import FIRST_STAGES, HybridSettings, StageParts, get_first_stage
from ctxir.retrieval.retrievers import DenseRetriever
from ctxir.types import Corpus, CtxirError, doc_text

logger = logging.getLogger("ctxir.app")

ENCODE_CHUNK = 256  # documents per progress step of a first start's encoding
PROMPTED_KEPT = 4  # first stages over other prompts kept per corpus (each holds its documents' vectors)


class CorpusIndex:
    """One corpus with a retriever per first stage."""

    def __init__(
        self,
        name: str,
        corpus: Corpus,
        bi_encoder,
        source: str = "",
        progress: Progress | None = None,
        cache=True,
        model_name: str | None = None,
        *,
        index: str = "auto",
        backend: str = "torch",
    ):
        step = progress or (lambda *_: None)
        self.name, self.corpus, self.source, self.cache = name, corpus, source, cache
        self.index, self.backend = index, backend
        self._bi_encoder, self._model_name = bi_encoder, model_name
        encoder = self._encoder()
        if progress is not None:
            self._encode_in_steps(encoder, step)
        step(0.95, f"BM25 index and dense index of {len(corpus):,} documents")
        self._pooled: dict[tuple, Any] = {}  # (pooling, layer, query prompt, document prompt) → its retriever
        self.prompts = {"query": encoder.query_prompt, "document": encoder.document_prompt}
        self._by_prompts: dict[tuple[str, str], StageParts] = {}  # (query, document prompt) → their parts
        self._lock = threading.Lock()
        # as `ctxir evaluate` builds them: one set of parts, which hybrid and any stage registered later share
        self._parts = StageParts(
            corpus, [encoder], hybrid=HybridSettings(fusion="rrf", depth=100), index=self.index
        )
        self.stages = {name: kind.build(self._parts) for name, kind in FIRST_STAGES.items()}
        step(1.0, "ready")

    def _encode_in_steps(self, encoder, step: Progress) -> None:
        """Encode the corpus into the embedding cache ``ENCODE_CHUNK`` documents at a time, reporting each."""
        if encoder.cache is None:
            step(0.1, f"encoding {len(self.corpus):,} documents")
            return
        texts = [doc_text(self.corpus[doc_id]) for doc_id in self.corpus]  # the order encode_corpus uses
        key = encoder.cache_key(texts, "document")
        # as encode_cached: another process encoding the same corpus (an evaluation, a second app) holds the lock
        with encoder.cache.lock(key):
            if encoder.cache.get(key, mmap=True) is not None:  # mapped, not read: a 1M matrix is 1.5 GB
                step(0.9, f"embeddings of {len(texts):,} documents read from the cache")
                return
            parts, chunk = [], ENCODE_CHUNK
            for start in range(0, len(texts), chunk):
                step(
                    0.9 * start / len(texts),
                    f"encoding documents: {start:,} of {len(texts):,} done (first start "
                    "only: the vectors are cached)",
                )
                parts.append(encoder.encode(texts[start : start + chunk], role="document"))
            encoder.cache.put(key, np.concatenate(parts) if parts else encoder.encode([]))

    def _encoder(self, pooling: str | None = None, layer: int | None = None, prompts: dict | None = None):
        # the search encoder (the model's own pooling) runs on self.backend; compare pooling's on torch
        backend = self.backend if pooling is None and layer is None else "torch"
        prompts = prompts or {}
        encoder = BiEncoder(
            self._bi_encoder,
            pooling=pooling,
            layer=layer,
            cache=self.cache,
            backend=backend,
            query_prompt=prompts.get("query"),
            document_prompt=prompts.get("document"),
        )
        if self._model_name:
            # the name shown; the cache key is the weights' fingerprint, shared with `ctxir evaluate`
            encoder.name = self._model_name
        return encoder

    def retriever(self, first_stage: str, prompts: dict | None = None):
        """The retriever of ``first_stage`` (a name of ``FIRST_STAGES``); checked, and built if it is new."""
        kind = get_first_stage(first_stage)
        wanted = {**self.prompts, **{k: v for k, v in (prompts or {}).items() if v is not None}}
        if wanted != self.prompts and kind.uses_bi_encoder:
            return self._prompted(kind, wanted)
        if kind.name not in self.stages:
            with self._lock:
                if kind.name not in self.stages:
                    self.stages = {**self.stages, kind.name: kind.build(self._parts)}
        return self.stages[kind.name]

    def _prompted(self, kind, prompts: dict):
        """``kind``'s first stage over a bi-encoder with ``prompts``, built (as ``pooled``: under the lock) once."""
        key = (prompts["query"], prompts["document"])
        with self._lock:
            if key not in self._by_prompts:
                parts = StageParts(
                    self.corpus, [self._encoder(prompts=prompts)], hybrid=self._parts.hybrid, index=self.index
                )
                parts.built["bm25"] = self._parts.bm25()  # words do not take prompts: one BM25 index
                self._by_prompts[key] = parts
                while len(self._by_prompts) > PROMPTED_KEPT:
                    self._by_prompts.pop(next(iter(self._by_prompts)))
            parts = self._by_prompts[key]
            return parts.part(("stage", kind.name), lambda: kind.build(parts))

    def __getattr__(self, name: str):
        # index.bm25, index.dense, ...: each first stage built at start by its name
        stages = self.__dict__.get("stages")
        if stages is not None and name in stages:
            return stages[name]
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def pooled(self, pooling: str, layer: int, prompts: dict | None = None):
        """A dense retriever with another pooling/layer and ``prompts``, encoded once (``PROMPTED_KEPT`` kept)."""
        wanted = {**self.prompts, **{k: v for k, v in (prompts or {}).items() if v is not None}}
        with self._lock:
            key = (pooling, layer, wanted["query"], wanted["document"])
            if key not in self._pooled:
                encoder = self._encoder(pooling, layer, prompts=None if wanted == self.prompts else wanted)
                self._pooled[key] = DenseRetriever(self.corpus, encoder, index=self.index, show_progress=True)
                other = [
                    k for k in self._pooled if k[2:] != (self.prompts["query"], self.prompts["document"])
                ]
                for old in other[:-PROMPTED_KEPT]:
                    del self._pooled[old]
            return self._pooled[key]


class Indexing:
    """How far the startup corpus's index has got."""

    def __init__(self, name: str, documents: int, progress: Progress | None = None):
        self.name, self.documents, self._progress = name, documents, progress
        self.started = time.monotonic()
        self.fraction, self.message = 0.0, "starting"
        self.error: str | None = None
        self.done = threading.Event()

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
        elapsed = time.monotonic() - self.started
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
            f"{time.monotonic() - self.started:.0f} s): try again when the line at the top of the page is gone. "
            "Pair scoring, Explain, Token embeddings and Attention work meanwhile"
        )


Owner = str | None  # whose uploads: a Gradio session hash; None = the local Python caller (tests, notebooks)


class UploadStore:
    """The uploaded corpora of every visitor of one running app, by owner."""

    def __init__(self, max_corpora: int, max_total: int, idle_s: float):
        self.max_corpora, self.max_total, self.idle_s = max_corpora, max_total, idle_s
        self.clock: Callable[[], float] = time.monotonic  # tests replace it to age owners
        self._lock = threading.Lock()
        self._uploads: dict[Owner, OrderedDict[str, CorpusIndex]] = {}
        self._last_seen: dict[Owner, float] = {}  # only owners that hold uploads

    def names(self, owner: Owner) -> list[str]:
        """``owner``'s uploads, least recently used first."""
        with self._lock:
            return list(self._uploads.get(owner, {}))

    def touch(self, owner: Owner) -> None:
        """``owner`` is active (any request): their uploads are not idle."""
        with self._lock:
            if owner in self._uploads:
                self._last_seen[owner] = self.clock()

    def get(self, owner: Owner, name: str) -> CorpusIndex | None:
        """``owner``'s upload ``name`` (now their most recently used), or None; the lookup marks ``owner`` active."""
        with self._lock:
            own = self._uploads.get(owner, {})
            if own:
                self._last_seen[owner] = self.clock()
            if name in own:
                own.move_to_end(name)
            return own.get(name)

    def _plan(self, owner: Owner, name: str) -> tuple[list[str], list[tuple[Owner, str]]]:
        """(the owner's own uploads to drop, other idle owners' uploads to evict) to add ``name``."""
        own = self._uploads.get(owner, OrderedDict())
        if name in own:
            return [], []  # a re-upload replaces itself
        own_drops = list(own)[: max(0, len(own) - self.max_corpora + 1)]
        total = self.count - len(own_drops)
        excess = total + 1 - self.max_total
        now = self.clock()
        idle = sorted(
            (o for o, seen in self._last_seen.items() if o != owner and now - seen >= self.idle_s),
            key=self._last_seen.__getitem__,
        )  # the longest idle first
        evict = [(other, n) for other in idle for n in self._uploads.get(other, {})][: max(0, excess)]
        if len(evict) < excess:
            raise CtxirError(
                f"this app already holds {total} uploaded corpora of visitors who are using them, its limit: "
                "nothing of theirs is removed while they are active. Try again in a few minutes (uploads are "
                f"released when a visitor closes the page, or after {self.idle_s / 60:g} minutes without "
                "use when room is needed), or run ctxir on your own machine: `python app.py --corpus YOUR_FILE`"
            )
        return own_drops, evict

    def check_room(self, owner: Owner, name: str = "") -> None:
        """Refuse early (before the minutes of indexing) when an upload by ``owner`` could not be kept."""
        with self._lock:
            self._plan(owner, name)

    def add(self, index: CorpusIndex, owner: Owner = None) -> list[str]:
        """Keep ``index`` for ``owner``; returns the owner's older uploads dropped (CtxirError when full)."""
        with self._lock:
            own_drops, evict = self._plan(owner, index.name)
            for other, name in evict:
                del self._uploads[other][name]
                logger.info("released an upload of an idle visitor (%d left app-wide)", self.count)
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

    @property
    def count(self) -> int:
        """Uploaded corpora in memory, all owners together."""
        return sum(len(corpora) for corpora in list(self._uploads.values()))
