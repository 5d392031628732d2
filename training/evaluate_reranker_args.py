"""The arguments of training/evaluate_reranker.py and their checks."""

from __future__ import annotations

from dataclasses import dataclass, field

from ctxir.evaluation.suite import STAGES as SUITE_STAGES
from ctxir.types import CtxirError
from training.common import DEFAULT_DATA_DIR, SQUAD_DEV_QUERIES
from training.fusion_choice import FUSION_METHODS, FUSION_RULES

EVALUATION_FILE = "evaluation.json"
FUSION_FILE = "fusion.json"
FUSION_DEV_PARTS = ("scifact", "squad", "squad-topics")  # --fusion-dev: dev_claims builds each
METRICS = ("nDCG@10", "MRR@10")
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
    kind: str = field(
        default="auto",
        metadata={
            "help": "re-ranker kind (ctxir.rerank.registry); auto = cls-lr if cls_lr_config.json is there"
        },
    )
    dev_from: str = field(
        default="",
        metadata={"help": "folder whose metrics.json names the held-out claims the fusion is chosen on"},
    )
    data_dir: str = field(default=DEFAULT_DATA_DIR, metadata={"help": "benchmark data root"})
    choose_fusion: bool = field(
        default=False,
        metadata={"help": "choose the fused mode on held-out claims, write <model>/fusion.json"},
    )
    fusion_depth: int = field(
        default=20, metadata={"help": "BM25 candidates per claim when choosing the fusion"}
    )
    fusion_first_stages: str = field(
        default="bm25,dense,hybrid", metadata={"help": "first stages whose fusion weight is chosen"}
    )
    fusion_dev: str = field(
        default="scifact",
        metadata={
            "help": f"dev parts the passages and fusion are chosen on, a comma list of {FUSION_DEV_PARTS}"
        },
    )
    fusion_dev_queries: int = field(
        default=SQUAD_DEV_QUERIES, metadata={"help": "--fusion-dev squad: questions drawn"}
    )
    fusion_dev_topics: int = field(
        default=2, metadata={"help": "--fusion-dev squad-topics: paragraphs drawn per SQuAD article"}
    )
    topic_words: int = field(default=50, metadata={"help": "--fusion-dev squad-topics: words of a query"})
    fusion_rule: str = field(
        default="mean", metadata={"help": "how a weight is chosen over the dev parts: mean or worst-part"}
    )
    fusion_methods: str = field(
        default="rrf", metadata={"help": "stage fusions the choice tries: comma list of rrf, calibrated"}
    )
    fusion_min_gain: float = field(
        default=0.0, metadata={"help": "a dev gain below this gets the largest first-stage weight"}
    )
    fusion_max_loss: float = field(
        default=0.005,
        metadata={"help": "refuse a fused mode this far below its first stage on a dev part (< 0 = off)"},
    )
    choose_passages: bool = field(
        default=False,
        metadata={"help": "choose between first tokens and best window (MaxP), write <model>/passages.json"},
    )
    passage_words: int = field(default=70, metadata={"help": "MaxP window, words"})
    passage_stride: int = field(default=50, metadata={"help": "MaxP: a new window every N words"})
    read_tokens: int = field(
        default=0, metadata={"help": "--choose-passages: tokens per pair (0 = the model's max length)"}
    )
    depths: str = field(
        default="20", metadata={"help": "BM25 depths re-ranked on SciFact test ('' = only choose)"}
    )
    collections: str = field(
        default="scifact,msmarco,demo", metadata={"help": f"what to evaluate, a comma list of {COLLECTIONS}"}
    )
    other_first_stages: str = field(
        default="bm25,hybrid",
        metadata={"help": "first stages re-ranked at --other-depth on the other collections"},
    )
    suite: bool = field(
        default=False, metadata={"help": "the out-of-domain suite: every collection and first stage, top 20"}
    )
    other_depth: int = field(default=20, metadata={"help": "candidates re-ranked on the other collections"})
    max_queries: int = field(default=0, metadata={"help": "first N test queries per collection (0 = all)"})
    batch_size: int = 32
    device: str = "auto"
    torch_threads: int = field(default=1, metadata={"help": "CPU threads for torch (0 = torch's default)"})
    rerank_backend: str = field(
        default="torch", metadata={"help": "cross-encoder backend: torch, onnx or onnx-int8"}
    )
    output: str = field(default="", metadata={"help": f"default <model>/{EVALUATION_FILE}"})
    scores_dir: str = field(
        default="",
        metadata={"help": "keep each query's scores here (resumable, shareable; '' = keep nothing)"},
    )
    update_metrics: bool = field(
        default=True, metadata={"help": "also add the nDCG@10 rows to <model>/metrics.json"}
    )


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

    for kind in comma_list(args.fusion_first_stages) + comma_list(args.other_first_stages):
        if kind not in FIRST_STAGES:
            raise CtxirError(
                f"first stage {kind!r} (--fusion-first-stages / --other-first-stages) is not known: "
                f"use {', '.join(FIRST_STAGES)}, comma-separated"
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
