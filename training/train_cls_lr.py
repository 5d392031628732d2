"""Train the CLS-LR ranker: logistic regression on a cross-encoder's [CLS] vector (the seed's "Bert Search Model").

Each (query, document) pair is read as in next-sentence prediction, ``[CLS] query [SEP] document [SEP]``, by
the cross-encoder; its [CLS] vector from ``--layer`` (default the last) is the feature row. Positives are the
qrels' relevant documents; hard negatives are BM25's best-ranked non-relevant documents
(``--negatives-per-positive`` per positive). SciFact's train queries are split by query into a fit part and
held-out "test queries" for the classification report. The regularisation C and the decision threshold are
chosen on the fit queries only (grouped cross-validation), never on held-out or test queries.
The ranking score is ``coef · CLS + intercept``; it is saved without pickle (safetensors + JSON) by
``ClsLrRanker.save`` and loads back with ``ctxir.rerank.ClsLrRanker.load`` as a re-ranker.

Then the ranker and the cross-encoder it reads both re-rank BM25's top ``--rerank-depth`` on SciFact's test
queries: nDCG@10 for BM25 alone (before), the cross-encoder (anchor) and CLS-LR (after).

    python -m training.train_cls_lr --base-model outputs/cross-encoder-scifact --output-dir outputs/cls-lr

Writes to --output-dir: cls_lr.safetensors, cls_lr_config.json, metrics.json, pr_curve.png, train.log.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

if __package__ in (
    None,
    "",
):  # `python training/train_cls_lr.py` as well as `python -m training.train_cls_lr`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
import torch

from ctxir import kinds
from ctxir.checks import check_choice
from ctxir.data import load_beir
from ctxir.encoders.models import DEFAULT_BI_ENCODER, load_cross_encoder, pick_device, resolve_model
from ctxir.evaluation import evaluate_run
from ctxir.rerank import ClsLrRanker, CrossEncoderReranker, Reranker
from ctxir.rerank.pipeline import Pipeline
from ctxir.retrieval import BM25Retriever
from ctxir.types import Corpus, CtxirError, Qrels, Queries, doc_text
from training.cls_lr_features import FeatureCache, Pair, features, folder_fingerprint, with_score
from training.common import (
    SQUAD_DEV_QUERIES,
    RunArgs,
    check_not_empty,
    cli_main,
    data_folder,
    dataset_entry,
    evaluation_row,
    general_entries,
    heldout_queries,
    machine_info,
    set_threads,
    take,
    tee_output,
    write_metrics,
)

# --cv-metric → the key of choose_c's record it maximises
CV_METRICS = {"average-precision": "average_precision", "ndcg": "ndcg"}


@dataclass
class ClsLrArgs(RunArgs):
    """The CLS-LR run's arguments; data_dir, device, seed and torch_threads come from RunArgs (every training
    script's), output_dir and model_name are redeclared with this script's defaults."""

    base_model: str = field(
        default=DEFAULT_BI_ENCODER,
        metadata={
            "help": "the cross-encoder whose [CLS] is read (a CrossEncoder folder or Hub id, e.g. "
            "outputs/cross-encoder-scifact); a plain encoder body gets an untrained head, so its "
            "cross-encoder anchor score is meaningless"
        },
    )
    output_dir: str = field(default="outputs/cls-lr", metadata={"help": "ranker folder to write"})
    layer: int = field(
        default=-1, metadata={"help": "hidden layer of the [CLS] vector (0 = embeddings, -1 = last)"}
    )
    max_length: int = field(
        default=0,
        metadata={
            "help": "tokens per pair (0 = the cross-encoder's own max_seq_length, capped at its position limit)"
        },
    )
    negatives_per_positive: int = field(
        default=4,
        metadata={"help": "hard negatives (BM25's best non-relevant documents) per relevant document"},
    )
    negative_depth: int = field(
        default=100, metadata={"help": "BM25 depth the hard negatives are drawn from"}
    )
    heldout_queries: str = field(
        default="random",
        metadata={
            "help": "which train queries are held out for the classification report: 'random' (a seeded "
            "--heldout-fraction of them) or 'base-unseen' (those the cross-encoder never trained on, "
            "rebuilt from its metrics.json as written by training/train_cross_encoder.py)"
        },
    )
    heldout_fraction: float = field(
        default=0.2,
        metadata={
            "help": "share of the train queries held out for the classification report (split by query)"
        },
    )
    max_samples: int = field(
        default=-1,
        metadata={
            "help": "use a seeded subset of this many train queries (each brings its positives and negatives); -1 = all"
        },
    )
    max_fit_queries: int = field(
        default=-1,
        metadata={
            "help": "fit on a seeded subset of this many of the non-held-out train queries (-1 = all); saves feature "
            "extraction time without shrinking the held-out report"
        },
    )
    c_grid: str = field(
        default="0.0001,0.0003,0.001,0.003,0.01,0.1,1,10",
        metadata={"help": "LogisticRegression C values tried by grouped cross-validation on the fit queries"},
    )
    class_weight: str = field(default="balanced", metadata={"help": "'balanced' or 'none'"})
    cv_metric: str = field(
        default="average-precision",
        metadata={
            "help": "what the query-grouped cross-validation maximises: 'average-precision' = one average "
            "precision over every fit pair pooled (a classifier's measure); 'ndcg' = the mean over fit queries "
            "of nDCG@10 of each query's own pairs ranked by their out-of-fold scores (a ranker's measure: a "
            "feature that only tells one query's share of relevant pairs from another's earns nothing)"
        },
    )
    cv_folds: int = field(
        default=5, metadata={"help": "query-grouped folds on the fit queries for C and threshold"}
    )
    rerank_depth: int = field(
        default=100, metadata={"help": "BM25 candidates re-ranked per SciFact test query"}
    )
    max_test_queries: int = field(
        default=-1, metadata={"help": "re-rank a seeded subset of test queries; -1 = all"}
    )
    verify_queries: int = field(
        default=2,
        metadata={
            "help": "test queries re-ranked again by the saved-then-loaded ranker and a CrossEncoderReranker "
            "to check they match the one-pass scores"
        },
    )
    score_feature: bool = field(
        default=False,
        metadata={
            "help": "also feed the cross-encoder's own score of each pair (read in the same pass) to the "
            "regression: its [CLS] alone was never trained for relevance. Needs a modular cross-encoder (a "
            "head after the body, e.g. the shipped segment-cosine one)"
        },
    )
    score_emphasis: str = field(
        default="1,10,100",
        metadata={
            "help": "--score-feature: how much less the score's weight is penalised than a [CLS] dimension's, a grid "
            "chosen with C by the same cross-validation (1 = alike; 10 = its standardised column ×10, a 100× weaker "
            "L2 pull on its weight): 384 [CLS] dimensions would otherwise outvote one score that ranks better alone"
        },
    )
    general: str = field(
        default="",
        metadata={
            "help": "also fit on general-domain relevance pairs from <data-dir>/general/, a comma list of "
            "squad, wikiqa, msmarco: each question's judged passages and its BM25 hard negatives over the "
            "source's own passages. Only questions the cross-encoder did not train on are drawn (its "
            "metrics.json says which), and never the SQuAD dev questions its fused mode was chosen on"
        },
    )
    general_queries: int = field(
        default=300, metadata={"help": "--general: questions drawn per source, seeded (-1 = all unseen)"}
    )
    batch_size: int = field(default=16, metadata={"help": "pairs per forward pass"})
    cache_dir: str = field(
        default="~/.cache/ctxir/cls-lr",
        metadata={
            "help": "where [CLS] features are cached as .npy, keyed by model weights + pairs ('' = no cache)"
        },
    )
    bundle_base: bool = field(
        default=False,
        metadata={
            "help": "copy the cross-encoder's files into the ranker folder (base_model '.') so it is self-contained"
        },
    )
    model_name: str = field(default="ctxir-cls-lr-scifact", metadata={"help": "short name for metrics.json"})


# ---------------------------------------------------------------- checks


def check_args(args: ClsLrArgs) -> list[float]:
    if args.negatives_per_positive < 1:
        raise CtxirError(f"--negatives-per-positive must be ≥ 1, got {args.negatives_per_positive!r}")
    if args.negative_depth < args.negatives_per_positive:
        raise CtxirError(
            f"--negative-depth ({args.negative_depth!r}) must be ≥ --negatives-per-positive "
            f"({args.negatives_per_positive!r}): negatives are drawn from that many BM25 hits"
        )
    if not 0 < args.heldout_fraction < 1:
        raise CtxirError(f"--heldout-fraction must be between 0 and 1, got {args.heldout_fraction!r}")
    for name in ("rerank_depth", "batch_size"):
        if getattr(args, name) < 1:
            raise CtxirError(f"--{name.replace('_', '-')} must be ≥ 1, got {getattr(args, name)!r}")
    for name in ("max_samples", "max_test_queries", "max_fit_queries", "general_queries"):
        if getattr(args, name) < -1 or getattr(args, name) == 0:
            raise CtxirError(
                f"--{name.replace('_', '-')} must be -1 (all) or ≥ 1, got {getattr(args, name)!r}"
            )
    if args.heldout_queries not in ("random", "base-unseen"):
        raise CtxirError(
            f"--heldout-queries {args.heldout_queries!r} is not known: use 'random' or 'base-unseen'"
        )
    check_choice(args.cv_metric, "--cv-metric", CV_METRICS)
    if args.cv_folds < 2:
        raise CtxirError(f"--cv-folds must be ≥ 2, got {args.cv_folds!r}")
    if args.class_weight not in ("balanced", "none"):
        raise CtxirError(f"--class-weight {args.class_weight!r} is not known: use 'balanced' or 'none'")
    if args.max_length < 0:
        raise CtxirError(f"--max-length must be ≥ 0 (0 = the cross-encoder's own), got {args.max_length!r}")
    grid = positive_grid("--c-grid", args.c_grid, "0.01,0.1,1", "C")
    pick_device(args.device)
    set_threads(args.torch_threads)
    emphasis_grid(args)  # a bad --score-emphasis stops here, before any loading
    return grid


# ---------------------------------------------------------------- data


@dataclass
class PairSet:
    """Labelled (query, document) pairs; ``groups`` is the query id of each pair (for splitting by query)."""

    pairs: list[Pair]
    labels: np.ndarray  # (pairs,) 1 = relevant
    groups: np.ndarray  # (pairs,) query id
    doc_ids: list[str]

    def __len__(self) -> int:
        return len(self.pairs)

    def rows(self, qids: set[str]) -> np.ndarray:
        """Indices of the pairs of ``qids``."""
        return np.array([i for i, g in enumerate(self.groups) if g in qids], dtype=np.int64)


def build_pairs(
    corpus: Corpus, queries: Queries, qrels: Qrels, bm25, negatives_per_positive: int, depth: int
) -> tuple[PairSet, dict[str, float]]:
    """Each query's relevant documents, then its BM25 hard negatives; also {qid: negatives per positive}."""
    qids = [q for q in queries if any(g > 0 and d in corpus for d, g in qrels.get(q, {}).items())]
    hits = bm25.search({q: queries[q] for q in qids}, depth) if qids else {}
    pairs, labels, groups, doc_ids, ratio = [], [], [], [], {}
    for qid in qids:
        judged = qrels[qid]
        positives = [d for d, g in judged.items() if g > 0 and d in corpus]
        # Judged-non-relevant documents (grade 0) are kept out too: they are not "hard negatives" BM25 found.
        negatives = [h.doc_id for h in hits[qid] if h.doc_id not in judged][
            : negatives_per_positive * len(positives)
        ]
        ratio[qid] = len(negatives) / len(positives)
        for doc_id, label in [(d, 1) for d in positives] + [(d, 0) for d in negatives]:
            pairs.append((queries[qid], doc_text(corpus[doc_id])))
            labels.append(label)
            groups.append(qid)
            doc_ids.append(doc_id)
    return PairSet(pairs, np.array(labels, dtype=np.int64), np.array(groups, dtype=object), doc_ids), ratio


