"""Train the STS pair scorer: a LoRA adapter + ctxir's segment-cosine head over all-MiniLM-L6-v2 (PEFT needs a
plain ``Transformer`` body, so not train_cross_encoder's top layers).

    python training/train_pair_scorer.py --output-dir outputs/sts-lora --torch-threads 1
    python training/train_pair_scorer.py --max-steps 2 --max-samples 16 --output-dir outputs/sts-smoke  # smoke run
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from sentence_transformers.cross_encoder import CrossEncoderTrainingArguments, losses
from sentence_transformers.util import batch_to_device

if __package__ in (None, ""):  # `python training/train_pair_scorer.py` from the repo root
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ctxir import kinds
from ctxir.encoders.models import load_cross_encoder, resolve_model
from ctxir.names import PAIR_ORDERS_FILE
from ctxir.types import CtxirError
from training.common import check_common_args, cli_main, run_config
from training.cross_encoder_data import build_pair_scorer_data
from training.cross_encoder_dev import PairCorrelationEvaluator, dev_orders
from training.pair_scorer_args import ADAPTER_WEIGHTS, HEAD_PARAMETERS, PairScorerArgs, check
from training.steps import (
    Run,
    check_data,
    dev_record,
    evaluation_rows,
    trainer_arguments,
    write_run_metrics,
)
from training.train_cross_encoder import ANCHORS, LORA_TARGETS, name_adapter_base


def load(args: PairScorerArgs, device: str):
    """Plain Transformer body (so PEFT saves an adapter) → SegmentCosineHead, raw scores; LoRA added."""
    from peft import LoraConfig
    from sentence_transformers import CrossEncoder
    from sentence_transformers.base.modules import Transformer

    from ctxir.encoders.heads import SegmentCosineHead

    body = Transformer(resolve_model(args.model), transformer_task="feature-extraction")
    body.model.config.num_labels = 1  # CrossEncoder.num_labels reads the body's config: one score per pair
    head = SegmentCosineHead(body.model.config.hidden_size, init_scale=args.init_scale)
    model = CrossEncoder(modules=[body, head], device=device, activation_fn=torch.nn.Identity())
    # Never beyond the position embeddings the body was trained with.
    model.max_seq_length = min(args.max_length, model.model.config.max_position_embeddings)
    if args.init_from:
        continue_from(model, Path(args.init_from), args)
    else:
        model.add_adapter(
            LoraConfig(
                r=args.lora_r,
                lora_alpha=args.lora_alpha or 2 * args.lora_r,
                lora_dropout=0.1,
                target_modules=LORA_TARGETS,
            )
        )
    # PEFT freezes everything but the adapter; the head lies outside the transformer and trains in full
    for parameter in model[1].parameters():
        parameter.requires_grad = True
    return model


def continue_from(model, folder: Path, args: PairScorerArgs) -> None:
    """The adapter of ``folder`` loaded trainable (its own rank, alpha and targets) and its head's weights copied
    in: training continues from that model rather than from the untrained cosine. ``args.lora_r`` is set to the
    loaded rank, so metrics.json records what was trained."""
    from ctxir.encoders.heads import SegmentCosineHead
    from ctxir.files import read_json

    config = read_json(folder / "adapter_config.json")
    head_folder = folder / "1_SegmentCosineHead"
    if not head_folder.is_dir():
        raise CtxirError(
            f"--init-from {str(folder)!r} has no 1_SegmentCosineHead folder: it is not a pair scorer "
            "written by training/train_pair_scorer.py"
        )
    # the saved head's config (term_match, hidden size) wins over this run's fresh head
    model[1] = SegmentCosineHead.load(str(folder), subfolder="1_SegmentCosineHead").to(model.device)
    model[0].model.load_adapter(str(folder), adapter_name="default", is_trainable=True)
    # the folder names its base by Hub id (name_adapter_base); checkpoints saved during training copy that name, and
    # --load-best reloads them through sentence-transformers, which would look for it online: name the local base
    model[0].model.peft_config["default"].base_model_name_or_path = resolve_model(args.model)
    args.lora_r = int(config.get("r", args.lora_r))
    args.lora_alpha = float(config.get("lora_alpha", args.lora_alpha))


def save(model, out: Path, args: PairScorerArgs) -> None:
    """The adapter (in float16), the head, tokenizer and configs, pair_orders.json; the base named by its Hub id."""
    from ctxir.files import write_json

    model.save_pretrained(str(out))
    name_adapter_base(out, args.model)
    write_json(out / PAIR_ORDERS_FILE, {"orders": args.pair_orders})
    from safetensors.torch import load_file, save_file

    # PEFT copies saved weights into the model's own dtype when it loads them, so float16 costs no code
    path = out / ADAPTER_WEIGHTS
    weights = {k: v.half().contiguous() for k, v in load_file(str(path)).items()}
    save_file(weights, str(path), metadata={"format": "pt"})


def evaluate(model, test: dict, batch_size: int, both_orders: bool) -> dict:
    """STS-B test Spearman and Pearson, each pair scored as --pair-orders says."""
    pairs = test["sts"]
    result = PairCorrelationEvaluator(
        [[a, b] for a, b, _ in pairs],
        [s for _, _, s in pairs],
        name="stsb-test",
        batch_size=batch_size,
        write_csv=False,
        both_orders=both_orders,
    )(model)
    return {("stsb", "test", metric): result[f"stsb-test_{metric}"] for metric in ("spearman", "pearson")}


def cosent_loss(scores, labels, scale: float = 20.0):
    """CoSENT (Su, 2022) over one batch: log(1 + Σ exp(scale · (s_j − s_i))) over the pairs with gold_i > gold_j.

    sentence-transformers' ``CoSENTLoss`` computes it from two embeddings' cosines; a cross-encoder has one score
    per pair, so this is the same sum over the scores. scores, labels: (batch,).

    >>> ordered = cosent_loss(torch.tensor([0.9, 0.1]), torch.tensor([1.0, 0.0]), 1.0)  # log(1 + e^-0.8)
    >>> round(float(ordered), 4), round(float(cosent_loss(torch.tensor([0.1, 0.9]), torch.tensor([1.0, 0.0]), 1.0)), 4)
    (0.3711, 1.1711)
    """
    differences = scale * (scores[None, :] - scores[:, None])  # (batch, batch): [i, j] = scale · (s_j − s_i)
    wrong_way = labels[:, None] > labels[None, :]  # only pairs whose gold says i above j
    terms = differences[wrong_way]
    return torch.logsumexp(torch.cat([terms.new_zeros(1), terms]), dim=0)  # log(1 + Σ exp(·)); 0 with no pair


def build_loss(args: PairScorerArgs, model):
    if args.loss == "cosent":
        return CoSENTPairLoss(model)
    # MSE on the raw score (activation Identity); BCE's logits are the raw score too
    return losses.MSELoss(model) if args.loss == "mse" else losses.BinaryCrossEntropyLoss(model)


class CoSENTPairLoss(losses.MSELoss):
    """sentence-transformers' MSELoss (its checks, its pair preprocessing) with ``cosent_loss`` as the objective."""

    def __init__(self, model, scale: float = 20.0):
        super().__init__(model)
        self.scale = float(scale)

    def forward(self, inputs, labels, prompt=None, task=None):
        if len(inputs) != 2:
            raise ValueError(f"CoSENTPairLoss expects two text columns (a, b), got {len(inputs)}")
        features = batch_to_device(
            self.model.preprocess(list(zip(inputs[0], inputs[1], strict=True)), prompt=prompt, task=task),
            self.model.device,
        )
        scores = self.model(features)["scores"].view(-1)  # (batch,)
        return cosent_loss(scores, labels.view(-1).float(), self.scale)

    def get_config_dict(self):
        return {"scale": self.scale}


