"""The zero-shot, kNN, centroid and logistic-regression classifiers over (N, D) unit vectors and the scores they share."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ctxir.checks import check_choice, check_int
from ctxir.data.labelled import Label
from ctxir.types import CtxirError

WEIGHTS = ("uniform", "distance")
# the kNN neighbour counts ``--k auto`` chooses among by cross-validation on --train: no k is safe on every data set
K_GRID = (1, 3, 5, 10, 15, 25)
CV_FOLDS = 5
# zero-shot prompt templates: ``select_zero_shot`` picks one on training data, never on test (none wins everywhere)
TEMPLATES = (
    "{label}",
    "This text is about {label}.",
    "Topic: {label}.",
    "{label}: {description}",
    "This text is about {description}.",
)


def as_matrix(x, what: str) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32)
    if x.ndim != 2:
        raise CtxirError(f"{what} must be a 2-D array (texts, dimensions), got shape {x.shape}")
    return x


def _normalise(x: np.ndarray) -> np.ndarray:
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)


def encode(encoder, texts: Sequence[str]) -> np.ndarray:
    """(N, D) unit vectors; 64 texts or more go through the encoder's persistent cache (keyed by weights and texts)."""
    if encoder is None:
        raise CtxirError(
            "this classifier was built without an encoder: pass embeddings (…_embeddings methods) or "
            "build it with encoder=BiEncoder(...)"
        )
    texts = list(texts)
    if len(texts) >= 64 and getattr(encoder, "cache", None) is not None:
        return encoder.encode_cached(texts)
    return encoder.encode(texts)


def top_neighbours(
    queries: np.ndarray, reference: np.ndarray, k: int, block: int = 1024
) -> tuple[np.ndarray, np.ndarray]:
    """(indices, similarities), each (n, k), of the k most similar reference rows, most similar (then first) first."""
    k = min(k, reference.shape[0])
    indices = np.empty((queries.shape[0], k), dtype=np.int64)
    sims = np.empty((queries.shape[0], k), dtype=np.float32)
    for begin in range(0, queries.shape[0], block):
        s = queries[begin : begin + block] @ reference.T  # (block, m)
        part = np.argpartition(-s, k - 1, axis=1)[:, :k]
        part_s = np.take_along_axis(s, part, axis=1)
        order = np.lexsort((part, -part_s), axis=1)
        indices[begin : begin + block] = np.take_along_axis(part, order, axis=1)
        sims[begin : begin + block] = np.take_along_axis(part_s, order, axis=1)
    return indices, sims


def neighbour_votes(indices, sims, reference_labels, n_classes: int, weights: str):
    """(votes, similarity sums), each (n, classes), of the given neighbours: class shares, summed cosines (ties)."""
    labels = reference_labels[indices].ravel()  # (n × k,)
    w = np.ones_like(sims) if weights == "uniform" else 1.0 / np.maximum(1.0 - sims, 1e-6)
    votes = np.zeros((indices.shape[0], n_classes), dtype=np.float64)
    sim_sums = np.zeros_like(votes)
    rows = np.repeat(np.arange(indices.shape[0]), indices.shape[1])
    np.add.at(votes, (rows, labels), w.ravel())
    np.add.at(sim_sums, (rows, labels), sims.ravel())
    return votes / votes.sum(axis=1, keepdims=True), sim_sums


def argmax_ties(primary: np.ndarray, secondary: np.ndarray) -> np.ndarray:
    """Row-wise argmax of ``primary``; ties (within 1e-9) go to the largest ``secondary``, then first."""
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
    """(the k with the best stratified cross-validation accuracy on training data, smallest of equals; every k's)."""
    from sklearn.metrics import f1_score
    from sklearn.model_selection import StratifiedKFold

    check_choice(weights, "weights", WEIGHTS)
    x = as_matrix(embeddings, "embeddings")
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
        indices, sims = top_neighbours(x[held], x[fit], max(tried))  # the largest k's, cut for the others
        for k in tried:
            votes, sums = neighbour_votes(indices[:, :k], sims[:, :k], y[fit], len(classes), weights)
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
    return max(tried, key=lambda k: int(np.sum(predicted[k] == y))), table  # max keeps the smallest of equals


def fit_projection(sentence_vectors: np.ndarray, word_vectors: np.ndarray, ridge: float = 1.0) -> np.ndarray:
    """Davison's label projection Z (D, d) = argmin ‖S Z − W‖² + ridge ‖Z‖² = (SᵀS + ridge·I)⁻¹ SᵀW."""
    s = np.asarray(sentence_vectors, dtype=np.float64)
    w = np.asarray(word_vectors, dtype=np.float64)
    return np.linalg.solve(s.T @ s + ridge * np.eye(s.shape[1]), s.T @ w).astype(np.float32)


