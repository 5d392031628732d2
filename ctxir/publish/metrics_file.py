"""The ``metrics.json`` a training run writes and every card is built from, and the license derived from its data."""

from __future__ import annotations

import datetime
import json
import math
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from ctxir.files import write_json
from ctxir.publish.licenses import (
    KNOWN_LICENSE_EXAMPLES,
    License,
    allowed_use,
    combine_licenses,
    dataset_info,
    parse_license,
)
from ctxir.publish.model_types import MODEL_TYPES
from ctxir.types import CtxirError

METRICS_FILE = "metrics.json"
EVAL_TASKS = {  # metrics.json task → (model-index task type, pretty name); types follow sentence-transformers' cards
    "retrieval": ("information-retrieval", "Information Retrieval"),
    "sts": ("semantic-similarity", "Semantic Similarity"),
    "reranking": ("reranking", "Reranking"),
    "classification": ("text-classification", "Text Classification"),
}
REQUIRED_KEYS = ("model_type", "model_name", "base_model", "objective", "datasets", "config", "training")
REQUIRED_KEYS += ("evaluations", "versions", "created")
REQUIRED_TRAINING = ("steps", "epochs", "train_examples", "batch_size", "learning_rate", "wall_time_seconds")
REQUIRED_TRAINING += ("device", "hardware", "seed")
REQUIRED_EVAL = ("dataset", "split", "task", "metric", "after")


def versions() -> dict:
    """Versions of the libraries that decide a run's numbers (None for one not installed)."""
    found = {}
    for name in ("ctxir", "sentence_transformers", "transformers", "torch", "datasets"):
        try:
            found[name] = version(name.replace("_", "-"))
        except PackageNotFoundError:
            found[name] = None
    return found


