"""The arguments of training/train_cross_encoder.py (CrossEncoderTrainingArguments + TrainerRunArgs), their checks
and the head's per-parameter learning rates."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from sentence_transformers.cross_encoder import CrossEncoderTrainingArguments

from ctxir import kinds
from ctxir.encoders.models import DEFAULT_BI_ENCODER
from ctxir.types import CtxirError
from training.common import TrainerRunArgs, trainer_setting

LOSSES = {"scifact": ("bce", "lambda", "listnet"), "stsb": ("bce", "mse")}
NEGATIVE_STAGES = (kinds.BM25, kinds.HYBRID)  # --negative-stages: the app's first stages
LISTWISE = ("lambda", "listnet")  # one row = (query, [positive, negatives…], [1, 0, …])
# the segment-cosine head's weights (module 1 of the chain) in the loss model's parameter names
HEAD_PARAMETERS = r"(^|\.)1\.(scale|bias|linear\.)"
# its term-match term (--term-match): the term-importance read-out and the kernels' linear read-out
# and --importance-pooling's mix (a bare parameter: no dot after its name)
MATCH_PARAMETERS = r"(^|\.)1\.(term_weight\.|term_linear\.|pool_mix$)"


@dataclass
class CrossEncoderArgs(TrainerRunArgs, CrossEncoderTrainingArguments):
    task: Literal["scifact", "stsb"] = field(
        default="scifact", metadata={"help": "scifact re-ranker or stsb"}
    )
    model: str = field(
        default=DEFAULT_BI_ENCODER,
        metadata={
            "help": "starting model: Hub id or folder; a bi-encoder/plain BERT gets a fresh one-logit head"
        },
    )
    loss: Literal["auto", "bce", "mse", "lambda", "listnet"] = field(
        default="auto",
        metadata={
            "help": "auto = bce; scifact also lambda / listnet (listwise over the positive and its negatives)"
        },
    )
    head: Literal["cls", "mean", "segment-cosine"] = field(
        default="cls",
        metadata={
            "help": "cls = classifier on [CLS]; mean = linear score on the mean token; segment-cosine = scale · cos(query, document) + a linear term (ctxir.encoders.heads)"
        },
    )
    train_layers: int = field(
        default=0,
        metadata={
            "help": "segment-cosine: train only the top N layers (+ head), saved in float16 over --model (0 = all)"
        },
    )
    head_learning_rate: float = field(
        default=0.0,
        metadata={"help": "learning rate of the segment-cosine head's few weights (0 = --learning-rate)"},
    )
    term_match: bool = field(
        default=False,
        metadata={
            "help": "segment-cosine: add the learned term-match term (ctxir.encoders.heads), zero-initialised"
        },
    )
    importance_pooling: bool = field(
        default=False,
        metadata={
            "help": "segment-cosine with --term-match: also pool the query by term importance, mixed in from 0"
        },
    )
    match_learning_rate: float = field(
        default=0.0,
        metadata={"help": "--term-match: learning rate of the term-match weights (0 = --head-learning-rate)"},
    )
    negative_rounds: int = field(
        default=1,
        metadata={
            "help": "scifact listwise: N groups per query, negatives re-drawn from the top --negative-pool"
        },
    )
    negative_pool: int = field(
        default=0,
        metadata={
            "help": "scifact: draw the negatives from this many top non-relevant hits (0 = the top --num-negatives)"
        },
    )
    num_dense_negatives: int = field(
        default=-1,
        metadata={
            "help": "scifact --negatives both|dense: bi-encoder negatives per group (-1 = --num-negatives)"
        },
    )
    dev_split: Literal["random", "unseen"] = field(
        default="random",
        metadata={
            "help": "scifact dev claims: random = any training claims; unseen = claims whose abstracts no other claim cites"
        },
    )
    lora_r: int = field(
        default=0,
        metadata={
            "help": "0 = full fine-tuning; r > 0 = a LoRA adapter of rank r (PEFT), pooler and classifier trained in full"
        },
    )
    lora_alpha: float = field(default=0.0, metadata={"help": "LoRA scaling alpha (0 = 2 × --lora-r)"})
    pseudo_queries: int = field(
        default=0,
        metadata={
            "help": "scifact: also train on N corpus titles as queries for their abstract (-1 = every document)"
        },
    )
    teacher: Literal["none", "hybrid"] = field(
        default="none",
        metadata={
            "help": "scifact listwise labels: none = 1/0 judgements; hybrid = distil BM25 + --dense-model z-scores (MarginMSE-style)"
        },
    )
    teacher_scale: float = field(
        default=1.0,
        metadata={"help": "--teacher hybrid: multiplies the summed z-scores (larger = sharper)"},
    )
    gold_weight: float = field(
        default=2.0,
        metadata={
            "help": "--teacher hybrid: added to a judged positive's label (a claim's cited abstract, a title's own)"
        },
    )
    general: str = field(
        default="",
        metadata={
            "help": "scifact: also train on general-domain pairs from <data-dir>/general/: squad, wikiqa, msmarco, wikiqa-topics"
        },
    )
    general_queries: int = field(
        default=800, metadata={"help": "--general: queries taken per source, seeded (-1 = all)"}
    )
    negative_stages: str = field(
        default="bm25",
        metadata={
            "help": "scifact and --general: first stages whose top non-relevant hits are the negatives' pool (bm25, hybrid)"
        },
    )
    output_dir: str = field(default="", metadata={"help": "default outputs/cross-encoder-<task>"})
    max_samples: int = field(
        default=-1,
        metadata={
            "help": "use N training pairs, seeded (-1 = all); scifact: N (claim, positive) pairs, negatives added"
        },
    )
    per_device_train_batch_size: int = trainer_setting("per_device_train_batch_size", 16)
    max_length: int = field(
        default=256,
        metadata={
            "help": "tokens per (query, document) input (0 = the model's own; never beyond its position embeddings)"
        },
    )
    negatives: Literal["bm25", "dense", "both"] = field(
        default="bm25", metadata={"help": "scifact: where hard negatives come from"}
    )
    num_negatives: int = field(default=4, metadata={"help": "scifact: hard negatives per claim (per source)"})
    negatives_range_min: int = field(default=0, metadata={"help": "skip the N best non-relevant hits"})
    random_negatives: int = field(
        default=0,
        metadata={"help": "scifact: also N random corpus documents per query as negatives"},
    )
    dense_model: str = field(
        default=DEFAULT_BI_ENCODER, metadata={"help": "bi-encoder for --negatives dense"}
    )
    pos_weight: float = field(
        default=0.0, metadata={"help": "BCE weight of positives (0 = negatives/positives)"}
    )
    rerank_depth: int = field(
        default=100, metadata={"help": "scifact test: BM25 candidates re-ranked per query"}
    )
    dev_queries: int = field(
        default=50,
        metadata={
            "help": "scifact: training queries held out for the CrossEncoderRerankingEvaluator (0 = none)"
        },
    )
    dev_depth: int = field(default=20, metadata={"help": "scifact dev evaluator: BM25 candidates per query"})
    eval_max_queries: int = field(default=0, metadata={"help": "scifact test: first N queries (0 = all)"})
    eval_before: bool = field(
        default=True, metadata={"help": "also evaluate the starting model (a fresh head scores at random)"}
    )
    eval_steps: int = trainer_setting("eval_steps", 0, "run the dev evaluator every N steps (0 = never)")
    train_passages: Literal["first", "best"] = field(
        default="first",
        metadata={
            "help": "scifact: what is read of a long abstract: first = first tokens (FirstP); best = its MaxP window (ctxir.rerank.Passages)"
        },
    )


def check(args: CrossEncoderArgs) -> None:
    if args.loss == "auto":
        args.loss = "bce"
    if args.loss not in LOSSES[args.task]:
        raise CtxirError(
            f"--loss {args.loss!r} does not fit --task {args.task!r}: use one of "
            f"{', '.join(LOSSES[args.task])}"
        )
    if args.task == "scifact" and (args.num_negatives < 1 or args.rerank_depth < 1):
        raise CtxirError(
            f"--num-negatives and --rerank-depth must be ≥ 1, got {args.num_negatives!r} and "
            f"{args.rerank_depth!r}"
        )
    if args.lora_r < 0:
        raise CtxirError(f"--lora-r must be 0 (full fine-tuning) or a rank ≥ 1, got {args.lora_r!r}")
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
    if args.importance_pooling and not args.term_match:
        raise CtxirError(
            "--importance-pooling pools the query by the term-match term's importance: add --term-match true"
        )
    if args.train_layers and args.lora_r:
        raise CtxirError("--train-layers and --lora-r are two ways to ship a small model: pick one")
    if args.negative_rounds < 1 or args.negative_pool < 0:
        raise CtxirError(
            f"--negative-rounds must be ≥ 1 and --negative-pool ≥ 0, got {args.negative_rounds!r} and "
            f"{args.negative_pool!r}"
        )
    if args.teacher != "none" and (args.task != "scifact" or args.loss not in LISTWISE):
        raise CtxirError(
            f"--teacher {args.teacher!r} grades the documents of listwise groups: use it with --task "
            f"scifact and --loss {' or '.join(LISTWISE)}, or --teacher none"
        )
    negative_stages(args.negative_stages)
    if args.general and (args.task != "scifact" or args.loss not in LISTWISE):
        raise CtxirError(
            f"--general {args.general!r} adds listwise groups beside SciFact's claims: use it with --task "
            f"scifact and --loss {' or '.join(LISTWISE)}, or drop --general"
        )
    if (args.negative_rounds > 1 or args.negative_pool) and args.loss not in LISTWISE:
        raise CtxirError(
            f"--negative-rounds/--negative-pool re-sample negatives per group: use a listwise --loss "
            f"({', '.join(LISTWISE)}), not {args.loss!r}"
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
    for name in names:
        if name not in NEGATIVE_STAGES:
            raise CtxirError(
                f"--negative-stages names {name!r}: use a comma list of {', '.join(NEGATIVE_STAGES)}"
            )
    return names or [kinds.BM25]
