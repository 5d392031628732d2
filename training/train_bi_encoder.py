"""Fine-tune a bi-encoder (SentenceTransformer) with sentence-transformers' own trainer, losses and evaluators.

Tasks and objectives (``--task`` / ``--objective``, the first objective is the default):
    scifact  mnrl         MultipleNegativesRankingLoss on (claim, cited abstract, mined hard negative...)
             contrastive  OnlineContrastiveLoss on 50/50 (claim, abstract, 1|0) pairs, negatives mined
    stsb     cosent       CoSENTLoss on STS-B train scores / 5          (also: cosine = CosineSimilarityLoss)
    sick     cosent       CoSENTLoss on SICK train relatedness → [0, 1] (also: cosine)
    nli      softmax      SoftmaxLoss over (u, v, |u−v|), 3 labels, on SNLI dev + SICK train entailment labels
             mnrl         MultipleNegativesRankingLoss on (premise, entailed, contradicted) triplets

Hard negatives come from ``sentence_transformers.util.mine_hard_negatives`` with the starting model.
Evaluation before and after training: SciFact test nDCG@10 / MRR@10 over the full corpus through ctxir's
DenseRetriever + pytrec_eval (InformationRetrievalEvaluator on held-out training queries during training);
STS-B / SICK test Spearman with EmbeddingSimilarityEvaluator.

Examples:
    python training/train_bi_encoder.py --task stsb --epochs 4 --output-dir outputs/bi-stsb
    python training/train_bi_encoder.py --task scifact --objective mnrl --num-negatives 3 --epochs 2
    python training/train_bi_encoder.py --task stsb --max-steps 2 --max-samples 16   # smoke run
    accelerate launch training/train_bi_encoder.py --task stsb --device cuda --batch-size 128   # several GPUs
Outputs in --output-dir: the model (loads with SentenceTransformer(path) and ctxir.encoders.models.load_bi_encoder),
metrics.json, training_log.jsonl (Trainer log history), train.log (everything printed), checkpoints/ while
training (kept with --keep-checkpoints, needed by --resume last).
"""

from __future__ import annotations

import random
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

if __package__ in (None, ""):  # `python training/train_bi_encoder.py` from the repo root
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sentence_transformers import SentenceTransformerTrainingArguments

from ctxir import kinds
from ctxir.data import NLI_LABELS, load_beir, load_sick, load_snli, load_sts
from ctxir.encoders.lengths import set_max_length
from ctxir.encoders.models import resolve_model
from ctxir.types import CtxirError, doc_text
from training.common import (
    TrainerRunArgs,
    check_not_empty,
    cli_main,
    data_folder,
    dataset_entry,
    heldout_queries,
    take,
)
from training.runner import ModelSpec, TaskData, train

