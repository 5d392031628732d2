"""What a cross-encoder run trains on and its dev evaluators: STS-B pairs, or SciFact claims with first-stage
negatives (+ title pseudo-queries and general-domain questions)."""

from __future__ import annotations

import copy
import functools
import itertools
import random
import re
from collections import Counter
from pathlib import Path

import numpy as np
from sentence_transformers.base.evaluation.evaluator import BaseEvaluator
from sentence_transformers.cross_encoder.evaluation import (
    CrossEncoderCorrelationEvaluator,
    CrossEncoderRerankingEvaluator,
)

from ctxir import kinds
from ctxir.encoders.models import DEFAULT_BI_ENCODER, resolve_model
from ctxir.files import read_json
from ctxir.rerank.passages import Passages
from ctxir.rerank.rankers import pair_scores
from ctxir.types import doc_text
from training import common
from training.cross_encoder_args import negative_stages
from training.steps import TaskData, dev_metric_key

HELDOUT = "scifact-train-heldout"  # the SciFact dev evaluator's name: its metrics' prefix


def build_pair_scorer_data(args) -> TaskData:
    """STS-B train (scores / 5; + silver pairs, + swapped pairs), its dev evaluator and test pairs."""
    from datasets import Dataset, concatenate_datasets

    from ctxir.data import load_sts

    folder = common.data_folder(args.data_dir, "stsb")
    train = common.take_train(load_sts(folder, "train"), args.max_samples, args.seed, "STS-B train pairs")
    dev, test = load_sts(folder, "dev"), load_sts(folder, "test")
    dataset = common.columns([(a, b, s / 5.0) for a, b, s in train], ["sentence1", "sentence2", "score"])
    dev_evaluator = PairCorrelationEvaluator(
        [[a, b] for a, b, _ in dev],
        [s / 5.0 for _, _, s in dev],
        name="stsb-dev",
        batch_size=args.per_device_train_batch_size,
        both_orders=args.pair_orders == "both",
    )
    rows = [common.dataset_entry("stsb", "train", "train", folder, len(train))]
    if args.extra_train == "silver":  # STS-B train's own sentences re-paired: STS-B's licence
        silver = Dataset.from_csv(args.silver_pairs).cast(dataset.features)
        dataset = concatenate_datasets([dataset, silver])
        rows.append(common.dataset_entry("stsb", "train-silver", "train", args.silver_pairs, len(silver)))
    if args.init_from:
        rows[1:1] = earlier_training_data(Path(args.init_from), rows)
    if args.both_orders:
        swapped = dataset.rename_columns({"sentence1": "sentence2", "sentence2": "sentence1"})
        dataset = concatenate_datasets([dataset, swapped.select_columns(dataset.column_names)])
    rows += [
        common.dataset_entry("stsb", "dev", "eval", folder, len(dev)),
        common.dataset_entry("stsb", "test", "eval", folder, len(test)),
    ]
    return TaskData(dataset, rows, dev_evaluator, {"sts": test})


def earlier_training_data(folder: Path, datasets: list[dict]) -> list[dict]:
    """The training data of the model in ``folder`` not in ``datasets``, marked "stage": "earlier" for the card."""
    seen = {(d["name"], d["split"]) for d in datasets if d["role"] == "train"}
    earlier = [
        d for d in (read_json(folder / "metrics.json") or {}).get("datasets", []) if d.get("role") == "train"
    ]
    return [{**d, "stage": "earlier"} for d in earlier if (d["name"], d["split"]) not in seen]


class PairCorrelationEvaluator(CrossEncoderCorrelationEvaluator):
    """sentence-transformers' Pearson/Spearman evaluator, each pair scored as ctxir does (``pair_scores``)."""

    def __init__(self, *args, both_orders: bool = False, **kwargs):
        super().__init__(*args, write_csv=False, **kwargs)
        self.both_orders = both_orders

    def __call__(self, model, output_path=None, epoch: int = -1, steps: int = -1) -> dict[str, float]:
        from scipy.stats import pearsonr, spearmanr

        predict = functools.partial(
            model.predict,
            prompt_name=self.prompt_name,
            batch_size=self.batch_size,
            convert_to_numpy=True,
            show_progress_bar=self.show_progress_bar,
        )
        predicted = pair_scores(predict, self.sentence_pairs, self.both_orders)  # (pairs,)
        metrics = {
            "pearson": float(pearsonr(self.scores, predicted)[0]),
            "spearman": float(spearmanr(self.scores, predicted)[0]),
        }
        metrics = self.prefix_name_to_metrics(metrics, self.name)
        self.store_metrics_in_model_card_data(model, metrics, epoch, steps)
        return metrics