def split_queries(qids: Sequence[str], heldout_fraction: float, seed: int) -> tuple[list[str], list[str]]:
    from sklearn.model_selection import train_test_split

    if len(qids) < 2:
        raise CtxirError(
            f"need at least 2 train queries with a relevant document to split into fit and held-out "
            f"parts, got {len(qids)}: raise --max-samples or check qrels/train.tsv"
        )
    fit, heldout = train_test_split(sorted(qids), test_size=heldout_fraction, random_state=seed)
    return list(fit), list(heldout)


def base_unseen_queries(base_path: str, all_qids: Sequence[str], positives: dict[str, set[str]]) -> set[str]:
    """The SciFact train queries a cross-encoder from training/train_cross_encoder.py never trained on.

    Its [CLS] vectors of pairs it was trained on are in-sample, so a classification report on them would flatter
    CLS-LR. Read from ``extra.train_query_ids`` in its metrics.json; for runs older than that record, rebuilt with
    that script's rule (seeded dev queries held out, then --max-samples pairs) and checked against its counts.
    """
    path = Path(base_path) / "metrics.json"
    if not path.is_file():
        raise CtxirError(
            f"--heldout-queries base-unseen needs {str(path)!r} (written by "
            "training/train_cross_encoder.py) to know which queries the cross-encoder trained on; "
            "use --heldout-queries random for other cross-encoders"
        )
    metrics = json.loads(path.read_text())
    config, extra = metrics.get("config", {}), metrics.get("extra", {})
    if metrics.get("model_type") != kinds.CROSS_ENCODER or config.get("task") != "scifact":
        raise CtxirError(
            f"{str(path)!r} is not a SciFact cross-encoder's metrics.json (model_type "
            f"{metrics.get('model_type')!r}, task {config.get('task')!r}): use --heldout-queries random"
        )
    qids = sorted(all_qids)
    if "train_query_ids" in extra:  # recorded by the training run itself
        return set(qids) - set(extra["train_query_ids"])
    # Older runs recorded only counts: rebuild the ids with that script's rule and check them against the counts.
    seed, dev_queries = int(config.get("seed", 42)), int(config.get("dev_queries", 0))
    dev = heldout_queries(qids, dev_queries, seed)
    pairs = take(
        [(q, d) for q in qids if q not in set(dev) for d in sorted(positives[q])],
        int(config.get("max_samples", -1)),
        seed,
    )
    seen = {q for q, _ in pairs}
    if (len(dev), len(seen)) != (extra.get("heldout_train_queries"), extra.get("train_queries")):
        raise CtxirError(
            f"could not rebuild the cross-encoder's training queries from {str(path)!r}: got "
            f"{len(dev)} held-out / {len(seen)} trained, its metrics.json says "
            f"{extra.get('heldout_train_queries')!r} / {extra.get('train_queries')!r}; "
            "use --heldout-queries random"
        )
    return set(qids) - seen


