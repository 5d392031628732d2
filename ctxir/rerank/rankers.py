"""Re-rankers: a cross-encoder, and the CLS-LR ranker (logistic regression on a cross-encoder's [CLS]).

Both answer ``score_pairs(query, texts) -> (N,)`` and ``rerank(query, hits, corpus, top_k) -> list[Hit]``.
The CLS-LR ranker is saved as safetensors (coef, intercept) + JSON config — never pickle.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import torch

from ctxir.checks import check_query
from ctxir.encoders.models import (
    DEFAULT_CROSS_ENCODER,
    load_cross_encoder,
    load_transformer,
    max_length_for,
    pick_device,
    position_limit,
    resolve_model,
)
from ctxir.files import verify_checksums
from ctxir.names import CLS_LR_CONFIG, CLS_LR_FORMAT, CLS_LR_WEIGHTS, PAIR_ORDERS_FILE
from ctxir.rerank.calibration import calibration_for
from ctxir.rerank.passages import Passages
from ctxir.types import Corpus, CtxirError, Hit, doc_text

logger = logging.getLogger(__name__)
# torch: the model's own predict. onnx: its body in ONNX Runtime, float32 (the same scores; faster on a CPU).
# onnx-int8: the same with the layers it shares unchanged with its base in int8 (the shipped re-ranker: 0–3 of 6),
# the trained layers float32; within the 0.005 nDCG@10 rule on the shipped re-ranker's held-out claims.
RERANK_BACKENDS = ("torch", "onnx", "onnx-int8")
PAIR_ORDERS = (
    "one",
    "both",
)  # pair_orders.json's "orders": (a, b) as given, or the mean of (a, b) and (b, a)


def default_rerank_backend() -> str:
    """The cross-encoders' backend when none is named: ``$CTXIR_RERANK_BACKEND`` (app.py's ``--rerank-backend``
    sets it), else "torch"."""
    from ctxir.checks import check_choice

    return check_choice(
        os.environ.get("CTXIR_RERANK_BACKEND") or "torch",
        "cross-encoder backend (CTXIR_RERANK_BACKEND)",
        RERANK_BACKENDS,
    )


def pair_scores(
    predict: Callable[[list[tuple[str, str]]], np.ndarray],
    pairs: Sequence[tuple[str, str]],
    both_orders: bool = False,
) -> np.ndarray:
    """``predict(pairs)`` as float32, (pairs,) or (pairs, labels) as ``predict`` gives; ``both_orders``: each pair's
    score is the mean of its scores read as (a, b) and as (b, a), from one ``predict`` call over both.

    One joint pass reads its first and second segment differently, so a pair scorer gives (a, b) and (b, a)
    slightly different scores; similarity has no order, and the mean of the two is steadier than either.

    >>> lengths = lambda pairs: np.array([len(a) - 0.5 * len(b) for a, b in pairs])  # a toy scorer with an order
    >>> pair_scores(lengths, [("ab", "abcd")]), pair_scores(lengths, [("ab", "abcd")], both_orders=True)
    (array([0.], dtype=float32), array([1.5], dtype=float32))
    """
    pairs = [tuple(pair) for pair in pairs]
    if not both_orders:
        return np.asarray(predict(pairs), dtype=np.float32)
    scores = np.asarray(
        predict(pairs + [(b, a) for a, b in pairs]), dtype=np.float32
    )  # (2 · pairs[, labels])
    return (scores[: len(pairs)] + scores[len(pairs) :]) / 2


def both_orders_for(model: str | Path) -> bool:
    """Whether ``model`` (a name ``resolve_model`` knows, or a folder) scores a pair as the mean of both orders: its
    folder's pair_orders.json (chosen on STS-B dev when the pair scorer was trained: ``train_pair_scorer.py
    --pair-orders``); False without one, or for a model that is not on this machine."""
    from ctxir.checks import check_choice
    from ctxir.files import read_json

    try:
        folder = Path(resolve_model(str(model)))
    except CtxirError:
        return False
    if not (folder / PAIR_ORDERS_FILE).is_file():
        return False
    orders = (read_json(folder / PAIR_ORDERS_FILE) or {}).get("orders")
    check_choice(orders, f"'orders' in {str(folder / PAIR_ORDERS_FILE)!r}", PAIR_ORDERS)
    return orders == "both"


class Reranker(ABC):
    """Base: subclasses implement ``score_pairs``; ``rerank`` checks the query, scores every hit and sorts.

    >>> class WordOverlap(Reranker):  # a toy re-ranker: how many query words a document shares
    ...     name = "overlap"
    ...     def score_pairs(self, query, texts):
    ...         words = set(query.lower().split())
    ...         return np.array([len(words & set(t.lower().rstrip(".").split())) for t in texts], dtype=np.float32)
    >>> corpus = {"d1": {"title": "", "text": "Banks lend money."}, "d2": {"title": "", "text": "Otters live in rivers."}}
    >>> WordOverlap().rerank("where do otters live", [Hit("d1", 9.0), Hit("d2", 7.0)], corpus)
    [Hit(doc_id='d2', score=2.0), Hit(doc_id='d1', score=0.0)]
    """

    name = "reranker"
    # how the fused re-rank mode combines it with a first stage (a ctxir.rerank.pipeline.StageFusion); None = the
    # default (RRF k=60, equal weights). ctxir.rerank.registry.load_reranker sets it from the model folder's
    # fusion.json.
    stage_fusion = None
    # why the app offers this re-ranker fused only (alone it scored below BM25 on a collection of its
    # evaluation.json); None = both modes. Set by ctxir.rerank.registry.load_reranker.
    fused_only: str | None = None

    @abstractmethod
    def score_pairs(self, query: str, texts: Sequence[str]) -> np.ndarray:
        """(N,) relevance scores, higher is better."""

    def score_documents(self, query: str, docs: Sequence[dict]) -> np.ndarray:
        """(N,) scores of corpus documents ({title, text}); by default ``score_pairs`` of title + text."""
        return self.score_pairs(query, [doc_text(doc) for doc in docs])

    def rerank(self, query: str, hits: Sequence[Hit], corpus: Corpus, top_k: int | None = None) -> list[Hit]:
        """Re-score ``hits`` (any first stage's output) and sort; keeps only the first ``top_k`` if given."""
        return self._rerank(check_query(query), hits, corpus, top_k)

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

    name = "cross-encoder"

    def __init__(
        self,
        model=DEFAULT_CROSS_ENCODER,
        device: str = "auto",
        batch_size: int = 32,
        passages: Passages | None = None,
        backend: str | None = None,
        both_orders: bool | None = None,
    ):
        """``backend``: "torch" (the model's own ``predict``), "onnx" (its body exported once to float32 ONNX
        under ctxir's cache folder and run by ONNX Runtime on the CPU, the head in torch: the same scores, faster
        on a CPU; ``ctxir.encoders.onnx_backend.OnnxCrossEncoder``) or "onnx-int8" (the same, with the layers
        the model shares unchanged with its base quantised to int8: ``onnx_export.frozen_layers``; a model that
        trained every layer stays float32); None = ``default_rerank_backend()``. A model on a GPU, or one that
        cannot be exported, runs in torch (logged). ``both_orders``: a pair's score is the mean of (query, text) and
        (text, query) (``pair_scores``); None = as the model's folder says (``both_orders_for``: a pair scorer's
        pair_orders.json), False for a model passed as an object."""
        from ctxir.checks import check_choice

        self.model_name = model if isinstance(model, str) else type(model).__name__
        self.model = load_cross_encoder(model, device) if isinstance(model, str) else model
        self.batch_size = batch_size
        self.passages = passages  # None = the first max-length tokens of each document (FirstP)
        self.both_orders = (
            (both_orders_for(model) if isinstance(model, str) else False)
            if both_orders is None
            else both_orders
        )
        self.backend = check_choice(backend or default_rerank_backend(), "backend", RERANK_BACKENDS)
        # its folder's calibration.json: raw scores → probabilities a person can read (None: raw scores only)
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
        """(the windows ``text`` is read by, each after ``title``; each one's score): a document scores as their
        max. A model that reads the first tokens has one window, the text as given (the title before it)."""
        windows = (
            self.passages.split(title, text)
            if self.passages is not None
            else [f"{title.strip()} {text}".strip() if title.strip() else text]
        )
        return windows, self._score(query, windows)  # (windows,): each window as it is, not cut again

    def onnx_scorer(self):
        """The ``OnnxCrossEncoder`` that scores for the onnx backends, or None: backend "torch", a model off the CPU,
        or an export that failed (then torch from here on, with a warning). The first call exports the body (about
        10 s for MiniLM, once per weights: later runs reuse the file) while other callers wait for it; the app makes
        that call while it loads, before it serves."""
        if not self.backend.startswith("onnx"):
            return None
        if self._onnx is None:  # only the first calls take the lock: every score of every request comes here
            with self._onnx_lock:
                if self._onnx is None:
                    self._onnx = self._open_onnx()
        return self._onnx or None

    def _open_onnx(self):
        from ctxir.encoders.bi_encoder import cache_root, weights_fingerprint
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
        except (
            Exception
        ) as err:  # any export or runtime failure: scoring goes on in torch, never fails for it
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
            return self.model.predict(
                pairs, batch_size=self.batch_size, show_progress_bar=False, convert_to_numpy=True
            )

        scores = pair_scores(predict, [(query, t) for t in texts], self.both_orders)
        if scores.ndim == 2:  # a multi-label head: the last column is "relevant" by convention
            scores = scores[:, -1]
        return scores


def head_scores(head: Sequence, enc: dict, last_hidden: torch.Tensor) -> torch.Tensor:
    """(batch,) a modular cross-encoder's own score, from its body's output: its modules after the body, run on the
    tokens. ``enc`` holds the tokenizer's features as the body read them: token_type_ids tell a segment head the
    query from the document, input_ids let a term-match head match query terms."""
    features = {**enc, "token_embeddings": last_hidden}  # last_hidden: (batch, tokens, hidden)
    for module in head:
        features = module(features)
    return features["scores"].reshape(len(last_hidden), -1)[:, -1]  # (batch, labels): last = "relevant"


def pair_vectors(output, enc: dict, layer: int = -1, head: Sequence | None = None) -> torch.Tensor:
    """(batch, hidden) the [CLS] vectors of ``layer`` from a body's output; (batch, hidden + 1) with the cross-encoder
    ``head``'s own score appended where one is given (CLS-LR's features, one pass for both)."""
    hidden = (
        output.last_hidden_state if layer == -1 else output.hidden_states[layer]
    )  # (batch, tokens, hidden)
    cls = hidden[:, 0].float()
    if head is None:
        return cls
    return torch.cat([cls, head_scores(head, enc, output.last_hidden_state).float().unsqueeze(1)], 1)


@torch.no_grad()
def cls_features(
    model,
    tokenizer,
    pairs: Sequence[tuple[str, str]],
    layer: int = -1,
    batch_size: int = 16,
    max_length: int | None = None,
    head: Sequence | None = None,
) -> np.ndarray:
    """[CLS] vectors of ``[CLS] query [SEP] document [SEP]`` inputs: (pairs, hidden) float32; with a cross-encoder's
    ``head`` (its modules after the body) its score of each pair is appended: (pairs, hidden + 1).

    layer indexes ``hidden_states`` (0 = embeddings, -1 = last, equal to ``last_hidden_state[:, 0]``); max_length
    follows ``max_length_for`` (None = the tokenizer's own limit, never beyond the position embeddings).
    """
    max_length = max_length_for(max_length, tokenizer.model_max_length, position_limit(model.config))
    out = []
    device = next(model.parameters()).device
    for start in range(0, len(pairs), batch_size):
        batch = pairs[start : start + batch_size]
        enc = dict(
            tokenizer(
                [q for q, _ in batch],
                [d for _, d in batch],
                padding=True,
                truncation="longest_first",
                max_length=max_length,
                return_tensors="pt",
            ).to(device)
        )
        output = model(**enc, output_hidden_states=layer != -1)
        out.append(pair_vectors(output, enc, layer, head).cpu().numpy())
    width = model.config.hidden_size + (head is not None)
    return np.concatenate(out) if out else np.zeros((0, width), dtype=np.float32)


class ClsLrRanker(Reranker):
    """score = coef · CLS(query, document) + intercept; ``predict_proba`` = sigmoid(score).

    With ``score_feature`` the cross-encoder's own score of the pair, read in the same pass, is one more feature:
    score = coef[:hidden] · CLS + coef[hidden] · cross-encoder score + intercept. Its [CLS] was never trained for
    relevance (the segment-cosine head reads token means), so alone the vector travels badly to other domains.

    >>> name = "sentence-transformers/all-MiniLM-L6-v2"
    >>> tokenizer, body = load_transformer(name, "cpu", attentions=False)  # doctest: +SKIP
    >>> pairs = [("river otters", "Otters dig dens in the river bank."), ("river otters", "Banks approve loans.")]
    >>> ranker = ClsLrRanker.fit(name, cls_features(body, tokenizer, pairs), [1, 0], device="cpu")  # doctest: +SKIP
    >>> ranker.predict_proba("river otters", [document for _, document in pairs]).round(1)  # doctest: +SKIP
    array([0.8, 0.2], dtype=float32)
    """

    name = "cls-lr"

    def __init__(
        self,
        base_model: str,
        coef: np.ndarray,
        intercept: float,
        layer: int = -1,
        max_length: int | None = None,
        device: str = "auto",
        batch_size: int = 16,
        metadata: dict | None = None,
        score_feature: bool = False,
    ):
        self.base_model, self.layer, self.batch_size = base_model, layer, batch_size
        self.coef = np.asarray(coef, dtype=np.float32).reshape(-1)  # (hidden,) or (hidden + 1,)
        self.intercept = float(intercept)
        self.metadata = metadata or {}
        self.score_feature = bool(score_feature)
        self.head = None  # the cross-encoder's modules after its body, where its score is a feature
        if self.score_feature:
            cross_encoder = load_cross_encoder(base_model, pick_device(device))
            self.tokenizer, self.model = cross_encoder.tokenizer, cross_encoder.model.eval()
            self.head = list(cross_encoder)[1:]
            if not self.head:
                raise CtxirError(
                    f"CLS-LR with score_feature reads the cross-encoder's own score, but {base_model!r} has no "
                    "modules after its body (a sequence-classification cross-encoder): fit it without "
                    "--score-feature"
                )
        else:
            self.tokenizer, self.model = load_transformer(base_model, pick_device(device), attentions=False)
        # None = the cross-encoder body's own limit; saved as the number it resolves to
        self.max_length = max_length_for(
            max_length, self.tokenizer.model_max_length, position_limit(self.model.config)
        )
        width = self.model.config.hidden_size + self.score_feature
        if self.coef.shape[0] != width:
            raise CtxirError(
                f"CLS-LR coef has {self.coef.shape[0]} values but {base_model!r} gives {width} features "
                f"(hidden size {self.model.config.hidden_size}"
                f"{' + its own score' if self.score_feature else ''}): the ranker was trained on another base "
                "model or with another score_feature setting"
            )

    def features(self, query: str, texts: Sequence[str]) -> np.ndarray:
        return cls_features(
            self.model,
            self.tokenizer,
            [(query, t) for t in texts],
            self.layer,
            self.batch_size,
            self.max_length,
            self.head,
        )

    def score_tensor(self, enc: dict, output) -> torch.Tensor:
        """(batch,) the logit from the body's ``output`` on ``enc`` (differentiable: explanations take its gradient)."""
        coef = torch.as_tensor(self.coef, device=output.last_hidden_state.device)
        return pair_vectors(output, enc, self.layer, self.head) @ coef + self.intercept

    def score_features(self, features: np.ndarray) -> np.ndarray:
        return features @ self.coef + self.intercept  # (N, features) · (features,) → (N,)

    def score_pairs(self, query: str, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros(0, dtype=np.float32)
        return self.score_features(self.features(query, texts))

    def predict_proba(self, query: str, texts: Sequence[str]) -> np.ndarray:
        return 1.0 / (1.0 + np.exp(-self.score_pairs(query, texts)))

    @classmethod
    def fit(
        cls,
        base_model: str,
        features: np.ndarray,
        labels: Sequence[int],
        C: float = 1.0,
        class_weight: str | None = "balanced",
        layer: int = -1,
        max_iter: int = 2000,
        **kwargs,
    ) -> ClsLrRanker:
        """Fit scikit-learn's LogisticRegression on precomputed [CLS] features (see ``cls_features``; pass
        ``score_feature=True`` for features read with the cross-encoder's head, whose last column is its score)."""
        # lazy: scikit-learn takes ~0.5 s, needed only to fit
        from sklearn.linear_model import LogisticRegression

        labels = np.asarray(labels)
        if len(features) != len(labels) or len(labels) == 0:
            raise CtxirError(
                f"need one label per feature row, got {len(features)} rows and {len(labels)} labels"
            )
        if set(np.unique(labels)) != {0, 1}:
            raise CtxirError(
                f"labels must contain both 0 (non-relevant) and 1 (relevant), got {sorted(set(labels))}"
            )
        clf = LogisticRegression(C=C, class_weight=class_weight, max_iter=max_iter)
        clf.fit(features, labels)
        meta = {
            "C": C,
            "class_weight": class_weight,
            "train_pairs": len(labels),
            "train_positives": int(labels.sum()),
        }
        return cls(base_model, clf.coef_[0], float(clf.intercept_[0]), layer=layer, metadata=meta, **kwargs)

    def save(self, folder: str | Path) -> Path:
        # lazy: safetensors is needed only to read or write weights
        from safetensors.numpy import save_file

        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        save_file(
            {"coef": self.coef, "intercept": np.array([self.intercept], dtype=np.float32)},
            str(folder / CLS_LR_WEIGHTS),
        )
        config = {
            "format": CLS_LR_FORMAT,
            "base_model": self.base_model,
            "layer": self.layer,
            "max_length": self.max_length,
            "hidden_size": int(self.model.config.hidden_size),
            "score_feature": self.score_feature,
            "metadata": self.metadata,
        }
        (folder / CLS_LR_CONFIG).write_text(json.dumps(config, indent=2) + "\n")
        return folder

    @classmethod
    def load(cls, folder: str | Path, device: str = "auto", **kwargs) -> ClsLrRanker:
        # lazy: safetensors is needed only to read or write weights
        from safetensors import SafetensorError
        from safetensors.numpy import load_file

        folder = Path(folder).expanduser()
        if (
            not folder.exists()
        ):  # a Hub id: fetches cls_lr_config.json, cls_lr.safetensors and a bundled encoder
            folder = Path(resolve_model(str(folder)))
        config_path, weights_path = folder / CLS_LR_CONFIG, folder / CLS_LR_WEIGHTS
        if not config_path.is_file() or not weights_path.is_file():
            raise CtxirError(
                f"{str(folder)!r} is not a CLS-LR ranker folder: expected {CLS_LR_CONFIG} and "
                f"{CLS_LR_WEIGHTS} (written by ClsLrRanker.save or training/train_cls_lr.py)"
            )
        verify_checksums(folder)  # a shipped or staged ranker: its files as they were written
        try:
            config = json.loads(config_path.read_text(encoding="utf-8"))
            if not isinstance(config, dict) or config.get("format") != CLS_LR_FORMAT:
                raise ValueError(f"format {getattr(config, 'get', lambda _: None)('format')!r}")
            tensors = load_file(str(weights_path))
            coef, intercept = tensors["coef"], tensors["intercept"]
            base = config["base_model"]
            if coef.ndim != 1 or intercept.shape != (1,) or not isinstance(base, str) or not base:
                raise ValueError(
                    f"coef of shape {coef.shape}, intercept of shape {intercept.shape}, base {base!r}"
                )
        except (OSError, ValueError, KeyError, TypeError, SafetensorError) as err:
            raise CtxirError(
                f"{str(folder)!r} is not a readable CLS-LR ranker ({type(err).__name__}: {err}): expected "
                f"{CLS_LR_CONFIG} with format {CLS_LR_FORMAT!r} and {CLS_LR_WEIGHTS} with coef and intercept; "
                "fit it again (training/train_cls_lr.py) or fetch the folder again"
            ) from err
        # "." means the cross-encoder body was published inside the ranker folder itself.
        if base == "." or (folder / base).is_dir():
            base = str((folder / base).resolve())
        return cls(
            base,
            coef,
            float(intercept[0]),
            layer=config.get("layer", -1),
            max_length=config.get("max_length"),
            device=device,
            metadata=config.get("metadata"),
            score_feature=bool(config.get("score_feature", False)),
            **kwargs,
        )
