"""Scores over (N, D) unit vectors: neighbours, kNN votes, ``choose_k``, centroids; ``encode``; zero-shot: prompt
``TEMPLATES``, label embeddings, Davison's label projection, the template choice."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np

from ctxir.data.labelled import Label
from ctxir.types import CtxirError

WEIGHTS = ("uniform", "distance")
# the kNN neighbour counts ``--k auto`` chooses among by cross-validation on --train: no k is safe on every data set
K_GRID = (1, 3, 5, 10, 15, 25)
CV_FOLDS = 5
# texts per encode below which the cache is skipped (hashing and a file per call cost more than encoding a few)
CACHE_FROM = 64


def as_matrix(x, what: str) -> np.ndarray:
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
    """Row-wise argmax of ``primary``; ties (within 1e-9) go to the largest ``secondary``, then first."""
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
    # max keeps the first of equals: the smallest k
    return max(tried, key=lambda k: int(np.sum(predicted[k] == y))), table


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
    """(n, C) cosines of texts and label embeddings, through ``projection`` (D, d) when given."""
    if projection is not None:
        texts, label_vectors = texts @ projection, label_vectors @ projection
    return _normalise(texts) @ _normalise(label_vectors).T


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


# zero-shot prompt templates: ``select_zero_shot`` picks one on training data, never on test (none wins everywhere)
TEMPLATES = (
    "{label}",
    "This text is about {label}.",
    "Topic: {label}.",
    "{label}: {description}",
    "This text is about {description}.",
)


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