def general_pairs(args: ClsLrArgs, base_path: str) -> tuple[PairSet, dict]:
    """--general's pairs, query ids prefixed ``<source>:``: questions the cross-encoder did not train on (and not the
    SQuAD questions its fused mode was chosen on), each with its judged passages and BM25 hard negatives over its
    source's passages; and what metrics.json records of them."""
    from ctxir.data.general import load_general

    # the cross-encoder's own draw, made again from its config (training.cross_encoder_data.add_general's rule)
    path = Path(base_path) / "metrics.json"
    config = json.loads(path.read_text()).get("config", {}) if path.is_file() else {}
    seed, trained_sources = int(config.get("seed", args.seed)), str(config.get("general", "")).split(",")
    parts, record = [], {}
    for source, data in load_general(
        args.data_dir, [s.strip() for s in args.general.split(",") if s.strip()]
    ).items():
        answered = sorted(q for q in data.queries if data.qrels[q])
        trained = (
            set(take(answered, int(config.get("general_queries", -1)), seed))
            if source in trained_sources
            else set()
        )
        unseen = [q for q in answered if q not in trained]
        if source == "squad":  # training/evaluate_reranker.squad_dev's draw: the fused mode's dev questions
            dev = set(take(unseen, SQUAD_DEV_QUERIES, seed))
            unseen = [q for q in unseen if q not in dev]
        chosen = take(unseen, args.general_queries, args.seed)
        check_not_empty(
            len(chosen),
            f"--general {source}: every question of it was seen by the cross-encoder {args.base_model!r}",
            f"drop {source!r} from --general",
        )
        pairs, _ = build_pairs(
            data.corpus,
            {q: data.queries[q] for q in chosen},
            data.qrels,
            BM25Retriever(data.corpus),
            args.negatives_per_positive,
            args.negative_depth,
        )
        pairs.groups = np.array([f"{source}:{g}" for g in pairs.groups], dtype=object)
        parts.append(pairs)
        record[source] = {
            "queries": len(chosen),
            "unseen_by_base": len(unseen),
            "pairs": len(pairs),
            "positives": int(pairs.labels.sum()),
            "passages": len(data.corpus),
        }
        print(
            f"general {source}: {len(chosen)} of {len(unseen)} questions the cross-encoder did not train on, "
            f"{len(pairs)} pairs over {len(data.corpus)} passages"
        )
    return concat_pairs(parts), record


def concat_pairs(parts: Sequence[PairSet]) -> PairSet:
    return PairSet(
        [pair for part in parts for pair in part.pairs],
        np.concatenate([part.labels for part in parts]),
        np.concatenate([part.groups for part in parts]),
        [d for part in parts for d in part.doc_ids],
    )


# ---------------------------------------------------------------- fitting


def fit_logistic(
    x: np.ndarray, y: np.ndarray, c: float, class_weight: str | None, seed: int, emphasis: float = 1.0
):
    """Standardise then fit LogisticRegression: (coef (features,), intercept) on the *raw* features, + the model.

    Scaling makes one C mean the same on every base model (some [CLS] dimensions are 10-100× larger than
    others); it is folded back into coef/intercept, so the saved ranker stays ``coef · CLS + intercept``.
    ``emphasis`` multiplies the last standardised column (the cross-encoder's score where it is a feature): its
    weight's L2 penalty is then emphasis² times weaker than a [CLS] dimension's.
    """
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import FunctionTransformer, StandardScaler

    weights = np.ones(x.shape[1])
    weights[-1] = emphasis
    model = make_pipeline(
        StandardScaler(),
        FunctionTransformer(lambda z: z * weights),
        LogisticRegression(C=c, class_weight=class_weight, max_iter=5000, random_state=seed),
    )
    model.fit(x, y)
    scaler, lr = model[0], model[-1]
    coef = lr.coef_[0] * weights / scaler.scale_
    intercept = float(lr.intercept_[0] - np.dot(coef, scaler.mean_))
    return coef.astype(np.float32), intercept, model


def out_of_fold_scores(
    x: np.ndarray,
    y: np.ndarray,
    groups: np.ndarray,
    c: float,
    class_weight: str | None,
    folds: int,
    seed: int,
    emphasis: float = 1.0,
) -> np.ndarray:
    """Decision scores of each fit pair from a model that never saw its query (GroupKFold by query)."""
    from sklearn.model_selection import GroupKFold

    scores = np.zeros(len(y), np.float64)
    for train_idx, val_idx in GroupKFold(n_splits=folds).split(x, y, groups):
        if len(set(y[train_idx])) < 2:
            raise CtxirError(
                "a cross-validation fold has only one class: too few fit queries — raise --max-samples "
                "or lower --cv-folds"
            )
        coef, intercept, _ = fit_logistic(x[train_idx], y[train_idx], c, class_weight, seed, emphasis)
        scores[val_idx] = x[val_idx] @ coef + intercept
    return scores


def best_f1_threshold(y: np.ndarray, scores: np.ndarray) -> tuple[float, float]:
    """The score threshold maximising F1 of the positive class on (y, scores): (threshold, F1)."""
    from sklearn.metrics import precision_recall_curve

    precision, recall, thresholds = precision_recall_curve(y, scores)
    f1 = 2 * precision[:-1] * recall[:-1] / np.maximum(precision[:-1] + recall[:-1], 1e-12)
    best = int(np.argmax(f1))
    return float(thresholds[best]), float(f1[best])


