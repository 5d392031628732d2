"""Train the STS pair scorer: a LoRA adapter + ctxir's segment-cosine head over all-MiniLM-L6-v2 (PEFT needs a
plain ``Transformer`` body, so not train_cross_encoder's top layers).

    python training/train_pair_scorer.py --output-dir outputs/sts-lora --torch-threads 1
    python training/train_pair_scorer.py --max-steps 2 --max-samples 16 --output-dir outputs/sts-smoke  # smoke run
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import torch
from sentence_transformers.cross_encoder import CrossEncoderTrainingArguments, losses

if __package__ in (None, ""):  # `python training/train_pair_scorer.py` from the repo root
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ctxir import kinds
from ctxir.cli import flag
from ctxir.encoders.lengths import set_max_length
from ctxir.encoders.models import ADAPTER_CONFIG, DEFAULT_BI_ENCODER, load_cross_encoder, resolve_model
from ctxir.files import read_json, write_json
from ctxir.names import PAIR_ORDERS_FILE
from ctxir.types import CtxirError
from training.common import (
    TrainerRunArgs,
    check_common_args,
    cli_main,
    data_folder,
    run_config,
    trainer_setting,
)
from training.cross_encoder_args import HEAD_PARAMETERS
from training.cross_encoder_data import build_pair_scorer_data, dev_orders, sts_test
from training.steps import Run, dev_record, evaluation_rows, trainer_arguments, write_run_metrics

ADAPTER_WEIGHTS = "adapter_model.safetensors"
LORA_TARGETS = ["query", "key", "value", "dense"]  # every linear layer of each BERT block
HEAD_FOLDER = "1_SegmentCosineHead"
ANCHORS = {
    ("stsb", "spearman"): {
        "value": 0.8833,
        "name": "BERT-NLI-STSb-base cross-encoder",
        "source": "Reimers & Gurevych 2019, Sentence-BERT (EMNLP-IJCNLP), Table 2: STS-B test, Spearman",
        "queries": 1379,
    },
}


@dataclass
class PairScorerArgs(TrainerRunArgs, CrossEncoderTrainingArguments):
    model: str = flag(
        DEFAULT_BI_ENCODER, "body: a mean-pooling bi-encoder (Hub id or folder), the adapter's base"
    )
    lora_r: int = flag(8, "LoRA rank (≥ 1) on every linear layer of each BERT block")
    lora_alpha: float = flag(0.0, "LoRA scaling alpha (0 = 2 × --lora-r)")
    head_learning_rate: float = flag(1e-3, "learning rate of the head's weights (0 = --learning-rate)")
    output_dir: str = flag("", "default outputs/pair-scorer-stsb")
    num_train_epochs: float = trainer_setting("num_train_epochs", 2.0)
    max_samples: int = flag(-1, "use N STS-B train pairs, seeded (-1 = all 5,749)")
    per_device_train_batch_size: int = trainer_setting("per_device_train_batch_size", 16)
    learning_rate: float = trainer_setting("learning_rate", 2e-4, "LoRA weights' learning rate")
    max_length: int = flag(128, "tokens per (a, b) input; STS-B pairs are short")
    eval_before: bool = flag(True, "also evaluate the untrained start (the cosine)")
    eval_steps: int = trainer_setting(
        "eval_steps", 0, "run the STS-B dev evaluator every N steps (0 = never)"
    )
    extra_train: Literal["none", "silver"] = flag(
        "none", "more training pairs beside STS-B train: silver (--silver-pairs)"
    )
    silver_pairs: str = flag("", "--extra-train silver: the CSV training/silver_pairs.py wrote")
    both_orders: bool = flag(False, "train every pair in both orders, (a, b) and (b, a)")
    pair_orders: Literal["one", "both"] = flag(
        "one", "how a pair is scored (pair_orders.json): one = (a, b); both = the mean of both orders"
    )
    init_from: str = flag("", "a pair scorer to continue from (its adapter, rank and head; '' = fresh)")


def check(args: PairScorerArgs) -> None:
    if args.lora_r < 1:
        raise CtxirError(
            f"--lora-r must be a rank ≥ 1, got {args.lora_r!r}: the pair scorer ships as an adapter "
            "(e.g. --lora-r 16)"
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
    folder = Path(args.init_from)
    if args.init_from and not ((folder / ADAPTER_WEIGHTS).is_file() and (folder / HEAD_FOLDER).is_dir()):
        raise CtxirError(
            f"--init-from {args.init_from!r} holds no {ADAPTER_WEIGHTS} and {HEAD_FOLDER}/: pass a folder this "
            "script wrote, or the shipped pair scorer ctxir/assets/models/sts-cross-encoder"
        )


def load(args: PairScorerArgs, device: str):
    """Plain Transformer body (so PEFT saves an adapter) → SegmentCosineHead, raw scores; LoRA added."""
    from peft import LoraConfig
    from sentence_transformers import CrossEncoder
    from sentence_transformers.base.modules import Transformer

    from ctxir.encoders.heads import SegmentCosineHead

    body = Transformer(resolve_model(args.model), transformer_task="feature-extraction")
    body.model.config.num_labels = 1  # CrossEncoder.num_labels reads the body's config: one score per pair
    head = SegmentCosineHead(body.model.config.hidden_size, init_scale=1.0)
    model = CrossEncoder(modules=[body, head], device=device, activation_fn=torch.nn.Identity())
    set_max_length(model, args.max_length, name="--max-length")  # never beyond the body's position embeddings
    # --init-from: continue that pair scorer, its adapter trainable (own rank, alpha, targets) and its head
    if args.init_from:
        folder = args.init_from
        model[1] = SegmentCosineHead.load(folder, subfolder=HEAD_FOLDER).to(model.device)  # its config wins
        model[0].model.load_adapter(folder, adapter_name="default", is_trainable=True)
        # the folder names its base by Hub id; --load-best reloads checkpoints by that name: name the local base
        model[0].model.peft_config["default"].base_model_name_or_path = resolve_model(args.model)
        config = read_json(Path(folder) / "adapter_config.json")  # metrics.json records what was trained
        args.lora_r = int(config.get("r", args.lora_r))
        args.lora_alpha = float(config.get("lora_alpha", args.lora_alpha))
    else:
        alpha = args.lora_alpha or 2 * args.lora_r
        model.add_adapter(
            LoraConfig(r=args.lora_r, lora_alpha=alpha, lora_dropout=0.1, target_modules=LORA_TARGETS)
        )
    # PEFT freezes everything but the adapter; the head lies outside the transformer and trains in full
    for parameter in model[1].parameters():
        parameter.requires_grad = True
    return model


def name_adapter_base(folder: Path, base: str) -> None:
    """Name the adapter's base by the name it was given (a Hub id), not the local folder: it loads anywhere."""
    path = folder / ADAPTER_CONFIG
    write_json(path, {**read_json(path), "base_model_name_or_path": base})


