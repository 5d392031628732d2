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
    CentroidClassifier,
    EmbeddingClassifier,
    KnnClassifier,
    LogRegClassifier,
    Prediction,
    ZeroShotClassifier,
    make_classifier,
)
from ctxir.classify.evaluation import evaluate_predictions, few_shot, mcnemar, sample_per_class  # noqa: F401
from ctxir.classify.scoring import (  # noqa: F401 -- public API
    K_GRID,
    TEMPLATES,
    choose_k,
    encode,
    label_vectors_for,
    select_zero_shot,
    word_projection,
)