def classification(y: np.ndarray, scores: np.ndarray, threshold: float) -> dict:
    """sklearn's classification_report at ``score ≥ threshold`` (dict, per class + accuracy) and the text."""
    from sklearn.metrics import average_precision_score, classification_report

    predicted = (scores >= threshold).astype(int)
    report = classification_report(
        y,
        predicted,
        labels=[0, 1],
        target_names=["non-relevant", "relevant"],
        output_dict=True,
        zero_division=0,
    )
    text = classification_report(
        y, predicted, labels=[0, 1], target_names=["non-relevant", "relevant"], digits=4, zero_division=0
    )
    return {
        "threshold": threshold,
        "report": report,
        "text": text,
        "positives": int(y.sum()),
        "negatives": int((1 - y).sum()),
        "average_precision": float(average_precision_score(y, scores)) if 0 < y.sum() < len(y) else None,
    }


def pr_curve_png(path: Path, y: np.ndarray, curves: dict[str, tuple[np.ndarray, float]], title: str) -> None:
    """Precision–recall curves of several scorers on the same pairs; the dot marks each tuned threshold."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from sklearn.metrics import PrecisionRecallDisplay

    fig, ax = plt.subplots(figsize=(5.6, 5.2), dpi=120)
    for i, (name, (scores, threshold)) in enumerate(curves.items()):
        display = PrecisionRecallDisplay.from_predictions(
            y, scores, name=name, ax=ax, plot_chance_level=i == 0
        )
        predicted = scores >= threshold
        tp = float((predicted & (y == 1)).sum())
        ax.plot(tp / max(y.sum(), 1), tp / max(predicted.sum(), 1), "o", color=display.line_.get_color())
    ax.set(xlabel="recall (relevant class)", ylabel="precision", xlim=(0, 1.01), ylim=(0, 1.02), title=title)
    ax.legend(loc="upper right", fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


# ---------------------------------------------------------------- re-ranking


class PrecomputedReranker(Reranker):
    """Looks scores up by (query, document text): lets Pipeline re-rank with scores from the one shared pass."""

    def __init__(self, name: str, pairs: Sequence[Pair], scores: np.ndarray):
        self.name = name
        self.table = {pair: float(s) for pair, s in zip(pairs, scores, strict=True)}

    def score_pairs(self, query: str, texts: Sequence[str]) -> np.ndarray:
        try:
            return np.array([self.table[(query, t)] for t in texts], dtype=np.float32)
        except KeyError as err:
            raise CtxirError(f"no precomputed {self.name} score for a candidate of query {query!r}") from err


def sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


# ---------------------------------------------------------------- run


@dataclass
class Inputs:
    """Step 1's result: SciFact's splits, the train queries split into fit and held-out, the cross-encoder's path."""

    scifact: Path
    corpus: Corpus
    train_queries: Queries
    train_qrels: Qrels
    test_queries: Queries
    test_qrels: Qrels
    fit_qids: list[str]
    heldout_qids: list[str]
    test_qids: list[str]
    base_path: str


def run(args: ClsLrArgs) -> dict:
    total_start = time.perf_counter()
    # 1. check arguments and data before anything is loaded or trained
    c_grid = check_args(args)
    inputs = load_inputs(args)
    output = Path(args.output_dir)
    output.mkdir(parents=True, exist_ok=True)
    with tee_output(output / "train.log"):
        print(
            f"=== train_cls_lr {time.strftime('%Y-%m-%d %H:%M:%S %Z')} ===\nconfig: {json.dumps(asdict(args))}"
        )
        result = _run(_Run(args, c_grid, inputs, output, total_start))
    return result


def load_inputs(args: ClsLrArgs) -> Inputs:
    """SciFact's train and test splits, and which train queries are fit on and which held out (``--heldout-queries``)."""
    scifact = data_folder(args.data_dir, "scifact")
    corpus, train_queries, train_qrels = load_beir(scifact, "train")
    _, test_queries, test_qrels = load_beir(scifact, "test")
    train_qids = [q for q in train_queries if any(g > 0 and d in corpus for d, g in train_qrels[q].items())]
    check_not_empty(
        len(train_qids),
        f"no query in {scifact / 'qrels' / 'train.tsv'} has a relevant document "
        "(grade > 0) that is in corpus.jsonl",
        "check that the qrels belong to this corpus",
    )
    base_path = resolve_model(args.base_model)
    unseen = None
    if args.heldout_queries == "base-unseen":
        positives = {q: {d for d, g in train_qrels[q].items() if g > 0 and d in corpus} for q in train_qids}
        unseen = base_unseen_queries(base_path, train_qids, positives)
    train_qids = take(train_qids, args.max_samples, args.seed)
    if unseen is None:
        fit_qids, heldout_qids = split_queries(train_qids, args.heldout_fraction, args.seed)
    else:
        fit_qids = [q for q in train_qids if q not in unseen]
        heldout_qids = [q for q in train_qids if q in unseen]
        if not fit_qids or not heldout_qids:
            raise CtxirError(
                f"--heldout-queries base-unseen leaves {len(fit_qids)} fit and {len(heldout_qids)} "
                "held-out queries: both must be non-empty (raise --max-samples)"
            )
    fit_qids = take(fit_qids, args.max_fit_queries, args.seed)
    test_qids = take(sorted(test_queries), args.max_test_queries, args.seed)
    return Inputs(
        scifact,
        corpus,
        train_queries,
        train_qrels,
        test_queries,
        test_qrels,
        fit_qids,
        heldout_qids,
        test_qids,
        base_path,
    )


def emphasis_grid(args: ClsLrArgs) -> list[float]:
    """--score-emphasis as numbers where the score is a feature; [1] (nothing to emphasise) otherwise."""
    if not args.score_feature:
        return [1.0]
    return positive_grid("--score-emphasis", args.score_emphasis, "1,10,100", "value")


def positive_grid(flag: str, value: str, example: str, what: str) -> list[float]:
    """A comma list of numbers > 0, or a CtxirError naming ``flag``."""
    try:
        grid = [float(v) for v in value.split(",") if v.strip()]
    except ValueError as err:
        raise CtxirError(f"{flag} {value!r} must be comma-separated numbers like '{example}'") from err
    if not grid or any(v <= 0 for v in grid):
        raise CtxirError(f"{flag} {value!r} must list at least one {what} > 0")
    return grid


def setting_name(c: float, emphasis: float) -> str:
    return f"C={c:g}" if emphasis == 1 else f"C={c:g}, score×{emphasis:g}"


