"""Train the sentence-pair (STS) cross-encoder: a LoRA adapter + ctxir's segment-cosine head over all-MiniLM-L6-v2.

One joint pass reads ``[CLS] a [SEP] b [SEP]``; the head scores scale · cos(mean tokens of a, mean tokens of b) +
bias + a zero-initialised linear term (``ctxir.encoders.heads.SegmentCosineHead``). A mean-pooling bi-encoder body
already makes that cosine a similarity, so training starts near the bi-encoder, and a LoRA adapter (PEFT) keeps
what is saved small enough to ship inside ctxir (``training/ship.py --pair-scorer``): the adapter, the head's
1,155 weights and the tokenizer, a few MB, over the packaged all-MiniLM-L6-v2 (resolved offline by ctxir.encoders.models).

Why its own script: ``train_cross_encoder.py --head segment-cosine`` builds a ``TopLayersTransformer`` body, whose
saved form is the trained layers themselves, not an adapter; here the body is a plain ``Transformer`` so PEFT's
``add_adapter`` and ``save_pretrained`` write an adapter that ``ctxir.encoders.models.load_cross_encoder`` merges back in.
Data, evaluators, test evaluation and metrics.json are train_cross_encoder.py's (task stsb) and the shared runner's.

Settings are chosen on STS-B dev (the in-training evaluator and ``dev_after`` in metrics.json); test is only reported.

    python training/train_pair_scorer.py --output-dir outputs/sts-lora --torch-threads 1
    python training/train_pair_scorer.py --max-steps 2 --max-samples 16 --output-dir outputs/sts-smoke  # smoke run
    python -m training.silver_pairs --teacher outputs/bi-encoder-stsb-cosent --output outputs/silver-stsb.csv
    python training/train_pair_scorer.py --extra-train silver --silver-pairs outputs/silver-stsb.csv \
        --learning-rate 5e-4 --epochs 1 --lora-r 16 --output-dir outputs/sts-silver   # gold + silver pairs
Outputs in --output-dir: the adapter folder (loads with ``ctxir.encoders.models.load_cross_encoder(DIR)``), metrics.json,
training_log.jsonl, train.log.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

import torch
from sentence_transformers.cross_encoder import CrossEncoderTrainingArguments, losses
from sentence_transformers.cross_encoder.evaluation import CrossEncoderCorrelationEvaluator
from sentence_transformers.util import batch_to_device

if __package__ in (None, ""):  # `python training/train_pair_scorer.py` from the repo root
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ctxir.encoders.models import DEFAULT_BI_ENCODER, load_cross_encoder, resolve_model
from ctxir.names import PAIR_ORDERS_FILE
from ctxir.rerank.rankers import pair_scores
from ctxir.types import CtxirError
from training.common import TrainerRunArgs, cli_main, trainer_setting
from training.runner import train
from training.train_cross_encoder import LORA_TARGETS, SPEC, name_adapter_base

# the head's three kinds of weights in the (PEFT-wrapped) model's parameter names: module 1 of the chain
HEAD_PARAMETERS = r"(^|\.)1\.(scale|bias|linear\.)"
ADAPTER_WEIGHTS = "adapter_model.safetensors"


@dataclass
class PairScorerArgs(TrainerRunArgs, CrossEncoderTrainingArguments):
    model: str = field(
        default=DEFAULT_BI_ENCODER,
        metadata={
            "help": "body: a mean-pooling bi-encoder (Hub id, resolved offline for all-MiniLM-L6-v2); the adapter "
            "names it as its base"
        },
    )
    lora_r: int = field(
        default=8, metadata={"help": "LoRA rank (≥ 1) on every linear layer of each BERT block"}
    )
    lora_alpha: float = field(default=0.0, metadata={"help": "LoRA scaling alpha (0 = 2 × --lora-r)"})
    lora_dropout: float = 0.1
    adapter_dtype: Literal["float32", "float16"] = field(
        default="float16",
        metadata={
            "help": "dtype the adapter weights are saved in; float16 halves the shipped size (the reloaded model, in "
            "float16-rounded weights, is the one evaluated)"
        },
    )
    loss: Literal["mse", "bce", "cosent"] = field(
        default="mse",
        metadata={
            "help": "mse: the raw score regresses gold / 5 (the head starts at score = cosine); bce: soft-label "
            "BinaryCrossEntropyLoss on the logit (SBERT's cross-encoder recipe); cosent: CoSENT's pairwise "
            "ranking of the batch's scores (what STS's Spearman rewards; the fine-tuned bi-encoder's loss), "
            "applied to the pair scores (CoSENTPairLoss)"
        },
    )
    cosent_scale: float = field(
        default=20.0,
        metadata={
            "help": "--loss cosent: multiplies score differences (CoSENT's 20 for cosines; the head starts at cosine)"
        },
    )
    init_scale: float = field(
        default=1.0,
        metadata={
            "help": "the head's starting scale on the cosine (1 fits --loss mse: score = cosine ≈ gold / 5)"
        },
    )
    init_bias: float = field(default=0.0, metadata={"help": "the head's starting bias"})
    head_learning_rate: float = field(
        default=1e-3,
        metadata={
            "help": "learning rate of the head's weights (scale, bias, linear term); 0 = --learning-rate"
        },
    )
    output_dir: str = field(default="", metadata={"help": "default outputs/pair-scorer-stsb"})
    num_train_epochs: float = trainer_setting("num_train_epochs", 2.0)
    max_samples: int = field(
        default=-1, metadata={"help": "use N STS-B train pairs, seeded (-1 = all 5,749)"}
    )
    per_device_train_batch_size: int = trainer_setting("per_device_train_batch_size", 16)
    learning_rate: float = trainer_setting("learning_rate", 2e-4, "LoRA weights' learning rate")
    max_length: int = field(default=128, metadata={"help": "tokens per (a, b) input; STS-B pairs are short"})
    eval_before: bool = field(
        default=True, metadata={"help": "also evaluate the untrained start (the cosine)"}
    )
    eval_steps: int = trainer_setting(
        "eval_steps", 0, "run the STS-B dev evaluator every N steps (0 = never)"
    )
    task: str = field(default="stsb", metadata={"help": "stsb (the only task: STS-B train, dev, test)"})
    extra_train: Literal["none", "sick", "silver"] = field(
        default="none",
        metadata={
            "help": "more pairs trained on beside STS-B train: sick = SICK's train split (4,439 pairs), relatedness "
            "1–5 mapped to 0–1 like STS-B's 0–5; silver = --silver-pairs, STS-B train sentences paired and "
            "labelled by a teacher bi-encoder (training/silver_pairs.py); dev and test stay STS-B's (5,749 "
            "STS-B pairs alone are few for learning to compare two sentences in one pass)"
        },
    )
    silver_pairs: str = field(
        default="",
        metadata={
            "help": "--extra-train silver: the CSV training/silver_pairs.py wrote (sentence1, sentence2, score 0–1)"
        },
    )
    both_orders: bool = field(
        default=False,
        metadata={
            "help": "train every pair in both orders, (a, b) and (b, a), with the same label, as sentence-transformers' "
            "STS-B cross-encoder example does: one joint pass reads a and b differently, similarity does not"
        },
    )
    pair_orders: Literal["one", "both"] = field(
        default="one",
        metadata={
            "help": "how a pair is scored, in dev evaluation (and so --load-best), test and by ctxir once saved "
            "(pair_orders.json): one = (a, b) as given; both = the mean of (a, b) and (b, a) "
            "(ctxir.rerank.rankers.pair_scores); metrics.json's extra.dev_orders has the trained model's dev "
            "Spearman both ways, to choose on"
        },
    )
    init_from: str = field(
        default="",
        metadata={
            "help": "a pair scorer to continue from (its adapter and head; e.g. the shipped "
            "ctxir/assets/models/sts-cross-encoder, so a new stage needs no git-ignored outputs/): its LoRA "
            "rank replaces --lora-r; '' = a fresh adapter (B = 0) and head"
        },
    )


# ---------------------------------------------------------------- the model kind


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


def load(args: PairScorerArgs, device: str):
    """Plain Transformer body (so PEFT saves an adapter) → SegmentCosineHead, raw scores; LoRA added."""
    import torch
    from peft import LoraConfig
    from sentence_transformers import CrossEncoder
    from sentence_transformers.base.modules import Transformer

    from ctxir.encoders.heads import SegmentCosineHead

    body = Transformer(resolve_model(args.model), transformer_task="feature-extraction")
    body.model.config.num_labels = 1  # CrossEncoder.num_labels reads the body's config: one score per pair
    head = SegmentCosineHead(body.model.config.hidden_size, init_scale=args.init_scale)
    with torch.no_grad():
        head.bias.fill_(args.init_bias)
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
                lora_dropout=args.lora_dropout,
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
    """The adapter (in --adapter-dtype), the head, tokenizer and configs, pair_orders.json; the base named by its
    Hub id."""
    from ctxir.files import write_json

    model.save_pretrained(str(out))
    name_adapter_base(out, args.model)
    write_json(out / PAIR_ORDERS_FILE, {"orders": args.pair_orders})
    if args.adapter_dtype == "float16":
        from safetensors.torch import load_file, save_file

        path = out / ADAPTER_WEIGHTS
        # PEFT copies saved weights into the model's own dtype when it loads them, so float16 costs no code
        save_file(
            {k: v.half().contiguous() for k, v in load_file(str(path)).items()},
            str(path),
            metadata={"format": "pt"},
        )


def build_data(args: PairScorerArgs, model, device: str):
    """STS-B train (+ SICK train with --extra-train sick), STS-B dev evaluator and test: train_cross_encoder's."""
    from datasets import Dataset, concatenate_datasets

    from ctxir.data import load_sick
    from training.common import data_folder, dataset_entry
    from training.cross_encoder_data import build_stsb

    data = build_stsb(args)
    if args.extra_train == "sick":
        folder = data_folder(args.data_dir, "sick")
        pairs = load_sick(folder, "train")
        sick = Dataset.from_dict(
            {
                "sentence1": [p.sentence_a for p in pairs],
                "sentence2": [p.sentence_b for p in pairs],
                "score": [(p.relatedness - 1.0) / 4.0 for p in pairs],
            }
        )  # 1–5 → 0–1
        data.train = concatenate_datasets([data.train, sick.cast(data.train.features)])
        data.datasets.insert(1, dataset_entry("sick", "train", "train", folder, len(pairs)))
    elif args.extra_train == "silver":
        silver = Dataset.from_csv(args.silver_pairs).cast(
            data.train.features
        )  # sentence1, sentence2, score 0–1
        data.train = concatenate_datasets([data.train, silver])
        # STS-B train's own sentences: STS-B's licence
        data.datasets.insert(
            1, dataset_entry("stsb", "train-silver", "train", args.silver_pairs, len(silver))
        )
    if args.both_orders:
        data.train = concatenate_datasets([data.train, swapped(data.train)])
    dev = data.dev_evaluator
    data.dev_evaluator = PairCorrelationEvaluator(
        dev.sentence_pairs,
        dev.scores,
        name=dev.name,
        batch_size=dev.batch_size,
        write_csv=False,
        both_orders=args.pair_orders == "both",
    )
    if args.init_from:
        data.datasets[1:1] = earlier_training_data(Path(args.init_from), data.datasets)
    return data


