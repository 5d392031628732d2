"""Classify texts with a bi-encoder's embeddings, without training a classifier head on the encoder.

Four classifiers over any ``BiEncoder``, each a pure function over (N, D) unit vectors that tests call without a
model, wrapped by a class that encodes (through ``EmbeddingCache`` for large sets, as retrieval does):

* ``ZeroShotClassifier``: the cosine between a text and each label's embedding, the label written into a prompt
  template (``"This text is about {label}."``) or its description; optionally through Davison's (2020) label
  projection: a ridge map from sentence-embedding space to the encoder's static word-embedding space, fitted on
  the embeddings of frequent vocabulary words alone (no labelled example), both sides compared after the map.
* ``KnnClassifier``: k nearest labelled examples by cosine, uniform or distance-weighted vote; ``choose_k`` picks k
  by stratified cross-validation on the training embeddings (the command line's default, ``--k auto``).
* ``CentroidClassifier``: cosine to each class's mean embedding.
* ``LogRegClassifier``: scikit-learn logistic regression on the frozen embeddings (the usual baseline, MTEB's).

``predict`` returns typed ``Prediction`` objects with a score per class; ``evaluate_predictions`` gives accuracy,
macro-F1, the per-class report and the confusion matrix (scikit-learn); ``mcnemar`` compares two classifiers on
the same texts. ``ctxir classify`` is the command line (see ``ClassifyArgs``).

>>> X = np.array([[1.0, 0.0], [0.8, 0.6], [0.0, 1.0], [-0.6, 0.8]], dtype=np.float32)  # 4 unit vectors
>>> y = ["sports", "sports", "world", "world"]
>>> KnnClassifier(k=1).fit_embeddings(X, y).predict_labels(np.array([[0.6, 0.8]], dtype=np.float32))
['sports']
>>> CentroidClassifier().fit_embeddings(X, y).predict_labels(np.array([[0.0, 1.0]], dtype=np.float32))
['world']
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from ctxir.data.labelled import Label, load_folder, load_labelled, load_labels
from ctxir.types import CtxirError

METHODS = ("zero-shot", "knn", "centroid", "logreg")
WEIGHTS = ("uniform", "distance")
# Prompt templates tried for zero-shot; the one used is chosen on training data (``select_zero_shot``), never on
# test: on AG News "This text is about {label}." gains 4 points over the bare name, on another set it loses 14.
TEMPLATES = (
    "{label}",
    "This text is about {label}.",
    "Topic: {label}.",
    "{label}: {description}",
    "This text is about {description}.",
)
# kNN neighbour counts ``--k auto`` chooses among by cross-validation on --train: no single k is safe across data
# sets, and the nearest one alone is noisy (AG News test: k=1 0.8645, k=5 0.8958, docs/results.md).
K_GRID = (1, 3, 5, 10, 15, 25)
CV_FOLDS = 5
# texts per encode below which the cache is skipped (hashing and a file per call cost more than encoding a few)
CACHE_FROM = 64


# ---------------------------------------------------------------- types


@dataclass(frozen=True)
class Neighbour:
    """One labelled example near a text: its row in the training data, text, label and cosine similarity."""

    index: int
    text: str
    label: str
    similarity: float


@dataclass(frozen=True)
class Prediction:
    """The predicted label, a score per class (higher = closer; cosine, vote share or probability by method), and
    the nearest labelled examples when the classifier has them.

    >>> X = np.array([[1.0, 0.0], [0.0, 1.0]], dtype=np.float32)
    >>> [p] = CentroidClassifier().fit_embeddings(X, ["a", "b"]).predict_embeddings(X[:1], neighbours=1)
    >>> p.label, p.scores, p.neighbours[0].label
    ('a', {'a': 1.0, 'b': 0.0}, 'a')
    """

    label: str
    scores: dict[str, float]
    neighbours: tuple[Neighbour, ...] = ()


# ---------------------------------------------------------------- pure scoring over unit vectors


def _as_matrix(x, what: str) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32)
    if x.ndim != 2:
        raise CtxirError(f"{what} must be a 2-D array (texts, dimensions), got shape {x.shape}")
    return x


def _normalise(x: np.ndarray) -> np.ndarray:
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)


def top_neighbours(
    queries: np.ndarray, reference: np.ndarray, k: int, block: int = 1024
) -> tuple[np.ndarray, np.ndarray]:
    """(indices, similarities), each (n, k), of each query's k most similar reference rows by dot product (cosine
    for unit vectors), most similar first; computed ``block`` queries at a time (7,600 × 8,000 at once is 240 MB)."""
    k = min(k, reference.shape[0])
    indices = np.empty((queries.shape[0], k), dtype=np.int64)
    sims = np.empty((queries.shape[0], k), dtype=np.float32)
    for begin in range(0, queries.shape[0], block):
        s = queries[begin : begin + block] @ reference.T  # (block, m)
        part = (
            np.argpartition(-s, k - 1, axis=1)[:, :k]
            if k < s.shape[1]
            else np.tile(np.arange(k), (len(s), 1))
        )
        part_s = np.take_along_axis(s, part, axis=1)
        # most similar first; equal similarities in row order, so results do not depend on argpartition's order
        order = np.lexsort((part, -part_s), axis=1)
        indices[begin : begin + block] = np.take_along_axis(part, order, axis=1)
        sims[begin : begin + block] = np.take_along_axis(part_s, order, axis=1)
    return indices, sims


def knn_scores(
    queries: np.ndarray,
    reference: np.ndarray,
    reference_labels: np.ndarray,
    n_classes: int,
    k: int,
    weights: str = "uniform",
) -> tuple[np.ndarray, np.ndarray]:
    """(votes, similarity sums), each (n, n_classes): the share of the k nearest examples in each class (uniform),
    or of their weights 1 / cosine distance (distance, as scikit-learn's ``weights="distance"``); and the summed
    cosine of each class's neighbours among the k, which breaks ties of votes (``argmax_ties``).

    >>> ref = np.eye(3, dtype=np.float32)
    >>> votes, _ = knn_scores(np.array([[0.9, 0.3, 0.3]], dtype=np.float32), ref, np.array([0, 1, 1]), 2, k=3)
    >>> votes.round(3).tolist()
    [[0.333, 0.667]]
    """
    if weights not in WEIGHTS:
        raise CtxirError(f"weights {weights!r} is not known: use one of {', '.join(map(repr, WEIGHTS))}")
    indices, sims = top_neighbours(queries, reference, k)  # (n, k)
    return _neighbour_votes(indices, sims, reference_labels, n_classes, weights)


def _neighbour_votes(
    indices: np.ndarray, sims: np.ndarray, reference_labels: np.ndarray, n_classes: int, weights: str
) -> tuple[np.ndarray, np.ndarray]:
    """``knn_scores`` from given neighbours, so that cross-validation finds them once for every k it tries."""
    queries = indices.shape[0]
    labels = reference_labels[indices]  # (n, k)
    w = np.ones_like(sims) if weights == "uniform" else 1.0 / np.maximum(1.0 - sims, 1e-6)
    votes = np.zeros((queries, n_classes), dtype=np.float64)
    sim_sums = np.zeros_like(votes)
    rows = np.repeat(np.arange(queries), indices.shape[1])
    np.add.at(votes, (rows, labels.ravel()), w.ravel())
    np.add.at(sim_sums, (rows, labels.ravel()), sims.ravel())
    return votes / votes.sum(axis=1, keepdims=True), sim_sums


def argmax_ties(primary: np.ndarray, secondary: np.ndarray | None = None) -> np.ndarray:
    """Row-wise argmax of ``primary``; among columns equal to the maximum (within 1e-9), the largest ``secondary``
    wins, then the first column."""
    if secondary is None:
        return primary.argmax(axis=1)
    top = primary >= primary.max(axis=1, keepdims=True) - 1e-9
    return np.where(top, secondary, -np.inf).argmax(axis=1)


def choose_k(
    embeddings,
    labels: Sequence[str],
    candidates: Sequence[int] = K_GRID,
    folds: int = CV_FOLDS,
    weights: str = "uniform",
    seed: int = 0,
) -> tuple[int, list[dict]]:
    """(the k, every candidate's scores): the k of ``candidates`` with the best accuracy in stratified ``folds``-fold
    cross-validation on the labelled ``embeddings`` (training data, never test), and each k's accuracy and macro-F1
    over the held-out rows. Ties keep the smallest k; a k above a fold's training rows is not tried; a class with
    fewer than ``folds`` examples lowers the number of folds to its count.

    >>> X = np.array([[1.0, 0.0], [0.9, 0.1], [0.8, 0.2], [0.0, 1.0], [0.1, 0.9], [0.2, 0.8]], dtype=np.float32)
    >>> k, table = choose_k(X, ["a", "a", "a", "b", "b", "b"], candidates=(1, 3), folds=3)
    >>> k, table[0]
    (1, {'k': 1, 'folds': 3, 'cv_accuracy': 1.0, 'cv_macro_f1': 1.0})
    """
    from sklearn.metrics import f1_score
    from sklearn.model_selection import StratifiedKFold

    from ctxir.checks import check_choice, check_int

    check_choice(weights, "weights", WEIGHTS)
    x = _as_matrix(embeddings, "embeddings")
    classes, y = np.unique(np.asarray([str(label) for label in labels]), return_inverse=True)
    if len(y) != len(x):
        raise CtxirError(f"embeddings and labels differ in length: {len(x)} rows, {len(y)} labels")
    if len(classes) < 2:
        raise CtxirError(
            f"choosing k by cross-validation needs examples of at least 2 classes, got "
            f"{[str(c) for c in classes]!r}: add examples of another class"
        )
    counts = np.bincount(y)
    if counts.min() < 2:
        raise CtxirError(
            f"choosing k by cross-validation needs at least 2 labelled examples of every class; class "
            f"{str(classes[counts.argmin()])!r} has 1: add examples, or give k yourself (--k 5 on the "
            "command line)"
        )
    splits = list(StratifiedKFold(min(folds, int(counts.min())), shuffle=True, random_state=seed).split(x, y))
    fit_rows = min(len(fit) for fit, _ in splits)
    tried = sorted({k for k in (check_int(c, "k", 1, 10_000) for c in candidates) if k <= fit_rows}) or [1]
    predicted = {k: np.empty(len(y), dtype=np.int64) for k in tried}
    for fit, held in splits:
        # neighbours found once, for the largest k, and cut for the others: one matrix product per fold
        indices, sims = top_neighbours(x[held], x[fit], max(tried))
        for k in tried:
            votes, sums = _neighbour_votes(indices[:, :k], sims[:, :k], y[fit], len(classes), weights)
            predicted[k][held] = argmax_ties(votes, sums)
    table = [
        {
            "k": k,
            "folds": len(splits),
            "cv_accuracy": round(float(np.mean(predicted[k] == y)), 4),
            "cv_macro_f1": round(float(f1_score(y, predicted[k], average="macro", zero_division=0)), 4),
        }
        for k in tried
    ]
    best = max(
        tried, key=lambda k: int(np.sum(predicted[k] == y))
    )  # max keeps the first of equals: the smallest k
    return best, table


def centroids(embeddings: np.ndarray, label_ids: np.ndarray, n_classes: int) -> np.ndarray:
    """(n_classes, D) unit-length class means of unit vectors."""
    sums = np.zeros((n_classes, embeddings.shape[1]), dtype=np.float64)
    np.add.at(sums, label_ids, embeddings)
    return _normalise(sums).astype(np.float32)


def fit_projection(sentence_vectors: np.ndarray, word_vectors: np.ndarray, ridge: float = 1.0) -> np.ndarray:
    """Davison's label projection Z, (D, d): argmin ‖S Z − W‖² + ridge ‖Z‖² over V words, S (V, D) their sentence
    embeddings, W (V, d) their word vectors; closed form (SᵀS + ridge·I)⁻¹ SᵀW.

    >>> S = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]); W = S @ np.array([[2.0, 0.0], [0.0, 3.0]])
    >>> fit_projection(S, W, ridge=0.0).round(6).tolist()
    [[2.0, 0.0], [0.0, 3.0]]
    """
    s = np.asarray(sentence_vectors, dtype=np.float64)
    w = np.asarray(word_vectors, dtype=np.float64)
    return np.linalg.solve(s.T @ s + ridge * np.eye(s.shape[1]), s.T @ w).astype(np.float32)


def zero_shot_scores(
    texts: np.ndarray, label_vectors: np.ndarray, projection: np.ndarray | None = None
) -> np.ndarray:
    """(n, C) cosine between each text and each label embedding, both first mapped through ``projection`` (D, d)
    when given (Davison's label projection)."""
    if projection is not None:
        texts, label_vectors = texts @ projection, label_vectors @ projection
    return _normalise(texts) @ _normalise(label_vectors).T


# ---------------------------------------------------------------- classifiers over a BiEncoder


def encode(encoder, texts: Sequence[str]) -> np.ndarray:
    """(N, D) unit vectors; large sets go through the encoder's persistent cache (keyed by weights and texts)."""
    if encoder is None:
        raise CtxirError(
            "this classifier was built without an encoder: pass embeddings (…_embeddings methods) or "
            "build it with encoder=BiEncoder(...)"
        )
    texts = list(texts)
    if len(texts) >= CACHE_FROM and getattr(encoder, "cache", None) is not None:
        return encoder.encode_cached(texts)
    return encoder.encode(texts)


class EmbeddingClassifier:
    """Shared by every method: ``fit(texts, labels)`` / ``predict(texts)`` encode and call the ``*_embeddings``
    versions, which work on (N, D) unit vectors alone."""

    method = ""

    def __init__(self, encoder=None):
        self.encoder = encoder
        self.classes: list[str] = []
        self.texts: list[str] = []  # the labelled texts, for neighbours shown beside a prediction

    def fit(self, texts: Sequence[str], labels: Sequence[str]) -> EmbeddingClassifier:
        texts = list(texts)
        if len(texts) != len(labels):
            raise CtxirError(f"texts and labels differ in length: {len(texts)} texts, {len(labels)} labels")
        self.fit_embeddings(encode(self.encoder, texts), labels)
        self.texts = texts
        return self

    def _label_ids(self, labels: Sequence[str], min_classes: int = 2) -> np.ndarray:
        labels = [str(label) for label in labels]
        if not labels:
            raise CtxirError(f"{self.method} needs labelled examples: got none")
        self.classes = sorted(set(labels))
        if len(self.classes) < min_classes:
            raise CtxirError(
                f"{self.method} needs examples of at least {min_classes} classes, got only {self.classes!r}"
            )
        index = {c: i for i, c in enumerate(self.classes)}
        return np.array([index[label] for label in labels], dtype=np.int64)

    def fit_embeddings(self, embeddings, labels: Sequence[str]) -> EmbeddingClassifier:
        raise NotImplementedError

    def scores_embeddings(self, embeddings) -> np.ndarray:
        """(n, classes) scores, higher = more likely; columns follow ``self.classes``."""
        raise NotImplementedError

    def _check_fitted(self) -> None:
        if not self.classes:
            raise CtxirError(f"{self.method} classifier is not fitted: call fit(texts, labels) first")

    def predict_ids(self, embeddings) -> np.ndarray:
        return self.scores_embeddings(embeddings).argmax(axis=1)

    def predict_labels(self, embeddings) -> list[str]:
        return [self.classes[i] for i in self.predict_ids(embeddings)]

    def predict_embeddings(self, embeddings, neighbours: int = 0) -> list[Prediction]:
        embeddings = _as_matrix(embeddings, "embeddings")
        scores = self.scores_embeddings(embeddings)
        ids = self.predict_ids(embeddings)
        near = self.neighbours(embeddings, neighbours) if neighbours else [()] * len(ids)
        return [
            Prediction(self.classes[i], {c: float(s) for c, s in zip(self.classes, row, strict=True)}, n)
            for i, row, n in zip(ids, scores, near, strict=True)
        ]

    def predict(self, texts: Sequence[str], neighbours: int = 0) -> list[Prediction]:
        """One ``Prediction`` per text, with its ``neighbours`` nearest labelled examples (0 = none)."""
        self._check_fitted()
        return self.predict_embeddings(encode(self.encoder, list(texts)), neighbours)

    def neighbours(self, embeddings: np.ndarray, k: int) -> list[tuple[Neighbour, ...]]:
        reference = getattr(self, "reference", None)
        if reference is None or not len(reference):
            return [()] * len(embeddings)
        indices, sims = top_neighbours(embeddings, reference, k)
        labels = self.reference_labels
        return [
            tuple(
                Neighbour(
                    int(i), self.texts[i] if i < len(self.texts) else "", self.classes[labels[i]], float(s)
                )
                for i, s in zip(row_i, row_s, strict=True)
            )
            for row_i, row_s in zip(indices, sims, strict=True)
        ]

    def _keep_reference(self, embeddings: np.ndarray, label_ids: np.ndarray) -> None:
        self.reference, self.reference_labels = embeddings, label_ids


class KnnClassifier(EmbeddingClassifier):
    """k nearest labelled examples by cosine; scores are vote shares; ties go to the class whose neighbours are more
    similar in sum. ``fit``/``predict`` take texts (with ``encoder``), the ``*_embeddings`` methods unit vectors.

    >>> X = np.array([[1.0, 0.0], [0.9, 0.436], [0.0, 1.0]], dtype=np.float32)
    >>> knn = KnnClassifier(k=3).fit_embeddings(X, ["a", "a", "b"])
    >>> knn.predict_embeddings(np.array([[0.0, 1.0]], dtype=np.float32))[0].scores  # 2 of 3 neighbours are "a"
    {'a': 0.6666666666666666, 'b': 0.3333333333333333}
    """

    method = "knn"

    def __init__(self, encoder=None, k: int = 5, weights: str = "uniform"):
        from ctxir.checks import check_choice, check_int

        super().__init__(encoder)
        self.k = check_int(k, "k", 1, 10_000)
        self.weights = check_choice(weights, "weights", WEIGHTS)

    def fit_embeddings(self, embeddings, labels):
        embeddings = _as_matrix(embeddings, "embeddings")
        self._keep_reference(embeddings, self._label_ids(labels, min_classes=1))
        return self

    def _votes(self, embeddings):
        self._check_fitted()
        return knn_scores(
            _as_matrix(embeddings, "embeddings"),
            self.reference,
            self.reference_labels,
            len(self.classes),
            self.k,
            self.weights,
        )

    def scores_embeddings(self, embeddings):
        return self._votes(embeddings)[0]

    def predict_ids(self, embeddings):
        votes, sims = self._votes(embeddings)
        return argmax_ties(votes, sims)


class CentroidClassifier(EmbeddingClassifier):
    """Cosine to each class's mean embedding.

    >>> X = np.array([[1.0, 0.0], [0.6, 0.8], [0.0, 1.0]], dtype=np.float32)
    >>> CentroidClassifier().fit_embeddings(X, ["a", "a", "b"]).predict_labels(np.array([[0.8, 0.6]], np.float32))
    ['a']
    """

    method = "centroid"

    def fit_embeddings(self, embeddings, labels):
        embeddings = _as_matrix(embeddings, "embeddings")
        ids = self._label_ids(labels, min_classes=1)
        self.centroids = centroids(embeddings, ids, len(self.classes))
        self._keep_reference(embeddings, ids)
        return self

    def scores_embeddings(self, embeddings):
        self._check_fitted()
        return _as_matrix(embeddings, "embeddings") @ self.centroids.T


class LogRegClassifier(EmbeddingClassifier):
    """scikit-learn ``LogisticRegression`` on the frozen embeddings; scores are class probabilities.

    >>> X = np.array([[1.0, 0.0], [0.9, 0.436], [0.0, 1.0], [0.436, 0.9]], dtype=np.float32)
    >>> LogRegClassifier().fit_embeddings(X, ["a", "a", "b", "b"]).predict_labels(X)
    ['a', 'a', 'b', 'b']
    """

    method = "logreg"

    def __init__(self, encoder=None, C: float = 1.0, max_iter: int = 1000, seed: int = 0):
        super().__init__(encoder)
        self.C, self.max_iter, self.seed = C, max_iter, seed

    def fit_embeddings(self, embeddings, labels):
        from sklearn.linear_model import LogisticRegression

        embeddings = _as_matrix(embeddings, "embeddings")
        ids = self._label_ids(labels)
        self.model = LogisticRegression(C=self.C, max_iter=self.max_iter, random_state=self.seed)
        self.model.fit(embeddings, ids)
        self._keep_reference(embeddings, ids)
        return self

    def scores_embeddings(self, embeddings):
        self._check_fitted()
        proba = self.model.predict_proba(_as_matrix(embeddings, "embeddings"))  # columns = model.classes_ ids
        full = np.zeros((proba.shape[0], len(self.classes)))
        full[:, self.model.classes_] = proba
        return full


class ZeroShotClassifier(EmbeddingClassifier):
    """Cosine between a text and each label written into ``template``; no labelled example needed.

    ``projection`` (D, d), from ``word_projection``, compares both sides after Davison's label projection.
    ``fit`` is not needed; ``fit(texts, labels)`` only keeps labelled examples to show as neighbours.

    >>> labels = np.array([[1.0, 0.0], [0.0, 1.0]], dtype=np.float32)  # label embeddings given, no encoder needed
    >>> zs = ZeroShotClassifier(None, ["Sports", "World"], label_vectors=labels)
    >>> zs.predict_labels(np.array([[0.8, 0.6]], dtype=np.float32))
    ['Sports']
    >>> from ctxir.encoders import BiEncoder
    >>> zs = ZeroShotClassifier(BiEncoder(device="cpu"), [Label("Sports"), Label("World")])  # doctest: +SKIP
    >>> zs.predict(["The striker scored twice."])[0].label  # doctest: +SKIP
    'Sports'
    """

    method = "zero-shot"

    def __init__(
        self,
        encoder=None,
        labels: Sequence[Label | str] = (),
        template: str = TEMPLATES[1],
        projection: np.ndarray | None = None,
        label_vectors: np.ndarray | None = None,
    ):
        super().__init__(encoder)
        self.labels = [label if isinstance(label, Label) else Label(str(label)) for label in labels]
        names = [label.name for label in self.labels]
        if len(set(names)) != len(names) or len(names) < 2:
            raise CtxirError(f"zero-shot needs at least 2 distinct label names, got {names!r}")
        if "{label}" not in template and "{description}" not in template:
            raise CtxirError(
                f"template {template!r} names no label: put {{label}} or {{description}} in it, e.g. "
                "'This text is about {label}.'"
            )
        self.template, self.projection = template, projection
        self.classes = names
        self.prompts = [label.prompt(template) for label in self.labels]
        self.label_vectors = (
            _as_matrix(label_vectors, "label_vectors")
            if label_vectors is not None
            else encode(encoder, self.prompts)
        )

    def fit_embeddings(self, embeddings, labels):
        embeddings = _as_matrix(embeddings, "embeddings")
        index = {c: i for i, c in enumerate(self.classes)}
        unknown = sorted({str(x) for x in labels} - set(index))
        if unknown:
            raise CtxirError(
                f"label {unknown[0]!r} of the examples is not one of the zero-shot labels {self.classes!r}"
            )
        self._keep_reference(embeddings, np.array([index[str(x)] for x in labels], dtype=np.int64))
        return self

    def scores_embeddings(self, embeddings):
        return zero_shot_scores(_as_matrix(embeddings, "embeddings"), self.label_vectors, self.projection)


def vocabulary_words(tokenizer, n: int) -> list[tuple[str, int]]:
    """The first ``n`` whole-word, alphabetic vocabulary entries of at least 2 letters, with their token ids, in id
    order: WordPiece vocabularies (BERT, MiniLM) are built most frequent first, so these are frequent words, as
    Davison's top-k word2vec words are."""
    special = set(tokenizer.all_special_ids)
    words = []
    for token, token_id in sorted(tokenizer.get_vocab().items(), key=lambda item: item[1]):
        word = token.lstrip("▁Ġ")
        if token_id in special or token.startswith("##") or len(word) < 2 or not word.isalpha():
            continue
        words.append((word, token_id))
        if len(words) == n:
            break
    return words


def word_projection(encoder, n_words: int = 5000, ridge: float = 1.0) -> np.ndarray:
    """Davison's label projection for ``encoder``: (D, d) ridge map from each frequent word's sentence embedding to
    the encoder's own static (input) embedding of that word; the word vectors stand in for his word2vec."""
    model = encoder.model
    words = vocabulary_words(model.tokenizer, n_words)
    if not words:
        raise CtxirError("label projection found no whole-word vocabulary entries in this model's tokenizer")
    table = model[0].auto_model.get_input_embeddings().weight.detach().cpu().numpy()  # (vocab, d)
    sentence_vectors = encode(encoder, [w for w, _ in words])  # (V, D)
    return fit_projection(sentence_vectors, table[[i for _, i in words]], ridge)


# ---------------------------------------------------------------- evaluation


def evaluate_predictions(y_true: Sequence[str], y_pred: Sequence[str], classes: Sequence[str]) -> dict:
    """accuracy, macro_f1, scikit-learn's per-class report and confusion matrix (rows = true, columns = predicted).

    >>> m = evaluate_predictions(["a", "a", "b", "b"], ["a", "b", "b", "b"], ["a", "b"])
    >>> m["accuracy"], round(m["macro_f1"], 4), m["confusion_matrix"]["matrix"]
    (0.75, 0.7333, [[1, 1], [0, 2]])
    """
    from sklearn.metrics import accuracy_score, classification_report, confusion_matrix, f1_score

    classes = list(classes)
    return {
        "accuracy": float(accuracy_score(y_true, y_pred)),
        "macro_f1": float(f1_score(y_true, y_pred, labels=classes, average="macro", zero_division=0)),
        "n": len(y_true),
        "report": classification_report(y_true, y_pred, labels=classes, output_dict=True, zero_division=0),
        "confusion_matrix": {
            "labels": classes,
            "matrix": confusion_matrix(y_true, y_pred, labels=classes).tolist(),
        },
    }


def mcnemar(y_true: Sequence[str], pred_a: Sequence[str], pred_b: Sequence[str]) -> dict:
    """Exact McNemar test: of the texts exactly one classifier gets right, is the split 50/50? (two-sided binomial
    test on the discordant pairs).

    >>> r = mcnemar(list("aaaaaaaaaa"), list("aaaaaaaaaa"), list("abbbbbbbba"))
    >>> r["a_only"], r["b_only"], round(r["pvalue"], 4)
    (8, 0, 0.0078)
    """
    from scipy.stats import binomtest

    right_a = np.asarray(pred_a) == np.asarray(y_true)
    right_b = np.asarray(pred_b) == np.asarray(y_true)
    a_only, b_only = int((right_a & ~right_b).sum()), int((right_b & ~right_a).sum())
    pvalue = float(binomtest(a_only, a_only + b_only, 0.5).pvalue) if a_only + b_only else 1.0
    return {
        "test": "McNemar exact (binomial)",
        "n": len(right_a),
        "accuracy_a": float(right_a.mean()),
        "accuracy_b": float(right_b.mean()),
        "a_only": a_only,
        "b_only": b_only,
        "pvalue": pvalue,
    }


def sample_per_class(labels: Sequence[str], n: int, seed: int) -> list[int]:
    """Indices of ``n`` seeded random examples of each class (all of a class with fewer), in row order.

    >>> sample_per_class(["a", "b", "a", "b", "a"], 2, seed=0) == sample_per_class(["a", "b", "a", "b", "a"], 2, 0)
    True
    >>> from collections import Counter
    >>> labels = ["a", "b", "a", "b", "a"]
    >>> sorted(Counter(labels[i] for i in sample_per_class(labels, 2, 1)).values())
    [2, 2]
    """
    rng = np.random.default_rng(seed)
    keep: list[int] = []
    for label in sorted(set(labels)):
        rows = [i for i, x in enumerate(labels) if x == label]
        keep += rows if len(rows) <= n else [rows[i] for i in rng.choice(len(rows), n, replace=False)]
    return sorted(keep)


def label_vectors_for(encoder, labels: Sequence[Label], templates: Sequence[str]) -> dict[str, np.ndarray]:
    """{template: (C, D) label embeddings}; templates using {description} only when some label has one."""
    described = any(label.description for label in labels)
    return {
        t: encode(encoder, [label.prompt(t) for label in labels])
        for t in templates
        if described or "{description}" not in t
    }


def select_zero_shot(
    encoder,
    labels: Sequence[Label],
    texts_embeddings: np.ndarray,
    text_labels: Sequence[str],
    templates: Sequence[str] = TEMPLATES,
    projection: np.ndarray | None = None,
    label_vectors: dict | None = None,
) -> tuple[dict, list[dict]]:
    """The (template, projection on/off) with the best accuracy on the given labelled texts — training data, never
    test — and every candidate's accuracy. Ties keep the first candidate (templates in order, projection off
    first)."""
    vectors = label_vectors or label_vectors_for(encoder, labels, templates)
    names = [label.name for label in labels]
    table = []
    for template, use_projection in itertools.product(
        vectors, (False, True) if projection is not None else (False,)
    ):
        scores = zero_shot_scores(texts_embeddings, vectors[template], projection if use_projection else None)
        predicted = [names[i] for i in scores.argmax(axis=1)]
        accuracy = float(np.mean([p == t for p, t in zip(predicted, text_labels, strict=True)]))
        table.append(
            {"template": template, "projection": use_projection, "train_accuracy": round(accuracy, 4)}
        )
    best = max(table, key=lambda row: row["train_accuracy"])  # max keeps the first of equals
    return best, table


# ---------------------------------------------------------------- command line


@dataclass
class ClassifyArgs:
    """ctxir classify: evaluate embedding classifiers on a labelled test file."""

    train: str = field(
        default="", metadata={"help": "labelled training file (.csv/.tsv text,label or .jsonl)"}
    )
    test: str = field(default="", metadata={"help": "labelled test file"})
    data: str = field(
        default="",
        metadata={
            "help": "a folder holding train*.csv and test.csv (instead of "
            "--train/--test), e.g. ../shared/data/agnews"
        },
    )
    method: str = field(
        default="all", metadata={"help": "comma list of zero-shot, knn, centroid, logreg; or all"}
    )
    labels: str = field(
        default="",
        metadata={
            "help": "zero-shot labels file (.txt, or .csv/.jsonl with label and "
            "optional description); default: the train file's labels. "
            "Descriptions help: on AG News test the label names alone gave "
            "0.6796 accuracy, names with short descriptions "
            "(ctxir/assets/agnews_labels.csv) 0.7714 (docs/results.md, "
            "Classification with embeddings)"
        },
    )
    templates: str = field(
        default="",
        metadata={
            "help": "zero-shot templates separated by '||' (default: "
            "ctxir.classify.TEMPLATES); the best on --train is used"
        },
    )
    projection: str = field(
        default="auto", metadata={"help": "zero-shot label projection: auto (chosen on --train), on, off"}
    )
    projection_words: int = field(
        default=5000, metadata={"help": "vocabulary words the projection is fitted on"}
    )
    k: str = field(
        default="auto",
        metadata={
            "help": "kNN neighbour count: auto chooses one of "
            f"{','.join(map(str, K_GRID))} by {CV_FOLDS}-fold stratified "
            "cross-validation accuracy on --train, then fits on all of "
            "--train; or a comma list (1,5,15) to report each k"
        },
    )
    weights: str = field(default="uniform", metadata={"help": "kNN vote: uniform or distance"})
    shots: str = field(
        default="",
        metadata={
            "help": "also run few-shot with N training examples per class; a comma "
            "list (8,16,32,64) gives the curve"
        },
    )
    seeds: int = field(default=5, metadata={"help": "few-shot: seeds (samples of N per class)"})
    few_shot_methods: str = field(default="knn-5,logreg", metadata={"help": "methods run few-shot"})
    max_test: int = field(default=0, metadata={"help": "first N test rows only (0 = all; for quick checks)"})
    model: str = field(
        default="sentence-transformers/all-MiniLM-L6-v2", metadata={"help": "bi-encoder id/folder"}
    )
    device: str = "auto"
    batch_size: int = 32
    torch_threads: int = field(default=0, metadata={"help": "CPU threads for torch (0 = default)"})
    cache_dir: str = field(
        default="", metadata={"help": "cache root (default $CTXIR_CACHE or ~/.cache/ctxir)"}
    )
    output: str = field(default="metrics.json", metadata={"help": "where the metrics JSON is written"})


def _methods(value: str) -> list[str]:
    names = [m.strip() for m in value.split(",") if m.strip()]
    if names == ["all"]:
        return list(METHODS)
    for name in names:
        if name not in METHODS:
            raise CtxirError(
                f"--method {name!r} is not known: use a comma list of {', '.join(METHODS)}, or all"
            )
    if not names:
        raise CtxirError("--method is empty: use a comma list of zero-shot, knn, centroid, logreg, or all")
    return names


def _ks(value: str) -> list[int] | None:
    """'1,5,15' → [1, 5, 15]; 'auto' → None (k chosen on --train by ``choose_k``)."""
    text = str(value).strip()
    if text.lower() == "auto":
        return None
    parts = [part.strip() for part in text.split(",")]
    if not text or not all(part.isascii() and part.isdigit() and 1 <= int(part) <= 10_000 for part in parts):
        raise CtxirError(
            f"--k {value!r} is not valid: use auto (k chosen by cross-validation on --train) or a comma "
            "list of whole numbers from 1 to 10000, e.g. --k 5 or --k 1,5,15"
        )
    return [int(part) for part in parts]


def _shots(value: str) -> list[int]:
    """'8,16,32' → [8, 16, 32]; '' or '0' → []."""
    from ctxir.checks import check_int

    shots = [check_int(n.strip(), "--shots", 0, 1_000_000) for n in str(value).split(",") if n.strip()]
    return [n for n in shots if n > 0]


def make_classifier(method: str, encoder, weights: str, seed: int = 0) -> EmbeddingClassifier:
    """'knn-5', 'centroid', 'logreg' → an unfitted classifier."""
    if method.startswith("knn-"):
        return KnnClassifier(encoder, k=int(method.split("-")[1]), weights=weights)
    if method == "centroid":
        return CentroidClassifier(encoder)
    if method == "logreg":
        return LogRegClassifier(encoder, seed=seed)
    raise CtxirError(f"few-shot method {method!r} is not known: use knn-N, centroid or logreg")


def _mean_std(values: Sequence[float]) -> dict:
    values = [float(v) for v in values]
    return {
        "mean": round(float(np.mean(values)), 4),
        "std": round(float(np.std(values, ddof=1)), 4) if len(values) > 1 else 0.0,
    }


def few_shot(
    train_x: np.ndarray,
    train_y: Sequence[str],
    test_x: np.ndarray,
    test_y: Sequence[str],
    methods: Sequence[str],
    shots: int,
    seeds: int,
    weights: str = "uniform",
) -> dict:
    """Each method fitted on ``shots`` examples per class drawn with seeds 0..seeds-1; accuracy and macro-F1 per
    seed and as mean ± sample std."""
    from sklearn.metrics import f1_score

    results = {}
    for method in methods:
        per_seed = []
        for seed in range(seeds):
            rows = sample_per_class(train_y, shots, seed)
            classifier = make_classifier(method, None, weights, seed)
            classifier.fit_embeddings(train_x[rows], [train_y[i] for i in rows])
            predicted = classifier.predict_labels(test_x)
            per_seed.append(
                {
                    "seed": seed,
                    "accuracy": float(np.mean(np.asarray(predicted) == np.asarray(test_y))),
                    "macro_f1": float(f1_score(test_y, predicted, average="macro", zero_division=0)),
                }
            )
        results[method] = {
            "accuracy": _mean_std([r["accuracy"] for r in per_seed]),
            "macro_f1": _mean_std([r["macro_f1"] for r in per_seed]),
            "per_seed": per_seed,
        }
    return {"shots": shots, "seeds": seeds, "methods": results}


@dataclass
class _Task:
    """What ``run`` works on, filled step by step: the checked choices, then the data, then its embeddings."""

    methods: list[str]
    ks: list[int] | None  # None: chosen on --train by cross-validation
    shots: list[int]
    templates: list[str]
    train_path: str | Path
    test_path: str | Path
    train: list[tuple[str, str]] = field(default_factory=list)
    test: list[tuple[str, str]] = field(default_factory=list)
    labels: list[Label] = field(default_factory=list)
    classes: list[str] = field(default_factory=list)
    train_x: np.ndarray | None = None
    test_x: np.ndarray | None = None

    @property
    def train_y(self) -> list[str]:
        return [y for _, y in self.train]

    @property
    def test_y(self) -> list[str]:
        return [y for _, y in self.test]


def run(args: ClassifyArgs) -> dict:
    """Evaluate the chosen methods on --test; returns and writes the metrics record."""
    import torch

    from ctxir.encoders.models import set_threads
    from ctxir.files import write_json

    # 0. check the arguments before anything heavy is loaded
    task = _check_args(args)
    set_threads(args.torch_threads)
    # 1. load the data
    _load_data(args, task)
    # 2. load the encoder and embed (cached: a second run reads the vectors from disk)
    encoder, sample, encode_seconds = _embed(args, task)
    # 3. classify the test set with every method
    record: dict = {
        "model": args.model,
        "weights": encoder.config["weights"],
        "config": asdict(args),
        "data": {
            "train": str(task.train_path),
            "test": str(task.test_path),
            "train_rows": len(task.train),
            "test_rows": len(task.test),
            "classes": task.classes,
        },
        "methods": {},
        "throughput": {},
    }
    predictions, classify_seconds = _classify_all(args, task, encoder, record["methods"])
    # 4. paired comparisons (exact McNemar) between every two methods
    record["paired"] = [
        {"a": a, "b": b, **mcnemar(task.test_y, predictions[a], predictions[b])}
        for a, b in itertools.combinations(predictions, 2)
    ]
    # 5. few-shot: N per class, mean ± std over seeds
    record["few_shot"] = _few_shot_curve(args, task)
    # 6. throughput and the machine, then write
    record["throughput"] = {
        "encode_texts": sample,
        "encode_seconds": round(encode_seconds, 2),
        "encode_texts_per_second": round(sample / max(encode_seconds, 1e-9), 1),
        "torch_threads": torch.get_num_threads(),
        "classify_texts_per_second": {
            m: round(len(task.test) / max(s, 1e-9), 1) for m, s in classify_seconds.items()
        },
    }
    record["machine"] = machine()
    write_json(Path(args.output), record)
    print(f"wrote {args.output}")
    return record


def _check_args(args: ClassifyArgs) -> _Task:
    """Every argument that can be checked without data or a model, checked."""
    from ctxir.checks import check_choice

    methods = _methods(args.method)
    ks = _ks(args.k)
    check_choice(args.weights, "--weights", WEIGHTS)
    check_choice(args.projection, "--projection", ("auto", "on", "off"))
    templates = (
        [t.strip() for t in args.templates.split("||") if t.strip()] if args.templates else list(TEMPLATES)
    )
    if args.data:
        if args.train or args.test:
            raise CtxirError("give either --data FOLDER or --train/--test files, not both")
        train_path, test_path = load_folder(args.data)
    else:
        train_path, test_path = args.train, args.test
    if not test_path:
        raise CtxirError("--test is missing: pass a labelled test file (text,label) or --data FOLDER")
    shots = _shots(args.shots)
    needs_train = [m for m in methods if m != "zero-shot"] or ([] if args.labels else ["zero-shot"])
    if not train_path and (needs_train or shots):
        raise CtxirError(
            f"--train is missing: {', '.join(needs_train) or 'few-shot'} needs labelled examples "
            "(zero-shot alone runs with --labels and no --train)"
        )
    if args.seeds < 1:
        raise CtxirError(f"--seeds must be ≥ 1, got {args.seeds!r}")
    return _Task(methods, ks, shots, templates, train_path, test_path)


def _load_data(args: ClassifyArgs, task: _Task) -> None:
    """The labelled rows and the classes; every test label must be a known class."""
    task.train = load_labelled(task.train_path) if task.train_path else []
    task.test = load_labelled(task.test_path)
    if args.max_test > 0:
        task.test = task.test[: args.max_test]
    train_classes = sorted({y for _, y in task.train})
    task.labels = load_labels(args.labels) if args.labels else [Label(c) for c in train_classes]
    label_names = {label.name for label in task.labels}
    task.classes = train_classes if task.train else [label.name for label in task.labels]
    known = set(task.classes) | label_names
    for row, (_, y) in enumerate(task.test, 2):
        if y not in known:
            raise CtxirError(
                f"{task.test_path}: test label {y!r} (row {row - 1}) is not among the training/labels-"
                f"file classes {sorted(known)!r}"
            )
    if "zero-shot" in task.methods and task.train and set(task.classes) - label_names:
        raise CtxirError(
            f"--labels names {[label.name for label in task.labels]!r} but the training data has "
            f"classes {task.classes!r}: name every class in the labels file"
        )


def _embed(args: ClassifyArgs, task: _Task):
    """(the encoder, texts timed, their seconds): times the encoder on up to 256 test texts uncached, then embeds
    both sets through the cache."""
    from ctxir.encoders.bi_encoder import BiEncoder, EmbeddingCache, cache_root

    cache = EmbeddingCache(cache_root(args.cache_dir or None) / "embeddings")
    encoder = BiEncoder(args.model, device=args.device, cache=cache, batch_size=args.batch_size)
    sample = [t for t, _ in task.test[:256]]
    started = time.perf_counter()
    encoder.encode(sample)  # uncached: the encoding speed on this machine
    encode_seconds = time.perf_counter() - started
    task.train_x = (
        encode(encoder, [t for t, _ in task.train])
        if task.train
        else np.zeros((0, encoder.dimension), np.float32)
    )
    task.test_x = encode(encoder, [t for t, _ in task.test])
    return encoder, len(sample), encode_seconds


def _classify_all(args: ClassifyArgs, task: _Task, encoder, results: dict) -> tuple[dict, dict]:
    """Each method's classifiers (kNN: one per k) fitted and run on the test set; their metrics go into
    ``results``. Returns (predictions, seconds) by classifier name; the seconds include fitting."""
    predictions: dict[str, list[str]] = {}
    classify_seconds: dict[str, float] = {}
    for method in task.methods:
        if method == "zero-shot":
            named, chosen = _zero_shot(args, task, encoder)
            started = time.perf_counter()  # choosing the template on --train is not the classifier's speed
        else:
            ks, k_choice = _knn_ks(args, task) if method == "knn" else ([], {})
            started = time.perf_counter()  # choosing k on --train is not the classifier's speed either
            variants = [f"knn-{k}" for k in ks] if method == "knn" else [method]
            named = {
                v: make_classifier(v, encoder, args.weights).fit_embeddings(task.train_x, task.train_y)
                for v in variants
            }
            chosen = {
                v: {"weights": args.weights, **k_choice} if v.startswith("knn") else {} for v in variants
            }
        for name, classifier in named.items():
            predicted = classifier.predict_labels(task.test_x)
            classify_seconds[name] = time.perf_counter() - started
            started = time.perf_counter()
            predictions[name] = predicted
            results[name] = {
                **evaluate_predictions(task.test_y, predicted, task.classes),
                "config": chosen[name],
            }
            print(
                f"{name}: accuracy {results[name]['accuracy']:.4f}, macro-F1 {results[name]['macro_f1']:.4f}",
                flush=True,
            )
    return predictions, classify_seconds


def _knn_ks(args: ClassifyArgs, task: _Task) -> tuple[list[int], dict]:
    """(the ks to run, how k was chosen): --k as given, or the one k of ``choose_k`` on the training embeddings
    already computed, with every candidate's cross-validation scores (printed, and kept in the metrics)."""
    if task.ks is not None:
        return task.ks, {}
    k, table = choose_k(task.train_x, task.train_y, weights=args.weights)
    print(
        "knn: k chosen by cross-validation on --train (accuracy): "
        + ", ".join(f"k={r['k']} {r['cv_accuracy']:.4f}" for r in table)
        + f" → k={k}",
        flush=True,
    )
    return [k], {
        "k": k,
        "chosen_on": f"{table[0]['folds']}-fold stratified cross-validation accuracy on --train",
        "candidates": table,
    }


def _zero_shot(args: ClassifyArgs, task: _Task, encoder) -> tuple[dict, dict]:
    """The zero-shot classifier with its template and projection chosen on --train accuracy (never on test); with
    no --train, the first template."""
    train = bool(task.train)
    # auto with no training data to choose on keeps the projection off: nothing to fit it for
    wanted = args.projection == "on" or (args.projection == "auto" and train)
    projection = word_projection(encoder, args.projection_words) if wanted else None
    vectors = label_vectors_for(encoder, task.labels, task.templates)
    if train and (len(vectors) > 1 or args.projection == "auto"):
        best, table = select_zero_shot(
            encoder,
            task.labels,
            task.train_x,
            task.train_y,
            task.templates,
            projection if args.projection != "off" else None,
            vectors,
        )
        if args.projection == "on":
            best = max((r for r in table if r["projection"]), key=lambda r: r["train_accuracy"])
    else:
        best, table = {"template": next(iter(vectors)), "projection": args.projection == "on"}, []
    classifier = ZeroShotClassifier(
        encoder,
        task.labels,
        best["template"],
        projection if best["projection"] else None,
        vectors[best["template"]],
    )
    chosen = {
        "template": best["template"],
        "projection": best["projection"],
        "chosen_on": "train accuracy" if table else "first template (no --train)",
        "candidates": table,
    }
    return {"zero-shot": classifier}, {"zero-shot": chosen}


def _few_shot_curve(args: ClassifyArgs, task: _Task) -> list[dict]:
    """``few_shot`` at each --shots N, printed as it goes."""
    methods = [m.strip() for m in args.few_shot_methods.split(",") if m.strip()]
    curve = []
    for n in task.shots:
        curve.append(
            few_shot(
                task.train_x, task.train_y, task.test_x, task.test_y, methods, n, args.seeds, args.weights
            )
        )
        for name, result in curve[-1]["methods"].items():
            print(
                f"{n}-shot {name}: accuracy {result['accuracy']['mean']:.4f} ± "
                f"{result['accuracy']['std']:.4f}",
                flush=True,
            )
    return curve


def machine() -> str:
    """The one-line machine summary written beside timings (training/common.py's ``hardware`` has the same form)."""
    import os
    import platform

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return f"{platform.system()} {platform.machine()}, {cores} CPU core{'s' if cores != 1 else ''}"


def main(argv: list[str] | None = None) -> int:
    from ctxir.cli import cli_main

    return cli_main(ClassifyArgs, run, argv)