def sts_test(model, pairs: list, batch_size: int, both_orders: bool = False) -> dict:
    """{("stsb", "test", metric): value}: STS-B test Spearman and Pearson, each pair scored in one or both orders."""
    evaluator = PairCorrelationEvaluator(
        [[a, b] for a, b, _ in pairs],
        [s for _, _, s in pairs],
        name="stsb-test",
        batch_size=batch_size,
        both_orders=both_orders,
    )
    result = evaluator(model)
    return {("stsb", "test", m): result[f"stsb-test_{m}"] for m in ("spearman", "pearson")}


def dev_orders(model, dev: PairCorrelationEvaluator) -> dict[str, float]:
    """{"one": dev Spearman of (a, b) as given, "both": of the mean of both orders}: what --pair-orders is chosen on."""
    spearman = {}
    for orders in ("one", "both"):
        evaluator = copy.copy(dev)
        evaluator.both_orders = orders == "both"
        spearman[orders] = round(evaluator(model)[f"{dev.name}_spearman"], 4)
    return spearman


def bm25_negatives(bm25, queries: dict[str, str], positives: dict, num: int) -> dict[str, list[str]]:
    """{qid: the top ``num`` non-relevant hits of ``bm25`` (any first stage)}: the re-ranker's own candidates."""
    hits = bm25.search(queries, num + max(len(p) for p in positives.values()))
    return {q: [h.doc_id for h in hits[q] if h.doc_id not in positives[q]][:num] for q in queries}


def stage_pools(corpus, queries, positives, bm25, stages: list[str], size: int, device: str) -> dict:
    """{qid: the top ``size`` non-relevant hits of each first stage in ``stages``, interleaved best first}."""
    from ctxir.encoders import BiEncoder
    from ctxir.rerank.pipeline import build_first_stages

    pools = {kinds.BM25: bm25_negatives(bm25, queries, positives, size)}
    if kinds.HYBRID in stages:  # the app's hybrid (BM25 + the packaged MiniLM, RRF over each one's top 100)
        hybrid = build_first_stages(corpus, [kinds.HYBRID], [BiEncoder(device=device)], show_progress=True)
        pools[kinds.HYBRID] = bm25_negatives(hybrid[kinds.HYBRID], queries, positives, size)
    return {q: interleave([pools[s].get(q, []) for s in stages], size) for q in queries}


def interleave(lists: list[list[str]], size: int) -> list[str]:
    """The lists' first items, then their second items, …, each id once, at most ``size``.

    >>> interleave([["a", "b", "c"], ["b", "d"]], 4)
    ['a', 'b', 'd', 'c']
    """
    ranks = itertools.zip_longest(*lists)
    return list(dict.fromkeys(d for rank in ranks for d in rank if d is not None))[:size]


