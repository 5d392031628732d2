"""The arguments of training/train_cls_lr.py and their checks."""

from __future__ import annotations

from dataclasses import dataclass

from ctxir.checks import check_choice
from ctxir.encoders.models import DEFAULT_BI_ENCODER, pick_device, set_threads
from ctxir.types import CtxirError
from training.common import RunArgs, arg

# --cv-metric → the key of choose_c's record it maximises
CV_METRICS = {"average-precision": "average_precision", "ndcg": "ndcg"}


@dataclass
class ClsLrArgs(RunArgs):
    base_model: str = arg(DEFAULT_BI_ENCODER, "the cross-encoder whose [CLS] is read (a folder or Hub id)")
    output_dir: str = arg("outputs/cls-lr", "ranker folder to write")
    layer: int = arg(-1, "hidden layer of the [CLS] vector (0 = embeddings, -1 = last)")
    max_length: int = arg(0, "tokens per pair (0 = the cross-encoder's own max_seq_length)")
    negatives_per_positive: int = arg(4, "hard negatives (BM25's best non-relevant documents) per positive")
    negative_depth: int = arg(100, "BM25 depth the hard negatives are drawn from")
    heldout_queries: str = arg(
        "random", "held-out queries: random (--heldout-fraction) or base-unseen (the cross-encoder never saw)"
    )
    heldout_fraction: float = arg(0.2, "share of the train queries held out for the classification report")
    max_samples: int = arg(-1, "use a seeded subset of this many train queries (-1 = all)")
    max_fit_queries: int = arg(-1, "fit on a seeded subset of this many non-held-out queries (-1 = all)")
    c_grid: str = arg("0.0001,0.0003,0.001,0.003,0.01,0.1,1,10", "LogisticRegression C values tried")
    class_weight: str = arg("balanced", "'balanced' or 'none'")
    cv_metric: str = arg("average-precision", "grouped cross-validation maximises: average-precision or ndcg")
    cv_folds: int = arg(5, "query-grouped folds on the fit queries for C and threshold")
    rerank_depth: int = arg(100, "BM25 candidates re-ranked per SciFact test query")
    max_test_queries: int = arg(-1, "re-rank a seeded subset of test queries; -1 = all")
    verify_queries: int = arg(2, "test queries re-ranked again by the saved ranker, to check they match")
    score_feature: bool = arg(False, "also feed the cross-encoder's own score to the regression")
    score_emphasis: str = arg("1,10,100", "--score-feature: grid of how much less the score is penalised")
    general: str = arg("", "also fit on <data-dir>/general/ pairs: a comma list of squad, wikiqa, msmarco")
    general_queries: int = arg(300, "--general: questions drawn per source, seeded (-1 = all unseen)")
    batch_size: int = arg(16, "pairs per forward pass")
    cache_dir: str = arg("~/.cache/ctxir/cls-lr", "[CLS] feature cache ('' = no cache)")
    bundle_base: bool = arg(False, "copy the cross-encoder's files into the ranker folder (base_model '.')")
    model_name: str = arg("ctxir-cls-lr-scifact", "short name for metrics.json")


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
    check_choice(args.heldout_queries, "--heldout-queries", ("random", "base-unseen"))
    check_choice(args.cv_metric, "--cv-metric", CV_METRICS)
    check_choice(args.class_weight, "--class-weight", ("balanced", "none"))
    if args.cv_folds < 2:
        raise CtxirError(f"--cv-folds must be ≥ 2, got {args.cv_folds!r}")
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
