"""Classify texts with a bi-encoder's embeddings (zero-shot, kNN, centroid, logistic regression), no head trained."""

from ctxir.classify.classifiers import (  # noqa: F401 -- public API
    TEMPLATES,
    CentroidClassifier,
    KnnClassifier,
    LogRegClassifier,
    Prediction,
    ZeroShotClassifier,
    make_classifier,
    sample_per_class,
)
