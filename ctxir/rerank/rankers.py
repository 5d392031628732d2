"""Re-rankers: the ``Reranker`` interface and the cross-encoder (CLS-LR is in ``cls_lr.py``)."""

from __future__ import annotations

import logging
import numbers
import reprlib
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import torch

from ctxir import kinds
from ctxir.checks import check_choice, check_query, is_blank
from ctxir.encoders.bi_encoder import cache_root, weights_fingerprint
from ctxir.encoders.models import DEFAULT_CROSS_ENCODER, load_cross_encoder, model_lock, resolve_model
from ctxir.files import read_json
from ctxir.names import PAIR_ORDERS_FILE
from ctxir.rerank.calibration import calibration_for
from ctxir.rerank.passages import Passages
from ctxir.types import Corpus, CtxirError, Hit, doc_text

logger = logging.getLogger(__name__)
RERANK_BACKENDS = ("torch", "onnx", "onnx-int8")
PAIR_ORDERS = ("one", "both")  # pair_orders.json's "orders"


def pair_scores(
    predict: Callable[[list[tuple[str, str]]], np.ndarray],
    pairs: Sequence[tuple[str, str]],
    both_orders: bool = False,
) -> np.ndarray:
    """``predict(pairs)`` as float32; ``both_orders``: each pair's score is the mean of (a, b) and (b, a).

    >>> lengths = lambda pairs: np.array([len(a) - 0.5 * len(b) for a, b in pairs])  # a toy scorer with an order
    >>> pair_scores(lengths, [("ab", "abcd")]), pair_scores(lengths, [("ab", "abcd")], both_orders=True)
    (array([0.], dtype=float32), array([1.5], dtype=float32))
    """
    pairs = [tuple(pair) for pair in pairs]
    swapped = [(b, a) for a, b in pairs] if both_orders else []
    scores = np.asarray(predict(pairs + swapped), dtype=np.float32)  # (pairs[ · 2][, labels])
    return (scores[: len(pairs)] + scores[len(pairs) :]) / 2 if both_orders else scores


def both_orders_for(model: str | Path) -> bool:
    """Whether ``model``'s folder (its pair_orders.json) says to score a pair as the mean of both orders."""
    try:
        path = Path(resolve_model(str(model))) / PAIR_ORDERS_FILE
    except CtxirError:
        return False
    orders = (read_json(path) or {}).get("orders") if path.is_file() else "one"
    return check_choice(orders, f"'orders' in {str(path)!r}", PAIR_ORDERS) == "both"


def short_repr(value) -> str:
    """``repr(value)`` cut to about 60 characters.

    >>> short_repr("otter " * 20)
    "'otter otter otter otter ott...ter otter otter otter otter '"
    """
    shorter = reprlib.Repr()
    shorter.maxstring = shorter.maxother = 60
    shorter.maxlist = shorter.maxtuple = shorter.maxdict = 3
    return shorter.repr(value)


def check_ranking(query, documents, top_k) -> tuple[str, list[str], int | None]:
    """(query stripped, documents as a list, top_k) for ``rank``; a ``CtxirError`` naming the argument otherwise."""
    if not isinstance(query, str) or is_blank(query):
        raise CtxirError(
            f"query must be text with a visible character, got {short_repr(query)}: pass the words or "
            "question the documents are ranked for"
        )
    if not isinstance(documents, list | tuple):
        one = f", e.g. [{short_repr(documents)}] for one" if isinstance(documents, str) else ""
        raise CtxirError(
            f"documents must be a list of str, got {short_repr(documents)} (type {type(documents).__name__}): "
            f"pass the texts to rank as a list{one}"
        )
    for i, document in enumerate(documents):
        if not isinstance(document, str):
            raise CtxirError(
                f"documents[{i}] must be a str, got {short_repr(document)} (type {type(document).__name__}): "
                "pass each document's text (e.g. its title and text joined by a space)"
            )
    whole = isinstance(top_k, numbers.Integral) and not isinstance(top_k, bool)
    if top_k is not None and (not whole or top_k < 1):
        raise CtxirError(
            f"top_k must be None (every document) or a whole number ≥ 1, got {top_k!r}: pass how many of the "
            "best documents to return"
        )
    return query.strip(), list(documents), None if top_k is None else int(top_k)


