"""The arguments of training/train_cls_lr.py and their checks."""

from __future__ import annotations

from dataclasses import dataclass, field

from ctxir.checks import check_choice
from ctxir.encoders.models import DEFAULT_BI_ENCODER, pick_device, set_threads
from ctxir.types import CtxirError
from training.common import RunArgs

# --cv-metric → the key of choose_c's record it maximises
CV_METRICS = {"average-precision": "average_precision", "ndcg": "ndcg"}


@dataclass
class ClsLrArgs(RunArgs):
    """The CLS-LR run's arguments; data_dir, device, seed and torch_threads come from RunArgs (every training
    script's), output_dir and model_name are redeclared with this script's defaults."""

    base_model: str = field(
        default=DEFAULT_BI_ENCODER,
        metadata={"help": "the cross-encoder whose [CLS] is read (a CrossEncoder folder or Hub id)"},
    )
    output_dir: str = field(default="outputs/cls-lr", metadata={"help": "ranker folder to write"})
    layer: int = field(
        default=-1, metadata={"help": "hidden layer of the [CLS] vector (0 = embeddings, -1 = last)"}
    )
    max_length: int = field(
        default=0,
        metadata={
            "help": "tokens per pair (0 = the cross-encoder's own max_seq_length, capped at its position limit)"
        },
    )
    negatives_per_positive: int = field(
        default=4,
        metadata={"help": "hard negatives (BM25's best non-relevant documents) per relevant document"},
    )
    negative_depth: int = field(
        default=100, metadata={"help": "BM25 depth the hard negatives are drawn from"}
    )
    heldout_queries: str = field(
        default="random",
        metadata={
            "help": "held-out queries for the report: random (--heldout-fraction) or base-unseen (those the cross-encoder never saw)"
        },
    )
    heldout_fraction: float = field(
        default=0.2,
        metadata={
            "help": "share of the train queries held out for the classification report (split by query)"
        },
    )
    max_samples: int = field(
        default=-1,
        metadata={"help": "use a seeded subset of this many train queries (-1 = all)"},
    )
    max_fit_queries: int = field(
        default=-1,
        metadata={"help": "fit on a seeded subset of this many non-held-out train queries (-1 = all)"},
    )
    c_grid: str = field(
        default="0.0001,0.0003,0.001,0.003,0.01,0.1,1,10",
        metadata={"help": "LogisticRegression C values tried by grouped cross-validation on the fit queries"},
    )
    class_weight: str = field(default="balanced", metadata={"help": "'balanced' or 'none'"})
    cv_metric: str = field(
        default="average-precision",
        metadata={
            "help": "what the grouped cross-validation maximises: average-precision (pooled pairs) or ndcg (per-query nDCG@10)"
        },
    )
    cv_folds: int = field(
        default=5, metadata={"help": "query-grouped folds on the fit queries for C and threshold"}
    )
    rerank_depth: int = field(
        default=100, metadata={"help": "BM25 candidates re-ranked per SciFact test query"}
    )
    max_test_queries: int = field(
        default=-1, metadata={"help": "re-rank a seeded subset of test queries; -1 = all"}
    )
    verify_queries: int = field(
        default=2,
        metadata={
            "help": "test queries re-ranked again by the reloaded ranker and a CrossEncoderReranker to check they match"
        },
    )
    score_feature: bool = field(
        default=False,
        metadata={
            "help": "also feed the cross-encoder's own score to the regression (needs a modular cross-encoder)"
        },
    )
    score_emphasis: str = field(
        default="1,10,100",
        metadata={
            "help": "--score-feature: how much less the score's weight is penalised than a [CLS] dimension's (a grid, 1 = alike)"
        },
    )
    general: str = field(
        default="",
        metadata={
            "help": "also fit on general-domain pairs from <data-dir>/general/: a comma list of squad, wikiqa, msmarco"
        },
    )
    general_queries: int = field(
        default=300, metadata={"help": "--general: questions drawn per source, seeded (-1 = all unseen)"}
    )
    batch_size: int = field(default=16, metadata={"help": "pairs per forward pass"})
    cache_dir: str = field(
        default="~/.cache/ctxir/cls-lr",
        metadata={
            "help": "where [CLS] features are cached as .npy, keyed by model weights + pairs ('' = no cache)"
        },
    )
    bundle_base: bool = field(
        default=False,
        metadata={
            "help": "copy the cross-encoder's files into the ranker folder (base_model '.') so it is self-contained"
        },
    )
    model_name: str = field(default="ctxir-cls-lr-scifact", metadata={"help": "short name for metrics.json"})


def check_args(args: ClsLrArgs) -> list[float]:
    """The argument checks, before anything is loaded; the --c-grid values."""
    if args.negatives_per_positive < 1:
        raise CtxirError(f"--negatives-per-positive must be ≥ 1, got {args.negatives_per_positive!r}")
    if args.negative_depth < args.negatives_per_positive:
        raise CtxirError(
            f"--negative-depth ({args.negative_depth!r}) must be ≥ --negatives-per-positive "
            f"({args.negatives_per_positive!r}): negatives are drawn from that many BM25 hits"
        )
    if not 0 < args.heldout_fraction < 1:
        raise CtxirError(f"--heldout-fraction must be between 0 and 1, got {args.heldout_fraction!r}")
    for name in ("rerank_depth", "batch_size"):
        if getattr(args, name) < 1:
            raise CtxirError(f"--{name.replace('_', '-')} must be ≥ 1, got {getattr(args, name)!r}")
    for name in ("max_samples", "max_test_queries", "max_fit_queries", "general_queries"):
        if getattr(args, name) < -1 or getattr(args, name) == 0:
            raise CtxirError(
                f"--{name.replace('_', '-')} must be -1 (all) or ≥ 1, got {getattr(args, name)!r}"
            )
    if args.heldout_queries not in ("random", "base-unseen"):
        raise CtxirError(
            f"--heldout-queries {args.heldout_queries!r} is not known: use 'random' or 'base-unseen'"
        )
    check_choice(args.cv_metric, "--cv-metric", CV_METRICS)
    if args.cv_folds < 2:
        raise CtxirError(f"--cv-folds must be ≥ 2, got {args.cv_folds!r}")
    if args.class_weight not in ("balanced", "none"):
        raise CtxirError(f"--class-weight {args.class_weight!r} is not known: use 'balanced' or 'none'")
    if args.max_length < 0:
        raise CtxirError(f"--max-length must be ≥ 0 (0 = the cross-encoder's own), got {args.max_length!r}")
    grid = positive_grid("--c-grid", args.c_grid, "0.01,0.1,1", "C")
    pick_device(args.device)
    set_threads(args.torch_threads)
    emphasis_grid(args)  # a bad --score-emphasis stops here, before any loading
    return grid


def emphasis_grid(args: ClsLrArgs) -> list[float]:
    """--score-emphasis as numbers where the score is a feature; [1] (nothing to emphasise) otherwise."""
    if not args.score_feature:
        return [1.0]
    return positive_grid("--score-emphasis", args.score_emphasis, "1,10,100", "value")


def positive_grid(flag: str, value: str, example: str, what: str) -> list[float]:
    """A comma list of numbers > 0, or a CtxirError naming ``flag``."""
    try:
        grid = [float(v) for v in value.split(",") if v.strip()]
    except ValueError as err:
        raise CtxirError(f"{flag} {value!r} must be comma-separated numbers like '{example}'") from err
    if not grid or any(v <= 0 for v in grid):
        raise CtxirError(f"{flag} {value!r} must list at least one {what} > 0")
    return grid