def trained_parameters(out: Path, model) -> int:
    """Weights the run trained: the saved adapter's + the head's (the reloaded model has the adapter merged)."""
    import math

    from safetensors import safe_open

    with safe_open(str(out / ADAPTER_WEIGHTS), "pt") as adapter:
        lora = sum(math.prod(adapter.get_slice(name).get_shape()) for name in adapter.keys())  # noqa: SIM118 (safe_open is not iterable)
    return lora + sum(p.numel() for p in model[1].parameters())


def run(args: PairScorerArgs) -> dict:
    """Train one pair scorer; returns the metrics.json record (empty on non-main processes)."""
    from sentence_transformers.cross_encoder.trainer import CrossEncoderTrainer

    # 0. check the arguments and the data before anything heavy is loaded; the run's folder and log
    check_common_args(args)
    check(args)
    check_data(args.data_dir, ["stsb"] + (["sick"] if args.extra_train == "sick" else []))
    out = Path(args.output_dir or "outputs/pair-scorer-stsb")
    config, resume = run_config(args), args.resume_from_checkpoint
    with Run(out, "train_pair_scorer", config, resume, args.run_device, args.torch_threads) as run:
        device = run.device
        # 1. load the model: body + segment-cosine head + LoRA
        model = load(args, device)
        # 2. load the data: STS-B (+ --extra-train) pairs, the STS-B dev evaluator and test
        data = build_pair_scorer_data(args)
        print(f"training rows: {len(data.train)}, columns {data.train.column_names}")
        # 3. loss
        loss = build_loss(args, model)
        # 4. evaluator: the dev one during training, and the starting model's scores
        both = args.pair_orders == "both"
        batch = args.per_device_train_batch_size
        before = evaluate(model, data.test, batch, both) if args.eval_before else {}
        print(f"before training: {before}")
        dev = data.dev_evaluator
        dev_before = dev(model) if args.eval_before else {}
        # 5. train (the head's own learning rate, when given)
        evaluator = dev if args.eval_steps > 0 else None
        head_rate = {HEAD_PARAMETERS: args.head_learning_rate} if args.head_learning_rate else None
        options = {"learning_rate_mapping": head_rate} if head_rate else {}
        settings = trainer_arguments(CrossEncoderTrainingArguments, args, out, device, evaluator, **options)
        trainer = run.train(CrossEncoderTrainer, settings, model, data.train, loss, evaluator)
        if not trainer.is_world_process_zero():
            return {}
        # 6. save the adapter, then reload it as users do: uncached, so a folder trained again in one process is
        # not the earlier model
        save(model, out, args)
        run.saved(args.keep_checkpoints)
        trained = load_cross_encoder.__wrapped__(str(out), device)
        # 7. evaluate the trained model on STS-B test
        after = evaluate(trained, data.test, batch, both)
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
                "trained_parameters": trained_parameters(out, trained),
            },
        )


def main(argv: list[str] | None = None) -> int:
    return cli_main(PairScorerArgs, run, argv)


if __name__ == "__main__":
    sys.exit(main())
