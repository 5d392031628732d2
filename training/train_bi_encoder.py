"""Fine-tune a bi-encoder (SentenceTransformer) with sentence-transformers' trainer, losses and evaluators.

Tasks (--task) and objectives (--objective): scifact mnrl, stsb and sick cosent|cosine, nli softmax|mnrl.

    python training/train_bi_encoder.py --task stsb --epochs 4 --output-dir outputs/bi-stsb
    python training/train_bi_encoder.py --task stsb --max-steps 2 --max-samples 16   # smoke run
Outputs in --output-dir: the model, metrics.json, training_log.jsonl, train.log, checkpoints/ while training.
"""

from __future__ import annotations

import random
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

if __package__ in (None, ""):  # `python training/train_bi_encoder.py` from the repo root
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sentence_transformers import SentenceTransformerTrainingArguments

from ctxir import kinds
from ctxir.cli import flag
from ctxir.data import NLI_LABELS, load_beir, load_sick, load_snli, load_sts
from ctxir.encoders.lengths import set_max_length
from ctxir.encoders.models import resolve_model
from ctxir.types import CtxirError, doc_text
from training.common import (
    TrainerRunArgs,
    check_common_args,
    check_not_empty,
    cli_main,
    columns,
    data_folder,
    dataset_entry,
    heldout_queries,
    run_config,
    take_train,
)
from training.steps import (
    Run,
    Scores,
    TaskData,
    check_data,
    dev_record,
    evaluation_rows,
    trainer_arguments,
    write_run_metrics,
)

MINING_RANGE = 50  # scifact mnrl: hard negatives are the nearest of this many non-positive documents
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
    task: Literal["scifact", "stsb", "sick", "nli"] = flag("stsb", "training data: scifact, stsb, sick, nli")
    objective: Literal["auto", "mnrl", "cosent", "cosine", "softmax"] = flag(
        "auto", "loss; auto = the task's default (see the module docstring)"
    )
    output_dir: str = flag("", "default outputs/bi-encoder-<task>-<objective>")
    num_negatives: int = flag(1, "mnrl on scifact: mined hard negatives per pair")
    mining_relative_margin: float = flag(0.05, "drop candidates scoring within this fraction of the positive")
    mining_cache: str = flag("", "folder caching mining embeddings (default ~/.cache/ctxir/mining; 'none')")
    dev_queries: int = flag(50, "scifact: training queries held out for the dev evaluator (0 = none)")
    dev_corpus_size: int = flag(1000, "scifact dev: judged docs + random others up to N (0 = full corpus)")
    eval_max_queries: int = flag(0, "scifact test: first N queries (0 = all)")


# ---------------------------------------------------------------- data


def sts_pairs(data_dir: str, name: str, split: str) -> list[tuple[str, str, float]]:
    """(s1, s2, score in [0, 1]) for STS-B (0-5) or SICK relatedness (1-5)."""
    if name == "stsb":
        return [(a, b, s / 5.0) for a, b, s in load_sts(data_folder(data_dir, "stsb"), split)]
    return [
        (p.sentence_a, p.sentence_b, (p.relatedness - 1.0) / 4.0)
        for p in load_sick(data_folder(data_dir, "sick"), split)
    ]


def similarity_evaluator(pairs, name: str, batch_size: int):
    from sentence_transformers.sentence_transformer.evaluation import EmbeddingSimilarityEvaluator

    return EmbeddingSimilarityEvaluator(
        *([p[i] for p in pairs] for i in range(3)),
        batch_size=batch_size,
        name=name,
        main_similarity="cosine",
        write_csv=False,
    )


def test_entries(data_dir: str, tests: dict) -> list[dict]:
    return [dataset_entry(n, "test", "eval", data_folder(data_dir, n), len(p)) for n, p in tests.items()]


def build_sts_task(args: BiEncoderArgs, model) -> TaskData:
    name, folder = args.task, data_folder(args.data_dir, args.task)
    pairs = take_train(
        sts_pairs(args.data_dir, name, "train"), args.max_samples, args.seed, f"{name} train pairs"
    )
    dev = sts_pairs(args.data_dir, name, "dev")
    tests = {name: sts_pairs(args.data_dir, name, "test")}
    if name == "sick":  # SICK-trained models are also read on STS-B, the usual STS yardstick
        tests["stsb"] = sts_pairs(args.data_dir, "stsb", "test")
    rows = [
        dataset_entry(name, "train", "train", folder, len(pairs)),
        dataset_entry(name, "dev", "eval", folder, len(dev)),
        *test_entries(args.data_dir, tests),
    ]
    evaluator = similarity_evaluator(dev, f"{name}-dev", args.per_device_train_batch_size)
    return TaskData(columns(pairs, ["sentence1", "sentence2", "score"]), rows, evaluator, {"sts": tests})


