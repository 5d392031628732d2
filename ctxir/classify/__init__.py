"""Classify texts with a bi-encoder's embeddings (zero-shot, kNN, centroid, logistic regression), no head trained."""

from ctxir.classify.classifiers import (  # noqa: F401 -- public API
    TEMPLATES,
    CentroidClassifier,
    KnnClassifier,
    LogRegClassifier,
    Prediction,
    ZeroShotClassifier,
    encode,
    evaluate_predictions,
    label_vectors_for,
    make_classifier,
    sample_per_class,
    select_zero_shot,
    word_projection,
)
