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
the same texts. ``Label`` and the readers of labelled files (``load_labelled``, ``load_labels``, ``load_folder``)
live in ``ctxir.data.labelled``.

    scoring.py       scores over unit vectors: neighbours, kNN votes, ``choose_k``, centroids, zero-shot cosines;
                     ``encode`` (texts to unit vectors, through the embedding cache)
    labels.py        zero-shot labels: ``TEMPLATES``, label embeddings per template, Davison's label projection,
                     the template chosen on training data (``select_zero_shot``)
    classifiers.py   ``ZeroShotClassifier``, ``KnnClassifier``, ``CentroidClassifier``, ``LogRegClassifier``, their
                     ``Prediction``s, ``make_classifier``
    evaluation.py    ``evaluate_predictions``, ``mcnemar``, ``sample_per_class``, ``few_shot``
    cli.py           ``ctxir classify`` (see ``ClassifyArgs``): ``run``, ``main``

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