def build_nli_task(args: BiEncoderArgs, model) -> TaskData:
    snli_dir, sick_dir = data_folder(args.data_dir, "snli"), data_folder(args.data_dir, "sick")
    # The staged SNLI has no train split: its dev set is our training data; test stays untouched.
    snli, sick = load_snli(snli_dir, "dev"), load_sick(sick_dir, "train")
    examples = [(p.premise, p.hypothesis, p.label) for p in snli]
    examples += [(p.sentence_a, p.sentence_b, p.label) for p in sick]
    if args.objective == "mnrl":
        # (premise, entailed hypothesis, contradicted hypothesis): SBERT's NLI recipe for MNRL.
        by_premise: dict[str, dict[str, str]] = {}
        for premise, hypothesis, label in examples:
            by_premise.setdefault(premise, {}).setdefault(label, hypothesis)
        triplets = [
            (p, h["entailment"], h["contradiction"])
            for p, h in by_premise.items()
            if "entailment" in h and "contradiction" in h
        ]
        triplets = take_train(
            triplets, args.max_samples, args.seed, "(premise, entailed, contradicted) triplets"
        )
        train = columns(triplets, ["anchor", "positive", "negative"])
    else:
        examples = take_train(examples, args.max_samples, args.seed, "NLI pairs")
        train = columns(
            [(p, h, NLI_LABELS.index(y)) for p, h, y in examples], ["premise", "hypothesis", "label"]
        )
    dev = sts_pairs(args.data_dir, "stsb", "dev")
    tests = {name: sts_pairs(args.data_dir, name, "test") for name in ("stsb", "sick")}
    rows = [
        dataset_entry("snli", "dev", "train", snli_dir, len(snli)),
        dataset_entry("sick", "train", "train", sick_dir, len(sick)),
        dataset_entry("stsb", "dev", "eval", data_folder(args.data_dir, "stsb"), len(dev)),
        *test_entries(args.data_dir, tests),
    ]
    extra = {"train_examples_after_filtering": len(train), "labels": list(NLI_LABELS)}
    evaluator = similarity_evaluator(dev, "stsb-dev", args.per_device_train_batch_size)
    return TaskData(train, rows, evaluator, {"sts": tests}, extra)


def subsample_corpus(corpus: dict, qrels: dict, size: int, seed: int) -> dict:
    """Judged documents plus random others up to ``size`` (0 = everything)."""
    if size <= 0 or size >= len(corpus):
        return corpus
    keep = {d for rel in qrels.values() for d in rel if d in corpus}
    others = sorted(set(corpus) - keep)
    keep |= set(random.Random(seed).sample(others, max(0, min(len(others), size - len(keep)))))
    return {d: corpus[d] for d in corpus if d in keep}