def run(args: PairScorerArgs) -> dict:
    """Train one pair scorer; returns the metrics.json record (empty on non-main processes)."""
    from safetensors.torch import load_file, save_file
    from sentence_transformers.cross_encoder.trainer import CrossEncoderTrainer

    # 0. check the arguments and the data before anything heavy is loaded; the run's folder and log
    check_common_args(args)
    check(args)
    data_folder(args.data_dir, "stsb")
    out = Path(args.output_dir or "outputs/pair-scorer-stsb")
    config, resume = run_config(args), args.resume_from_checkpoint
    with Run(out, "train_pair_scorer", config, resume, args.run_device, args.torch_threads) as run:
        device = run.device
        # 1. load the model: body + segment-cosine head + LoRA
        model = load(args, device)
        # 2. load the data: STS-B (+ --extra-train) pairs, the STS-B dev evaluator and test
        data = build_pair_scorer_data(args)
        print(f"training rows: {len(data.train)}, columns {data.train.column_names}")
        # 3. the loss: the raw score (activation Identity) regresses gold / 5
        loss = losses.MSELoss(model)
        # 4. evaluator: the dev one during training, and the starting model's scores
        both, batch = args.pair_orders == "both", args.per_device_train_batch_size
        before = sts_test(model, data.test["sts"], batch, both) if args.eval_before else {}
        print(f"before training: {before}")
        dev = data.dev_evaluator
        dev_before = dev(model) if args.eval_before else {}
        # 5. train (the head's own learning rate, when given)
        evaluator = dev if args.eval_steps > 0 else None
        head_rate = {HEAD_PARAMETERS: args.head_learning_rate}
        options = {"learning_rate_mapping": head_rate} if args.head_learning_rate else {}
        settings = trainer_arguments(CrossEncoderTrainingArguments, args, out, device, evaluator, **options)
        trainer = run.train(CrossEncoderTrainer, settings, model, data.train, loss, evaluator)
        if not trainer.is_world_process_zero():
            return {}
        # 6. save the adapter in float16 (PEFT loads saved weights in the model's own dtype), the head, pair_orders.json;
        # then reload it as users do: uncached, so a folder trained again in one process is not the earlier model
        model.save_pretrained(str(out))
        name_adapter_base(out, args.model)
        write_json(out / PAIR_ORDERS_FILE, {"orders": args.pair_orders})
        adapter = {k: v.half().contiguous() for k, v in load_file(str(out / ADAPTER_WEIGHTS)).items()}
        save_file(adapter, str(out / ADAPTER_WEIGHTS), metadata={"format": "pt"})
        run.saved(args.keep_checkpoints)
        trained = load_cross_encoder.__wrapped__(str(out), device)
        # 7. evaluate the trained model on STS-B test
        after = sts_test(trained, data.test["sts"], batch, both)
        dev_after = dev(trained)
        print(f"after training: {after}")
        # 8. metrics.json
        n = len(data.test["sts"])
        tasks, coverage = {"stsb": ("sts", f"cross-encoder score, {n} pairs")}, {"stsb": {"queries": n}}
        return write_run_metrics(
            out,
            args,
            model_type=kinds.CROSS_ENCODER,
            objective=type(loss).__name__,
            datasets=data.datasets,
            training=run.training(trainer, len(data.train)),
            evaluations=evaluation_rows(before, after, tasks, coverage, ANCHORS),
            extra={
                **data.extra,
                **dev_record(trainer, dev_before, dev_after),
                "max_length": trained.max_seq_length,
                "lora_r": args.lora_r,
                "head": "segment-cosine",
                "extra_train": args.extra_train,
                "both_orders": args.both_orders,
                "pair_orders": args.pair_orders,
                "dev_orders": dev_orders(trained, dev),
                **({"init_from": args.init_from} if args.init_from else {}),
                **({"silver_pairs": args.silver_pairs} if args.silver_pairs else {}),
                "adapter_dtype": "float16",
                # the reloaded model has the adapter merged: the saved adapter's weights + the head's
                "trained_parameters": sum(v.numel() for v in adapter.values())
                + sum(p.numel() for p in trained[1].parameters()),
            },
        )


def main(argv: list[str] | None = None) -> int:
    return cli_main(PairScorerArgs, run, argv)


if __name__ == "__main__":
    sys.exit(main())
