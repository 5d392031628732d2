"""Calibrated probabilities for a cross-encoder's raw scores: Platt scaling, ``p = sigmoid(scale · score + bias)``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np

from ctxir.encoders.models import resolve_model
from ctxir.files import read_json, write_json
from ctxir.types import CtxirError

CALIBRATION_FILE = "calibration.json"


@dataclass(frozen=True)
class Calibration:
    """``probabilities(scores) = sigmoid(scale · score + bias)``; ``scale`` is 1 / temperature.

    >>> Calibration(scale=2.0, bias=-38.0).probabilities([18.0, 19.0, 20.0]).round(3).tolist()
    [0.119, 0.5, 0.881]
    """

    scale: float
    bias: float
    fitted_on: str = ""
    report: dict = field(default_factory=dict)

    def probabilities(self, scores: Sequence[float] | np.ndarray) -> np.ndarray:
        logits = self.scale * np.asarray(scores, dtype=np.float64) + self.bias
        return 1.0 / (1.0 + np.exp(-np.clip(logits, -500, 500)))

    @property
    def base_rate(self) -> float | None:
        """The share of relevant pairs the calibration was fitted on, None if unrecorded.

        >>> Calibration(1.0, 0.0, report={"pairs": 200, "relevant": 10}).base_rate, Calibration(1.0, 0.0).base_rate
        (0.05, None)
        """
        pairs, relevant = self.report.get("pairs"), self.report.get("relevant")
        return relevant / pairs if pairs and relevant is not None else None

    def save(self, folder: str | Path) -> Path:
        path = Path(folder) / CALIBRATION_FILE
        write_json(path, {"method": "platt", **asdict(self)})
        return path


def fit_calibration(scores: Sequence[float], labels: Sequence[int], fitted_on: str = "") -> Calibration:
    """Platt scaling on (raw score, 0/1 label) pairs; ``report`` holds log loss, Brier and ECE before and after."""
    from sklearn.linear_model import LogisticRegression

    x, y = np.asarray(scores, dtype=np.float64).reshape(-1, 1), np.asarray(labels, dtype=int)
    if len(x) != len(y) or not 0 < y.sum() < len(y):
        raise CtxirError(
            f"calibration needs relevant and non-relevant pairs: got {int(y.sum())} relevant of {len(y)}"
        )
    model = LogisticRegression(C=1e6).fit(x, y)
    calibration = Calibration(float(model.coef_[0, 0]), float(model.intercept_[0]), fitted_on)
    report = {
        "pairs": len(y),
        "relevant": int(y.sum()),
        "before": calibration_quality(Calibration(1.0, 0.0).probabilities(x[:, 0]), y),
        "after": calibration_quality(calibration.probabilities(x[:, 0]), y),
    }
    return replace(calibration, report=report)


def calibration_quality(p: np.ndarray, y: np.ndarray, bins: int = 10) -> dict:
    """Log loss, Brier score and expected calibration error (equal-width bins) of probabilities ``p``."""
    from sklearn.metrics import brier_score_loss, log_loss

    edges = np.minimum((p * bins).astype(int), bins - 1)
    ece = sum(
        abs(p[edges == b].mean() - y[edges == b].mean()) * (edges == b).mean()
        for b in range(bins)
        if (edges == b).any()
    )
    return {
        "log_loss": round(float(log_loss(y, np.clip(p, 1e-12, 1 - 1e-12), labels=[0, 1])), 4),
        "brier": round(float(brier_score_loss(y, p)), 4),
        "ece": round(float(ece), 4),
    }


def calibration_for(model) -> Calibration | None:
    """The calibration in ``model``'s folder (``calibration.json``), else None."""
    folder = Path(str(model)).expanduser()
    try:
        path = (folder if folder.is_dir() else Path(resolve_model(str(model)))) / CALIBRATION_FILE
    except CtxirError:
        return None
    if not path.is_file():
        return None
    record = read_json(path) or {}
    try:
        return Calibration(
            float(record["scale"]),
            float(record["bias"]),
            str(record.get("fitted_on", "")),
            dict(record.get("report") or {}),
        )
    except (KeyError, TypeError, ValueError):
        raise CtxirError(
            f"{str(path)!r} is damaged: it needs numbers 'scale' and 'bias'; "
            "fit it again with `python -m training.calibrate --model <folder>`"
        ) from None
