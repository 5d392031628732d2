"""The zero-shot, kNN, centroid and logistic-regression classifiers, their ``Prediction``s, ``make_classifier``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ctxir.classify.scoring import (
    TEMPLATES,
    WEIGHTS,
    argmax_ties,
    as_matrix,
    centroids,
    encode,
    knn_scores,
    top_neighbours,
    zero_shot_scores,
)
from ctxir.data.labelled import Label
from ctxir.types import CtxirError


@dataclass(frozen=True)
class Neighbour:
    """One labelled example near a text: its row in the training data, text, label and cosine similarity."""

    index: int
    text: str
    label: str
    similarity: float


@dataclass(frozen=True)
class Prediction:
    """The predicted label, a score per class (higher = closer), and the nearest labelled examples if kept.

    >>> X = np.array([[1.0, 0.0], [0.0, 1.0]], dtype=np.float32)
    >>> [p] = CentroidClassifier().fit_embeddings(X, ["a", "b"]).predict_embeddings(X[:1], neighbours=1)
    >>> p.label, p.scores, p.neighbours[0].label
    ('a', {'a': 1.0, 'b': 0.0}, 'a')
    """

    label: str
    scores: dict[str, float]
    neighbours: tuple[Neighbour, ...] = ()


class EmbeddingClassifier:
    """``fit``/``predict`` encode texts and call the ``*_embeddings`` methods, which take (N, D) unit vectors."""

    method = ""
    min_classes = 1

    def __init__(self, encoder=None):
        self.encoder = encoder
        self.classes: list[str] = []
        self.texts: list[str] = []  # the labelled texts, for neighbours shown beside a prediction
        self.reference, self.reference_labels = None, None  # (n, D) labelled embeddings, (n,) their class ids

    def fit(self, texts: Sequence[str], labels: Sequence[str]) -> EmbeddingClassifier:
        texts = list(texts)
        if len(texts) != len(labels):
            raise CtxirError(f"texts and labels differ in length: {len(texts)} texts, {len(labels)} labels")
        self.fit_embeddings(encode(self.encoder, texts), labels)
        self.texts = texts
        return self

    def _label_ids(self, labels: Sequence[str]) -> np.ndarray:
        labels = [str(label) for label in labels]
        if not labels:
            raise CtxirError(f"{self.method} needs labelled examples: got none")
        self.classes = sorted(set(labels))
        if len(self.classes) < self.min_classes:
            raise CtxirError(
                f"{self.method} needs examples of at least {self.min_classes} classes, got only {self.classes!r}"
            )
        index = {c: i for i, c in enumerate(self.classes)}
        return np.array([index[label] for label in labels], dtype=np.int64)

    def fit_embeddings(self, embeddings, labels: Sequence[str]) -> EmbeddingClassifier:
        x = as_matrix(embeddings, "embeddings")
        self.reference_labels = self._label_ids(labels)
        self.reference = x
        self._fit(x, self.reference_labels)
        return self

    def _fit(self, embeddings: np.ndarray, label_ids: np.ndarray) -> None:
        """What a classifier learns beyond the labelled examples it keeps."""

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
        embeddings = as_matrix(embeddings, "embeddings")
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
        if self.reference is None or not len(self.reference):
            return [()] * len(embeddings)
        indices, sims = top_neighbours(embeddings, self.reference, k)
        labels, texts = self.reference_labels, self.texts
        return [
            tuple(
                Neighbour(int(i), texts[i] if i < len(texts) else "", self.classes[labels[i]], float(s))
                for i, s in zip(row_i, row_s, strict=True)
            )
            for row_i, row_s in zip(indices, sims, strict=True)
        ]


class KnnClassifier(EmbeddingClassifier):
    """k nearest labelled examples by cosine; scores are vote shares; ties go to the more similar neighbours in sum.

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

    def _votes(self, embeddings):
        self._check_fitted()
        x = as_matrix(embeddings, "embeddings")
        return knn_scores(x, self.reference, self.reference_labels, len(self.classes), self.k, self.weights)

    def scores_embeddings(self, embeddings):
        return self._votes(embeddings)[0]

    def predict_ids(self, embeddings):
        return argmax_ties(*self._votes(embeddings))


class CentroidClassifier(EmbeddingClassifier):
    """Cosine to each class's mean embedding.

    >>> X = np.array([[1.0, 0.0], [0.6, 0.8], [0.0, 1.0]], dtype=np.float32)
    >>> CentroidClassifier().fit_embeddings(X, ["a", "a", "b"]).predict_labels(np.array([[0.8, 0.6]], np.float32))
    ['a']
    """

    method = "centroid"

    def _fit(self, embeddings, label_ids):
        self.centroids = centroids(embeddings, label_ids, len(self.classes))

    def scores_embeddings(self, embeddings):
        self._check_fitted()
        return as_matrix(embeddings, "embeddings") @ self.centroids.T


class LogRegClassifier(EmbeddingClassifier):
    """scikit-learn ``LogisticRegression`` on the frozen embeddings; scores are class probabilities.

    >>> X = np.array([[1.0, 0.0], [0.9, 0.436], [0.0, 1.0], [0.436, 0.9]], dtype=np.float32)
    >>> LogRegClassifier().fit_embeddings(X, ["a", "a", "b", "b"]).predict_labels(X)
    ['a', 'a', 'b', 'b']
    """

    method = "logreg"
    min_classes = 2

    def __init__(self, encoder=None, C: float = 1.0, max_iter: int = 1000, seed: int = 0):
        super().__init__(encoder)
        self.C, self.max_iter, self.seed = C, max_iter, seed

    def _fit(self, embeddings, label_ids):
        from sklearn.linear_model import LogisticRegression

        self.model = LogisticRegression(C=self.C, max_iter=self.max_iter, random_state=self.seed)
        self.model.fit(embeddings, label_ids)

    def scores_embeddings(self, embeddings):
        self._check_fitted()
        proba = self.model.predict_proba(as_matrix(embeddings, "embeddings"))  # columns = model.classes_ ids
        full = np.zeros((proba.shape[0], len(self.classes)))
        full[:, self.model.classes_] = proba
        return full


class ZeroShotClassifier(EmbeddingClassifier):
    """Cosine between a text and each label written into ``template`` (after ``projection`` (D, d), Davison's label
    projection, when given); ``fit`` only keeps labelled examples to show as neighbours.

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
        given = label_vectors is not None
        self.label_vectors = (
            as_matrix(label_vectors, "label_vectors") if given else encode(encoder, self.prompts)
        )

    def _label_ids(self, labels):
        """The examples' ids among the zero-shot labels, which stay the classes."""
        index = {c: i for i, c in enumerate(self.classes)}
        unknown = sorted({str(x) for x in labels} - set(index))
        if unknown:
            raise CtxirError(
                f"label {unknown[0]!r} of the examples is not one of the zero-shot labels {self.classes!r}"
            )
        return np.array([index[str(x)] for x in labels], dtype=np.int64)

    def scores_embeddings(self, embeddings):
        return zero_shot_scores(as_matrix(embeddings, "embeddings"), self.label_vectors, self.projection)


def make_classifier(method: str, encoder, weights: str, seed: int = 0) -> EmbeddingClassifier:
    """'knn-5', 'centroid', 'logreg' → an unfitted classifier."""
    if method.startswith("knn-"):
        return KnnClassifier(encoder, k=int(method.split("-")[1]), weights=weights)
    if method == "centroid":
        return CentroidClassifier(encoder)
    if method == "logreg":
        return LogRegClassifier(encoder, seed=seed)
    raise CtxirError(f"few-shot method {method!r} is not known: use knn-N, centroid or logreg")
