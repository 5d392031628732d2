"""Fine-tune a bi-encoder (SentenceTransformer) with sentence-transformers' trainer, losses and evaluators.

Tasks (--task) and objectives (--objective): scifact mnrl|contrastive, stsb and sick cosent|cosine, nli softmax|mnrl.

    python training/train_bi_encoder.py --task stsb --epochs 4 --output-dir outputs/bi-stsb
    python training/train_bi_encoder.py --task stsb --max-steps 2 --max-samples 16   # smoke run
Outputs in --output-dir: the model, metrics.json, training_log.jsonl, train.log, checkpoints/ while training.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

if __package__ in (None, ""):  # `python training/train_bi_encoder.py` from the repo root
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sentence_transformers import SentenceTransformerTrainingArguments

from ctxir import kinds
from ctxir.encoders.lengths import set_max_length
from ctxir.encoders.models import resolve_model
from ctxir.types import CtxirError
from training.bi_encoder_data import BUILDERS, DATA_NAMES, similarity_evaluator
from training.common import (
    TrainerRunArgs,
    arg,
    check_common_args,
    cli_main,
    run_config,
)
from training.steps import (
    Run,
    Scores,
    check_data,
    dev_record,
    evaluation_rows,
    trainer_arguments,
    write_run_metrics,
)

OBJECTIVES = {
    "scifact": ("mnrl", "contrastive"),
    "stsb": ("cosent", "cosine"),
    "sick": ("cosent", "cosine"),
    "nli": ("softmax", "mnrl"),
}
# published figures and what they cover: an anchor stands beside a row only on the same queries
ANCHORS = {
    ("scifact", "nDCG@10"): {
        "value": 0.665,
        "name": "BEIR BM25",
        "source": "Thakur et al. 2021 (BEIR), Table 2",
        "queries": 300,
    },
    ("stsb", "spearman"): {
        "value": 0.8535,
        "name": "SBERT-NLI-STSb-base",
        "source": "Reimers & Gurevych 2019, Sentence-BERT (EMNLP-IJCNLP), Table 2: STS-B test, Spearman",
        "queries": 1379,
    },
}


@dataclass
class BiEncoderArgs(TrainerRunArgs, SentenceTransformerTrainingArguments):
    task: Literal["scifact", "stsb", "sick", "nli"] = arg("stsb", "training data: scifact, stsb, sick, nli")
    objective: Literal["auto", "mnrl", "contrastive", "cosent", "cosine", "softmax"] = arg(
        "auto", "loss; auto = the task's default (see the module docstring)"
    )
    output_dir: str = arg("", "default outputs/bi-encoder-<task>-<objective>")
    num_negatives: int = arg(1, "mnrl on scifact: mined hard negatives per pair")
    mining_relative_margin: float = arg(0.05, "drop candidates scoring within this fraction of the positive")
    mining_cache: str = arg("", "folder caching mining embeddings (default ~/.cache/ctxir/mining; 'none')")
    dev_queries: int = arg(50, "scifact: training queries held out for the dev evaluator (0 = none)")
    dev_corpus_size: int = arg(1000, "scifact dev: judged docs + random others up to N (0 = full corpus)")
    eval_corpus_size: int = arg(0, "scifact test: 0 = full corpus; N = judged docs + random others")
    eval_max_queries: int = arg(0, "scifact test: first N queries (0 = all)")


# ---------------------------------------------------------------- loss & evaluation


def build_loss(objective: str, model, num_labels: int = 3):
    from sentence_transformers.sentence_transformer import losses

    if objective == "mnrl":
        return losses.MultipleNegativesRankingLoss(model)
    if objective == "contrastive":
        return losses.OnlineContrastiveLoss(model)
    if objective == "cosent":
        return losses.CoSENTLoss(model)
    if objective == "cosine":
        return losses.CosineSimilarityLoss(model)
    # SBERT's classification objective: softmax over (u, v, |u−v|).
    return losses.SoftmaxLoss(
        model, embedding_dimension=model.get_embedding_dimension(), num_labels=num_labels
    )


def evaluate(model, test: dict, batch_size: int, model_id: str) -> Scores:
    """{(dataset, split, metric): value} on the test splits; ``model_id`` names ``model``'s weights on disk
    (its Hub id or folder), so ctxir's embedding cache is shared with ``ctxir evaluate --model ID``."""
    scores: Scores = {}
    for name, pairs in test.get("sts", {}).items():
        result = similarity_evaluator(pairs, f"{name}-test", batch_size)(model)
        scores[(name, "test", "spearman")] = float(result[f"{name}-test_spearman_cosine"])
        scores[(name, "test", "pearson")] = float(result[f"{name}-test_pearson_cosine"])
    if "retrieval" in test:
        from ctxir.encoders import BiEncoder
        from ctxir.evaluation import evaluate_run
        from ctxir.retrieval import DenseRetriever
        from ctxir.types import run_from_hits

        corpus, queries, qrels = test["retrieval"]
        # ctxir's cache is keyed by the name and a fingerprint of the weights: the trained model never reuses
        # old vectors, and the starting model reuses those of an earlier `ctxir.evaluate` run.
        encoder = BiEncoder(model, batch_size=batch_size)
        encoder.name = model_id
        hits = DenseRetriever(corpus, encoder, index="exact", show_progress=True).search(queries, 100)
        aggregate = evaluate_run(qrels, run_from_hits(hits)).aggregate
        for metric in ("nDCG@10", "MRR@10", "Recall@100"):
            scores[("scifact", "test", metric)] = float(aggregate[metric])
    return scores


