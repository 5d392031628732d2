"""Train a cross-encoder (re-ranker or STS scorer) with sentence-transformers' CrossEncoderTrainer.

Tasks:
    scifact  BinaryCrossEntropyLoss on (claim, cited abstract, 1) + (claim, hard negative, 0); negatives are
             the top non-relevant BM25 hits (ctxir's BM25Retriever, the same first stage it re-ranks) and/or
             bi-encoder neighbours from sentence-transformers' mine_hard_negatives (--negatives bm25|dense|both).
             Evaluated as a re-ranker of BM25's top --rerank-depth on SciFact test (nDCG@10, MRR@10) through
             ctxir's Pipeline + pytrec_eval; CrossEncoderRerankingEvaluator on held-out training queries.
    stsb     regression on STS-B train scores / 5: BinaryCrossEntropyLoss with soft labels (SBERT's recipe)
             or MSELoss (--loss mse); CrossEncoderCorrelationEvaluator (Spearman) on dev and test.

The offline default start is the BERT body of the packaged all-MiniLM-L6-v2 with a fresh one-logit head.

Examples:
    python training/train_cross_encoder.py --task scifact --num-negatives 4 --epochs 1 --rerank-depth 100
    python training/train_cross_encoder.py --task stsb --epochs 2 --output-dir outputs/ce-stsb
    python training/train_cross_encoder.py --task stsb --max-steps 2 --max-samples 16   # smoke run
    torchrun --nproc_per_node 4 training/train_cross_encoder.py --task scifact --device cuda --batch-size 64
Outputs in --output-dir: the model (loads with CrossEncoder(path), ctxir.encoders.models.load_cross_encoder and
``ctxir evaluate --rerank cross-encoder --reranker-model DIR``), metrics.json, training_log.jsonl,
train.log, checkpoints/ while training (kept with --keep-checkpoints; --resume last continues from them).

This file builds the model, its loss and its test figures, and runs the trainer (``run``). The rest lives beside it:
``training/cross_encoder_args.py`` (the flags), ``training/cross_encoder_data.py`` (what a run trains on: pairs,
negatives from the app's first stages, general-domain questions, windows) and ``training/cross_encoder_dev.py`` (the
dev evaluators its best step is chosen by).
"""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):  # `python training/train_cross_encoder.py` from the repo root
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sentence_transformers.cross_encoder import CrossEncoderTrainingArguments

from ctxir import kinds
from ctxir.encoders.lengths import set_max_length
from ctxir.encoders.models import (
    ADAPTER_CONFIG,
    load_cross_encoder,
    resolve_model,
)
from ctxir.files import read_json, write_json
from ctxir.rerank.passages import Passages
from ctxir.types import CtxirError
from training.common import (
    cli_main,
)
from training.cross_encoder_args import CrossEncoderArgs
from training.cross_encoder_data import LISTWISE, build_scifact, build_stsb, negative_stages
from training.runner import ModelSpec, Scores, TaskData, train

LOSSES = {"scifact": ("bce", "lambda", "listnet"), "stsb": ("bce", "mse")}
LOSS_NAMES = {
    "bce": "BinaryCrossEntropyLoss",
    "mse": "MSELoss",
    "lambda": "LambdaLoss",
    "listnet": "ListNetLoss",
}
# LoRA on every linear layer of each BERT block; the pooler and the fresh classifier are trained in full (tiny).
LORA_TARGETS = ["query", "key", "value", "dense"]
LORA_FULL_MODULES = ["classifier", "pooler"]
# the segment-cosine head's weights (module 1 of the chain) in the loss model's parameter names
HEAD_PARAMETERS = r"(^|\.)1\.(scale|bias|linear\.)"
# its term-match term (--term-match): the term-importance read-out and the kernels' linear read-out
# and --importance-pooling's mix (a bare parameter: no dot after its name)
MATCH_PARAMETERS = r"(^|\.)1\.(term_weight\.|term_linear\.|pool_mix$)"
# published figures and what they cover: an anchor stands beside a row only on the same queries and depth
ANCHORS = {
    ("scifact", "nDCG@10"): {
        "value": 0.688,
        "name": "BEIR BM25 + cross-encoder (ms-marco-MiniLM-L6)",
        "source": "Thakur et al. 2021 (BEIR), Table 2",
        "queries": 300,
        "first_stage": "bm25",
        "depth": 100,
    },
    ("stsb", "spearman"): {
        "value": 0.8833,
        "name": "BERT-NLI-STSb-base cross-encoder",
        "source": "Reimers & Gurevych 2019, Sentence-BERT (EMNLP-IJCNLP), Table 2: STS-B test, Spearman",
        "queries": 1379,
    },
}


# ---------------------------------------------------------------- evaluation