def per_query_ndcg(y: np.ndarray, scores: np.ndarray, groups: np.ndarray, k: int = 10) -> float:
    """The mean over queries (``groups``) of nDCG@k of each query's own pairs ranked by ``scores`` (labels ``y``,
    1 = relevant), through ctxir's metrics; queries without a relevant pair are left out.

    Query a ranks its relevant pair 2nd (1 / log2(3) = 0.6309), query b 1st (1): the mean is 0.8155.

    >>> y, scores = np.array([1, 0, 0, 1]), np.array([0.2, 0.9, 0.5, 0.8])
    >>> round(per_query_ndcg(y, scores, np.array(["a", "a", "b", "b"])), 4)
    0.8155
    """
    from ctxir.evaluation import evaluate_run

    qrels, run = {}, {}
    for i, (label, score, group) in enumerate(zip(y, scores, groups, strict=True)):
        run.setdefault(str(group), {})[str(i)] = float(score)
        if label:
            qrels.setdefault(str(group), {})[str(i)] = 1
    run = {q: docs for q, docs in run.items() if q in qrels}
    return float(evaluate_run(qrels, run, [k]).aggregate[f"nDCG@{k}"])


def choose_c(
    x_fit: np.ndarray, y_fit: np.ndarray, g_fit: np.ndarray, c_grid: Sequence[float], args: ClsLrArgs
) -> tuple[tuple[float, float], dict]:
    """The C (and, with --score-feature, the score's emphasis) with the best out-of-fold ``--cv-metric``, folds
    grouped by query (a query's pairs never straddle folds) → ((C, emphasis), {(C, emphasis): {"average_precision",
    "ndcg", "oof" scores}})."""
    from sklearn.metrics import average_precision_score

    class_weight = None if args.class_weight == "none" else args.class_weight
    folds = min(args.cv_folds, len(set(g_fit)))
    if folds < 2:
        raise CtxirError(
            f"need at least 2 fit queries for cross-validation, got {len(set(g_fit))}: raise --max-samples"
        )
    cv = {}
    for c in c_grid:
        for emphasis in emphasis_grid(args):
            oof = out_of_fold_scores(x_fit, y_fit, g_fit, c, class_weight, folds, args.seed, emphasis)
            ap = float(average_precision_score(y_fit, oof))
            ndcg = per_query_ndcg(y_fit, oof, g_fit)
            cv[c, emphasis] = {"average_precision": ap, "ndcg": ndcg, "oof": oof}
            print(
                f"{setting_name(c, emphasis)}: out-of-fold average precision {ap:.4f}, per-query nDCG@10 "
                f"{ndcg:.4f} ({folds} folds by query)"
            )
    key = CV_METRICS[args.cv_metric]
    return max(cv, key=lambda setting: cv[setting][key]), cv


def rerank_test(
    bm25, scores: dict[str, np.ndarray], pairs: Sequence[Pair], queries: dict, qrels: dict, depth: int
) -> dict[str, dict]:
    """BM25's top-``depth`` re-ranked by each ranker's precomputed ``scores`` (aligned with ``pairs``) through the
    library's Pipeline and metrics → {"bm25" | ranker name: aggregate metrics}."""
    runs = {}
    for name, values in scores.items():
        stage_runs = Pipeline(bm25, PrecomputedReranker(name, pairs, values), depth=depth).run(
            queries, show_progress=False
        )
        runs[kinds.BM25], runs[name] = stage_runs["first_stage"], stage_runs["rerank"]
    k_values = sorted({1, 3, 5, 10, depth, 100})
    retrieval = {name: evaluate_run(qrels, r, k_values).aggregate for name, r in runs.items()}
    for name, agg in retrieval.items():
        print(
            f"{name:>14}: nDCG@10 {agg['nDCG@10']:.4f}  MRR@10 {agg['MRR@10']:.4f}  "
            f"Recall@{depth} {agg[f'Recall@{depth}']:.4f}"
        )
    return retrieval


@dataclass
class Labelled:
    """Step 2's result: the train pairs, which of them are fit on, and which the held-out report is stated on."""

    pairs: PairSet
    fit_rows: np.ndarray
    report_rows: np.ndarray
    eligible: set[str]  # held-out queries with ≥ 3 hard negatives per positive
    n_scifact: int = 0  # the first n pairs are SciFact's; the rest --general's (all fit on)
    general: dict = field(default_factory=dict)  # what metrics.json records of --general

    @property
    def y_fit(self) -> np.ndarray:
        return self.pairs.labels[self.fit_rows]

    @property
    def y_report(self) -> np.ndarray:
        return self.pairs.labels[self.report_rows]


@dataclass
class Fitted:
    """Steps 4–5: the C and thresholds chosen on the fit queries, and the fitted weights."""

    best_c: float
    cv: dict
    threshold: float
    oof_f1: float
    ce_threshold: float
    ce_fit_f1: float
    class_weight: str | None
    coef: np.ndarray
    intercept: float
    sk_model: Any
    seconds: float  # feature extraction of all train pairs + C search + fit
    base_ref: str = ""
    emphasis: float = 1.0  # the score feature's standardised column × this in the fit (--score-emphasis)


@dataclass
class RerankSet:
    """Step 7: BM25's candidates for the test queries as (query, document) pairs, and both rankers' one-pass
    scores of them."""

    qids: list[str]
    queries: Queries
    candidates: dict
    pairs: list[Pair]
    cls_scores: np.ndarray
    ce_logits: np.ndarray


@dataclass
class _Run:
    """One run's state, filled step by step (the numbered steps of ``_run``)."""

    args: ClsLrArgs
    c_grid: list[float]
    inputs: Inputs
    output: Path
    total_start: float
    timings: dict = field(default_factory=dict)
    labelled: Labelled | None = None
    device: str = ""
    max_length: int = 0
    cross_encoder: Any = None
    cache: FeatureCache | None = None
    x_all: np.ndarray | None = None  # [CLS] of every train pair
    ce_all: np.ndarray | None = None  # the cross-encoder's own logit of every train pair
    fitted: Fitted | None = None
    reports: dict = field(default_factory=dict)
    test: RerankSet | None = None
    retrieval: dict = field(default_factory=dict)
    verification: dict = field(default_factory=dict)