OBJECTIVES = {
    "scifact": ("mnrl", "contrastive"),
    "stsb": ("cosent", "cosine"),
    "sick": ("cosent", "cosine"),
    "nli": ("softmax", "mnrl"),
}
LOSS_NAMES = {
    "mnrl": "MultipleNegativesRankingLoss",
    "contrastive": "OnlineContrastiveLoss",
    "cosent": "CoSENTLoss",
    "cosine": "CosineSimilarityLoss",
    "softmax": "SoftmaxLoss",
}
# Published reference numbers shown next to ours (docs/results.md cites their sources).
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
    """sentence-transformers' training arguments with ctxir's shared ones (training/common.py) and this script's
    task, loss, mining and evaluation."""

    task: Literal["scifact", "stsb", "sick", "nli"] = field(
        default="stsb", metadata={"help": "training data: scifact (claims → abstracts), stsb, sick, nli"}
    )
    objective: Literal["auto", "mnrl", "contrastive", "cosent", "cosine", "softmax"] = field(
        default="auto", metadata={"help": "loss; auto = the task's default (see the module docstring)"}
    )
    output_dir: str = field(default="", metadata={"help": "default outputs/bi-encoder-<task>-<objective>"})
    num_negatives: int = field(default=1, metadata={"help": "mnrl on scifact: mined hard negatives per pair"})
    mining_range_min: int = field(default=0, metadata={"help": "skip the N nearest non-positive documents"})
    mining_range_max: int = field(default=50, metadata={"help": "sample negatives among the N nearest"})
    mining_relative_margin: float = field(
        default=0.05, metadata={"help": "drop candidates scoring within this fraction of the positive"}
    )
    mining_cache: str = field(
        default="",
        metadata={
            "help": "folder caching mining embeddings (default ~/.cache/ctxir/mining; 'none' disables)"
        },
    )
    dev_queries: int = field(
        default=50,
        metadata={
            "help": "scifact: training queries held out for the InformationRetrievalEvaluator (0 = none)"
        },
    )
    dev_corpus_size: int = field(
        default=1000,
        metadata={"help": "scifact dev evaluator: judged docs + random others up to N (0 = full corpus)"},
    )
    eval_corpus_size: int = field(
        default=0,
        metadata={
            "help": "scifact test: 0 = full corpus (reported numbers); N = judged docs + random others"
        },
    )
    eval_max_queries: int = field(default=0, metadata={"help": "scifact test: first N queries (0 = all)"})


# ---------------------------------------------------------------- data


def _sts_pairs(args: BiEncoderArgs, name: str, split: str) -> list[tuple[str, str, float]]:
    """(s1, s2, score in [0, 1]) for STS-B (0-5) or SICK relatedness (1-5)."""

    if name == "stsb":
        return [(a, b, s / 5.0) for a, b, s in load_sts(data_folder(args.data_dir, "stsb"), split)]
    return [
        (p.sentence_a, p.sentence_b, (p.relatedness - 1.0) / 4.0)
        for p in load_sick(data_folder(args.data_dir, "sick"), split)
    ]


def _similarity_evaluator(pairs, name: str, batch_size: int):
    from sentence_transformers.sentence_transformer.evaluation import EmbeddingSimilarityEvaluator

    return EmbeddingSimilarityEvaluator(
        [a for a, _, _ in pairs],
        [b for _, b, _ in pairs],
        [s for _, _, s in pairs],
        batch_size=batch_size,
        name=name,
        main_similarity="cosine",
        write_csv=False,
    )


def build_sts_task(args: BiEncoderArgs, model) -> TaskData:
    from datasets import Dataset

    name = args.task
    folder = data_folder(args.data_dir, name)
    dev_split = "dev"
    pairs = take(_sts_pairs(args, name, "train"), args.max_samples, args.seed)
    check_not_empty(
        len(pairs),
        f"--max-samples {args.max_samples} leaves no {name} train pairs",
        "use --max-samples -1 (all) or a positive number",
    )
    train = Dataset.from_dict(
        {
            "sentence1": [a for a, _, _ in pairs],
            "sentence2": [b for _, b, _ in pairs],
            "score": [s for _, _, s in pairs],
        }
    )
    dev = _sts_pairs(args, name, dev_split)
    rows = [
        dataset_entry(name, "train", "train", folder, len(pairs)),
        dataset_entry(name, dev_split, "eval", folder, len(dev)),
    ]
    tests = {name: _sts_pairs(args, name, "test")}
    if name == "sick":  # SICK-trained models are also read on STS-B, the usual STS yardstick
        tests["stsb"] = _sts_pairs(args, "stsb", "test")
    rows += [
        dataset_entry(n, "test", "eval", data_folder(args.data_dir, n), len(p)) for n, p in tests.items()
    ]
    return TaskData(
        train,
        rows,
        _similarity_evaluator(dev, f"{name}-dev", args.per_device_train_batch_size),
        {"sts": tests},
    )


