"""Train a SciFact re-ranker with sentence-transformers' CrossEncoderTrainer, tested re-ranking BM25's top
--rerank-depth.

    python training/train_cross_encoder.py --task scifact --num-negatives 4 --epochs 1 --rerank-depth 100
    python training/train_cross_encoder.py --max-steps 2 --max-samples 8 --rerank-depth 10   # smoke run
Outputs in --output-dir: the model, metrics.json, training_log.jsonl, train.log, checkpoints/ while training.
"""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):  # `python training/train_cross_encoder.py` from the repo root
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sentence_transformers.cross_encoder import CrossEncoderTrainingArguments

from ctxir import kinds
from ctxir.encoders.lengths import set_max_length
from ctxir.encoders.models import load_cross_encoder, resolve_model
from ctxir.rerank.passages import Passages
from ctxir.types import CtxirError
from training.common import check_common_args, cli_main, data_folder, run_config
from training.cross_encoder_args import CrossEncoderArgs, check, head_learning_rates
from training.cross_encoder_data import build_scifact
from training.steps import Run, dev_record, evaluation_rows, trainer_arguments, write_run_metrics

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
}


def evaluate(model, test: dict, batch_size: int, depth: int, passages: str) -> tuple[dict, dict]:
    """({(dataset, split, metric): value} on the test split, BM25's own figures there)."""
    from ctxir.evaluation import evaluate_run
    from ctxir.rerank import CrossEncoderReranker
    from ctxir.rerank.pipeline import Pipeline

    _, queries, qrels, bm25 = test["rerank"]
    reranker = CrossEncoderReranker(
        model, batch_size=batch_size, passages=Passages() if passages == "best" else None
    )
    runs = Pipeline(bm25, reranker, depth=depth).run(queries)
    aggregate = evaluate_run(qrels, runs["rerank"]).aggregate
    # BM25 alone on the same queries; Recall@depth bounds what any re-ranker of its top-depth can find.
    first = evaluate_run(qrels, runs["first_stage"], k_values=(10, depth)).aggregate
    bm25_alone = {m: round(float(first[m]), 4) for m in ("nDCG@10", "MRR@10", f"Recall@{depth}")}
    scores = {("scifact", "test", m): float(aggregate[m]) for m in ("nDCG@10", "MRR@10")}
    return scores, {"retriever": kinds.BM25, "depth": depth, "test": bm25_alone}


def load_segment_cosine(path: str, device: str, name: str, train_layers: int, term_match: bool):
    """A fresh segment-cosine cross-encoder over ``path``'s body, or ``path``'s own ctxir cross-encoder."""
    import torch
    from sentence_transformers import CrossEncoder

    from ctxir.encoders.heads import SegmentCosineHead, TopLayersTransformer
    from ctxir.names import TOP_LAYERS_CONFIG

    if (Path(path) / TOP_LAYERS_CONFIG).is_file():
        model = load_cross_encoder.__wrapped__(path, device)
        body, base = model[0], model[0].base_model
    else:
        body, base = TopLayersTransformer(path, transformer_task="feature-extraction"), name
        body.model.config.num_labels = 1  # CrossEncoder.num_labels reads the body's config
        model = CrossEncoder(
            modules=[body, SegmentCosineHead(body.model.config.hidden_size)],
            device=device,
            activation_fn=torch.nn.Identity(),
        )
    if term_match:
        model[1].add_term_match()
    layers = body.model.config.num_hidden_layers
    if train_layers > layers:
        raise CtxirError(f"--train-layers {train_layers!r} exceeds the body's {layers} layers")
    body.freeze_below(layers - train_layers if train_layers else 0, base)
    if not train_layers:  # every layer trains: the embeddings too
        for parameter in body.model.parameters():
            parameter.requires_grad = True
    return model


def trained_parameters(model) -> int:
    """Parameters the run trained: a top-layers body's trained layers + its head, else every parameter."""
    from ctxir.encoders.heads import TopLayersTransformer

    body = model[0]
    if not isinstance(body, TopLayersTransformer):
        return sum(p.numel() for p in model.parameters())
    trained = [p for n, p in body.model.named_parameters() if body._trained(n)]  # the layers it saves
    return sum(p.numel() for p in trained) + sum(p.numel() for m in list(model)[1:] for p in m.parameters())