class PairCorrelationEvaluator(CrossEncoderCorrelationEvaluator):
    """sentence-transformers' Pearson/Spearman evaluator, scoring each pair as ctxir will once the model is saved:
    ``both_orders`` = the mean of (a, b) and (b, a) (``ctxir.rerank.rankers.pair_scores``, pair_orders.json)."""

    def __init__(self, *args, both_orders: bool = False, **kwargs):
        super().__init__(*args, **kwargs)
        self.both_orders = both_orders

    def __call__(
        self, model, output_path: str | None = None, epoch: int = -1, steps: int = -1
    ) -> dict[str, float]:
        from scipy.stats import pearsonr, spearmanr

        def predict(pairs):
            return model.predict(
                pairs,
                prompt_name=self.prompt_name,
                batch_size=self.batch_size,
                convert_to_numpy=True,
                show_progress_bar=self.show_progress_bar,
            )

        predicted = pair_scores(predict, self.sentence_pairs, self.both_orders)  # (pairs,)
        metrics = self.prefix_name_to_metrics(
            {
                "pearson": float(pearsonr(self.scores, predicted)[0]),
                "spearman": float(spearmanr(self.scores, predicted)[0]),
            },
            self.name,
        )
        self.store_metrics_in_model_card_data(model, metrics, epoch, steps)
        return metrics


