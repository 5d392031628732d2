"""The arguments of training/train_cross_encoder.py, their checks and the head's per-parameter learning rates."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from sentence_transformers.cross_encoder import CrossEncoderTrainingArguments

from ctxir import kinds
from ctxir.cli import flag
from ctxir.encoders.models import DEFAULT_BI_ENCODER
from ctxir.types import CtxirError
from training.common import TrainerRunArgs, trainer_setting

NEGATIVE_STAGES = (kinds.BM25, kinds.HYBRID)  # --negative-stages: the app's first stages
HEAD_PARAMETERS = r"(^|\.)1\.(scale|bias|linear\.)"  # the segment-cosine head's weights (module 1)
# its --term-match read-outs and an importance-pooling head's mix (a bare parameter: no dot after its name)
MATCH_PARAMETERS = r"(^|\.)1\.(term_weight\.|term_linear\.)"


@dataclass
class CrossEncoderArgs(TrainerRunArgs, CrossEncoderTrainingArguments):
    task: Literal["scifact"] = flag("scifact", "scifact: a re-ranker of BM25's top hits")
    model: str = flag(DEFAULT_BI_ENCODER, "starting Hub id or folder; a plain body gets a one-logit head")
    loss: Literal["bce", "listnet"] = flag(
        "bce", "bce, or listnet: listwise over the positive and its negatives"
    )
    head: Literal["cls", "segment-cosine"] = flag(
        "cls", "cls = classifier on [CLS]; segment-cosine (ctxir.encoders.heads)"
    )
    train_layers: int = flag(0, "segment-cosine: train only the top N layers (+ head) (0 = all)")
    head_learning_rate: float = flag(0.0, "segment-cosine head's learning rate (0 = --learning-rate)")
    term_match: bool = flag(False, "segment-cosine: add the learned term-match term, zero-initialised")
    match_learning_rate: float = flag(0.0, "term-match weights' learning rate (0 = --head-learning-rate)")
    negative_rounds: int = flag(1, "listwise: N groups per query, negatives re-drawn from --negative-pool")
    negative_pool: int = flag(0, "draw negatives from this many top non-relevant hits (0 = --num-negatives)")
    num_dense_negatives: int = flag(-1, "--negatives both|dense: bi-encoder negatives (-1 = --num-negatives)")
    dev_split: Literal["random", "unseen"] = flag(
        "random", "dev claims: random, or unseen = claims whose abstracts no other claim cites"
    )
    pseudo_queries: int = flag(0, "also train on N corpus titles as queries for their abstract (-1 = all)")
    general: str = flag(
        "", "also train on <data-dir>/general/ sources: squad, wikiqa, msmarco, wikiqa-topics"
    )
    general_queries: int = flag(800, "--general: queries taken per source, seeded (-1 = all)")
    negative_stages: str = flag("bm25", "first stages whose non-relevant hits are negatives: bm25, hybrid")
    output_dir: str = flag("", "default outputs/cross-encoder-scifact")
    max_samples: int = flag(-1, "use N (claim, positive) training pairs, seeded (-1 = all)")
    per_device_train_batch_size: int = trainer_setting("per_device_train_batch_size", 16)
    max_length: int = flag(256, "tokens per (query, document) input (0 = the model's own)")
    negatives: Literal["bm25", "dense", "both"] = flag("bm25", "where hard negatives come from")
    num_negatives: int = flag(4, "hard negatives per claim (per source)")
    rerank_depth: int = flag(100, "test: BM25 candidates re-ranked per query")
    dev_queries: int = flag(50, "training queries held out for the dev evaluator (0 = none)")
    dev_depth: int = flag(20, "dev evaluator: BM25 candidates per query")
    eval_max_queries: int = flag(0, "test: first N queries (0 = all)")
    eval_before: bool = flag(True, "also evaluate the starting model")
    eval_steps: int = trainer_setting("eval_steps", 0, "run the dev evaluator every N steps (0 = never)")
    train_passages: Literal["first", "best"] = flag(
        "first", "what is read of a long abstract: first tokens, or best = its MaxP window"
    )


def check(args: CrossEncoderArgs) -> None:
    if args.num_negatives < 1 or args.rerank_depth < 1:
        raise CtxirError(
            f"--num-negatives and --rerank-depth must be ≥ 1, got {args.num_negatives!r} and "
            f"{args.rerank_depth!r}"
        )
    if args.train_layers < 0 or (args.train_layers and args.head != "segment-cosine"):
        raise CtxirError(
            f"--train-layers {args.train_layers!r}: use 0 (every layer), or N ≥ 1 with --head "
            "segment-cosine (only its body saves just the trained layers)"
        )
    if args.term_match and args.head != "segment-cosine":
        raise CtxirError(
            f"--term-match adds a term to the segment-cosine head: use it with --head segment-cosine, "
            f"not --head {args.head!r}"
        )
    if args.negative_rounds < 1 or args.negative_pool < 0:
        raise CtxirError(
            f"--negative-rounds must be ≥ 1 and --negative-pool ≥ 0, got {args.negative_rounds!r} and "
            f"{args.negative_pool!r}"
        )
    negative_stages(args.negative_stages)
    if args.general and args.loss != "listnet":
        raise CtxirError(
            f"--general {args.general!r} adds listwise groups beside SciFact's claims: use it with "
            "--loss listnet, or drop --general"
        )
    if (args.negative_rounds > 1 or args.negative_pool) and args.loss != "listnet":
        raise CtxirError(
            f"--negative-rounds/--negative-pool re-sample negatives per group: use the listwise --loss "
            f"listnet, not {args.loss!r}"
        )


def head_learning_rates(args: CrossEncoderArgs) -> dict:
    """The trainer's per-parameter learning rates: the head's (and its term-match term's) own, when given."""
    if args.head != "segment-cosine":
        return {}
    mapping = {}
    if args.head_learning_rate:
        mapping[HEAD_PARAMETERS] = args.head_learning_rate
    if args.term_match and (args.match_learning_rate or args.head_learning_rate):
        mapping[MATCH_PARAMETERS] = args.match_learning_rate or args.head_learning_rate
    return {"learning_rate_mapping": mapping} if mapping else {}


def negative_stages(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    for name in [n for n in names if n not in NEGATIVE_STAGES][:1]:
        raise CtxirError(
            f"--negative-stages names {name!r}: use a comma list of {', '.join(NEGATIVE_STAGES)}"
        )
    return names or [kinds.BM25]