def dense_negatives(corpus, queries, positives, model_name: str, num: int, device: str) -> dict:
    """{qid: doc ids} mined by sentence-transformers' mine_hard_negatives with the bi-encoder ``model_name``."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.util import mine_hard_negatives

    text_to_id = {doc_text(doc): d for d, doc in corpus.items()}
    pairs = [(queries[q], doc_text(corpus[d])) for q in queries for d in sorted(positives[q])]
    mined = mine_hard_negatives(
        common.columns(pairs, ["query", "positive"]),
        SentenceTransformer(resolve_model(model_name), device=device),
        corpus=list(text_to_id),
        num_negatives=num,
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
        out[qid] += [text_to_id[t] for t in dict.fromkeys(values[2:]) if text_to_id[t] not in out[qid]]
    return out


class WindowPicker:
    """The MaxP window of a document that shares the most query words, each word weighted by its IDF over the
    corpus: the passage a claim is most likely about, and, for a negative, the passage that competes hardest.

    >>> picker = WindowPicker({"a": {"title": "", "text": "otters swim"}, "b": {"title": "", "text": "banks lend"}},
    ...                       Passages(words=2, stride=1))
    >>> picker.best("where do otters sleep", "T", "banks lend money otters sleep here")  # both words: one window
    'T otters sleep'
    """

    def __init__(self, corpus: dict, passages: Passages):
        self.passages = passages
        frequency = Counter(word for doc in corpus.values() for word in set(_words(doc_text(doc))))
        self.idf = {w: float(np.log((len(corpus) + 1) / (n + 0.5))) for w, n in frequency.items()}
        self.unknown = float(np.log((len(corpus) + 1) / 0.5))

    def best(self, query: str, title: str, text: str) -> str:
        asked = set(_words(query))
        # ties (e.g. no shared word) keep the earliest window: the first tokens, as FirstP reads
        return max(
            self.passages.split(title, text),
            key=lambda w: sum(self.idf.get(x, self.unknown) for x in asked & set(_words(w))),
        )


def _words(text: str) -> list[str]:
    return re.findall(r"\w+", text.lower())


def resampled_groups(groups: list, pools: dict, rounds: int, num: int, pool_size: int, seed: int) -> list:
    """``rounds`` groups per claim (per title or --general query: one), ``num`` negatives each from its pool."""
    rng = random.Random(seed)
    claims, others = [g for g in groups if ":" not in g[0]], [g for g in groups if ":" in g[0]]
    out = []
    for round_ in range(rounds):
        for q, pos, neg in claims + others[round_::rounds]:
            pool = pools.get(q, [])[:pool_size]
            sampled = rng.sample(pool, min(num, len(pool)))
            out.append((q, pos, sampled + [d for d in neg if d not in pool and d not in sampled]))
    return out


def build_scifact(args, device: str) -> TaskData:
    """SciFact's training claims with hard negatives (+ pseudo-queries, --general), the dev evaluator, the test."""
    from ctxir.data import load_beir
    from ctxir.data.general import load_general
    from ctxir.retrieval import BM25Retriever

    # 1. the claims: SciFact has no dev split, so some training claims are held out for the dev evaluator
    folder = common.data_folder(args.data_dir, "scifact")
    corpus, queries, qrels = load_beir(folder, "train")
    positives = {q: {d for d, s in rel.items() if s > 0 and d in corpus} for q, rel in qrels.items()}
    qids = sorted(q for q in queries if positives.get(q))
    if args.dev_split == "unseen":
        dev_ids = common.unseen_heldout_queries({q: positives[q] for q in qids}, args.dev_queries, args.seed)
    else:
        dev_ids = common.heldout_queries(qids, args.dev_queries, args.seed)
    judged = [(q, d) for q in qids if q not in set(dev_ids) for d in sorted(positives[q])]
    pairs = common.take_train(judged, args.max_samples, args.seed, "(claim, abstract) pairs")
    train_queries = {q: queries[q] for q, _ in pairs}
    # 2. pseudo-queries: a document's title asks for its own abstract (corpus text only, no judgments)
    if args.pseudo_queries:
        titled = [d for d in sorted(corpus) if corpus[d]["title"].strip() and corpus[d]["text"].strip()]
        for d in common.take(titled, args.pseudo_queries, args.seed):
            train_queries[f"title:{d}"], positives[f"title:{d}"] = corpus[d]["title"].strip(), {d}
            pairs.append((f"title:{d}", d))
    # 3. hard negatives: BM25's best wrong answers are exactly what the re-ranker must push down
    bm25 = BM25Retriever(corpus)
    stages, pool_size = negative_stages(args.negative_stages), max(args.num_negatives, args.negative_pool)
    negatives: dict[str, list[str]] = {q: [] for q in train_queries}
    pools: dict[str, list[str]] = {}
    if args.negatives in ("bm25", "both"):
        pools = stage_pools(corpus, train_queries, positives, bm25, stages, pool_size, device)
        for q, docs in pools.items():
            negatives[q] += docs[: args.num_negatives]
    if args.negatives in ("dense", "both"):
        num = args.num_negatives if args.num_dense_negatives < 0 else args.num_dense_negatives
        dense = dense_negatives(corpus, train_queries, positives, DEFAULT_BI_ENCODER, num, device)
        for q, docs in dense.items():
            negatives[q] += [d for d in docs if d not in negatives[q]]
    # 4. --general: each source's questions (ids prefixed "<source>:"), --general-queries of each (seeded), with a
    # pool of --negative-stages negatives over the source's own passages and one negative the source marks
    train_corpus, general, rng = dict(corpus), {}, random.Random(args.seed)  # test and dev stay SciFact's
    sources = [s.strip() for s in args.general.split(",") if s.strip()]
    for source, data in (load_general(args.data_dir, sources) if args.general else {}).items():
        chosen = common.take(
            sorted(q for q in data.queries if data.qrels[q]), args.general_queries, args.seed
        )
        data = data.subset(chosen)
        own = {q: set(rel) for q, rel in data.qrels.items()}
        print(
            f"general {source}: {len(data.queries)} queries over {len(data.corpus)} passages; mining negatives "
            f"({','.join(stages)})"
        )
        retriever = BM25Retriever(data.corpus)
        pool = stage_pools(data.corpus, data.queries, own, retriever, stages, pool_size, device)
        prefix = f"{source}:"
        train_corpus.update({prefix + d: doc for d, doc in data.corpus.items()})
        for q, text in data.queries.items():
            qid, marked = prefix + q, [d for d in data.negatives.get(q, []) if d not in pool[q]]
            train_queries[qid], positives[qid] = text, {prefix + d for d in own[q]}
            pairs += [(qid, prefix + d) for d in sorted(own[q])]
            pools[qid] = [prefix + d for d in pool[q]]
            drawn = [prefix + d for d in rng.sample(marked, min(1, len(marked)))]
            negatives[qid] = pools[qid][: args.num_negatives] + drawn
        general[source] = {"queries": len(data.queries), "passages": len(data.corpus)}
    n_pos, n_neg = len(pairs), sum(len(v) for v in negatives.values())
    common.check_not_empty(n_neg, "no hard negatives were found", "check --negatives and --num-negatives")
    # 5. the rows the loss reads
    windows = WindowPicker(corpus, Passages()) if args.train_passages == "best" else None

    def text(q: str, d: str) -> str:
        # a title query sees abstracts alone: doc_text starts with the title, which would be string matching
        doc, title_query = train_corpus[d], q.startswith("title:")
        if windows is not None:
            return windows.best(train_queries[q], "" if title_query else doc["title"], doc["text"])
        return doc["text"] if title_query else doc_text(doc)

    if args.loss != "listnet":  # labelled pairs; listwise: (query, [positives, negatives], labels)
        rows = [(train_queries[q], text(q, d), 1.0) for q, d in pairs]
        rows += [(train_queries[q], text(q, d), 0.0) for q in sorted(negatives) for d in negatives[q]]
        dataset = common.columns(rows, ["query", "document", "label"])
    else:
        groups = [(q, [d for q2, d in pairs if q2 == q], negatives[q]) for q in train_queries]
        if args.negative_rounds > 1 or args.negative_pool > args.num_negatives:
            rounds, num = args.negative_rounds, args.num_negatives
            groups = resampled_groups(groups, pools, rounds, num, pool_size, args.seed)
        labels = [[1.0] * len(pos) + [0.0] * len(neg) for _, pos, neg in groups]
        texts = [[text(q, d) for d in pos + neg] for q, pos, neg in groups]
        rows = list(zip([train_queries[q] for q, _, _ in groups], texts, labels, strict=True))
        dataset = common.columns(rows, ["query", "docs", "labels"])
    # 6. the dev evaluator: BM25's top --dev-depth of the held-out claims re-ranked (+ WikiQA dev with --general)
    dev, batch = None, args.per_device_train_batch_size
    if dev_ids:
        dev_queries = {q: queries[q] for q in dev_ids}
        hits = bm25.search(dev_queries, args.dev_depth)
        if args.train_passages == "best":
            dev_qrels = {q: dict.fromkeys(positives[q], 1) for q in dev_ids}
            dev = maxp_evaluator(dev_queries, hits, corpus, dev_qrels, batch)
        else:
            candidates = {q: [corpus[h.doc_id] for h in hits[q]] for q in dev_ids}
            rows = [(queries[q], [corpus[d] for d in sorted(positives[q])], candidates[q]) for q in dev_ids]
            dev = reranking_evaluator(rows, HELDOUT, batch)
        if args.general:
            dev = mixed_dev_evaluator([dev, wikiqa_dev_evaluator(args.data_dir, batch)])
    # 7. the test claims the trained model re-ranks, and what metrics.json records
    test_queries, test_qrels = common.first_test_queries(folder, args.eval_max_queries)
    datasets = [
        common.dataset_entry("scifact", "train", "train", folder, n_pos + n_neg),
        common.dataset_entry("scifact", "test", "eval", folder, len(test_queries)),
        *common.general_entries(args.data_dir, general),
    ]
    claim_ids = sorted({q for q, _ in pairs if ":" not in q})
    extra = {
        "positives": n_pos,
        "negatives": n_neg,
        "negatives_source": args.negatives,
        "heldout_train_queries": len(dev_ids),
        "train_queries": len(claim_ids),
        "pseudo_queries": sum(q.startswith("title:") for q in train_queries),
        "general": general,
        "negative_stages": stages,
        "heldout_query_ids": dev_ids,
        "train_query_ids": claim_ids,
        "pos_weight": n_neg / max(n_pos, 1),
    }
    test = {"rerank": (corpus, test_queries, test_qrels, bm25)}
    return TaskData(dataset, datasets, dev, test, extra)