def describe_tests(test: dict, subsampled: bool, eval_max_queries: int) -> tuple[dict, dict]:
    """({dataset: (task, config text)}, {dataset: what its figures cover}) of the test rows: SciFact's queries (the
    first --eval-max-queries, when set), STS-B's pairs."""
    tasks = {name: ("sts", f"cosine similarity, {len(p)} pairs") for name, p in test.get("sts", {}).items()}
    coverage = {name: {"queries": len(pairs)} for name, pairs in test.get("sts", {}).items()}
    if "retrieval" in test:
        corpus, queries, _ = test["retrieval"]
        sample = " (SUBSAMPLED corpus)" if subsampled else ""
        tasks["scifact"] = (
            "retrieval",
            f"dense exact search, {len(corpus)} documents{sample}, {len(queries)} queries",
        )
        subset = f"the first {len(queries)} SciFact test queries (--eval-max-queries)"
        coverage["scifact"] = {
            "queries": len(queries),
            **({"subset": subset} if eval_max_queries > 0 else {}),
        }
    return tasks, coverage


# ---------------------------------------------------------------- run


def resolve_objective(args: BiEncoderArgs) -> str:
    allowed = OBJECTIVES[args.task]
    if args.objective == "auto":
        return allowed[0]
    if args.objective not in allowed:
        raise CtxirError(
            f"--objective {args.objective!r} does not fit --task {args.task!r}: use one of "
            f"{', '.join(allowed)} (or auto)"
        )
    return args.objective


def load(args: BiEncoderArgs, device: str):
    """The starting SentenceTransformer, --max-length applied (0 = the model's own, capped at its positions)."""
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(resolve_model(args.model), device=device)
    set_max_length(model, args.max_length, name="--max-length")
    return model


def run(args: BiEncoderArgs) -> dict:
    """Train one bi-encoder; returns the metrics.json record (empty on non-main processes)."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.base.sampler import BatchSamplers
    from sentence_transformers.sentence_transformer.trainer import SentenceTransformerTrainer

    # 0. check the arguments and the data before anything heavy is loaded; the run's folder and log
    args.objective = resolve_objective(args)
    check_common_args(args)
    check_data(args.data_dir, DATA_NAMES[args.task])
    out = Path(args.output_dir or f"outputs/bi-encoder-{args.task}-{args.objective}")
    config, resume = run_config(args), args.resume_from_checkpoint
    with Run(out, "train_bi_encoder", config, resume, args.run_device, args.torch_threads) as run:
        device = run.device
        # 1. load the model
        model = load(args, device)
        # 2. load the data
        data = BUILDERS[args.task](args, model)
        print(f"training rows: {len(data.train)}, columns {data.train.column_names}")
        # 3. loss
        loss = build_loss(args.objective, model)
        # 4. evaluator: the dev one during training, and the starting model's scores
        batch = args.per_device_train_batch_size
        before = evaluate(model, data.test, batch, args.model) if args.eval_before else {}
        print(f"before training: {before}")
        dev = data.dev_evaluator
        dev_before = dev(model) if dev is not None and args.eval_before else {}
        # 5. train (in-batch negatives must not include a copy of the positive)
        sampler = BatchSamplers.NO_DUPLICATES if args.objective == "mnrl" else BatchSamplers.BATCH_SAMPLER
        evaluator = dev if args.eval_steps > 0 else None
        settings = trainer_arguments(
            SentenceTransformerTrainingArguments,
            args,
            out,
            device,
            evaluator,
            batch_sampler=sampler,
            dataloader_drop_last=False,
        )
        trainer = run.train(SentenceTransformerTrainer, settings, model, data.train, loss, evaluator)
        if not trainer.is_world_process_zero():
            return {}
        # 6. save, then reload from disk as every user will
        model.save_pretrained(str(out))
        run.saved(args.keep_checkpoints)
        trained = SentenceTransformer(str(out), device=device)
        # 7. evaluate the trained model
        after = evaluate(trained, data.test, batch, str(out))
        dev_after = dev(trained) if dev is not None else {}
        print(f"after training: {after}")
        # 8. metrics.json
        tests = describe_tests(data.test, args.eval_corpus_size > 0, args.eval_max_queries)
        return write_run_metrics(
            out,
            args,
            model_type=kinds.BI_ENCODER,
            objective=type(loss).__name__,
            datasets=data.datasets,
            training=run.training(trainer, len(data.train)),
            evaluations=evaluation_rows(before, after, *tests, ANCHORS),
            extra={
                **data.extra,
                **dev_record(trainer, dev_before, dev_after),
                "max_length": trained.max_seq_length,
                "max_seq_length": trained.max_seq_length,
            },
        )


def main(argv: list[str] | None = None) -> int:
    return cli_main(BiEncoderArgs, run, argv)


if __name__ == "__main__":
    sys.exit(main())
