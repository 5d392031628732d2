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
Outputs in --output-dir: the model (loads with CrossEncoder(path), ctxir.models.load_cross_encoder and
``python -m ctxir.evaluate --rerank cross-encoder --reranker-model DIR``), metrics.json, training_log.jsonl,
train.log, checkpoints/ while training (kept with --keep-checkpoints; --resume last continues from them).
"""

from __future__ import annotations

import shutil
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal

if __package__ in (None, ""):  # `python training/train_cross_encoder.py` from the repo root
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ctxir.models import DEFAULT_BI_ENCODER, pick_device, resolve_model
from ctxir.types import CtxirError, doc_text
from training.common import (
    DEFAULT_DATA_DIR,
    TrainerRunArgs,
    check_common_args,
    check_not_empty,
    cli_main,
    data_folder,
    dataset_entry,
    evaluation_row,
    heldout_queries,
    jsonl_log_callback,
    resolve_resume,
    set_threads,
    take,
    tee_output,
    trainer_device_kwargs,
    training_block,
    write_metrics,
)

LOSSES = {"scifact": ("bce",), "stsb": ("bce", "mse")}
LOSS_NAMES = {"bce": "BinaryCrossEntropyLoss", "mse": "MSELoss"}
ANCHORS = {("scifact", "nDCG@10"): (0.688, "BEIR BM25 + cross-encoder (ms-marco-MiniLM-L6)"),
           ("stsb", "spearman"): (0.8833, "BERT-NLI-STSb-base cross-encoder")}


@dataclass
class CrossEncoderArgs(TrainerRunArgs):
    task: Literal["scifact", "stsb"] = field(default="scifact", metadata={"help": "scifact re-ranker or stsb"})
    model: str = field(default=DEFAULT_BI_ENCODER, metadata={
        "help": "starting model: Hub id or folder; a bi-encoder/plain BERT gets a fresh one-logit head"})
    loss: Literal["auto", "bce", "mse"] = field(default="auto", metadata={"help": "auto = bce"})
    data_dir: str = field(default=DEFAULT_DATA_DIR, metadata={"help": "benchmark data root (../shared/data)"})
    output_dir: str = field(default="", metadata={"help": "default outputs/cross-encoder-<task>"})
    device: str = field(default="auto", metadata={"help": "auto, cpu, cuda (the Trainer spreads over GPUs)"})
    epochs: float = 1.0
    max_steps: int = field(default=-1, metadata={"help": "stop after N optimizer steps (-1 = use --epochs)"})
    max_samples: int = field(default=-1, metadata={
        "help": "use N training pairs, seeded (-1 = all); scifact: N (claim, positive) pairs, negatives added"})
    batch_size: int = 16
    learning_rate: float = 2e-5
    warmup: float = field(default=0.1, metadata={"help": "linear warm-up, fraction of the steps"})
    seed: int = 42
    max_length: int = field(default=256, metadata={"help": "tokens per (query, document) input"})
    negatives: Literal["bm25", "dense", "both"] = field(default="bm25", metadata={
        "help": "scifact: where hard negatives come from"})
    num_negatives: int = field(default=4, metadata={"help": "scifact: hard negatives per claim (per source)"})
    negatives_range_min: int = field(default=0, metadata={"help": "skip the N best non-relevant hits"})
    dense_model: str = field(default=DEFAULT_BI_ENCODER, metadata={"help": "bi-encoder for --negatives dense"})
    pos_weight: float = field(default=0.0, metadata={"help": "BCE weight of positives (0 = negatives/positives)"})
    rerank_depth: int = field(default=100, metadata={"help": "scifact test: BM25 candidates re-ranked per query"})
    dev_queries: int = field(default=50, metadata={"help": "scifact: training queries held out for the "
                                                           "CrossEncoderRerankingEvaluator (0 = none)"})
    dev_depth: int = field(default=20, metadata={"help": "scifact dev evaluator: BM25 candidates per query"})
    eval_max_queries: int = field(default=0, metadata={"help": "scifact test: first N queries (0 = all)"})
    eval_before: bool = field(default=True, metadata={
        "help": "also evaluate the starting model (a fresh head scores at random)"})
    eval_steps: int = field(default=0, metadata={"help": "run the dev evaluator every N steps (0 = never)"})


@dataclass
class TaskData:
    train: object  # datasets.Dataset: (text1, text2, label)
    datasets: list[dict]
    dev_evaluator: object | None = None
    test: dict = field(default_factory=dict)
    extra: dict = field(default_factory=dict)
    pos_weight: float | None = None


# ---------------------------------------------------------------- data


def build_stsb(args: CrossEncoderArgs) -> TaskData:
    from datasets import Dataset
    from sentence_transformers.cross_encoder.evaluation import CrossEncoderCorrelationEvaluator

    from ctxir.data import load_sts

    folder = data_folder(args.data_dir, "stsb")
    train = take(load_sts(folder, "train"), args.max_samples, args.seed)
    check_not_empty(len(train), f"--max-samples {args.max_samples} leaves no STS-B train pairs",
                    "use --max-samples -1 (all) or a positive number")
    dev, test = load_sts(folder, "dev"), load_sts(folder, "test")
    dataset = Dataset.from_dict({"sentence1": [a for a, _, _ in train], "sentence2": [b for _, b, _ in train],
                                 "score": [s / 5.0 for _, _, s in train]})
    dev_evaluator = CrossEncoderCorrelationEvaluator([[a, b] for a, b, _ in dev], [s / 5.0 for _, _, s in dev],
                                                     name="stsb-dev", batch_size=args.batch_size, write_csv=False)
    rows = [dataset_entry("stsb", "train", "train", folder, len(train)),
            dataset_entry("stsb", "dev", "eval", folder, len(dev)),
            dataset_entry("stsb", "test", "eval", folder, len(test))]
    return TaskData(dataset, rows, dev_evaluator, {"sts": test})


def bm25_negatives(bm25, queries: dict[str, str], positives: dict[str, set[str]], num: int, skip: int
                   ) -> dict[str, list[str]]:
    """{qid: the top ``num`` non-relevant BM25 hits after skipping ``skip``}: the re-ranker's own candidates."""
    depth = skip + num + max(len(p) for p in positives.values())
    hits = bm25.search(queries, depth)
    return {q: [h.doc_id for h in hits[q] if h.doc_id not in positives[q]][skip: skip + num] for q in queries}


