"""What CLS-LR is fitted on: SciFact train queries' relevant abstracts and BM25's best wrong ones (+ --general
questions), the train queries split into fit and held-out parts."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ctxir import kinds
from ctxir.data import load_beir
from ctxir.encoders.models import resolve_model
from ctxir.retrieval import BM25Retriever
from ctxir.types import Corpus, CtxirError, Qrels, Queries, doc_text
from training.cls_lr_features import Pair
from training.common import (
    SQUAD_DEV_QUERIES,
    check_not_empty,
    data_folder,
    heldout_queries,
    take,
    untrained_questions,
)

if TYPE_CHECKING:
    from training.cls_lr_args import ClsLrArgs


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
    """The SciFact train queries the cross-encoder never trained on (its [CLS] of trained pairs is in-sample):
    its metrics.json's ``extra.train_query_ids``, else rebuilt with its script's rule and checked against its counts."""
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
    seed = int(config.get("seed", args.seed))
    parts, record = [], {}
    for source, data in load_general(
        args.data_dir, [s.strip() for s in args.general.split(",") if s.strip()]
    ).items():
        unseen = untrained_questions(data, source, config, args.seed)
        if source == "squad":  # training/fusion_choice.squad_dev's draw: the fused mode's dev questions
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


def label_pairs(args: ClsLrArgs, inputs: Inputs, bm25) -> Labelled:
    """The fit and held-out queries' pairs (relevant + BM25 hard negatives, + --general's), checked non-empty."""
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