def zero_shot_scores(texts: np.ndarray, label_vectors: np.ndarray, projection: np.ndarray | None = None):
    """(n, C) cosines of texts and label embeddings, through ``projection`` (D, d) when given."""
    if projection is not None:
        texts, label_vectors = texts @ projection, label_vectors @ projection
    return _normalise(texts) @ _normalise(label_vectors).T


def label_vectors_for(encoder, labels: Sequence[Label], templates: Sequence[str]) -> dict[str, np.ndarray]:
    """{template: (C, D) label embeddings}; templates using {description} only when some label has one."""
    described = any(label.description for label in labels)
    return {
        t: encode(encoder, [label.prompt(t) for label in labels])
        for t in templates
        if described or "{description}" not in t
    }


def select_zero_shot(
    labels: Sequence[Label],
    texts_embeddings: np.ndarray,
    text_labels: Sequence[str],
    vectors: dict[str, np.ndarray],
    projection: np.ndarray | None = None,
) -> tuple[dict, list[dict]]:
    """The (template of ``vectors``, projection on/off) best on labelled training texts (first of equals), and all."""
    names, truth = np.asarray([label.name for label in labels]), np.asarray(text_labels)
    table = []
    switch = (False, True) if projection is not None else (False,)
    for template, use_projection in itertools.product(vectors, switch):
        scores = zero_shot_scores(texts_embeddings, vectors[template], projection if use_projection else None)
        accuracy = round(float(np.mean(names[scores.argmax(axis=1)] == truth)), 4)
        table.append({"template": template, "projection": use_projection, "train_accuracy": accuracy})
    return max(table, key=lambda row: row["train_accuracy"]), table


def vocabulary_words(tokenizer, n: int) -> list[tuple[str, int]]:
    """The first ``n`` whole words of 2+ letters in the vocabulary, with their ids: WordPiece's most frequent."""
    special = set(tokenizer.all_special_ids)
    entries = sorted(tokenizer.get_vocab().items(), key=lambda item: item[1])
    words = ((t.lstrip("▁Ġ"), i) for t, i in entries if i not in special and not t.startswith("##"))
    return list(itertools.islice(((w, i) for w, i in words if len(w) >= 2 and w.isalpha()), n))


def word_projection(encoder, n_words: int = 5000, ridge: float = 1.0) -> np.ndarray:
    """Davison's label projection: frequent words' sentence embeddings → their input embeddings (his word2vec)."""
    model = encoder.model
    words = vocabulary_words(model.tokenizer, n_words)
    if not words:
        raise CtxirError("label projection found no whole-word vocabulary entries in this model's tokenizer")
    table = model[0].auto_model.get_input_embeddings().weight.detach().cpu().numpy()  # (vocab, d)
    return fit_projection(encode(encoder, [w for w, _ in words]), table[[i for _, i in words]], ridge)


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
        self.reference = as_matrix(embeddings, "embeddings")
        self.reference_labels = self._label_ids(labels)
        self._fit(self.reference, self.reference_labels)
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
        scores, ids = self.scores_embeddings(embeddings), self.predict_ids(embeddings)
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
        super().__init__(encoder)
        self.k = check_int(k, "k", 1, 10_000)
        self.weights = check_choice(weights, "weights", WEIGHTS)

    def _votes(self, embeddings):
        self._check_fitted()
        near = top_neighbours(as_matrix(embeddings, "embeddings"), self.reference, self.k)
        return neighbour_votes(*near, self.reference_labels, len(self.classes), self.weights)

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
        sums = np.zeros((len(self.classes), embeddings.shape[1]), dtype=np.float64)
        np.add.at(sums, label_ids, embeddings)
        self.centroids = _normalise(sums).astype(np.float32)  # (classes, D) unit-length class means

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

    def __init__(self, encoder=None, seed: int = 0):
        super().__init__(encoder)
        self.seed = seed

    def _fit(self, embeddings, label_ids):
        from sklearn.linear_model import LogisticRegression

        self.model = LogisticRegression(max_iter=1000, random_state=self.seed).fit(embeddings, label_ids)

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
        self.template, self.projection, self.classes = template, projection, names
        self.prompts = [label.prompt(template) for label in self.labels]
        self.label_vectors = (
            as_matrix(label_vectors, "label_vectors")
            if label_vectors is not None
            else encode(encoder, self.prompts)
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


def sample_per_class(labels: Sequence[str], n: int, seed: int) -> list[int]:
    """Indices of ``n`` seeded random examples of each class (all of a class with fewer), in row order."""
    rng = np.random.default_rng(seed)
    keep: list[int] = []
    for label in sorted(set(labels)):
        rows = [i for i, x in enumerate(labels) if x == label]
        keep += rows if len(rows) <= n else [rows[i] for i in rng.choice(len(rows), n, replace=False)]
    return sorted(keep)