def dense_negatives(args: CrossEncoderArgs, corpus: dict, queries: dict[str, str],
                    positives: dict[str, set[str]], device: str) -> dict[str, list[str]]:
    """{qid: doc ids} mined by sentence-transformers' mine_hard_negatives with the bi-encoder --dense-model."""
    from datasets import Dataset
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.util import mine_hard_negatives

    text_to_id = {doc_text(doc): d for d, doc in corpus.items()}
    pairs = [(q, d) for q in queries for d in sorted(positives[q])]
    data = Dataset.from_dict({"query": [queries[q] for q, _ in pairs],
                              "positive": [doc_text(corpus[d]) for _, d in pairs]})
    model = SentenceTransformer(resolve_model(args.dense_model), device=device)
    mined = mine_hard_negatives(data, model, corpus=list(text_to_id), range_min=args.negatives_range_min,
                                num_negatives=args.num_negatives, sampling_strategy="top", output_format="n-tuple",
                                batch_size=32, cache_folder=str(Path.home() / ".cache" / "ctxir" / "mining"))
    by_text = {text: q for q, text in queries.items()}
    out: dict[str, list[str]] = {q: [] for q in queries}
    for row in mined:
        values = list(row.values())
        qid = by_text[values[0]]
        for text in values[2:]:
            if text_to_id[text] not in out[qid]:
                out[qid].append(text_to_id[text])
    return out


