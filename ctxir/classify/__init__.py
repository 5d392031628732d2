"""Classify texts with a bi-encoder's embeddings (zero-shot, kNN, centroid, logistic regression), no head trained.

>>> import numpy as np
>>> X = np.array([[1.0, 0.0], [0.8, 0.6], [0.0, 1.0], [-0.6, 0.8]], dtype=np.float32)  # 4 unit vectors
>>> y = ["sports", "sports", "world", "world"]
>>> KnnClassifier(k=1).fit_embeddings(X, y).predict_labels(np.array([[0.6, 0.8]], dtype=np.float32))
['sports']
>>> CentroidClassifier().fit_embeddings(X, y).predict_labels(np.array([[0.0, 1.0]], dtype=np.float32))
['world']
"""

from ctxir.classify.classifiers import (  # noqa: F401 -- public API
    K_GRID,
    TEMPLATES,
    CentroidClassifier,
    EmbeddingClassifier,
    KnnClassifier,
    LogRegClassifier,
    Prediction,
    ZeroShotClassifier,
    choose_k,
    encode,
    evaluate_predictions,
    few_shot,
    label_vectors_for,
    make_classifier,
    mcnemar,
    sample_per_class,
    select_zero_shot,
    word_projection,
)