def build_scifact_task(args: BiEncoderArgs, model) -> TaskData:
    from sentence_transformers.sentence_transformer.evaluation import InformationRetrievalEvaluator
    from sentence_transformers.util import mine_hard_negatives

    folder = data_folder(args.data_dir, "scifact")
    corpus, queries, qrels = load_beir(folder, "train")
    # SciFact has no dev split: hold out some training queries for the in-training evaluator.
    qids = sorted(queries)
    dev_ids = set(heldout_queries(qids, args.dev_queries, args.seed))
    judged = [
        (q, d) for q in qids if q not in dev_ids for d, s in sorted(qrels[q].items()) if s > 0 and d in corpus
    ]
    id_pairs = take_train(judged, args.max_samples, args.seed, "(claim, abstract) pairs")
    pairs = [(queries[q], doc_text(corpus[d])) for q, d in id_pairs]
    # mine hard negatives with the starting model over the whole corpus (its positives are excluded)
    fmt, num_negatives = ("triplet" if args.num_negatives == 1 else "n-tuple"), args.num_negatives
    if num_negatives > MINING_RANGE:
        raise CtxirError(
            f"--num-negatives {num_negatives} exceeds the {MINING_RANGE} nearest documents mined"
        )
    cache = args.mining_cache or str(Path.home() / ".cache" / "ctxir" / "mining")
    mined = mine_hard_negatives(
        columns(pairs, ["anchor", "positive"]),
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
    check_not_empty(
        len(mined), "mine_hard_negatives found no negative for any pair", "lower --mining-relative-margin"
    )
    dev_evaluator = None
    if dev_ids:
        dev_qrels = {q: {d for d, s in qrels[q].items() if s > 0} for q in dev_ids}
        dev_corpus = subsample_corpus(
            corpus, {q: dict.fromkeys(v, 1) for q, v in dev_qrels.items()}, args.dev_corpus_size, args.seed
        )
        dev_evaluator = InformationRetrievalEvaluator(
            {q: queries[q] for q in sorted(dev_ids)},
            {d: doc_text(doc) for d, doc in dev_corpus.items()},
            dev_qrels,
            name="scifact-train-heldout",
            batch_size=args.per_device_train_batch_size,
            mrr_at_k=[10],
            ndcg_at_k=[10],
            accuracy_at_k=[1, 10],
            precision_recall_at_k=[10, 100],
            map_at_k=[100],
            write_csv=False,
        )
    _, test_queries, test_qrels = load_beir(folder, "test")
    if args.eval_max_queries > 0:
        test_queries = dict(list(test_queries.items())[: args.eval_max_queries])
        test_qrels = {q: test_qrels[q] for q in test_queries}
    rows = [
        dataset_entry("scifact", "train", "train", folder, len(pairs)),
        dataset_entry("scifact", "test", "eval", folder, len(test_queries)),
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
    return TaskData(mined, rows, dev_evaluator, {"retrieval": (corpus, test_queries, test_qrels)}, extra)


# each task: its data step, the dataset folders it reads under --data-dir, its objectives (the first is auto's)
TASKS = {
    "scifact": (build_scifact_task, ["scifact"], ("mnrl",)),
    "stsb": (build_sts_task, ["stsb"], ("cosent", "cosine")),
    "sick": (build_sts_task, ["sick", "stsb"], ("cosent", "cosine")),
    "nli": (build_nli_task, ["snli", "sick", "stsb"], ("softmax", "mnrl")),
}


# ---------------------------------------------------------------- loss & evaluation


def build_loss(objective: str, model):
    from sentence_transformers.sentence_transformer import losses

    if objective == "softmax":  # SBERT's classification objective: softmax over (u, v, |u−v|)
        dimension = model.get_embedding_dimension()
        return losses.SoftmaxLoss(model, embedding_dimension=dimension, num_labels=len(NLI_LABELS))
    return {
        "mnrl": losses.MultipleNegativesRankingLoss,
        "cosent": losses.CoSENTLoss,
        "cosine": losses.CosineSimilarityLoss,
    }[objective](model)


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
        # the cache is keyed by the name and a fingerprint of the weights: the trained model never reuses old vectors
        encoder = BiEncoder(model, batch_size=batch_size)
        encoder.name = model_id
        hits = DenseRetriever(corpus, encoder, index="exact", show_progress=True).search(queries, 100)
        aggregate = evaluate_run(qrels, run_from_hits(hits)).aggregate
        for metric in ("nDCG@10", "MRR@10", "Recall@100"):
            scores[("scifact", "test", metric)] = float(aggregate[metric])
    return scores


def describe_tests(test: dict, eval_max_queries: int) -> tuple[dict, dict]:
    """({dataset: (task, config text)}, {dataset: what its figures cover}) of the test rows."""
    tasks = {name: ("sts", f"cosine similarity, {len(p)} pairs") for name, p in test.get("sts", {}).items()}
    coverage = {name: {"queries": len(pairs)} for name, pairs in test.get("sts", {}).items()}
    if "retrieval" in test:
        corpus, queries, _ = test["retrieval"]
        tasks["scifact"] = (
            "retrieval",
            f"dense exact search, {len(corpus)} documents, {len(queries)} queries",
        )
        coverage["scifact"] = {"queries": len(queries)}
        if eval_max_queries > 0:
            coverage["scifact"]["subset"] = (
                f"the first {len(queries)} SciFact test queries (--eval-max-queries)"
            )
    return tasks, coverage


# ---------------------------------------------------------------- run


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
    build_task, data_names, objectives = TASKS[args.task]
    if args.objective == "auto":
        args.objective = objectives[0]
    if args.objective not in objectives:
        raise CtxirError(
            f"--objective {args.objective!r} does not fit --task {args.task!r}: use one of "
            f"{', '.join(objectives)} (or auto)"
        )
    check_common_args(args)
    check_data(args.data_dir, data_names)
    out = Path(args.output_dir or f"outputs/bi-encoder-{args.task}-{args.objective}")
    config, resume = run_config(args), args.resume_from_checkpoint
    with Run(out, "train_bi_encoder", config, resume, args.run_device, args.torch_threads) as run:
        # 1. load the model
        model = load(args, run.device)
        # 2. load the data
        data = build_task(args, model)
        print(f"training rows: {len(data.train)}, columns {data.train.column_names}")
        # 3. loss
        loss = build_loss(args.objective, model)
        # 4. evaluator: the dev one during training, and the starting model's scores
        batch, dev = args.per_device_train_batch_size, data.dev_evaluator
        before = evaluate(model, data.test, batch, args.model) if args.eval_before else {}
        print(f"before training: {before}")
        dev_before = dev(model) if dev is not None and args.eval_before else {}
        # 5. train (in-batch negatives must not include a copy of the positive)
        sampler = BatchSamplers.NO_DUPLICATES if args.objective == "mnrl" else BatchSamplers.BATCH_SAMPLER
        evaluator = dev if args.eval_steps > 0 else None
        options = {"batch_sampler": sampler, "dataloader_drop_last": False}
        settings = trainer_arguments(
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