def _run(run: _Run) -> dict:
    args = run.args
    # 2. BM25 over the corpus: hard negatives for train queries, candidates for test queries
    bm25 = BM25Retriever(run.inputs.corpus)
    run.labelled = label_pairs(run, bm25)
    # 3. load the cross-encoder (a plain body gets a fresh head, seeded) and read [CLS] + its own score
    load_reader(run)
    train_start = time.perf_counter()
    parts = {"train pairs": run.labelled.pairs.pairs[: run.labelled.n_scifact]}
    if args.general:
        parts["general pairs"] = run.labelled.pairs.pairs[run.labelled.n_scifact :]
    read = [
        features(
            run.cross_encoder,
            run.cache,
            pairs,
            args.layer,
            args.batch_size,
            run.max_length,
            desc,
            run.timings,
        )
        for desc, pairs in parts.items()
    ]
    run.ce_all = np.concatenate([logits for _, logits in read])
    run.x_all = with_score(np.concatenate([cls for cls, _ in read]), run.ce_all, args.score_feature)
    # 4. choose C and the decision threshold on the fit queries only (query-grouped cross-validation)
    # 5. fit on all fit queries; save coef/intercept (safetensors + JSON) through ClsLrRanker
    run.fitted = fit(run, train_start)
    ranker = save_ranker(run)
    # 6. classification reports: fit queries (in-sample) and held-out queries, at p = 0.5 and the tuned threshold
    run.reports = classification_reports(run)
    # 7. re-rank BM25's top candidates on SciFact test queries: BM25, the cross-encoder, CLS-LR (one shared pass)
    run.test = rerank_candidates(run, bm25, ranker)
    test = run.test
    run.retrieval = rerank_test(
        bm25,
        {kinds.CROSS_ENCODER: test.ce_logits, kinds.CLS_LR: test.cls_scores},
        test.pairs,
        test.queries,
        {q: run.inputs.test_qrels[q] for q in test.qids},
        args.rerank_depth,
    )
    # 8. the saved ranker, loaded back, and a CrossEncoderReranker score like the one-pass scores
    run.verification = _verify(run.output, args, run.cross_encoder, run.inputs.corpus, test, run.device)
    # 9. metrics.json
    metrics = metrics_record(run)
    path = write_metrics(run.output, metrics)
    print(f"wrote {path} (total {metrics['extra']['total_wall_time_seconds']:.1f} s)")
    return metrics


def label_pairs(run: _Run, bm25) -> Labelled:
    """The fit and held-out queries' pairs (relevant + BM25 hard negatives), checked non-empty."""
    args, inputs = run.args, run.inputs
    fit_qids, heldout_qids = inputs.fit_qids, inputs.heldout_qids
    pairs, ratio = build_pairs(
        inputs.corpus,
        {q: inputs.train_queries[q] for q in fit_qids + heldout_qids},
        inputs.train_qrels,
        bm25,
        args.negatives_per_positive,
        args.negative_depth,
    )
    fit_rows = pairs.rows(set(fit_qids))
    y_fit = pairs.labels[fit_rows]
    check_not_empty(int(y_fit.sum()), "the fit queries have no relevant pairs", "raise --max-samples")
    check_not_empty(
        int((1 - y_fit).sum()),
        "BM25 found no non-relevant document for the fit queries",
        "raise --negative-depth",
    )
    # The target is stated on held-out queries with ≥ 3 hard negatives per positive.
    eligible = {q for q in heldout_qids if ratio.get(q, 0) >= 3}
    labelled = Labelled(pairs, fit_rows, pairs.rows(eligible), eligible, len(pairs))
    if args.general:
        extra, labelled.general = general_pairs(args, inputs.base_path)
        labelled.pairs = concat_pairs([pairs, extra])
        labelled.fit_rows = np.concatenate([fit_rows, len(pairs) + np.arange(len(extra))])
    check_not_empty(
        len(labelled.report_rows),
        f"none of the {len(heldout_qids)} held-out queries has ≥ 3 hard negatives per positive",
        "raise --negatives-per-positive / --negative-depth or --max-samples",
    )
    print(
        f"queries: {len(fit_qids)} fit, {len(heldout_qids)} held-out ({len(eligible)} with ≥ 3 negatives per "
        f"positive), {len(inputs.test_qids)} test; pairs: {len(fit_rows)} fit ({int(y_fit.sum())} relevant), "
        f"{len(labelled.report_rows)} held-out ({int(labelled.y_report.sum())} relevant)"
    )
    return labelled


def load_reader(run: _Run) -> None:
    """The cross-encoder whose [CLS] is read, its token limit, and the feature cache keyed by its files."""
    args, base_path = run.args, run.inputs.base_path
    torch.manual_seed(args.seed)
    run.device = pick_device(args.device)
    cross_encoder = load_cross_encoder(base_path, run.device)
    positions = getattr(cross_encoder.model.config, "max_position_embeddings", 512)
    run.max_length = min(args.max_length or cross_encoder.max_seq_length or positions, positions)
    # The anchor cross-encoder reads exactly the tokens CLS-LR reads (and CrossEncoderReranker agrees).
    cross_encoder.max_seq_length = run.max_length
    run.cross_encoder = cross_encoder
    run.cache = FeatureCache(args.cache_dir, folder_fingerprint(base_path), args.layer, run.max_length)
    print(
        f"cross-encoder {args.base_model!r} ({base_path}) on {run.device}, max_length {run.max_length}, "
        f"layer {args.layer}"
    )


def fit(run: _Run, train_start: float) -> Fitted:
    """C by grouped cross-validation and the F1-maximising thresholds, on the fit queries; then the final fit."""
    args, labelled = run.args, run.labelled
    y_fit, g_fit = labelled.y_fit, labelled.pairs.groups[labelled.fit_rows]
    x_fit = run.x_all[labelled.fit_rows]  # (fit pairs, hidden)
    (best_c, emphasis), cv = choose_c(x_fit, y_fit, g_fit, run.c_grid, args)
    threshold, oof_f1 = best_f1_threshold(y_fit, cv[best_c, emphasis]["oof"])
    ce_threshold, ce_fit_f1 = best_f1_threshold(y_fit, run.ce_all[labelled.fit_rows])
    print(
        f"chosen {setting_name(best_c, emphasis)}; F1-maximising threshold on fit queries (out-of-fold): score {threshold:.4f} "
        f"(probability {sigmoid(threshold):.4f}, F1 {oof_f1:.4f})"
    )
    class_weight = None if args.class_weight == "none" else args.class_weight
    coef, intercept, sk_model = fit_logistic(x_fit, y_fit, best_c, class_weight, args.seed, emphasis)
    return Fitted(
        best_c,
        cv,
        threshold,
        oof_f1,
        ce_threshold,
        ce_fit_f1,
        class_weight,
        coef,
        intercept,
        sk_model,
        time.perf_counter() - train_start,
        emphasis=emphasis,
    )


def save_ranker(run: _Run) -> ClsLrRanker:
    """The ranker (coef/intercept + what it was chosen on) saved through ClsLrRanker: safetensors + JSON."""
    args, fitted, y_fit = run.args, run.fitted, run.labelled.y_fit
    fitted.base_ref = _base_reference(args.base_model, run.inputs.base_path, run.output, args.bundle_base)
    ranker = ClsLrRanker(
        run.inputs.base_path,
        fitted.coef,
        fitted.intercept,
        layer=args.layer,
        max_length=run.max_length,
        device=run.device,
        batch_size=args.batch_size,
        score_feature=args.score_feature,
        metadata={
            "C": fitted.best_c,
            "score_emphasis": fitted.emphasis,
            "class_weight": fitted.class_weight,
            "standardised_then_folded": True,
            "threshold": fitted.threshold,
            "threshold_probability": float(sigmoid(fitted.threshold)),
            "threshold_chosen_on": "out-of-fold scores of the fit queries (max F1)",
            "train_pairs": len(y_fit),
            "train_positives": int(y_fit.sum()),
            "base_model_given": args.base_model,
        },
    )
    ranker.base_model = fitted.base_ref
    ranker.save(run.output)
    print(
        f"saved {run.output / 'cls_lr.safetensors'} and cls_lr_config.json (base_model {fitted.base_ref!r})"
    )
    return ranker