class Reranker(ABC):
    """Base: subclasses implement ``score_pairs``; ``rerank`` and ``rank`` check their input, score and sort.

    >>> class WordOverlap(Reranker):  # a toy re-ranker: how many query words a document shares
    ...     name = "overlap"
    ...     def score_pairs(self, query, texts):
    ...         words = set(query.lower().split())
    ...         return np.array([len(words & set(t.lower().rstrip(".").split())) for t in texts], dtype=np.float32)
    >>> corpus = {"d1": {"title": "", "text": "Banks lend money."}, "d2": {"title": "", "text": "Otters live in rivers."}}
    >>> WordOverlap().rerank("where do otters live", [Hit("d1", 9.0), Hit("d2", 7.0)], corpus)
    [Hit(doc_id='d2', score=2.0), Hit(doc_id='d1', score=0.0)]
    >>> WordOverlap().rank("where do otters live", ["Banks lend money.", "Otters live in rivers."], top_k=1)
    [{'corpus_id': 1, 'score': 2.0, 'text': 'Otters live in rivers.'}]
    """

    name = "reranker"
    stage_fusion = None  # a StageFusion for the fused mode; None = RRF k=60 (set by load_reranker)
    fused_only: str | None = None  # why the app offers it fused only (set by load_reranker)

    @abstractmethod
    def score_pairs(self, query: str, texts: Sequence[str]) -> np.ndarray:
        """(N,) relevance scores, higher is better."""

    def score_documents(self, query: str, docs: Sequence[dict]) -> np.ndarray:
        """(N,) scores of corpus documents ({title, text}); by default ``score_pairs`` of title + text."""
        return self.score_pairs(query, [doc_text(doc) for doc in docs])

    def rerank(self, query: str, hits: Sequence[Hit], corpus: Corpus, top_k: int | None = None) -> list[Hit]:
        """Re-score ``hits`` (any first stage's output) and sort; keeps only the first ``top_k`` if given."""
        return self._rerank(check_query(query), hits, corpus, top_k)

    def rank(self, query: str, documents: Sequence[str], top_k: int | None = None) -> list[dict]:
        """``documents`` best first as ``[{"corpus_id", "score", "text"}, ...]``, as ``CrossEncoder.rank``."""
        query, documents, top_k = check_ranking(query, documents, top_k)
        scores = self.score_pairs(query, documents) if documents else np.zeros(0, dtype=np.float32)
        order = sorted(range(len(documents)), key=lambda i: (-float(scores[i]), i))
        return [{"corpus_id": i, "score": float(scores[i]), "text": documents[i]} for i in order][:top_k]

    def _rerank(self, query: str, hits: Sequence[Hit], corpus: Corpus, top_k: int | None = None) -> list[Hit]:
        hits = list(hits)
        if not hits:
            return []
        missing = [h.doc_id for h in hits if h.doc_id not in corpus]
        if missing:
            raise CtxirError(
                f"hits name documents that are not in the corpus, e.g. {missing[0]!r}: "
                "re-rank with the corpus the first stage searched"
            )
        scores = self.score_documents(query, [corpus[h.doc_id] for h in hits])
        order = sorted(range(len(hits)), key=lambda i: (-float(scores[i]), hits[i].doc_id))
        reranked = [Hit(hits[i].doc_id, float(scores[i])) for i in order]
        return reranked[:top_k] if top_k else reranked


