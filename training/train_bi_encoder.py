"""Fine-tune a bi-encoder (SentenceTransformer) with sentence-transformers' trainer, losses and evaluators.

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

from sentence_transformers import SentenceTransformer, SentenceTransformerTrainingArguments
from sentence_transformers.base.sampler import BatchSamplers
from sentence_transformers.sentence_transformer import losses
from sentence_transformers.sentence_transformer.evaluation import (
    EmbeddingSimilarityEvaluator,
    InformationRetrievalEvaluator,
)
from sentence_transformers.sentence_transformer.trainer import SentenceTransformerTrainer
from sentence_transformers.util import mine_hard_negatives

from ctxir import kinds
from ctxir.cli import flag
from ctxir.data import load_beir, load_sts
from ctxir.encoders.lengths import set_max_length
from ctxir.encoders.models import resolve_model
from ctxir.types import CtxirError, doc_text
from training import common, steps

MINING_RANGE, DEV_CORPUS_SIZE = 50, 1000  # scifact: the nearest documents mined; the dev evaluator's corpus
# each --objective: the --task it fits (a task's first is auto's) and its sentence-transformers loss
OBJECTIVES = {
    "mnrl": ("scifact", "MultipleNegativesRankingLoss"),
    "cosent": ("stsb", "CoSENTLoss"),
    "cosine": ("stsb", "CosineSimilarityLoss"),
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
class BiEncoderArgs(common.TrainerRunArgs, SentenceTransformerTrainingArguments):
    task: Literal["scifact", "stsb"] = flag("stsb", "training data: scifact or stsb")
    objective: Literal["auto", "mnrl", "cosent", "cosine"] = flag(
        "auto", "loss: mnrl (scifact), cosent or cosine (stsb); auto = the task's first"
    )
    output_dir: str = flag("", "default outputs/bi-encoder-<task>-<objective>")
    num_negatives: int = flag(1, "mnrl on scifact: mined hard negatives per pair")
    mining_relative_margin: float = flag(0.05, "drop candidates scoring within this fraction of the positive")
    mining_cache: str = flag("", "folder caching mining embeddings (default ~/.cache/ctxir/mining; 'none')")
    dev_queries: int = flag(50, "scifact: training queries held out for the dev evaluator (0 = none)")
    eval_max_queries: int = flag(0, "scifact test: first N queries (0 = all)")


def similarity_evaluator(pairs, name: str, batch_size: int):
    return EmbeddingSimilarityEvaluator(
        *([p[i] for p in pairs] for i in range(3)),
        batch_size=batch_size,
        name=name,
        main_similarity="cosine",
        write_csv=False,
    )


def build_sts_task(args: BiEncoderArgs, model) -> steps.TaskData:
    folder = common.data_folder(args.data_dir, "stsb")
    train, dev, test = (
        [(a, b, s / 5.0) for a, b, s in load_sts(folder, split)] for split in ("train", "dev", "test")
    )
    pairs = common.take_train(train, args.max_samples, args.seed, "stsb train pairs")
    rows = [
        common.dataset_entry("stsb", "train", "train", folder, len(pairs)),
        common.dataset_entry("stsb", "dev", "eval", folder, len(dev)),
        common.dataset_entry("stsb", "test", "eval", folder, len(test)),
    ]
    evaluator = similarity_evaluator(dev, "stsb-dev", args.per_device_train_batch_size)
    return steps.TaskData(
        common.columns(pairs, ["sentence1", "sentence2", "score"]), rows, evaluator, {"sts": test}
    )


def build_scifact_task(args: BiEncoderArgs, model) -> steps.TaskData:
    folder = common.data_folder(args.data_dir, "scifact")
    corpus, queries, qrels = load_beir(folder, "train")
    # SciFact has no dev split: hold out some training queries for the in-training evaluator.
    qids = sorted(queries)
    dev_ids = set(common.heldout_queries(qids, args.dev_queries, args.seed))
    judged = [
        (q, d) for q in qids if q not in dev_ids for d, s in sorted(qrels[q].items()) if s > 0 and d in corpus
    ]
    id_pairs = common.take_train(judged, args.max_samples, args.seed, "(claim, abstract) pairs")
    pairs = [(queries[q], doc_text(corpus[d])) for q, d in id_pairs]
    # mine hard negatives with the starting model over the whole corpus (its positives are excluded)
    fmt, num_negatives = ("triplet" if args.num_negatives == 1 else "n-tuple"), args.num_negatives
    if num_negatives > MINING_RANGE:
        raise CtxirError(
            f"--num-negatives {num_negatives} exceeds the {MINING_RANGE} nearest documents mined"
        )
    cache = args.mining_cache or str(Path.home() / ".cache" / "ctxir" / "mining")
    mined = mine_hard_negatives(
        common.columns(pairs, ["anchor", "positive"]),
        model,
        corpus=[doc_text(corpus[d]) for d in corpus],
        range_max=min(MINING_RANGE, len(corpus) - 1),
        relative_margin=args.mining_relative_margin or None,
        num_negatives=num_negatives,
        sampling_strategy="top",
        output_format=fmt,
        batch_size=args.per_device_train_batch_size,
        cache_folder=None if cache.lower() == "none" else cache,
        verbose=True,
    )
    common.check_not_empty(
        len(mined), "mining found no negative for any pair", "lower --mining-relative-margin"
    )
    dev_evaluator = None
    if dev_ids:
        dev_qrels = {q: {d for d, s in qrels[q].items() if s > 0} for q in dev_ids}
        keep = {d for docs in dev_qrels.values() for d in docs if d in corpus}  # + random others
        keep |= set(common.take(sorted(set(corpus) - keep), max(0, DEV_CORPUS_SIZE - len(keep)), args.seed))
        dev_evaluator = InformationRetrievalEvaluator(
            {q: queries[q] for q in sorted(dev_ids)},
            {d: doc_text(doc) for d, doc in corpus.items() if d in keep},
            dev_qrels,
            name="scifact-train-heldout",
            batch_size=args.per_device_train_batch_size,
            accuracy_at_k=[1, 10],
            precision_recall_at_k=[10, 100],
            write_csv=False,
        )
    test_queries, test_qrels = common.first_test_queries(folder, args.eval_max_queries)
    rows = [
        common.dataset_entry("scifact", "train", "train", folder, len(pairs)),
        common.dataset_entry("scifact", "test", "eval", folder, len(test_queries)),
    ]
    extra = {
        "pairs": len(pairs),
        "train_rows_after_mining": len(mined),
        "heldout_train_queries": len(dev_ids),
        "heldout_query_ids": sorted(dev_ids),
        "train_query_ids": sorted({q for q, _ in id_pairs}),
        "mining": {
            "model": args.model,
            "format": fmt,
            "num_negatives": num_negatives,
            "range_min": 0,
            "range_max": MINING_RANGE,
            "relative_margin": args.mining_relative_margin,
            "corpus_size": len(corpus),
        },
    }
    return steps.TaskData(
        mined, rows, dev_evaluator, {"retrieval": (corpus, test_queries, test_qrels)}, extra
    )


def evaluate(model, test: dict, batch_size: int, model_id: str) -> dict:
    """{(dataset, split, metric): value} on the test splits; ``model_id`` keys the embedding cache."""
    if "sts" in test:
        result = similarity_evaluator(test["sts"], "stsb-test", batch_size)(model)
        return {("stsb", "test", m): float(result[f"stsb-test_{m}_cosine"]) for m in ("spearman", "pearson")}
    from ctxir.encoders import BiEncoder
    from ctxir.evaluation import evaluate_run
    from ctxir.retrieval import DenseRetriever
    from ctxir.types import run_from_hits

    corpus, queries, qrels = test["retrieval"]
    # the cache is keyed by the name and a fingerprint of the weights: the trained model never reuses old vectors
    encoder = BiEncoder(model, batch_size=batch_size)
    encoder.name = model_id
    hits = DenseRetriever(corpus, encoder, index="exact", show_progress=True).search(queries, 100)
    aggregate = evaluate_run(qrels, run_from_hits(hits)).aggregate
    return {("scifact", "test", m): float(aggregate[m]) for m in ("nDCG@10", "MRR@10", "Recall@100")}


def describe_tests(test: dict, eval_max_queries: int) -> tuple[dict, dict]:  # the rows' task and coverage
    if "sts" in test:
        n = len(test["sts"])
        return {"stsb": ("sts", f"cosine similarity, {n} pairs")}, {"stsb": {"queries": n}}
    corpus, queries, _ = test["retrieval"]
    coverage = {"queries": len(queries)}
    if eval_max_queries > 0:
        coverage["subset"] = f"the first {len(queries)} SciFact test queries (--eval-max-queries)"
    task = ("retrieval", f"dense exact search, {len(corpus)} documents, {len(queries)} queries")
    return {"scifact": task}, {"scifact": coverage}


def load(args: BiEncoderArgs, device: str):
    """The starting SentenceTransformer, --max-length applied (0 = the model's own, capped at its positions)."""
    model = SentenceTransformer(resolve_model(args.model), device=device)
    set_max_length(model, args.max_length, name="--max-length")
    return model


def run(args: BiEncoderArgs) -> dict:
    """Train one bi-encoder; returns the metrics.json record (empty on non-main processes)."""
    # 0. check the arguments and the data before anything heavy is loaded; the run's folder and log
    objectives = [name for name, (task, _) in OBJECTIVES.items() if task == args.task]
    args.objective = objectives[0] if args.objective == "auto" else args.objective
    if args.objective not in objectives:
        raise CtxirError(
            f"--objective {args.objective!r} does not fit --task {args.task!r}: use one of "
            f"{', '.join(objectives)} (or auto)"
        )
    common.check_common_args(args)
    common.data_folder(args.data_dir, args.task)  # the data is there before anything loads
    out = Path(args.output_dir or f"outputs/bi-encoder-{args.task}-{args.objective}")
    config, resume = common.run_config(args), args.resume_from_checkpoint
    with steps.Run(out, "train_bi_encoder", config, resume, args.run_device, args.torch_threads) as run:
        # 1. load the model
        model = load(args, run.device)
        # 2. load the data
        data = (build_scifact_task if args.task == "scifact" else build_sts_task)(args, model)
        print(f"training rows: {len(data.train)}, columns {data.train.column_names}")
        # 3. the loss
        loss = getattr(losses, OBJECTIVES[args.objective][1])(model)
        # 4. evaluator: the dev one during training, and the starting model's scores
        batch, dev = args.per_device_train_batch_size, data.dev_evaluator
        before = evaluate(model, data.test, batch, args.model) if args.eval_before else {}
        print(f"before training: {before}")
        dev_before = dev(model) if dev is not None and args.eval_before else {}
        # 5. train (in-batch negatives must not include a copy of the positive)
        sampler = BatchSamplers.NO_DUPLICATES if args.objective == "mnrl" else BatchSamplers.BATCH_SAMPLER
        evaluator = dev if args.eval_steps > 0 else None
        options = {"batch_sampler": sampler, "dataloader_drop_last": False}
        settings = steps.trainer_arguments(
            SentenceTransformerTrainingArguments, args, out, run.device, evaluator, **options
        )
        trainer = run.train(SentenceTransformerTrainer, settings, model, data.train, loss, evaluator)
        if not trainer.is_world_process_zero():
            return {}
        # 6. save, then reload from disk as every user will
        model.save_pretrained(str(out))
        run.saved(args.keep_checkpoints)
        trained = SentenceTransformer(str(out), device=run.device)
        # 7. evaluate the trained model
        after = evaluate(trained, data.test, batch, str(out))
        dev_after = dev(trained) if dev is not None else {}
        print(f"after training: {after}")
        # 8. metrics.json
        tests = describe_tests(data.test, args.eval_max_queries)
        return steps.write_run_metrics(
            out,
            args,
            model_type=kinds.BI_ENCODER,
            objective=type(loss).__name__,
            datasets=data.datasets,
            training=run.training(trainer, len(data.train)),
            evaluations=steps.evaluation_rows(before, after, *tests, ANCHORS),
            extra={
                **data.extra,
                **steps.dev_record(trainer, dev_before, dev_after),
                "max_length": trained.max_seq_length,
                "max_seq_length": trained.max_seq_length,
            },
        )


def main(argv: list[str] | None = None) -> int:
    return common.cli_main(BiEncoderArgs, run, argv)


if __name__ == "__main__":
    sys.exit(main())
