"""The arguments of training/train_pair_scorer.py (CrossEncoderTrainingArguments + TrainerRunArgs) and their checks."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from sentence_transformers.cross_encoder import CrossEncoderTrainingArguments

from ctxir.encoders.models import DEFAULT_BI_ENCODER
from ctxir.types import CtxirError
from training.common import TrainerRunArgs, arg, trainer_setting

# the head's three kinds of weights in the (PEFT-wrapped) model's parameter names: module 1 of the chain
HEAD_PARAMETERS = r"(^|\.)1\.(scale|bias|linear\.)"
ADAPTER_WEIGHTS = "adapter_model.safetensors"


@dataclass
class PairScorerArgs(TrainerRunArgs, CrossEncoderTrainingArguments):
    model: str = arg(
        DEFAULT_BI_ENCODER, "body: a mean-pooling bi-encoder (Hub id or folder), the adapter's base"
    )
    lora_r: int = arg(8, "LoRA rank (≥ 1) on every linear layer of each BERT block")
    lora_alpha: float = arg(0.0, "LoRA scaling alpha (0 = 2 × --lora-r)")
    loss: Literal["mse", "bce", "cosent"] = arg(
        "mse", "mse: score regresses gold / 5; bce: soft labels; cosent: CoSENT on the scores"
    )
    init_scale: float = arg(1.0, "the head's starting scale on the cosine (1 fits --loss mse)")
    head_learning_rate: float = arg(1e-3, "learning rate of the head's weights (0 = --learning-rate)")
    output_dir: str = arg("", "default outputs/pair-scorer-stsb")
    num_train_epochs: float = trainer_setting("num_train_epochs", 2.0)
    max_samples: int = arg(-1, "use N STS-B train pairs, seeded (-1 = all 5,749)")
    per_device_train_batch_size: int = trainer_setting("per_device_train_batch_size", 16)
    learning_rate: float = trainer_setting("learning_rate", 2e-4, "LoRA weights' learning rate")
    max_length: int = arg(128, "tokens per (a, b) input; STS-B pairs are short")
    eval_before: bool = arg(True, "also evaluate the untrained start (the cosine)")
    eval_steps: int = trainer_setting(
        "eval_steps", 0, "run the STS-B dev evaluator every N steps (0 = never)"
    )
    task: str = arg("stsb", "stsb (the only task: STS-B train, dev, test)")
    extra_train: Literal["none", "sick", "silver"] = arg(
        "none", "more training pairs beside STS-B train: sick (SICK train), silver (--silver-pairs)"
    )
    silver_pairs: str = arg("", "--extra-train silver: the CSV training/silver_pairs.py wrote")
    both_orders: bool = arg(False, "train every pair in both orders, (a, b) and (b, a)")
    pair_orders: Literal["one", "both"] = arg(
        "one", "how a pair is scored (pair_orders.json): one = (a, b); both = the mean of both orders"
    )
    init_from: str = arg("", "a pair scorer to continue from (its adapter, rank and head; '' = fresh)")


def check(args: PairScorerArgs) -> None:
    if args.task != "stsb":
        raise CtxirError(
            f"--task {args.task!r} is not known here: use 'stsb' (re-rankers train with "
            "train_cross_encoder.py)"
        )
    if args.lora_r < 1:
        raise CtxirError(
            f"--lora-r must be a rank ≥ 1, got {args.lora_r!r}: the pair scorer ships as an adapter "
            "(full fine-tuning is train_cross_encoder.py --task stsb)"
        )
    if (args.extra_train == "silver") != bool(args.silver_pairs):
        raise CtxirError(
            f"--extra-train {args.extra_train!r} with --silver-pairs {args.silver_pairs!r}: the silver "
            "pairs are read with --extra-train silver and only then; make them with "
            "python -m training.silver_pairs --teacher BI_ENCODER --output FILE"
        )
    if args.silver_pairs and not Path(args.silver_pairs).is_file():
        raise CtxirError(
            f"--silver-pairs {args.silver_pairs!r} is not a file: make it with "
            "python -m training.silver_pairs --teacher BI_ENCODER --output FILE"
        )
    if args.init_from and not (Path(args.init_from) / ADAPTER_WEIGHTS).is_file():
        raise CtxirError(
            f"--init-from {args.init_from!r} holds no {ADAPTER_WEIGHTS}: pass a folder this script "
            "wrote, or the shipped pair scorer ctxir/assets/models/sts-cross-encoder"
        )
    if args.init_scale == 0:
        raise CtxirError(
            "--init-scale 0 would start the head at a constant score with no gradient to the "
            "cosine: use e.g. 1 (--loss mse) or 8 (--loss bce)"
        )