def evaluate(model, data, args: PairScorerArgs, model_id: str = "") -> dict:
    """STS-B test Spearman and Pearson, each pair scored as --pair-orders says."""
    test = data.test["sts"]
    result = PairCorrelationEvaluator(
        [[a, b] for a, b, _ in test],
        [s for _, _, s in test],
        name="stsb-test",
        batch_size=args.per_device_train_batch_size,
        write_csv=False,
        both_orders=args.pair_orders == "both",
    )(model)
    return {("stsb", "test", metric): result[f"stsb-test_{metric}"] for metric in ("spearman", "pearson")}


def dev_orders(model, data) -> dict[str, float]:
    """{"one": dev Spearman of (a, b) as given, "both": of the mean of both orders}: what --pair-orders is chosen on."""
    dev = data.dev_evaluator
    return {
        orders: round(
            PairCorrelationEvaluator(
                dev.sentence_pairs,
                dev.scores,
                name=dev.name,
                batch_size=dev.batch_size,
                write_csv=False,
                both_orders=orders == "both",
            )(model)[f"{dev.name}_spearman"],
            4,
        )
        for orders in ("one", "both")
    }


def swapped(pairs):
    """The same pairs with sentence1 and sentence2 exchanged (labels unchanged)."""
    return pairs.rename_columns({"sentence1": "sentence2", "sentence2": "sentence1"}).select_columns(
        pairs.column_names
    )