def build_scifact(args: CrossEncoderArgs, device: str) -> TaskData:
    from datasets import Dataset
    from sentence_transformers.cross_encoder.evaluation import CrossEncoderRerankingEvaluator

    from ctxir.data import load_beir
    from ctxir.retrieval import BM25Retriever

    folder = data_folder(args.data_dir, "scifact")
    corpus, queries, qrels = load_beir(folder, "train")
    positives = {q: {d for d, s in rel.items() if s > 0 and d in corpus} for q, rel in qrels.items()}
    qids = sorted(q for q in queries if positives.get(q))
    # SciFact has no dev split: hold out some training queries for the in-training evaluator.
    dev_ids = heldout_queries(qids, args.dev_queries, args.seed)
    pairs = take([(q, d) for q in qids if q not in set(dev_ids) for d in sorted(positives[q])],
                 args.max_samples, args.seed)
    check_not_empty(len(pairs), f"--max-samples {args.max_samples} leaves no (claim, abstract) pairs",
                    "use --max-samples -1 (all) or a positive number")
    train_queries = {q: queries[q] for q, _ in pairs}
    # 2b. hard negatives: BM25's best wrong answers are exactly what the re-ranker must push down
    bm25 = BM25Retriever(corpus)
    negatives: dict[str, list[str]] = {q: [] for q in train_queries}
    if args.negatives in ("bm25", "both"):
        for q, docs in bm25_negatives(bm25, train_queries, positives, args.num_negatives,
                                      args.negatives_range_min).items():
            negatives[q] += docs
    if args.negatives in ("dense", "both"):
        for q, docs in dense_negatives(args, corpus, train_queries, positives, device).items():
            negatives[q] += [d for d in docs if d not in negatives[q]]
    rows = [(queries[q], doc_text(corpus[d]), 1.0) for q, d in pairs]
    rows += [(train_queries[q], doc_text(corpus[d]), 0.0) for q in sorted(negatives) for d in negatives[q]]
    n_pos, n_neg = len(pairs), len(rows) - len(pairs)
    check_not_empty(n_neg, "no hard negatives were found", "check --negatives and --num-negatives")
    dataset = Dataset.from_dict({"query": [r[0] for r in rows], "document": [r[1] for r in rows],
                                 "label": [r[2] for r in rows]})
    dev_evaluator = None
    if dev_ids:
        dev_hits = bm25.search({q: queries[q] for q in dev_ids}, args.dev_depth)
        samples = [{"query": queries[q], "positive": [doc_text(corpus[d]) for d in sorted(positives[q])],
                    "documents": [doc_text(corpus[h.doc_id]) for h in dev_hits[q]]} for q in dev_ids]
        dev_evaluator = CrossEncoderRerankingEvaluator(samples, at_k=10, always_rerank_positives=False,
                                                       name="scifact-train-heldout", batch_size=args.batch_size,
                                                       write_csv=False)
    _, test_queries, test_qrels = load_beir(folder, "test")
    if args.eval_max_queries > 0:
        test_queries = dict(list(test_queries.items())[: args.eval_max_queries])
        test_qrels = {q: test_qrels[q] for q in test_queries}
    datasets = [dataset_entry("scifact", "train", "train", folder, len(rows)),
                dataset_entry("scifact", "test", "eval", folder, len(test_queries))]
    extra = {"positives": n_pos, "negatives": n_neg, "negatives_source": args.negatives,
             "heldout_train_queries": len(dev_ids), "train_queries": len(train_queries),
             "heldout_query_ids": dev_ids}
    return TaskData(dataset, datasets, dev_evaluator, {"rerank": (corpus, test_queries, test_qrels, bm25)}, extra,
                    pos_weight=args.pos_weight or n_neg / max(n_pos, 1))


# ---------------------------------------------------------------- evaluation


def first_stage_hits(data: TaskData, depth: int) -> dict:
    _, queries, _, bm25 = data.test["rerank"]
    return bm25.search(queries, depth)


