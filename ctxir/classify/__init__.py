"""Classify texts with a bi-encoder's embeddings (zero-shot, kNN, centroid, logistic regression), no head trained.

    scoring.py       scores over (N, D) unit vectors: neighbours, kNN votes, ``choose_k``, centroids, zero-shot
    labels.py        zero-shot labels: ``TEMPLATES``, label embeddings, Davison's label projection
    classifiers.py   the four classifiers, their ``Prediction``s, ``make_classifier``
    evaluation.py    ``evaluate_predictions``, ``mcnemar``, ``sample_per_class``, ``few_shot``
    cli.py           ``ctxir classify``

>>> import numpy as np
>>> X = np.array([[1.0, 0.0], [0.8, 0.6], [0.0, 1.0], [-0.6, 0.8]], dtype=np.float32)  # 4 unit vectors
>>> y = ["sports", "sports", "world", "world"]
>>> KnnClassifier(k=1).fit_embeddings(X, y).predict_labels(np.array([[0.6, 0.8]], dtype=np.float32))
['sports']
>>> CentroidClassifier().fit_embeddings(X, y).predict_labels(np.array([[0.0, 1.0]], dtype=np.float32))
['world']
"""

from ctxir.classify.classifiers import (
    CentroidClassifier,
    EmbeddingClassifier,
    KnnClassifier,
    LogRegClassifier,
    Neighbour,
    Prediction,
    ZeroShotClassifier,
    make_classifier,
)
from ctxir.classify.evaluation import evaluate_predictions, few_shot, mcnemar, sample_per_class
from ctxir.classify.labels import (
    TEMPLATES,
    label_vectors_for,
    select_zero_shot,
    vocabulary_words,
    word_projection,
)
from ctxir.classify.scoring import (
    CV_FOLDS,
    K_GRID,
    WEIGHTS,
    argmax_ties,
    centroids,
    choose_k,
    encode,
    fit_projection,
    knn_scores,
    top_neighbours,
    zero_shot_scores,
)

__all__ = [
    "CV_FOLDS",
    "K_GRID",
    "TEMPLATES",
    "WEIGHTS",
    "CentroidClassifier",
    "EmbeddingClassifier",
    "KnnClassifier",
    "LogRegClassifier",
    "Neighbour",
    "Prediction",
    "ZeroShotClassifier",
    "argmax_ties",
    "centroids",
    "choose_k",
    "encode",
    "evaluate_predictions",
    "few_shot",
    "fit_projection",
    "knn_scores",
    "label_vectors_for",
    "make_classifier",
    "mcnemar",
    "sample_per_class",
    "select_zero_shot",
    "top_neighbours",
    "vocabulary_words",
    "word_projection",
    "zero_shot_scores",
]