def build_nli_task(args: BiEncoderArgs, model) -> TaskData:
    from datasets import Dataset

    snli_dir, sick_dir = data_folder(args.data_dir, "snli"), data_folder(args.data_dir, "sick")
    # The staged SNLI has no train split: its dev set is our training data; test stays untouched.
    snli = load_snli(snli_dir, "dev")
    sick = load_sick(sick_dir, "train")
    examples = [(p.premise, p.hypothesis, p.label) for p in snli] + [
        (p.sentence_a, p.sentence_b, p.label) for p in sick
    ]
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
        triplets = take(triplets, args.max_samples, args.seed)
        check_not_empty(
            len(triplets),
            f"{len(triplets)} (premise, entailed, contradicted) triplets after "
            f"--max-samples {args.max_samples}",
            "use more samples (-1 = all)",
        )
        train = Dataset.from_dict(
            {
                "anchor": [t[0] for t in triplets],
                "positive": [t[1] for t in triplets],
                "negative": [t[2] for t in triplets],
            }
        )
        n_train = len(triplets)
    else:
        examples = take(examples, args.max_samples, args.seed)
        check_not_empty(
            len(examples),
            f"--max-samples {args.max_samples} leaves no NLI pairs",
            "use --max-samples -1 (all) or a positive number",
        )
        train = Dataset.from_dict(
            {
                "premise": [e[0] for e in examples],
                "hypothesis": [e[1] for e in examples],
                "label": [NLI_LABELS.index(e[2]) for e in examples],
            }
        )
        n_train = len(examples)
    dev = _sts_pairs(args, "stsb", "dev")
    tests = {"stsb": _sts_pairs(args, "stsb", "test"), "sick": _sts_pairs(args, "sick", "test")}
    rows = [
        dataset_entry("snli", "dev", "train", snli_dir, len(snli)),
        dataset_entry("sick", "train", "train", sick_dir, len(sick)),
        dataset_entry("stsb", "dev", "eval", data_folder(args.data_dir, "stsb"), len(dev)),
    ]
    rows += [
        dataset_entry(n, "test", "eval", data_folder(args.data_dir, n), len(p)) for n, p in tests.items()
    ]
    return TaskData(
        train,
        rows,
        _similarity_evaluator(dev, "stsb-dev", args.per_device_train_batch_size),
        {"sts": tests},
        {"train_examples_after_filtering": n_train, "labels": list(NLI_LABELS)},
    )


def _subsample_corpus(corpus: dict, qrels: dict, size: int, seed: int) -> dict:
    """Judged documents plus random others up to ``size`` (0 = everything)."""
    if size <= 0 or size >= len(corpus):
        return corpus
    keep = {d for rel in qrels.values() for d in rel if d in corpus}
    others = sorted(set(corpus) - keep)
    keep |= set(random.Random(seed).sample(others, max(0, min(len(others), size - len(keep)))))
    return {d: corpus[d] for d in corpus if d in keep}


def _mining_cache(args: BiEncoderArgs) -> str | None:
    if args.mining_cache.lower() == "none":
        return None
    return args.mining_cache or str(Path.home() / ".cache" / "ctxir" / "mining")