def evaluate(model, data: TaskData, args: CrossEncoderArgs, hits: dict | None) -> dict:
    """{(dataset, split, metric): value}; for scifact also the first stage's scores under 'first_stage'."""
    scores: dict = {}
    if "sts" in data.test:
        from sentence_transformers.cross_encoder.evaluation import CrossEncoderCorrelationEvaluator

        test = data.test["sts"]
        result = CrossEncoderCorrelationEvaluator([[a, b] for a, b, _ in test], [s for _, _, s in test],
                                                  name="stsb-test", batch_size=args.batch_size,
                                                  write_csv=False)(model)
        scores[("stsb", "test", "spearman")] = float(result["stsb-test_spearman"])
        scores[("stsb", "test", "pearson")] = float(result["stsb-test_pearson"])
    if "rerank" in data.test:
        from tqdm.auto import tqdm

        from ctxir.evaluation import evaluate_run
        from ctxir.rerank import CrossEncoderReranker
        from ctxir.types import run_from_hits

        corpus, queries, qrels, _ = data.test["rerank"]
        reranker = CrossEncoderReranker(model, batch_size=args.batch_size)
        reranked = {q: reranker.rerank(queries[q], hits[q], corpus) for q in tqdm(queries, desc="re-ranking")}
        aggregate = evaluate_run(qrels, run_from_hits(reranked)).aggregate
        for metric in ("nDCG@10", "MRR@10"):
            scores[("scifact", "test", metric)] = float(aggregate[metric])
    return scores


def first_stage_scores(data: TaskData, hits: dict, depth: int) -> dict:
    """BM25 alone on the same queries; Recall@depth bounds what any re-ranker of its top-depth can find."""
    from ctxir.evaluation import evaluate_run
    from ctxir.types import run_from_hits

    _, _, qrels, _ = data.test["rerank"]
    aggregate = evaluate_run(qrels, run_from_hits(hits), k_values=(10, depth)).aggregate
    return {m: round(float(aggregate[m]), 4) for m in ("nDCG@10", "MRR@10", f"Recall@{depth}")}


def evaluation_rows(before: dict, after: dict, data: TaskData, args: CrossEncoderArgs) -> list[dict]:
    rows = []
    for (name, split, metric), value in after.items():
        anchor, anchor_name = ANCHORS.get((name, metric), (None, None))
        if name == "scifact":
            _, queries, _, _ = data.test["rerank"]
            task, config = "reranking", f"rerank BM25 top-{args.rerank_depth}, {len(queries)} queries"
        else:
            task, config = "sts", f"cross-encoder score, {len(data.test['sts'])} pairs"
        rows.append(evaluation_row(name, split, task, metric, before.get((name, split, metric)), value,
                                   anchor, anchor_name, config))
    return rows


# ---------------------------------------------------------------- run


def build_loss(loss: str, model, pos_weight: float | None):
    import torch
    from sentence_transformers.cross_encoder import losses

    if loss == "mse":
        return losses.MSELoss(model)
    # pos_weight balances the few positives against the many negatives (SBERT's recommended setting).
    weight = torch.tensor(pos_weight) if pos_weight else None
    return losses.BinaryCrossEntropyLoss(model, pos_weight=weight)


