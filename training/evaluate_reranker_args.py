"""The arguments of training/evaluate_reranker.py and their checks."""

from __future__ import annotations

from dataclasses import dataclass, field

from ctxir.evaluation.suite import STAGES as SUITE_STAGES
from ctxir.types import CtxirError
from training.common import DEFAULT_DATA_DIR, SQUAD_DEV_QUERIES, arg
from training.fusion_choice import FUSION_METHODS, FUSION_RULES

EVALUATION_FILE = "evaluation.json"
FUSION_FILE = "fusion.json"
FUSION_DEV_PARTS = ("scifact", "squad", "squad-topics")  # --fusion-dev: dev_claims builds each
METRICS = ("nDCG@10", "MRR@10")
FUSION_FIRST_STAGES = ("dense", "hybrid")  # the fusion weight is chosen for each, beside BM25's
SQUAD_TOPICS_PER_ARTICLE = 2  # --fusion-dev squad-topics: paragraphs drawn per SQuAD article
# the out-of-domain suite (--suite); the classic collections are for evaluation only
COLLECTIONS = ("scifact", "msmarco", "demo", "med", "npl", "lisa")
COLLECTION_NAMES = {
    "scifact_test": ("scifact", "test"),
    "msmarco": ("msmarco", "sample"),
    "demo": ("ctxir-demo", "demo"),
    "med": ("medline", "test"),
    "npl": ("npl", "test"),
    "lisa": ("lisa", "test"),
}


@dataclass
class EvaluateRerankerArgs:
    model: str = field(metadata={"help": "re-ranker folder: a cross-encoder or a CLS-LR ranker"})
    kind: str = arg(
        "auto", "re-ranker kind (ctxir.rerank.registry); auto = cls-lr if cls_lr_config.json is there"
    )
    dev_from: str = arg("", "folder whose metrics.json names the held-out claims the fusion is chosen on")
    data_dir: str = arg(DEFAULT_DATA_DIR, "benchmark data root")
    choose_fusion: bool = arg(False, "choose the fused mode on held-out claims, write <model>/fusion.json")
    fusion_depth: int = arg(20, "BM25 candidates per claim when choosing the fusion")
    fusion_dev: str = arg(
        "scifact", f"dev parts the passages and fusion are chosen on, of {FUSION_DEV_PARTS}"
    )
    fusion_dev_queries: int = arg(SQUAD_DEV_QUERIES, "--fusion-dev squad: questions drawn")
    topic_words: int = arg(50, "--fusion-dev squad-topics: words of a query")
    fusion_rule: str = arg("mean", "how a weight is chosen over the dev parts: mean or worst-part")
    fusion_methods: str = arg("rrf", "stage fusions the choice tries: comma list of rrf, calibrated")
    fusion_min_gain: float = arg(0.0, "a dev gain below this gets the largest first-stage weight")
    fusion_max_loss: float = arg(0.005, "refuse a fused mode this far below its first stage on a dev part")
    choose_passages: bool = arg(
        False, "choose first tokens or best window (MaxP), write <model>/passages.json"
    )
    passage_words: int = arg(70, "MaxP window, words")
    passage_stride: int = arg(50, "MaxP: a new window every N words")
    read_tokens: int = arg(0, "--choose-passages: tokens per pair (0 = the model's max length)")
    depths: str = arg("20", "BM25 depths re-ranked on SciFact test ('' = only choose)")
    collections: str = arg("scifact,msmarco,demo", f"what to evaluate, a comma list of {COLLECTIONS}")
    other_first_stages: str = arg("bm25,hybrid", "first stages re-ranked at --other-depth on the others")
    suite: bool = arg(False, "the out-of-domain suite: every collection and first stage, top 20")
    other_depth: int = arg(20, "candidates re-ranked on the other collections")
    max_queries: int = arg(0, "first N test queries per collection (0 = all)")
    batch_size: int = 32
    device: str = "auto"
    torch_threads: int = arg(1, "CPU threads for torch (0 = torch's default)")
    rerank_backend: str = arg("torch", "cross-encoder backend: torch, onnx or onnx-int8")
    output: str = arg("", f"default <model>/{EVALUATION_FILE}")
    scores_dir: str = arg("", "keep each query's scores here (resumable, shareable; '' = keep nothing)")
    update_metrics: bool = arg(True, "also add the nDCG@10 rows to <model>/metrics.json")


def comma_list(text: str) -> list[str]:
    return [k.strip() for k in text.split(",") if k.strip()]


def check_args(args: EvaluateRerankerArgs) -> tuple[list[int], list[str]]:
    """(--depths, --collections), checked before any model loads."""
    if args.suite:
        args.collections, args.other_first_stages, args.depths = (
            ",".join(COLLECTIONS),
            ",".join(SUITE_STAGES),
            "20",
        )
    depths = sorted({int(d) for d in args.depths.split(",") if d.strip()})
    if any(d < 10 for d in depths):
        raise CtxirError(f"--depths {args.depths!r}: every depth must be ≥ 10 (nDCG@10 needs ten candidates)")
    from ctxir.rerank.pipeline import FIRST_STAGES

    for kind in comma_list(args.other_first_stages):
        if kind not in FIRST_STAGES:
            raise CtxirError(
                f"--other-first-stages names {kind!r}: use {', '.join(FIRST_STAGES)}, comma-separated"
            )
    for part in comma_list(args.fusion_dev):
        if part not in FUSION_DEV_PARTS:
            raise CtxirError(
                f"--fusion-dev names {part!r}: use a comma list of {', '.join(FUSION_DEV_PARTS)}"
            )
    for method in comma_list(args.fusion_methods):
        if method not in FUSION_METHODS:
            raise CtxirError(
                f"--fusion-methods names {method!r}: use a comma list of {', '.join(FUSION_METHODS)}"
            )
    if args.fusion_rule not in FUSION_RULES:
        raise CtxirError(
            f"--fusion-rule {args.fusion_rule!r} is not known: use one of {', '.join(FUSION_RULES)}"
        )
    collections = comma_list(args.collections)
    for c in collections:
        if c not in COLLECTIONS:
            raise CtxirError(f"--collections names {c!r}: use a comma list of {', '.join(COLLECTIONS)}")
    if not depths and not (args.choose_passages or args.choose_fusion):
        # '' is how the choosing recipes say "evaluate nothing"; alone it would run nothing and exit 0
        raise CtxirError(
            f"--depths {args.depths!r} evaluates nothing (it is for a run that only chooses, with "
            "--choose-passages or --choose-fusion): to evaluate other collections without SciFact's test figures, "
            f"leave scifact out of --collections (now {args.collections!r}) and --depths at its default"
        )
    return depths, collections