def build_scifact_task(args: BiEncoderArgs, model) -> TaskData:
    from datasets import Dataset
    from sentence_transformers.sentence_transformer.evaluation import InformationRetrievalEvaluator
    from sentence_transformers.util import mine_hard_negatives

    folder = data_folder(args.data_dir, "scifact")
    corpus, queries, qrels = load_beir(folder, "train")
    # SciFact has no dev split: hold out some training queries for the in-training evaluator.
    qids = sorted(queries)
    dev_ids = set(heldout_queries(qids, args.dev_queries, args.seed))
    id_pairs = take(
        [
            (q, d)
            for q in qids
            if q not in dev_ids
            for d, score in sorted(qrels[q].items())
            if score > 0 and d in corpus
        ],
        args.max_samples,
        args.seed,
    )
    pairs = [(queries[q], doc_text(corpus[d])) for q, d in id_pairs]
    check_not_empty(
        len(pairs),
        f"--max-samples {args.max_samples} leaves no (claim, abstract) pairs",
        "use --max-samples -1 (all) or a positive number",
    )
    # 2b. mine hard negatives with the starting model over the whole corpus (its positives are excluded)
    fmt = (
        "labeled-pair"
        if args.objective == "contrastive"
        else ("triplet" if args.num_negatives == 1 else "n-tuple")
    )
    num_negatives = 1 if args.objective == "contrastive" else args.num_negatives
    if args.mining_range_max - args.mining_range_min < num_negatives:
        raise CtxirError(
            f"--mining-range-max {args.mining_range_max} − --mining-range-min {args.mining_range_min}"
            f" leaves fewer candidates than --num-negatives {num_negatives}: widen the range"
        )
    pair_data = Dataset.from_dict({"anchor": [q for q, _ in pairs], "positive": [d for _, d in pairs]})
    mined = mine_hard_negatives(
        pair_data,
        model,
        corpus=[doc_text(corpus[d]) for d in corpus],
        range_min=args.mining_range_min,
        range_max=min(args.mining_range_max, len(corpus) - 1),
        relative_margin=args.mining_relative_margin or None,
        num_negatives=num_negatives,
        sampling_strategy="top",
        output_format=fmt,
        batch_size=args.per_device_train_batch_size,
        cache_folder=_mining_cache(args),
        verbose=True,
    )
    check_not_empty(
        len(mined),
        "mine_hard_negatives found no negative for any pair",
        "lower --mining-relative-margin or raise --mining-range-max",
    )
    if args.objective == "contrastive":
        first, second, label = mined.column_names[:3]
        mined = mined.rename_columns({first: "sentence1", second: "sentence2", label: "label"})
    dev_evaluator = None
    if dev_ids:
        dev_qrels = {q: {d for d, s in qrels[q].items() if s > 0} for q in dev_ids}
        dev_corpus = _subsample_corpus(
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
    test_corpus = _subsample_corpus(corpus, test_qrels, args.eval_corpus_size, args.seed)
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
            "range_min": args.mining_range_min,
            "range_max": args.mining_range_max,
            "relative_margin": args.mining_relative_margin,
            "corpus_size": len(corpus),
        },
    }
    return TaskData(mined, rows, dev_evaluator, {"retrieval": (test_corpus, test_queries, test_qrels)}, extra)


BUILDERS = {
    "scifact": build_scifact_task,
    "stsb": build_sts_task,
    "sick": build_sts_task,
    "nli": build_nli_task,
}


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


def evaluate(model, data: TaskData, args: BiEncoderArgs, model_id: str) -> dict[tuple[str, str, str], float]:
    """{(dataset, split, metric): value} on the test splits; ``model_id`` names ``model``'s weights on disk
    (its Hub id or folder), so ctxir's embedding cache is shared with ``ctxir evaluate --model ID``."""
    scores: dict[tuple[str, str, str], float] = {}
    for name, pairs in data.test.get("sts", {}).items():
        result = _similarity_evaluator(pairs, f"{name}-test", args.per_device_train_batch_size)(model)
        scores[(name, "test", "spearman")] = float(result[f"{name}-test_spearman_cosine"])
        scores[(name, "test", "pearson")] = float(result[f"{name}-test_pearson_cosine"])
    if "retrieval" in data.test:
        from ctxir.encoders import BiEncoder
        from ctxir.evaluation import evaluate_run
        from ctxir.retrieval import DenseRetriever
        from ctxir.types import run_from_hits

        corpus, queries, qrels = data.test["retrieval"]
        # ctxir's cache is keyed by the name and a fingerprint of the weights: the trained model never reuses
        # old vectors, and the starting model reuses those of an earlier `ctxir.evaluate` run.
        encoder = BiEncoder(model, batch_size=args.per_device_train_batch_size)
        encoder.name = model_id
        hits = DenseRetriever(corpus, encoder, index="exact", show_progress=True).search(queries, 100)
        aggregate = evaluate_run(qrels, run_from_hits(hits)).aggregate
        for metric in ("nDCG@10", "MRR@10", "Recall@100"):
            scores[("scifact", "test", metric)] = float(aggregate[metric])
    return scores