class CrossEncoderReranker(Reranker):
    """Scores each (query, document) pair jointly; inputs beyond the model's max length are truncated.

    >>> reranker = CrossEncoderReranker(DEFAULT_CROSS_ENCODER, device="cpu")  # doctest: +SKIP
    >>> corpus = {"d1": {"title": "", "text": "Banks approve loans to small firms."},
    ...           "d2": {"title": "", "text": "Otters dig dens in the river bank."}}
    >>> hits = [Hit("d1", 9.0), Hit("d2", 7.0)]  # a first stage's top 2, e.g. BM25 matching "bank"
    >>> [h.doc_id for h in reranker.rerank("where do otters live?", hits, corpus)]  # doctest: +SKIP
    ['d2', 'd1']
    """

    name = kinds.CROSS_ENCODER

    def __init__(
        self,
        model=DEFAULT_CROSS_ENCODER,
        device: str = "auto",
        batch_size: int = 32,
        passages: Passages | None = None,
        backend: str = "torch",
        both_orders: bool | None = None,
    ):
        """``backend`` onnx*: the body in ONNX Runtime on the CPU, else torch; ``both_orders`` None: as its folder says."""
        self.model_name = model if isinstance(model, str) else type(model).__name__
        self.model = load_cross_encoder(model, device) if isinstance(model, str) else model
        self.batch_size = batch_size
        self.passages = passages  # None = the first max-length tokens of each document (FirstP)
        self.both_orders = (
            both_orders if both_orders is not None else isinstance(model, str) and both_orders_for(model)
        )
        self.backend = check_choice(backend, "backend", RERANK_BACKENDS)
        self.calibration = calibration_for(model) if isinstance(model, str) else None
        self.onnx_dir: Path | None = None  # where backend "onnx" exports to; None = <cache root>/onnx
        self._onnx = None  # the OnnxCrossEncoder, opened on the first score
        self._onnx_lock = threading.Lock()

    def score_documents(self, query: str, docs: Sequence[dict]) -> np.ndarray:
        if self.passages is None:
            return super().score_documents(query, docs)
        return self._best_window(
            [self.passages.split(doc.get("title") or "", doc.get("text") or "") for doc in docs], query
        )

    def score_pairs(self, query: str, texts: Sequence[str]) -> np.ndarray:
        if self.passages is not None:
            return self._best_window([self.passages.split("", text) for text in texts], query)
        return self._score(query, texts)

    def predict_proba(self, query: str, texts: Sequence[str]) -> np.ndarray:
        """(N,) calibrated probabilities that each text is relevant (``self.calibration`` over ``score_pairs``)."""
        if self.calibration is None:
            raise CtxirError(
                f"cross-encoder {self.model_name!r} has no calibration.json: fit one with "
                "`python -m training.calibrate --model <folder>`, or read its raw scores (score_pairs)"
            )
        return self.calibration.probabilities(self.score_pairs(query, texts))

    def window_scores(self, query: str, text: str, title: str = "") -> tuple[list[str], np.ndarray]:
        """(the windows ``text`` is read by, each after ``title``; each one's score)."""
        windows = (
            self.passages.split(title, text)
            if self.passages is not None
            else [f"{title.strip()} {text}".strip() if title.strip() else text]
        )
        return windows, self._score(query, windows)  # (windows,): each window as it is, not cut again

    def onnx_scorer(self):
        """The ``OnnxCrossEncoder`` of the onnx backends, or None (torch); the first call exports the body."""
        if not self.backend.startswith("onnx"):
            return None
        if self._onnx is None:
            with self._onnx_lock:
                if self._onnx is None:
                    self._onnx = self._open_onnx()
        return self._onnx or None

    def _open_onnx(self):
        from ctxir.encoders.onnx_backend import open_cross_encoder

        if self.model.device.type != "cpu":
            logger.info(
                "cross-encoder on %s: backend %r runs on the CPU only, so torch scores",
                self.model.device,
                self.backend,
            )
            return False
        try:
            return open_cross_encoder(
                self.model,
                Path(self.onnx_dir or cache_root() / "onnx") / weights_fingerprint(self.model),
                threads=torch.get_num_threads(),
                int8=self.backend == "onnx-int8",
            )
        except Exception as err:  # any export or runtime failure: scoring goes on in torch
            logger.warning(
                "cross-encoder backend %r unavailable, scoring in torch: %s: %s",
                self.backend,
                type(err).__name__,
                err,
            )
            return False

    def _best_window(self, windows: list[list[str]], query: str) -> np.ndarray:
        scores = self._score(query, [w for ws in windows for w in ws])  # (all windows,)
        ends = np.cumsum([len(ws) for ws in windows])
        return np.array(
            [scores[end - len(ws) : end].max() for ws, end in zip(windows, ends, strict=True)],
            dtype=np.float32,
        )

    def _score(self, query: str, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros(0, dtype=np.float32)
        onnx = self.onnx_scorer()

        def predict(pairs: list[tuple[str, str]]) -> np.ndarray:
            if onnx is not None:
                return onnx.predict(pairs, self.batch_size)
            with model_lock(self.model):  # an explanation may be hooking this model in another thread
                return self.model.predict(
                    pairs, batch_size=self.batch_size, show_progress_bar=False, convert_to_numpy=True
                )

        scores = pair_scores(predict, [(query, t) for t in texts], self.both_orders)
        if scores.ndim == 2:  # a multi-label head: the last column is "relevant" by convention
            scores = scores[:, -1]
        return scores