def write_metrics(folder: str | Path, metrics: dict) -> Path:
    """Check and write ``folder/metrics.json``, filling ``versions``, ``created``, ``extra``."""
    metrics = dict(metrics)
    metrics.setdefault("versions", versions())
    metrics.setdefault("created", datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"))
    metrics.setdefault("extra", {})
    validate_metrics(metrics, source=str(Path(folder) / METRICS_FILE))
    return write_json(Path(folder) / METRICS_FILE, metrics, default=json_default)


def json_default(value: Any):
    """numpy scalars and paths, which turn up in configs and evaluator outputs, as JSON."""
    return value.item() if hasattr(value, "item") else str(value)


def load_metrics(path: str | Path) -> dict:
    """Read and check a ``metrics.json`` (a file, or the folder holding one) against the contract."""
    path = Path(path)
    if path.is_dir():
        path = path / METRICS_FILE
    if not path.is_file():
        raise CtxirError(
            f"{str(path)!r} does not exist: a model folder must hold the {METRICS_FILE} its training "
            "script wrote (the card's numbers come from it)"
        )
    try:
        metrics = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise CtxirError(f"{str(path)!r} is not valid JSON ({err}): re-run the training script") from err
    validate_metrics(metrics, source=str(path))
    return metrics


def validate_metrics(metrics: Any, source: str = METRICS_FILE) -> None:
    """Raise ``CtxirError`` naming every way ``metrics`` breaks the metrics.json contract."""
    if not isinstance(metrics, dict):
        raise CtxirError(f"{source!r} must hold a JSON object, got {type(metrics).__name__}")
    problems = [f"missing key {k!r}" for k in REQUIRED_KEYS if k not in metrics]
    if metrics.get("model_type") not in MODEL_TYPES and "model_type" in metrics:
        problems.append(f"model_type {metrics['model_type']!r} is not one of {', '.join(MODEL_TYPES)}")
    training = metrics.get("training")
    if isinstance(training, dict):
        problems += [f"missing training.{k}" for k in REQUIRED_TRAINING if k not in training]
    elif "training" in metrics:
        problems.append("training must be an object")
    datasets = metrics.get("datasets")
    if "datasets" in metrics and (not isinstance(datasets, list) or not datasets):
        problems.append("datasets must be a non-empty list")
    elif isinstance(datasets, list):
        for i, d in enumerate(datasets or []):
            for k in ("name", "split", "role"):
                if not isinstance(d, dict) or k not in d:
                    problems.append(f"datasets[{i}] has no {k!r}")
            if isinstance(d, dict) and d.get("role") not in ("train", "eval"):
                problems.append(f"datasets[{i}].role is {d.get('role')!r}; use 'train' or 'eval'")
        if not any(isinstance(d, dict) and d.get("role") == "train" for d in datasets):
            problems.append("datasets lists no dataset with role 'train'")
    evaluations = metrics.get("evaluations")
    if not isinstance(evaluations, list) and "evaluations" in metrics:
        problems.append("evaluations must be a list")
    seen, rows = set(), evaluations if isinstance(evaluations, list) else []
    for i, e in enumerate(rows):
        missing = [k for k in REQUIRED_EVAL if not isinstance(e, dict) or k not in e]
        if missing:
            problems.append(f"evaluations[{i}] has no {', '.join(map(repr, missing))}")
            continue
        if e["task"] not in EVAL_TASKS:
            problems.append(f"evaluations[{i}].task {e['task']!r} is not one of {', '.join(EVAL_TASKS)}")
        if not _is_number(e["after"]):
            problems.append(f"evaluations[{i}].after is {e['after']!r}; it must be a finite number")
        for k in ("before", "anchor"):
            if e.get(k) is not None and not _is_number(e[k]):
                problems.append(f"evaluations[{i}].{k} is {e[k]!r}; use a number or null")
        # what an evaluation covers, so a card can say it and ``cards.row_problems`` can hold it to its anchor
        for k in ("queries", "depth", "anchor_queries", "anchor_depth"):
            if e.get(k) is not None and (not isinstance(e[k], int) or isinstance(e[k], bool) or e[k] < 1):
                problems.append(f"evaluations[{i}].{k} is {e[k]!r}; use a positive integer or null")
        for k in ("subset", "first_stage", "anchor_name", "anchor_source", "anchor_first_stage"):
            if e.get(k) is not None and not isinstance(e[k], str):
                problems.append(f"evaluations[{i}].{k} is {e[k]!r}; use a string or null")
        if e.get("headline") not in (None, True, False):
            problems.append(f"evaluations[{i}].headline is {e['headline']!r}; use true or leave it out")
        ident = (e["dataset"], e["split"], e["task"], e["metric"], e.get("config"))
        if ident in seen:
            problems.append(f"evaluations[{i}] repeats {ident!r}: give each evaluation a distinct 'config'")
        seen.add(ident)
    if sum(bool(isinstance(e, dict) and e.get("headline")) for e in rows) > 1:
        problems.append("more than one evaluation has headline: true; the card leads with one figure")
    if problems:
        raise CtxirError(f"{source!r} does not follow the metrics.json contract: " + "; ".join(problems))


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def training_license(metrics: dict, base_license: tuple[str, License] | None = None) -> tuple[License, str]:
    """(the model's license from its training data's and its base's, what use they allow)."""
    return combine_licenses(training_sources(metrics, base_license))


def license_text(metrics: dict, base_license: tuple[str, License] | None = None) -> str:
    """The text of the repo's ``LICENSE_FILE``: each training source's terms and link, then what they allow together."""
    sources = training_sources(metrics, base_license)
    lines = [f"- {what}: {lic.name}" + (f" ({lic.link})" if lic.link else "") for what, lic in sources]
    return "\n".join(["# Terms of this model's training sources", "", *lines, "", allowed_use(sources), ""])


def _training_rows(metrics: dict) -> list[tuple[dict, License | None, Any]]:
    """(row, its License or None, its ``DatasetInfo`` or None) of each training dataset (role 'train')."""
    rows = [d for d in metrics["datasets"] if d.get("role") == "train"]
    return [(d, parse_license(d.get("license")), dataset_info(d["name"])) for d in rows]


def training_sources(metrics: dict, base_license: tuple[str, License] | None = None) -> list:
    """[(what, License)] of the training data (role 'train') and the base model; an unknown license refused."""
    sources = []
    for d, lic, info in _training_rows(metrics):
        if lic is None:
            what = (
                f"has license {d['license']!r}, which is not known" if d.get("license") else "has no license"
            )
            raise CtxirError(
                f"training dataset {d.get('name')!r} in {METRICS_FILE} {what}: the model's license is derived from "
                f"its training data, so set datasets[].license to the data's license (e.g. "
                f"{', '.join(map(repr, KNOWN_LICENSE_EXAMPLES))}) and stage again"
            )
        sources.append((f"{info.pretty if info else d['name']} ({d.get('split')})", lic))
    return sources + ([base_license] if base_license is not None else [])


def data_licenses(metrics: dict) -> list[dict]:
    """Each training source's own terms: the card's ``data_licenses`` metadata."""
    return [
        {
            "dataset": info.pretty if info else str(d["name"]),
            "split": str(d.get("split")),
            "terms": lic.name if lic else str(d.get("license")),
            "license_id": (lic.slug or lic.hub_id) if lic else None,
            "link": (lic.link if lic else None) or (info.url if info else None),
        }
        for d, lic, info in _training_rows(metrics)
    ]