def classification_reports(run: _Run) -> dict:
    """Fit (in-sample) and held-out reports at p = 0.5 and at the tuned threshold, the cross-encoder's beside them;
    printed, and the held-out precision–recall curves drawn to pr_curve.png."""
    fitted, labelled = run.fitted, run.labelled
    y_fit, y_report = labelled.y_fit, labelled.y_report
    s_fit = run.x_all[labelled.fit_rows] @ fitted.coef + fitted.intercept
    s_report = run.x_all[labelled.report_rows] @ fitted.coef + fitted.intercept
    ce_report = run.ce_all[labelled.report_rows]
    reports = {
        "train_queries@0.5": classification(y_fit, s_fit, 0.0),
        "train_queries@tuned": classification(y_fit, s_fit, fitted.threshold),
        "heldout_queries@0.5": classification(y_report, s_report, 0.0),
        "heldout_queries@tuned": classification(y_report, s_report, fitted.threshold),
        "cross_encoder_heldout@tuned": classification(y_report, ce_report, fitted.ce_threshold),
    }
    for name, rep in reports.items():
        print(f"--- {name} (score ≥ {rep['threshold']:.4f}) ---\n{rep['text']}")
    pr_curve_png(
        run.output / "pr_curve.png",
        y_report,
        {"CLS-LR": (s_report, fitted.threshold), "cross-encoder score": (ce_report, fitted.ce_threshold)},
        f"Held-out SciFact train queries ({len(labelled.eligible)} queries, {int(y_report.sum())} relevant "
        "pairs)",
    )
    return reports


def rerank_candidates(run: _Run, bm25, ranker: ClsLrRanker) -> RerankSet:
    """BM25's top --rerank-depth for each test query, read once by the cross-encoder: both rankers' scores."""
    inputs = run.inputs
    queries = {q: inputs.test_queries[q] for q in inputs.test_qids}
    candidates = bm25.search(queries, run.args.rerank_depth)
    pairs = [(queries[q], doc_text(inputs.corpus[h.doc_id])) for q in inputs.test_qids for h in candidates[q]]
    x_test, ce_test = features(
        run.cross_encoder,
        run.cache,
        pairs,
        run.args.layer,
        run.args.batch_size,
        run.max_length,
        "test candidates",
        run.timings,
    )
    x_test = with_score(x_test, ce_test, run.args.score_feature)
    return RerankSet(inputs.test_qids, queries, candidates, pairs, ranker.score_features(x_test), ce_test)


def metrics_record(run: _Run) -> dict:
    """metrics.json (docs/training.md's contract); CLS-LR's "training" block in the Trainer scripts' keys."""
    args, inputs, fitted, labelled = run.args, run.inputs, run.fitted, run.labelled
    ndcg = {name: agg["nDCG@10"] for name, agg in run.retrieval.items()}
    y_fit, y_report = labelled.y_fit, labelled.y_report
    general_pairs_count = sum(int(g.get("pairs", 0)) for g in labelled.general.values())
    heldout_tuned, ce_heldout = (
        run.reports["heldout_queries@tuned"]["report"],
        run.reports["cross_encoder_heldout@tuned"],
    )
    heldout_how = (
        "train queries the cross-encoder never trained on"
        if args.heldout_queries == "base-unseen"
        else f"a seeded {args.heldout_fraction:g} of the train queries"
    )
    f1_config = (
        f"held-out SciFact train queries ({heldout_how}) with ≥ 3 BM25 hard negatives per positive "
        f"({len(labelled.eligible)} queries, {len(y_report)} pairs); threshold chosen on fit queries"
    )
    seconds = fitted.seconds
    return {
        "model_type": kinds.CLS_LR,
        "model_name": args.model_name,
        "base_model": args.base_model,
        "objective": "LogisticRegression (scikit-learn) on the cross-encoder's [CLS] vector"
        + (" and its own score of the pair" if args.score_feature else ""),
        "datasets": [
            # fit rows hold the --general pairs too; they get rows of their own
            dataset_entry("scifact", "train", "train", inputs.scifact, len(y_fit) - general_pairs_count),
            dataset_entry("scifact", "train (held-out queries)", "eval", inputs.scifact, len(y_report)),
            dataset_entry("scifact", "test", "eval", inputs.scifact, len(run.test.pairs)),
            *general_entries(args.data_dir, labelled.general),
        ],
        "config": asdict(args),
        "training": {
            "steps": int(fitted.sk_model[-1].n_iter_[0]),
            "epochs": float(fitted.sk_model[-1].n_iter_[0]),
            "train_examples": len(y_fit),
            "batch_size": args.batch_size,
            "learning_rate": None,
            "wall_time_seconds": round(seconds, 1),
            "examples_per_second": round(len(y_fit) / seconds, 2) if seconds > 0 else None,
            "device": run.device,
            "hardware": machine_info()["hardware"],
            "final_loss": _log_loss(fitted.sk_model, run.x_all[labelled.fit_rows], y_fit),
            "seed": args.seed,
        },
        "evaluations": [
            evaluation_row(
                "scifact",
                "train (held-out queries)",
                "classification",
                "F1 (relevant class)",
                ce_heldout["report"]["relevant"]["f1-score"],
                heldout_tuned["relevant"]["f1-score"],
                config=f1_config + "; before = the cross-encoder's own score, thresholded the same way",
            ),
            evaluation_row(
                "scifact",
                "train (held-out queries)",
                "classification",
                "accuracy",
                ce_heldout["report"]["accuracy"],
                heldout_tuned["accuracy"],
                config=f1_config,
            ),
            evaluation_row(
                "scifact",
                "test",
                "reranking",
                "nDCG@10",
                ndcg[kinds.BM25],
                ndcg[kinds.CLS_LR],
                anchor=round(ndcg[kinds.CROSS_ENCODER], 4),
                anchor_name=f"cross-encoder {args.base_model} re-ranking the same candidates",
                config=f"re-rank BM25 top-{args.rerank_depth}, {len(run.test.qids)} test queries; "
                "before = BM25 alone",
            ),
        ],
        "extra": extra_record(run, heldout_how),
    }