def run(args: CrossEncoderArgs) -> dict:
    from sentence_transformers import CrossEncoder
    from sentence_transformers.cross_encoder.trainer import CrossEncoderTrainer
    from sentence_transformers.cross_encoder.training_args import CrossEncoderTrainingArguments

    # 0. check the arguments and the data before anything heavy is loaded
    check_common_args(args)
    if args.loss == "auto":
        args.loss = "bce"
    if args.loss not in LOSSES[args.task]:
        raise CtxirError(f"--loss {args.loss!r} does not fit --task {args.task!r}: use one of "
                         f"{', '.join(LOSSES[args.task])}")
    if args.task == "scifact" and (args.num_negatives < 1 or args.rerank_depth < 1):
        raise CtxirError(f"--num-negatives and --rerank-depth must be ≥ 1, got {args.num_negatives!r} and "
                         f"{args.rerank_depth!r}")
    data_folder(args.data_dir, args.task)
    out = Path(args.output_dir or f"outputs/cross-encoder-{args.task}")
    checkpoint_dir = out / "checkpoints"
    resume_from = resolve_resume(args.resume, checkpoint_dir)
    device = pick_device(args.device)
    set_threads(args.torch_threads)
    started = time.perf_counter()
    with tee_output(out / "train.log"):
        print(f"# train_cross_encoder {' '.join(sys.argv[1:])}\n{asdict(args)}")
        # 1. build the training data (hard negatives) and the evaluators
        data = build_scifact(args, device) if args.task == "scifact" else build_stsb(args)
        print(f"training rows: {len(data.train)} {data.extra}")
        # 2. load the starting model; a body without a classifier gets a fresh one-logit head
        model = CrossEncoder(resolve_model(args.model), num_labels=1, device=device)
        # Never beyond the position embeddings the body was trained with (512 for BERT, 128 for toy models).
        model.max_seq_length = min(args.max_length, model.config.max_position_embeddings)
        # 3. evaluate the starting model
        hits = first_stage_hits(data, args.rerank_depth) if "rerank" in data.test else None
        before = evaluate(model, data, args, hits) if args.eval_before else {}
        print(f"before training: {before}")
        # 4. train with the CrossEncoderTrainer
        loss = build_loss(args.loss, model, data.pos_weight)
        training_args = CrossEncoderTrainingArguments(
            output_dir=str(checkpoint_dir), num_train_epochs=args.epochs, max_steps=args.max_steps,
            per_device_train_batch_size=args.batch_size, per_device_eval_batch_size=args.batch_size,
            learning_rate=args.learning_rate, warmup_steps=args.warmup, seed=args.seed, data_seed=args.seed,
            eval_strategy="steps" if args.eval_steps > 0 and data.dev_evaluator is not None else "no",
            eval_steps=args.eval_steps or None, save_strategy="steps", save_steps=args.save_steps,
            save_total_limit=2, logging_steps=args.logging_steps, logging_first_step=True, report_to="none",
            fp16=args.fp16, **trainer_device_kwargs(device))
        trainer = CrossEncoderTrainer(
            model=model, args=training_args, train_dataset=data.train, loss=loss,
            evaluator=data.dev_evaluator if training_args.eval_strategy != "no" else None,
            callbacks=[jsonl_log_callback(out / "training_log.jsonl")])
        train_start = time.perf_counter()
        train_output = trainer.train(resume_from_checkpoint=resume_from)
        train_seconds = time.perf_counter() - train_start
        if not trainer.is_world_process_zero():
            return {}
        # 5. save, then reload from disk as every user will
        model.save_pretrained(str(out))
        if not args.keep_checkpoints:
            shutil.rmtree(checkpoint_dir, ignore_errors=True)
        print(f"saved model to {out}")
        trained = CrossEncoder(str(out), device=device)
        # 6. evaluate the trained model
        after = evaluate(trained, data, args, hits)
        dev_after = data.dev_evaluator(trained) if data.dev_evaluator is not None else {}
        print(f"after training: {after}")
        # 7. write metrics.json
        extra = {**data.extra, "dev_after": {k: round(float(v), 4) for k, v in dev_after.items()},
                 "max_length": args.max_length, "pos_weight": data.pos_weight}
        if hits is not None:
            extra["first_stage"] = {"retriever": "bm25", "depth": args.rerank_depth,
                                    "test": first_stage_scores(data, hits, args.rerank_depth)}
        metrics = {
            "model_type": "cross-encoder",
            "model_name": args.model_name or out.name,
            "base_model": args.model,
            "objective": LOSS_NAMES[args.loss],
            "datasets": data.datasets,
            "config": asdict(args),
            "training": {**training_block(
                train_output, steps=trainer.state.global_step, epochs=trainer.state.epoch or 0.0,
                train_examples=len(data.train), batch_size=args.batch_size, learning_rate=args.learning_rate,
                wall_time_seconds=time.perf_counter() - started, device=device, seed=args.seed,
                log_history=trainer.state.log_history), "train_seconds": round(train_seconds, 1),
                "resumed_from": resume_from},
            "evaluations": evaluation_rows(before, after, data, args),
            "extra": extra,
        }
        path = write_metrics(out, metrics)
        print(f"wrote {out} (model), {path}")
    return metrics


def main(argv: list[str] | None = None) -> int:
    return cli_main(CrossEncoderArgs, run, argv)


if __name__ == "__main__":
    sys.exit(main())