def run(args: CrossEncoderArgs) -> dict:
    """Train one cross-encoder; returns the metrics.json record (empty on non-main processes)."""
    import torch
    from sentence_transformers import CrossEncoder
    from sentence_transformers.cross_encoder import losses
    from sentence_transformers.cross_encoder.trainer import CrossEncoderTrainer

    from ctxir.encoders.heads import save_cross_encoder

    # 0. check the arguments and the data before anything heavy is loaded; the run's folder and log
    check_common_args(args)
    check(args)
    data_folder(args.data_dir, "scifact")
    out = Path(args.output_dir or "outputs/cross-encoder-scifact")
    config, resume = run_config(args), args.resume_from_checkpoint
    with Run(out, "train_cross_encoder", config, resume, args.run_device, args.torch_threads) as run:
        device = run.device
        # 1. load the model: a segment-cosine or [CLS] head over the body
        path = resolve_model(args.model)
        if args.head == "segment-cosine":
            model = load_segment_cosine(path, device, args.model, args.train_layers, args.term_match)
        else:  # a body without a classifier (a bi-encoder, plain BERT) gets a fresh one-logit head
            model = CrossEncoder(path, num_labels=1, device=device)
        set_max_length(model, args.max_length, name="--max-length")  # 0 = the model's own limit
        # 2. load the data: SciFact claims with their negatives
        data = build_scifact(args, device)
        print(f"training rows: {len(data.train)}, columns {data.train.column_names}")
        # 3. the loss; BCE's pos_weight balances the few positives against the many negatives (SBERT's setting)
        if args.loss == "bce":
            loss = losses.BinaryCrossEntropyLoss(model, pos_weight=torch.tensor(data.extra["pos_weight"]))
        else:
            loss = losses.ListNetLoss(model)
        # 4. the evaluators: the dev one during training, and the starting model's scores
        batch, depth = args.per_device_train_batch_size, args.rerank_depth
        before = evaluate(model, data.test, batch, depth, args.train_passages)[0] if args.eval_before else {}
        print(f"before training: {before}")
        dev = data.dev_evaluator
        dev_before = dev(model) if dev is not None and args.eval_before else {}
        # 5. train (the head's own learning rates, when given)
        evaluator = dev if args.eval_steps > 0 else None
        options = head_learning_rates(args)
        settings = trainer_arguments(CrossEncoderTrainingArguments, args, out, device, evaluator, **options)
        trainer = run.train(CrossEncoderTrainer, settings, model, data.train, loss, evaluator)
        if not trainer.is_world_process_zero():
            return {}
        # 6. save (in place over an earlier run's model: marked unfinished until complete), then reload from disk
        # as every user will: uncached, so a folder trained again in one process is not the earlier model
        save_cross_encoder(model, out)
        run.saved(args.keep_checkpoints)
        trained = load_cross_encoder.__wrapped__(str(out), device)
        # 7. evaluate the trained model
        after, first_stage = evaluate(trained, data.test, batch, depth, args.train_passages)
        dev_after = dev(trained) if dev is not None else {}
        print(f"after training: {after}")
        # 8. metrics.json, with what each test covers
        n = len(data.test["rerank"][1])
        tasks = {"scifact": ("reranking", f"rerank BM25 top-{depth}, {n} queries")}
        coverage = {"scifact": {"queries": n, "first_stage": "bm25", "depth": depth}}
        if args.eval_max_queries > 0:
            subset = f"the first {n} SciFact test queries in file order"
            coverage["scifact"]["subset"] = f"{subset} (--eval-max-queries {args.eval_max_queries})"
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
                "first_stage": first_stage,
                **dev_record(trainer, dev_before, dev_after),
                "max_length": getattr(trained, "max_seq_length", None) or args.max_length,
                "trained_parameters": trained_parameters(trained),
            },
        )


def main(argv: list[str] | None = None) -> int:
    return cli_main(CrossEncoderArgs, run, argv)


if __name__ == "__main__":
    sys.exit(main())