def earlier_training_data(folder: Path, datasets: list[dict]) -> list[dict]:
    """The training data of the model ``--init-from`` continues (its metrics.json), not already in ``datasets``, each
    marked ``"stage": "earlier"``: the model learned from them too, so its card lists them and their licences."""
    from ctxir.files import read_json

    seen = {(d["name"], d["split"]) for d in datasets if d["role"] == "train"}
    earlier = [
        d for d in (read_json(folder / "metrics.json") or {}).get("datasets", []) if d.get("role") == "train"
    ]
    return [{**d, "stage": "earlier"} for d in earlier if (d["name"], d["split"]) not in seen]


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


def build_loss(args: PairScorerArgs, model, data):
    if args.loss == "cosent":
        return CoSENTPairLoss(model, scale=args.cosent_scale)
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


def trained_parameters(args: PairScorerArgs, model) -> int:
    """Weights the run trained: the saved adapter's + the head's (the reloaded model has the adapter merged)."""
    import math

    from safetensors import safe_open

    out = Path(args.output_dir or SPEC_PAIR.default_output(args))
    with safe_open(str(out / ADAPTER_WEIGHTS), "pt") as adapter:
        lora = sum(math.prod(adapter.get_slice(name).get_shape()) for name in adapter.keys())  # noqa: SIM118 (safe_open is not iterable)
    return lora + sum(p.numel() for p in model[1].parameters())


SPEC_PAIR = replace(
    SPEC,
    script="train_pair_scorer",
    default_output=lambda args: "outputs/pair-scorer-stsb",
    data_names=lambda args: ["stsb"] + (["sick"] if args.extra_train == "sick" else []),
    check=check,
    load=load,
    save=save,
    build_data=build_data,
    build_loss=build_loss,
    evaluate=evaluate,
    # uncached: a folder trained again in the same process must not come back as the earlier model
    reload=lambda out, device: load_cross_encoder.__wrapped__(str(out), device),
    objective_name=lambda args: {
        "mse": "MSELoss",
        "bce": "BinaryCrossEntropyLoss",
        "cosent": "CoSENTPairLoss",
    }[args.loss],
    training_options=lambda args: (
        {"learning_rate_mapping": {HEAD_PARAMETERS: args.head_learning_rate}}
        if args.head_learning_rate
        else {}
    ),
    extra=lambda args, model, data: {
        "lora_r": args.lora_r,
        "head": "segment-cosine",
        "extra_train": args.extra_train,
        "both_orders": args.both_orders,
        "pair_orders": args.pair_orders,
        "dev_orders": dev_orders(model, data),
        **({"init_from": args.init_from} if args.init_from else {}),
        **({"silver_pairs": args.silver_pairs} if args.silver_pairs else {}),
        "adapter_dtype": args.adapter_dtype,
        "trained_parameters": trained_parameters(args, model),
    },
)


def run(args: PairScorerArgs) -> dict:
    """0. check args · 1. load body + head + LoRA · 2. STS-B data + dev evaluator · 3. evaluate the start ·
    4. train · 5. save the adapter, reload it as users do · 6. evaluate on STS-B test · 7. metrics.json
    (the shared runner's steps, training/runner.py)."""
    return train(args, SPEC_PAIR)


def main(argv: list[str] | None = None) -> int:
    return cli_main(PairScorerArgs, run, argv)


if __name__ == "__main__":
    sys.exit(main())