def reranking_evaluator(rows: list[tuple], name: str, batch_size: int) -> CrossEncoderRerankingEvaluator:
    """sentence-transformers' nDCG@10 re-ranking evaluator of ``rows``: (query, positive docs, candidate docs)."""
    samples = [
        {"query": q, "positive": [doc_text(d) for d in pos], "documents": [doc_text(d) for d in docs]}
        for q, pos, docs in rows
    ]
    return CrossEncoderRerankingEvaluator(
        samples, at_k=10, always_rerank_positives=False, name=name, batch_size=batch_size, write_csv=False
    )


class NdcgEvaluator(BaseEvaluator):
    """An evaluator whose metrics are ``score(model, output_path, epoch, steps)``, primary ``<name>_ndcg@10``."""

    def __init__(self, name: str, score):
        super().__init__()
        self.name, self.score, self.primary_metric = name, score, f"{name}_ndcg@10"

    def __call__(self, model, output_path=None, epoch: int = -1, steps: int = -1) -> dict[str, float]:
        metrics = self.score(model, output_path, epoch, steps)
        self.store_metrics_in_model_card_data(model, metrics, epoch, steps)
        return metrics


def maxp_evaluator(queries: dict, hits: dict, corpus: dict, qrels: dict, batch_size: int) -> NdcgEvaluator:
    """The --train-passages best dev evaluator: nDCG@10 of the held-out claims, each document by its best window."""
    from ctxir.evaluation import evaluate_run
    from ctxir.rerank import CrossEncoderReranker

    def score(model, *_) -> dict[str, float]:
        reranker = CrossEncoderReranker(model, batch_size=batch_size, passages=Passages())
        run = {
            q: {h.doc_id: h.score for h in reranker.rerank(t, hits[q], corpus)} for q, t in queries.items()
        }
        aggregate = evaluate_run(qrels, run).aggregate
        return {f"{HELDOUT}_{m.lower()}": float(aggregate[m]) for m in ("nDCG@10", "MRR@10")}

    return NdcgEvaluator(HELDOUT, score)


