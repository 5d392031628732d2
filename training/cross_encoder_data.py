"""What a cross-encoder run trains on: STS-B pairs, or SciFact claims and title pseudo-queries with first-stage
negatives and general-domain questions beside them; and the pair scorer's STS-B pairs.
"""

from __future__ import annotations

import math
import random
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ctxir import kinds
from ctxir.encoders.models import resolve_model
from ctxir.rerank.passages import Passages
from ctxir.types import doc_text
from training.common import (
    check_not_empty,
    columns,
    data_folder,
    dataset_entry,
    general_entries,
    heldout_queries,
    take,
    take_train,
    unseen_heldout_queries,
)
from training.cross_encoder_args import LISTWISE, negative_stages
from training.cross_encoder_dev import (
    PairCorrelationEvaluator,
    mixed_dev_evaluator,
    scifact_dev_evaluator,
    wikiqa_dev_evaluator,
)
from training.steps import TaskData

if TYPE_CHECKING:
    from training.cross_encoder_args import CrossEncoderArgs
    from training.pair_scorer_args import PairScorerArgs


def build_stsb(args: CrossEncoderArgs) -> TaskData:
    from sentence_transformers.cross_encoder.evaluation import CrossEncoderCorrelationEvaluator

    from ctxir.data import load_sts

    folder = data_folder(args.data_dir, "stsb")
    train = take_train(load_sts(folder, "train"), args.max_samples, args.seed, "STS-B train pairs")
    dev, test = load_sts(folder, "dev"), load_sts(folder, "test")
    dataset = columns([(a, b, s / 5.0) for a, b, s in train], ["sentence1", "sentence2", "score"])
    dev_evaluator = CrossEncoderCorrelationEvaluator(
        [[a, b] for a, b, _ in dev],
        [s / 5.0 for _, _, s in dev],
        name="stsb-dev",
        batch_size=args.per_device_train_batch_size,
        write_csv=False,
    )
    rows = [
        dataset_entry("stsb", "train", "train", folder, len(train)),
        dataset_entry("stsb", "dev", "eval", folder, len(dev)),
        dataset_entry("stsb", "test", "eval", folder, len(test)),
    ]
    return TaskData(dataset, rows, dev_evaluator, {"sts": test})


def build_pair_scorer_data(args: PairScorerArgs) -> TaskData:
    """STS-B train (+ SICK train with --extra-train sick), STS-B dev evaluator and test: train_cross_encoder's."""
    from datasets import Dataset, concatenate_datasets

    from ctxir.data import load_sick

    data = build_stsb(args)
    if args.extra_train == "sick":
        folder = data_folder(args.data_dir, "sick")
        pairs = load_sick(folder, "train")
        rows = [(p.sentence_a, p.sentence_b, (p.relatedness - 1.0) / 4.0) for p in pairs]  # 1–5 → 0–1
        sick = columns(rows, ["sentence1", "sentence2", "score"])
        data.train = concatenate_datasets([data.train, sick.cast(data.train.features)])
        data.datasets.insert(1, dataset_entry("sick", "train", "train", folder, len(pairs)))
    elif args.extra_train == "silver":
        # sentence1, sentence2, score 0–1
        silver = Dataset.from_csv(args.silver_pairs).cast(data.train.features)
        data.train = concatenate_datasets([data.train, silver])
        # STS-B train's own sentences: STS-B's licence
        data.datasets.insert(
            1, dataset_entry("stsb", "train-silver", "train", args.silver_pairs, len(silver))
        )
    if args.both_orders:
        data.train = concatenate_datasets([data.train, swapped(data.train)])
    data.dev_evaluator = PairCorrelationEvaluator.like(data.dev_evaluator, args.pair_orders == "both")
    if args.init_from:
        data.datasets[1:1] = earlier_training_data(Path(args.init_from), data.datasets)
    return data


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


def bm25_negatives(
    bm25, queries: dict[str, str], positives: dict[str, set[str]], num: int
) -> dict[str, list[str]]:
    """{qid: the top ``num`` non-relevant hits of ``bm25`` (any first stage)}: the re-ranker's own candidates."""
    hits = bm25.search(queries, num + max(len(p) for p in positives.values()))
    return {q: [h.doc_id for h in hits[q] if h.doc_id not in positives[q]][:num] for q in queries}