def extra_record(run: _Run, heldout_how: str) -> dict:
    """metrics.json "extra": every report and threshold, the C search, timings and the verification."""
    fitted, inputs, reports, timings = run.fitted, run.inputs, run.reports, run.timings
    extraction_pairs = sum(t["pairs"] for t in timings.values() if not t["cached"])
    extraction_seconds = sum(t["seconds"] for t in timings.values() if not t["cached"])
    return {
        "classification_reports": {
            k: {kk: vv for kk, vv in v.items() if kk != "text"} for k, v in reports.items()
        },
        "classification_reports_text": {k: v["text"] for k, v in reports.items()},
        "thresholds": {
            "cls_lr_score": fitted.threshold,
            "cls_lr_probability": float(sigmoid(fitted.threshold)),
            "cls_lr_fit_oof_f1": fitted.oof_f1,
            "cross_encoder_logit": fitted.ce_threshold,
            "cross_encoder_fit_f1": fitted.ce_fit_f1,
            "note": "'@0.5' = probability 0.5 (score 0); '@tuned' = the F1-maximising threshold "
            "chosen on out-of-fold scores of the fit queries, never on held-out or test",
        },
        "c_selection": {
            setting_name(*k): round(v[CV_METRICS[run.args.cv_metric]], 4) for k, v in fitted.cv.items()
        },
        "c_selection_metric": run.args.cv_metric,
        "c_selection_both": {
            setting_name(*k): {
                "average_precision": round(v["average_precision"], 4),
                "ndcg@10": round(v["ndcg"], 4),
            }
            for k, v in fitted.cv.items()
        },
        "chosen_C": fitted.best_c,
        "chosen_score_emphasis": fitted.emphasis,
        "features": "[CLS] + the cross-encoder's score" if run.args.score_feature else "[CLS]",
        "general": run.labelled.general,
        "queries": {
            "fit": len(inputs.fit_qids),
            "heldout": len(inputs.heldout_qids),
            "heldout_reported": len(run.labelled.eligible),
            "test": len(inputs.test_qids),
        },
        "heldout_queries": heldout_how,
        "reranking": {name: {k: round(v, 4) for k, v in agg.items()} for name, agg in run.retrieval.items()},
        "pr_curve": "pr_curve.png",
        "max_length": run.max_length,
        "layer": run.args.layer,
        "base_model_path": inputs.base_path,
        "base_model_reference": fitted.base_ref,
        "feature_extraction": timings,
        "feature_extraction_pairs_per_second": round(extraction_pairs / extraction_seconds, 2)
        if extraction_seconds > 0
        else None,
        # the whole run up to writing metrics.json (data loading, both feature passes, reports, verification)
        "total_wall_time_seconds": round(time.perf_counter() - run.total_start, 1),
        "verification": run.verification,
        "notes": "CLS-LR has no gradient training: 'steps'/'epochs' are L-BFGS iterations (each one full pass "
        "over the fit features), learning_rate is null, batch_size is the feature-extraction batch. "
        "wall_time_seconds covers feature extraction of all train pairs + C search + fit; "
        "examples_per_second = fit pairs / that time.",
    }


def _log_loss(sk_model, x: np.ndarray, y: np.ndarray) -> float:
    from sklearn.metrics import log_loss

    return round(float(log_loss(y, sk_model.predict_proba(x)[:, 1], labels=[0, 1])), 6)


def _base_reference(given: str, base_path: str, output: Path, bundle: bool) -> str:
    """What cls_lr_config.json names as base_model: '.' when bundled, a path relative to the ranker folder for
    a local cross-encoder (ClsLrRanker.load resolves it there), else the Hub id as given."""
    if bundle:
        for item in Path(base_path).iterdir():
            if item.name in (
                "README.md",
                "metrics.json",
                "train.log",
                "training_log.jsonl",
            ) or item.name.startswith("checkpoint"):
                continue
            target = output / item.name
            if item.is_dir():
                shutil.copytree(item, target, dirs_exist_ok=True)
            else:
                shutil.copy2(item, target)
        return "."
    if Path(given).expanduser().exists():
        return os.path.relpath(Path(base_path).resolve(), output.resolve())
    return given


def _verify(
    output: Path, args: ClsLrArgs, cross_encoder, corpus: Corpus, test: RerankSet, device: str
) -> dict:
    """Re-rank a few test queries for real (loaded ranker, CrossEncoderReranker) and compare with one-pass scores."""
    if args.verify_queries <= 0:
        return {"queries": 0}
    loaded = ClsLrRanker.load(output, device=device, batch_size=args.batch_size)
    reference = CrossEncoderReranker(cross_encoder, batch_size=args.batch_size)
    precomputed = PrecomputedReranker(kinds.CLS_LR, test.pairs, test.cls_scores)
    lookup = {pair: i for i, pair in enumerate(test.pairs)}
    activation = getattr(cross_encoder, "activation_fn", None) or torch.nn.Sigmoid()
    cls_diff, ce_diff, same_order = 0.0, 0.0, True
    for qid in test.qids[: args.verify_queries]:
        query, hits = test.queries[qid], test.candidates[qid]
        texts = [doc_text(corpus[h.doc_id]) for h in hits]
        rows = [lookup[(query, t)] for t in texts]
        got = loaded.score_pairs(query, texts)
        cls_diff = max(cls_diff, float(np.abs(got - test.cls_scores[rows]).max()))
        # the cross-encoder's own activation: sigmoid for a classifier head, identity for ctxir's segment-cosine head
        expected = activation(torch.from_numpy(test.ce_logits[rows])).numpy()
        ce_diff = max(ce_diff, float(np.abs(reference.score_pairs(query, texts) - expected).max()))
        same_order &= [h.doc_id for h in loaded.rerank(query, hits, corpus)] == [
            h.doc_id for h in precomputed.rerank(query, hits, corpus)
        ]
    checked = min(args.verify_queries, len(test.qids))
    print(
        f"verification on {checked} test queries: loaded ClsLrRanker vs one-pass "
        f"max |Δscore| {cls_diff:.2e}; CrossEncoderReranker vs one-pass max |Δ| {ce_diff:.2e}; "
        f"same CLS-LR order: {same_order}"
    )
    if cls_diff > 1e-3 or ce_diff > 1e-3:
        raise CtxirError(
            f"the loaded ranker or the cross-encoder disagrees with the one-pass scores (CLS-LR "
            f"{cls_diff:.2e}, cross-encoder {ce_diff:.2e}): the reported numbers would be wrong"
        )
    return {
        "queries": checked,
        "cls_lr_max_abs_diff": cls_diff,
        "cross_encoder_max_abs_prob_diff": ce_diff,
        "cls_lr_same_order": bool(same_order),
    }


def main(argv: list[str] | None = None) -> int:
    return cli_main(ClsLrArgs, run, argv)


if __name__ == "__main__":
    sys.exit(main())
