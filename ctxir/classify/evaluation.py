"""Classifiers evaluated: accuracy, macro-F1, report, confusion matrix, McNemar's test, the few-shot curve."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ctxir.classify.classifiers import make_classifier


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
    """Each method fitted on ``shots`` examples per class for each seed; per seed and mean ± std."""
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