def coverage(name: str, data: TaskData, args: BiEncoderArgs) -> dict:
    """What a test row covers: SciFact's queries (the first --eval-max-queries, when set), STS-B's pairs."""
    if name != "scifact":
        return {"queries": len(data.test["sts"][name])}
    n = len(data.test["retrieval"][1])
    if args.eval_max_queries > 0:
        return {"queries": n, "subset": f"the first {n} SciFact test queries (--eval-max-queries)"}
    return {"queries": n}


def describe(name: str, data: TaskData, args: BiEncoderArgs) -> tuple[str, str]:
    if name == "scifact":
        corpus, queries, _ = data.test["retrieval"]
        return "retrieval", (
            f"dense exact search, {len(corpus)} documents"
            f"{'' if args.eval_corpus_size <= 0 else ' (SUBSAMPLED corpus)'}, {len(queries)} queries"
        )
    return "sts", f"cosine similarity, {len(data.test['sts'][name])} pairs"


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


def check(args: BiEncoderArgs) -> None:
    args.objective = resolve_objective(args)


def load(args: BiEncoderArgs, device: str):
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(resolve_model(args.model), device=device)
    set_max_length(
        model, args.max_length, name="--max-length"
    )  # 0 = the model's own, capped at its positions
    return model


def trainer_classes():
    """sentence-transformers' bi-encoder trainer and its arguments (train_classifier.py trains the same kind)."""
    from sentence_transformers.sentence_transformer.trainer import SentenceTransformerTrainer

    return SentenceTransformerTrainingArguments, SentenceTransformerTrainer


def _training_options(args: BiEncoderArgs) -> dict:
    from sentence_transformers.base.sampler import BatchSamplers

    # In-batch negatives must not include a copy of the positive.
    return {
        "batch_sampler": BatchSamplers.NO_DUPLICATES
        if args.objective == "mnrl"
        else BatchSamplers.BATCH_SAMPLER,
        "dataloader_drop_last": False,
    }


def reload(out: Path, device: str):
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(out), device=device)


SPEC = ModelSpec(
    model_type=kinds.BI_ENCODER,
    script="train_bi_encoder",
    default_output=lambda args: f"outputs/bi-encoder-{args.task}-{args.objective}",
    data_names=lambda args: {
        "scifact": ["scifact"],
        "stsb": ["stsb"],
        "sick": ["sick", "stsb"],
        "nli": ["snli", "sick", "stsb"],
    }[args.task],
    check=check,
    load=load,
    build_data=lambda args, model, device: BUILDERS[args.task](args, model),
    build_loss=lambda args, model, data: build_loss(args.objective, model),
    evaluate=evaluate,
    describe=describe,
    save=lambda model, out, args: model.save_pretrained(str(out)),
    reload=reload,
    objective_name=lambda args: LOSS_NAMES[args.objective],
    trainer_classes=trainer_classes,
    anchors=ANCHORS,
    coverage=coverage,
    training_options=_training_options,
    extra=lambda args, model, data: {"max_seq_length": model.max_seq_length},
)


def run(args: BiEncoderArgs) -> dict:
    # the objective decides the default output folder, so it is resolved before the runner names it
    args.objective = resolve_objective(args)
    return train(args, SPEC)


def main(argv: list[str] | None = None) -> int:
    return cli_main(BiEncoderArgs, run, argv)


if __name__ == "__main__":
    sys.exit(main())