def evaluate(model, data: TaskData, args: CrossEncoderArgs, model_id: str = "") -> Scores:
    """{(dataset, split, metric): value} on the test split; SciFact through ctxir's Pipeline and pytrec_eval."""
    scores: Scores = {}
    if "sts" in data.test:
        from sentence_transformers.cross_encoder.evaluation import CrossEncoderCorrelationEvaluator

        test = data.test["sts"]
        result = CrossEncoderCorrelationEvaluator(
            [[a, b] for a, b, _ in test],
            [s for _, _, s in test],
            name="stsb-test",
            batch_size=args.per_device_train_batch_size,
            write_csv=False,
        )(model)
        scores[("stsb", "test", "spearman")] = float(result["stsb-test_spearman"])
        scores[("stsb", "test", "pearson")] = float(result["stsb-test_pearson"])
    if "rerank" in data.test:
        from ctxir.evaluation import evaluate_run
        from ctxir.rerank import CrossEncoderReranker
        from ctxir.rerank.pipeline import Pipeline

        _, queries, qrels, bm25 = data.test["rerank"]
        passages = Passages() if args.train_passages == "best" else None  # scored as it was trained
        runs = Pipeline(
            bm25,
            CrossEncoderReranker(model, batch_size=args.per_device_train_batch_size, passages=passages),
            depth=args.rerank_depth,
        ).run(queries)
        aggregate = evaluate_run(qrels, runs["rerank"]).aggregate
        for metric in ("nDCG@10", "MRR@10"):
            scores[("scifact", "test", metric)] = float(aggregate[metric])
        # BM25 alone on the same queries; Recall@depth bounds what any re-ranker of its top-depth can find.
        first = evaluate_run(qrels, runs["first_stage"], k_values=(10, args.rerank_depth)).aggregate
        data.extra["first_stage"] = {
            "retriever": kinds.BM25,
            "depth": args.rerank_depth,
            "test": {
                m: round(float(first[m]), 4) for m in ("nDCG@10", "MRR@10", f"Recall@{args.rerank_depth}")
            },
        }
    return scores


def coverage(name: str, data: TaskData, args: CrossEncoderArgs) -> dict:
    """What a test row covers: SciFact's re-ranked queries (the first --eval-max-queries, when set), STS-B's pairs."""
    if name != "scifact":
        return {"queries": len(data.test["sts"])}
    n = len(data.test["rerank"][1])
    subset = (
        {
            "subset": f"the first {n} SciFact test queries in file order (--eval-max-queries {args.eval_max_queries})"
        }
        if args.eval_max_queries > 0
        else {}
    )
    return {"queries": n, "first_stage": "bm25", "depth": args.rerank_depth, **subset}


def describe(name: str, data: TaskData, args: CrossEncoderArgs) -> tuple[str, str]:
    if name == "scifact":
        return "reranking", f"rerank BM25 top-{args.rerank_depth}, {len(data.test['rerank'][1])} queries"
    return "sts", f"cross-encoder score, {len(data.test['sts'])} pairs"


# ---------------------------------------------------------------- the model kind


def build_loss(args: CrossEncoderArgs, model, data: TaskData):
    import torch
    from sentence_transformers.cross_encoder import losses

    if args.loss == "mse":
        return losses.MSELoss(model)
    if args.loss == "lambda":
        return losses.LambdaLoss(model)
    if args.loss == "listnet":
        return losses.ListNetLoss(model)
    # pos_weight balances the few positives against the many negatives (SBERT's recommended setting).
    pos_weight = data.loss_options.get("pos_weight")
    return losses.BinaryCrossEntropyLoss(model, pos_weight=torch.tensor(pos_weight) if pos_weight else None)


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


def load(args: CrossEncoderArgs, device: str):
    from sentence_transformers import CrossEncoder

    path = resolve_model(args.model)
    if args.head == "segment-cosine":
        model = load_segment_cosine(args, path, device)
    elif args.head == "mean":
        from sentence_transformers.base.modules import Dense, Transformer
        from sentence_transformers.sentence_transformer.modules import Pooling

        body = Transformer(path, transformer_task="feature-extraction")
        hidden = body.model.config.hidden_size
        model = CrossEncoder(
            modules=[
                body,
                Pooling(hidden, "mean"),
                Dense(hidden, 1, activation_function=None, module_output_name="scores"),
            ],
            device=device,
        )
    else:  # a body without a classifier (a bi-encoder, plain BERT) gets a fresh one-logit head
        model = CrossEncoder(path, num_labels=1, device=device)
    # ctxir's one rule: 0 = the model's own limit, else that many tokens, never beyond its position embeddings
    set_max_length(model, args.max_length, name="--max-length")
    if args.lora_r > 0:
        from peft import LoraConfig

        # the mean head's Dense sits outside the transformer and trains in full anyway
        model.add_adapter(
            LoraConfig(
                r=args.lora_r,
                lora_alpha=args.lora_alpha or 2 * args.lora_r,
                lora_dropout=0.1,
                target_modules=LORA_TARGETS,
                modules_to_save=LORA_FULL_MODULES if args.head == "cls" else None,
            )
        )
    return model


