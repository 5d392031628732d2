"""Fitting CLS-LR's logistic regression and reading it: grouped cross-validation, the F1-best threshold, the
classification report and its precision–recall figure, and a re-ranker over scores computed once."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ctxir.encoders.reranker_heads import cls_lr_logit
from ctxir.rerank import Reranker
from ctxir.types import CtxirError
from training.cls_lr_features import Pair


def fit_logistic(
    x: np.ndarray, y: np.ndarray, c: float, class_weight: str | None, seed: int, emphasis: float = 1.0
):
    """Standardise then fit LogisticRegression: (coef (features,), intercept) on the *raw* features, + the model.

    Scaling makes one C mean the same on every base model (some [CLS] dimensions are 10-100× larger than
    others); it is folded back into coef/intercept, so the saved ranker stays ``coef · CLS + intercept``.
    ``emphasis`` multiplies the last standardised column (the cross-encoder's score where it is a feature): its
    weight's L2 penalty is then emphasis² times weaker than a [CLS] dimension's.
    """
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import FunctionTransformer, StandardScaler

    weights = np.ones(x.shape[1])
    weights[-1] = emphasis
    model = make_pipeline(
        StandardScaler(),
        FunctionTransformer(lambda z: z * weights),
        LogisticRegression(C=c, class_weight=class_weight, max_iter=5000, random_state=seed),
    )
    model.fit(x, y)
    scaler, lr = model[0], model[-1]
    coef = lr.coef_[0] * weights / scaler.scale_
    intercept = float(lr.intercept_[0] - np.dot(coef, scaler.mean_))
    return coef.astype(np.float32), intercept, model


def out_of_fold_scores(
    x: np.ndarray,
    y: np.ndarray,
    groups: np.ndarray,
    c: float,
    class_weight: str | None,
    folds: int,
    seed: int,
    emphasis: float = 1.0,
) -> np.ndarray:
    """Decision scores of each fit pair from a model that never saw its query (GroupKFold by query)."""
    from sklearn.model_selection import GroupKFold

    scores = np.zeros(len(y), np.float64)
    for train_idx, val_idx in GroupKFold(n_splits=folds).split(x, y, groups):
        if len(set(y[train_idx])) < 2:
            raise CtxirError(
                "a cross-validation fold has only one class: too few fit queries — raise --max-samples "
                "or lower --cv-folds"
            )
        coef, intercept, _ = fit_logistic(x[train_idx], y[train_idx], c, class_weight, seed, emphasis)
        scores[val_idx] = cls_lr_logit(x[val_idx], coef, intercept)
    return scores


def best_f1_threshold(y: np.ndarray, scores: np.ndarray) -> tuple[float, float]:
    """The score threshold maximising F1 of the positive class on (y, scores): (threshold, F1)."""
    from sklearn.metrics import precision_recall_curve

    precision, recall, thresholds = precision_recall_curve(y, scores)
    f1 = 2 * precision[:-1] * recall[:-1] / np.maximum(precision[:-1] + recall[:-1], 1e-12)
    best = int(np.argmax(f1))
    return float(thresholds[best]), float(f1[best])


def classification(y: np.ndarray, scores: np.ndarray, threshold: float) -> dict:
    """sklearn's classification_report at ``score ≥ threshold`` (dict, per class + accuracy) and the text."""
    from sklearn.metrics import average_precision_score, classification_report

    predicted = (scores >= threshold).astype(int)
    report = classification_report(
        y,
        predicted,
        labels=[0, 1],
        target_names=["non-relevant", "relevant"],
        output_dict=True,
        zero_division=0,
    )
    text = classification_report(
        y, predicted, labels=[0, 1], target_names=["non-relevant", "relevant"], digits=4, zero_division=0
    )
    return {
        "threshold": threshold,
        "report": report,
        "text": text,
        "positives": int(y.sum()),
        "negatives": int((1 - y).sum()),
        "average_precision": float(average_precision_score(y, scores)) if 0 < y.sum() < len(y) else None,
    }


def pr_curve_png(path: Path, y: np.ndarray, curves: dict[str, tuple[np.ndarray, float]], title: str) -> None:
    """Precision–recall curves of several scorers on the same pairs; the dot marks each tuned threshold."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from sklearn.metrics import PrecisionRecallDisplay

    fig, ax = plt.subplots(figsize=(5.6, 5.2), dpi=120)
    for i, (name, (scores, threshold)) in enumerate(curves.items()):
        display = PrecisionRecallDisplay.from_predictions(
            y, scores, name=name, ax=ax, plot_chance_level=i == 0
        )
        predicted = scores >= threshold
        tp = float((predicted & (y == 1)).sum())
        ax.plot(tp / max(y.sum(), 1), tp / max(predicted.sum(), 1), "o", color=display.line_.get_color())
    ax.set(xlabel="recall (relevant class)", ylabel="precision", xlim=(0, 1.01), ylim=(0, 1.02), title=title)
    ax.legend(loc="upper right", fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


# ---------------------------------------------------------------- re-ranking


class PrecomputedReranker(Reranker):
    """Looks scores up by (query, document text): lets Pipeline re-rank with scores from the one shared pass."""

    def __init__(self, name: str, pairs: Sequence[Pair], scores: np.ndarray):
        self.name = name
        self.table = {pair: float(s) for pair, s in zip(pairs, scores, strict=True)}

    def score_pairs(self, query: str, texts: Sequence[str]) -> np.ndarray:
        try:
            return np.array([self.table[(query, t)] for t in texts], dtype=np.float32)
        except KeyError as err:
            raise CtxirError(f"no precomputed {self.name} score for a candidate of query {query!r}") from err


def sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))