def wikiqa_dev_evaluator(data_dir: str, batch_size: int) -> CrossEncoderRerankingEvaluator:
    """WikiQA dev as a re-ranking evaluator: each answered question's summary sentences re-ranked (nDCG@10)."""
    from ctxir.data.general import load_wikiqa

    dev = load_wikiqa(Path(data_dir) / "general" / "wikiqa" / "WikiQA-dev.tsv")
    # the summary's sentences in their own order ("D1-0", "D1-1", …): the evaluator's base order is no oracle
    order = {d: i for i, d in enumerate(dev.corpus)}
    answered = [q for q in sorted(dev.queries) if dev.negatives[q]]  # nDCG needs two candidates at least
    candidates = {q: sorted([*dev.qrels[q], *dev.negatives[q]], key=order.__getitem__) for q in answered}
    docs = {q: [dev.corpus[d] for d in candidates[q]] for q in answered}
    rows = [(dev.queries[q], [dev.corpus[d] for d in sorted(dev.qrels[q])], docs[q]) for q in answered]
    return reranking_evaluator(rows, "wikiqa-dev", batch_size)


def mixed_dev_evaluator(evaluators: list) -> NdcgEvaluator:
    """Several dev evaluators as one: every metric of each, and their mean nDCG@10 as the primary metric."""

    def score(model, output_path, epoch, steps) -> dict[str, float]:
        metrics = {}
        for evaluator in evaluators:
            metrics.update(evaluator(model, output_path, epoch, steps))
        primary = [metrics[dev_metric_key(evaluator)] for evaluator in evaluators]
        return {**metrics, "dev-mix_ndcg@10": sum(primary) / len(primary)}

    return NdcgEvaluator("dev-mix", score)