def load_segment_cosine(args: CrossEncoderArgs, path: str, device: str):
    """A fresh segment-cosine cross-encoder over --model's body, or (from a ctxir cross-encoder folder, e.g. the
    shipped one) that model itself, to continue training it: each stage resumes from the last shipped weights."""
    import torch
    from sentence_transformers import CrossEncoder

    from ctxir.encoders.heads import SegmentCosineHead, TopLayersTransformer
    from ctxir.names import TOP_LAYERS_CONFIG

    if (Path(path) / TOP_LAYERS_CONFIG).is_file():
        model = load_cross_encoder.__wrapped__(path, device)
        body, base = model[0], model[0].base_model
    else:
        body, base = TopLayersTransformer(path, transformer_task="feature-extraction"), args.model
        body.model.config.num_labels = (
            1  # CrossEncoder.num_labels reads the body's config: one score per pair
        )
        model = CrossEncoder(
            modules=[body, SegmentCosineHead(body.model.config.hidden_size)],
            device=device,
            activation_fn=torch.nn.Identity(),
        )
    if args.term_match:
        model[1].add_term_match()
    if args.importance_pooling:
        model[1].add_importance_pooling()
    layers = body.model.config.num_hidden_layers
    if args.train_layers > layers:
        raise CtxirError(f"--train-layers {args.train_layers!r} exceeds the body's {layers} layers")
    body.freeze_below(layers - args.train_layers if args.train_layers else 0, base)
    if not args.train_layers:  # every layer trains: the embeddings too
        for parameter in body.model.parameters():
            parameter.requires_grad = True
    return model


def save(model, out: Path, args: CrossEncoderArgs) -> None:
    from ctxir.encoders.heads import save_cross_encoder

    save_cross_encoder(model, out)  # in place over an earlier run's model: marked unfinished until complete
    if args.lora_r > 0:
        name_adapter_base(out, args.model)


def _trainer_classes():
    from sentence_transformers.cross_encoder.trainer import CrossEncoderTrainer

    return CrossEncoderTrainingArguments, CrossEncoderTrainer


SPEC = ModelSpec(
    model_type=kinds.CROSS_ENCODER,
    script="train_cross_encoder",
    default_output=lambda args: f"outputs/cross-encoder-{args.task}",
    data_names=lambda args: [args.task],
    check=check,
    load=load,
    build_data=lambda args, model, device: (
        build_scifact(args, device) if args.task == "scifact" else build_stsb(args)
    ),
    build_loss=build_loss,
    evaluate=evaluate,
    describe=describe,
    save=save,
    # uncached: a folder trained again in the same process must not come back as the earlier model
    reload=lambda out, device: load_cross_encoder.__wrapped__(str(out), device),
    objective_name=lambda args: LOSS_NAMES[args.loss],
    trainer_classes=_trainer_classes,
    anchors=ANCHORS,
    coverage=coverage,
    extra=lambda args, model, data: {
        "pos_weight": data.loss_options.get("pos_weight"),
        "lora_r": args.lora_r,
        "trained_parameters": trained_parameters(model),
    },
    training_options=lambda args: head_learning_rates(args),
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


def trained_parameters(model) -> int:
    """Parameters the run trained: a top-layers body's trained layers + its head, else every parameter."""
    from ctxir.encoders.heads import TopLayersTransformer, layer_of

    body = model[0] if hasattr(model, "__getitem__") else None
    if not isinstance(body, TopLayersTransformer):
        return sum(p.numel() for p in model.parameters())
    top = sum(
        p.numel()
        for n, p in body.model.named_parameters()
        if layer_of(n) is not None and layer_of(n) >= body.trained_from
    )
    return top + sum(p.numel() for m in list(model)[1:] for p in m.parameters())


def run(args: CrossEncoderArgs) -> dict:
    return train(args, SPEC)


def name_adapter_base(folder: Path, base: str) -> None:
    """Record the base by the name it was given (a Hub id), not the local folder it resolved to here.

    The adapter then loads on any machine: from the Hub, or offline from the packaged MiniLM (ctxir.encoders.models).
    """
    path = folder / ADAPTER_CONFIG
    config = read_json(path)
    config["base_model_name_or_path"] = base
    write_json(path, config)


def main(argv: list[str] | None = None) -> int:
    return cli_main(CrossEncoderArgs, run, argv)


if __name__ == "__main__":
    sys.exit(main())