def dense_negatives(
    args: CrossEncoderArgs, corpus: dict, queries: dict[str, str], positives: dict[str, set[str]], device: str
) -> dict[str, list[str]]:
    """{qid: doc ids} mined by sentence-transformers' mine_hard_negatives with the bi-encoder --dense-model."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.util import mine_hard_negatives

    text_to_id = {doc_text(doc): d for d, doc in corpus.items()}
    pairs = [(q, d) for q in queries for d in sorted(positives[q])]
    data = columns([(queries[q], doc_text(corpus[d])) for q, d in pairs], ["query", "positive"])
    model = SentenceTransformer(resolve_model(args.dense_model), device=device)
    mined = mine_hard_negatives(
        data,
        model,
        corpus=list(text_to_id),
        num_negatives=args.num_negatives if args.num_dense_negatives < 0 else args.num_dense_negatives,
        sampling_strategy="top",
        output_format="n-tuple",
        batch_size=32,
        cache_folder=str(Path.home() / ".cache" / "ctxir" / "mining"),
    )
    by_text = {text: q for q, text in queries.items()}
    out: dict[str, list[str]] = {q: [] for q in queries}
    for row in mined:
        values = list(row.values())
        qid = by_text[values[0]]
        for text in values[2:]:
            if text_to_id[text] not in out[qid]:
                out[qid].append(text_to_id[text])
    return out


def stage_pools(
    args: CrossEncoderArgs,
    corpus: dict,
    queries: dict[str, str],
    positives: dict[str, set[str]],
    bm25,
    device: str,
) -> dict[str, list[str]]:
    """{qid: non-relevant hits of each --negative-stages first stage over ``corpus``, interleaved best first}: the
    pool a group's negatives are drawn from (``bm25`` is that corpus's BM25Retriever, built once by the caller)."""
    from ctxir.encoders import BiEncoder
    from ctxir.rerank.pipeline import build_first_stages

    stages = negative_stages(args.negative_stages)
    size = max(args.num_negatives, args.negative_pool)
    pools = {kinds.BM25: bm25_negatives(bm25, queries, positives, size)}
    if kinds.HYBRID in stages:  # the app's hybrid (BM25 + the packaged MiniLM, RRF over each one's top 100)
        hybrid = build_first_stages(corpus, [kinds.HYBRID], [BiEncoder(device=device)], show_progress=True)[
            kinds.HYBRID
        ]
        pools[kinds.HYBRID] = bm25_negatives(hybrid, queries, positives, size)
    return {q: interleave([pools[s].get(q, []) for s in stages], size) for q in queries}


def interleave(lists: list[list[str]], size: int) -> list[str]:
    """The lists' first items, then their second items, …, each id once, at most ``size``.

    >>> interleave([["a", "b", "c"], ["b", "d"]], 4)
    ['a', 'b', 'd', 'c']
    """
    out: dict[str, None] = {}
    for rank in range(max((len(items) for items in lists), default=0)):
        for items in lists:
            if rank < len(items):
                out.setdefault(items[rank])
    return list(out)[:size]


def add_general(args: CrossEncoderArgs, train: ScifactTraining, device: str) -> dict:
    """Add --general sources' queries to ``train`` (ids prefixed ``<source>:``), each with its positives, a pool of
    --negative-stages negatives over the source's own collection, and one negative the source itself marks;
    returns what metrics.json records of them."""
    from ctxir.data.general import load_general
    from ctxir.retrieval import BM25Retriever

    train.corpus = dict(train.corpus)  # the test and dev corpus stays SciFact's
    rng, record = random.Random(args.seed), {}
    for source, data in load_general(
        args.data_dir, [s.strip() for s in args.general.split(",") if s.strip()]
    ).items():
        data = data.subset(
            take(sorted(q for q in data.queries if data.qrels[q]), args.general_queries, args.seed)
        )
        positives = {q: set(rel) for q, rel in data.qrels.items()}
        print(
            f"general {source}: {len(data.queries)} queries over {len(data.corpus)} passages; mining negatives "
            f"({args.negative_stages})"
        )
        pool = stage_pools(args, data.corpus, data.queries, positives, BM25Retriever(data.corpus), device)
        prefix = f"{source}:"
        train.corpus.update({prefix + d: doc for d, doc in data.corpus.items()})
        for q, text in data.queries.items():
            qid, marked = prefix + q, [d for d in data.negatives.get(q, []) if d not in pool[q]]
            train.queries[qid], train.positives[qid] = text, {prefix + d for d in positives[q]}
            train.pairs += [(qid, prefix + d) for d in sorted(positives[q])]
            train.bm25_pool[qid] = [prefix + d for d in pool[q]]
            train.negatives[qid] = train.bm25_pool[qid][: args.num_negatives] + [
                prefix + d for d in rng.sample(marked, min(1, len(marked)))
            ]
        record[source] = {"queries": len(data.queries), "passages": len(data.corpus)}
    return record


def resampled_groups(
    groups: list[tuple[str, list[str], list[str]]], bm25_pool: dict[str, list[str]], args: CrossEncoderArgs
) -> list[tuple[str, list[str], list[str]]]:
    """--negative-rounds groups per claim, each with --num-negatives BM25 negatives drawn from its pool (seeded);
    each title pseudo-query goes to one round only, so titles do not outnumber the claims."""
    rng = random.Random(args.seed)
    # a prefixed id ("title:…", "squad:…") is not a claim: those are spread over the rounds, claims are in each
    claims = [g for g in groups if ":" not in g[0]]
    titles = [g for g in groups if ":" in g[0]]
    out = []
    for round_ in range(max(args.negative_rounds, 1)):
        chosen = claims + titles[round_ :: max(args.negative_rounds, 1)]
        for q, pos, neg in chosen:
            pool = bm25_pool.get(q, [])[: max(args.negative_pool, args.num_negatives)]
            sampled = rng.sample(pool, min(args.num_negatives, len(pool)))
            out.append((q, pos, sampled + [d for d in neg if d not in pool and d not in sampled]))
    return out


def hybrid_teacher(args: CrossEncoderArgs, corpus: dict, queries: dict[str, str], bm25, device: str):
    """grade(qid, doc_id) = --teacher-scale · (z(BM25) + z(cosine)), each z-scored over the query's BM25 top
    --negative-pool (at least 20): a lexical + semantic judge of any (query, abstract) pair, with no judgments.
    NaN for a query with fewer than two BM25 hits (its group is dropped: one NaN label makes every weight NaN)."""
    import numpy as np

    from ctxir.encoders import BiEncoder

    depth = max(args.negative_pool, 20)
    hits = bm25.search(queries, max(depth, 200))
    bm25_scores = {q: {h.doc_id: h.score for h in hs} for q, hs in hits.items()}
    encoder = BiEncoder(args.dense_model, device=device)
    doc_ids, doc_vectors = encoder.encode_corpus(corpus)
    row = {d: i for i, d in enumerate(doc_ids)}
    qids = sorted(queries)
    query_vectors = encoder.encode([queries[q] for q in qids])
    doc_vectors = doc_vectors / np.linalg.norm(doc_vectors, axis=1, keepdims=True)
    query_vectors = query_vectors / np.linalg.norm(query_vectors, axis=1, keepdims=True)
    qrow = {q: i for i, q in enumerate(qids)}
    stats: dict[str, tuple[float, float, float, float, float]] = {}
    for q in qids:
        pool = [h.doc_id for h in hits[q][:depth]]
        if len(pool) < 2:  # no word of the query is in the index: nothing to z-score against (NaN labels)
            continue
        b = np.array([bm25_scores[q][d] for d in pool])
        c = doc_vectors[[row[d] for d in pool]] @ query_vectors[qrow[q]]
        floor = min(bm25_scores[q].values())  # below its top 200: no better than that
        stats[q] = (b.mean(), b.std() + 1e-6, c.mean(), c.std() + 1e-6, floor)
    print(
        f"hybrid teacher: BM25 + {args.dense_model} over {len(stats)} queries, z-scored over BM25 top {depth}; "
        f"{len(qids) - len(stats)} with fewer than 2 BM25 hits left out"
    )

    def grade(q: str, d: str) -> float:
        if q not in stats:
            return float("nan")
        b_mean, b_std, c_mean, c_std, floor = stats[q]
        cosine = float(doc_vectors[row[d]] @ query_vectors[qrow[q]])
        z = (bm25_scores[q].get(d, floor) - b_mean) / b_std + (cosine - c_mean) / c_std
        return float(args.teacher_scale * z)

    return grade


@dataclass
class ScifactTraining:
    """What the SciFact training set is built from: the corpus, the training queries (claims and title
    pseudo-queries) with their positives, and the negatives found for them."""

    corpus: dict
    queries: dict[str, str]
    positives: dict[str, set[str]]
    pairs: list[tuple[str, str]]
    negatives: dict[str, list[str]] = field(default_factory=dict)
    bm25_pool: dict[str, list[str]] = field(default_factory=dict)
    windows: WindowPicker | None = None  # --train-passages best

    def text(self, q: str, d: str) -> str:
        # a title query sees abstracts alone: doc_text starts with the title, which would be string matching
        title = "" if q.startswith("title:") else self.corpus[d]["title"]
        if self.windows is not None:
            return self.windows.best(self.queries[q], title, self.corpus[d]["text"])
        return self.corpus[d]["text"] if q.startswith("title:") else doc_text(self.corpus[d])


class WindowPicker:
    """The MaxP window of a document that shares the most query words, each word weighted by its IDF over the
    corpus: the passage a claim is most likely about, and, for a negative, the passage that competes hardest.

    >>> picker = WindowPicker({"a": {"title": "", "text": "otters swim"}, "b": {"title": "", "text": "banks lend"}},
    ...                       Passages(words=2, stride=1))
    >>> picker.best("where do otters sleep", "T", "banks lend money otters sleep here")  # both words: one window
    'T otters sleep'
    """

    def __init__(self, corpus: dict, passages: Passages):
        import numpy as np

        self.passages = passages
        frequency: dict[str, int] = {}
        for doc in corpus.values():
            for word in set(_words(doc_text(doc))):
                frequency[word] = frequency.get(word, 0) + 1
        self.idf = {w: float(np.log((len(corpus) + 1) / (n + 0.5))) for w, n in frequency.items()}
        self.unknown = float(np.log((len(corpus) + 1) / 0.5))

    def best(self, query: str, title: str, text: str) -> str:
        windows = self.passages.split(title, text)
        asked = set(_words(query))
        # ties (e.g. no shared word) keep the earliest window: the first tokens, as FirstP reads
        return max(windows, key=lambda w: sum(self.idf.get(x, self.unknown) for x in asked & set(_words(w))))


def _words(text: str) -> list[str]:
    return re.findall(r"\w+", text.lower())


def build_scifact(args: CrossEncoderArgs, device: str) -> TaskData:
    from ctxir.data import load_beir
    from ctxir.retrieval import BM25Retriever

    # 1. the claims (some held out as the dev set) and the title pseudo-queries
    folder = data_folder(args.data_dir, "scifact")
    corpus, queries, qrels = load_beir(folder, "train")
    positives = {q: {d for d, s in rel.items() if s > 0 and d in corpus} for q, rel in qrels.items()}
    dev_ids, train = scifact_queries(args, corpus, queries, positives)
    if args.train_passages == "best":
        train.windows = WindowPicker(corpus, Passages())
    # 2. hard negatives: BM25's best wrong answers are exactly what the re-ranker must push down
    bm25 = BM25Retriever(corpus)
    find_negatives(args, train, bm25, device)
    general = add_general(args, train, device) if args.general else {}
    n_pos, n_neg = len(train.pairs), sum(len(v) for v in train.negatives.values())
    check_not_empty(n_neg, "no hard negatives were found", "check --negatives and --num-negatives")
    # 3. the rows the loss reads, and the dev evaluator
    dataset = scifact_dataset(args, train, bm25, device)
    dev_evaluator = (
        scifact_dev_evaluator(args, bm25, corpus, queries, positives, dev_ids) if dev_ids else None
    )
    if dev_evaluator is not None and args.general:
        dev_evaluator = mixed_dev_evaluator([dev_evaluator, wikiqa_dev_evaluator(args)])
    # 4. the test claims the trained model re-ranks, and what metrics.json records
    _, test_queries, test_qrels = load_beir(folder, "test")
    if args.eval_max_queries > 0:
        test_queries = dict(list(test_queries.items())[: args.eval_max_queries])
        test_qrels = {q: test_qrels[q] for q in test_queries}
    datasets = [
        dataset_entry("scifact", "train", "train", folder, n_pos + n_neg),
        dataset_entry("scifact", "test", "eval", folder, len(test_queries)),
        *general_entries(args.data_dir, general),
    ]
    claim_ids = sorted({q for q, _ in train.pairs if ":" not in q})
    extra = {
        "positives": n_pos,
        "negatives": n_neg,
        "negatives_source": args.negatives,
        "heldout_train_queries": len(dev_ids),
        "train_queries": len(claim_ids),
        "pseudo_queries": sum(q.startswith("title:") for q in train.queries),
        "general": general,
        "negative_stages": negative_stages(args.negative_stages),
        "heldout_query_ids": dev_ids,
        "train_query_ids": claim_ids,
    }
    return TaskData(
        dataset,
        datasets,
        dev_evaluator,
        {"rerank": (corpus, test_queries, test_qrels, bm25)},
        extra,
        loss_options={"pos_weight": n_neg / max(n_pos, 1)},
    )


def scifact_queries(
    args: CrossEncoderArgs, corpus: dict, queries: dict[str, str], positives: dict[str, set[str]]
) -> tuple[list[str], ScifactTraining]:
    """(dev claim ids, the training set's queries and positive pairs); ``positives`` gains the pseudo-queries'."""
    qids = sorted(q for q in queries if positives.get(q))
    # SciFact has no dev split: hold out some training queries for the in-training evaluator.
    dev_ids = (
        unseen_heldout_queries({q: positives[q] for q in qids}, args.dev_queries, args.seed)
        if args.dev_split == "unseen"
        else heldout_queries(qids, args.dev_queries, args.seed)
    )
    judged = [(q, d) for q in qids if q not in set(dev_ids) for d in sorted(positives[q])]
    pairs = take_train(judged, args.max_samples, args.seed, "(claim, abstract) pairs")
    train_queries = {q: queries[q] for q, _ in pairs}
    # pseudo-queries: a document's title asks for its own abstract (corpus text only, no judgments)
    if args.pseudo_queries:
        titled = [d for d in sorted(corpus) if corpus[d]["title"].strip() and corpus[d]["text"].strip()]
        for d in take(titled, args.pseudo_queries, args.seed):
            qid = f"title:{d}"
            train_queries[qid] = corpus[d]["title"].strip()
            positives[qid] = {d}
            pairs.append((qid, d))
    return dev_ids, ScifactTraining(corpus, train_queries, positives, pairs)


def find_negatives(args: CrossEncoderArgs, train: ScifactTraining, bm25, device: str) -> None:
    """Fill ``train.negatives`` (and the BM25 pool the rounds re-sample from) from --negatives and
    --random-negatives."""
    train.negatives = {q: [] for q in train.queries}
    if args.negatives in ("bm25", "both"):
        train.bm25_pool = stage_pools(args, train.corpus, train.queries, train.positives, bm25, device)
        for q, docs in train.bm25_pool.items():
            train.negatives[q] += docs[: args.num_negatives]
    if args.negatives in ("dense", "both"):
        for q, docs in dense_negatives(args, train.corpus, train.queries, train.positives, device).items():
            train.negatives[q] += [d for d in docs if d not in train.negatives[q]]
    if args.random_negatives > 0:
        rng, doc_ids = random.Random(args.seed), sorted(train.corpus)
        for q in sorted(train.negatives):
            known = train.positives[q] | set(train.negatives[q])
            size = min(
                len(doc_ids), args.random_negatives + len(train.positives[q]) + len(train.negatives[q])
            )
            pool = [d for d in rng.sample(doc_ids, size) if d not in known]
            train.negatives[q] += pool[: args.random_negatives]


def scifact_dataset(args: CrossEncoderArgs, train: ScifactTraining, bm25, device: str):
    """Listwise: one row per (query, [positives, negatives], labels) group; else one row per labelled pair."""
    if args.loss not in LISTWISE:
        rows = [(train.queries[q], train.text(q, d), 1.0) for q, d in train.pairs]
        rows += [
            (train.queries[q], train.text(q, d), 0.0)
            for q in sorted(train.negatives)
            for d in train.negatives[q]
        ]
        return columns(rows, ["query", "document", "label"])
    groups = [(q, [d for q2, d in train.pairs if q2 == q], train.negatives[q]) for q in train.queries]
    if args.negative_rounds > 1 or args.negative_pool > args.num_negatives:
        groups = resampled_groups(groups, train.bm25_pool, args)
    if args.teacher == "hybrid":
        grade = hybrid_teacher(args, train.corpus, train.queries, bm25, device)
        groups = [g for g in groups if not math.isnan(grade(g[0], g[1][0]))]
        labels = [
            [grade(q, d) + args.gold_weight for d in pos] + [grade(q, d) for d in neg]
            for q, pos, neg in groups
        ]
    else:
        labels = [[1.0] * len(pos) + [0.0] * len(neg) for _, pos, neg in groups]
    queries = [train.queries[q] for q, _, _ in groups]
    docs = [[train.text(q, d) for d in pos + neg] for q, pos, neg in groups]
    return columns(list(zip(queries, docs, labels, strict=True)), ["query", "docs", "labels"])
