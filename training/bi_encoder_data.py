"""What a bi-encoder run trains and is tested on (STS-B, SICK, NLI, SciFact; AG News for train_classifier.py)."""

from __future__ import annotations

import random
from pathlib import Path

from ctxir.classify import sample_per_class
from ctxir.data import NLI_LABELS, load_beir, load_sick, load_snli, load_sts
from ctxir.data.labelled import load_labelled, load_labels
from ctxir.types import CtxirError, doc_text
from training.common import (
    check_not_empty,
    columns,
    data_folder,
    dataset_entry,
    heldout_queries,
    take,
    take_train,
)
from training.steps import TaskData

MINING_RANGE = 50  # scifact mnrl: hard negatives are the nearest of this many non-positive documents


def _sts_pairs(args, name: str, split: str) -> list[tuple[str, str, float]]:
    """(s1, s2, score in [0, 1]) for STS-B (0-5) or SICK relatedness (1-5)."""

    if name == "stsb":
        return [(a, b, s / 5.0) for a, b, s in load_sts(data_folder(args.data_dir, "stsb"), split)]
    return [
        (p.sentence_a, p.sentence_b, (p.relatedness - 1.0) / 4.0)
        for p in load_sick(data_folder(args.data_dir, "sick"), split)
    ]


def similarity_evaluator(pairs, name: str, batch_size: int):
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


def build_sts_task(args, model) -> TaskData:
    name = args.task
    folder = data_folder(args.data_dir, name)
    dev_split = "dev"
    pairs = take_train(_sts_pairs(args, name, "train"), args.max_samples, args.seed, f"{name} train pairs")
    train = columns(pairs, ["sentence1", "sentence2", "score"])
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
        similarity_evaluator(dev, f"{name}-dev", args.per_device_train_batch_size),
        {"sts": tests},
    )


def build_nli_task(args, model) -> TaskData:
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
        train = columns(triplets, ["anchor", "positive", "negative"])
        n_train = len(triplets)
    else:
        examples = take_train(examples, args.max_samples, args.seed, "NLI pairs")
        train = columns(
            [(p, h, NLI_LABELS.index(y)) for p, h, y in examples], ["premise", "hypothesis", "label"]
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
        similarity_evaluator(dev, "stsb-dev", args.per_device_train_batch_size),
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


def _mining_cache(args) -> str | None:
    if args.mining_cache.lower() == "none":
        return None
    return args.mining_cache or str(Path.home() / ".cache" / "ctxir" / "mining")


def build_scifact_task(args, model) -> TaskData:
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
    # 2b. mine hard negatives with the starting model over the whole corpus (its positives are excluded)
    fmt = (
        "labeled-pair"
        if args.objective == "contrastive"
        else ("triplet" if args.num_negatives == 1 else "n-tuple")
    )
    num_negatives = 1 if args.objective == "contrastive" else args.num_negatives
    if num_negatives > MINING_RANGE:
        raise CtxirError(
            f"--num-negatives {num_negatives} exceeds the {MINING_RANGE} nearest documents mined"
        )
    pair_data = columns(pairs, ["anchor", "positive"])
    mined = mine_hard_negatives(
        pair_data,
        model,
        corpus=[doc_text(corpus[d]) for d in corpus],
        range_max=min(MINING_RANGE, len(corpus) - 1),
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
        "lower --mining-relative-margin",
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
            "range_min": 0,
            "range_max": MINING_RANGE,
            "relative_margin": args.mining_relative_margin,
            "corpus_size": len(corpus),
        },
    }
    return TaskData(mined, rows, dev_evaluator, {"retrieval": (test_corpus, test_queries, test_qrels)}, extra)


DATA_NAMES = {  # the dataset folders each task reads under --data-dir
    "scifact": ["scifact"],
    "stsb": ["stsb"],
    "sick": ["sick", "stsb"],
    "nli": ["snli", "sick", "stsb"],
}
BUILDERS = {
    "scifact": build_scifact_task,
    "stsb": build_sts_task,
    "sick": build_sts_task,
    "nli": build_nli_task,
}


# ---------------------------------------------------------------- classification (train_classifier.py)


def triplets(examples: list[tuple[str, str]], iterations: int, seed: int) -> list[tuple[str, str, str]]:
    """(anchor, positive, negative) × ``iterations`` per example: a random other text of the anchor's class and a
    random text of another class, seeded.

    >>> rows = triplets([("a1", "A"), ("a2", "A"), ("b1", "B")], iterations=2, seed=0)
    >>> len(rows), all(p.startswith(a[0]) and not n.startswith(a[0]) for a, p, n in rows)
    (6, True)
    """
    rng = random.Random(seed)
    by_class: dict[str, list[str]] = {}
    for text, label in examples:
        by_class.setdefault(label, []).append(text)
    rows = []
    for _ in range(iterations):
        for text, label in examples:
            same = [t for t in by_class[label] if t != text] or [text]
            other = [t for c, texts in by_class.items() if c != label for t in texts]
            rows.append((text, rng.choice(same), rng.choice(other)))
    return rows


def setfit_pairs(examples: list[tuple[str, str]], iterations: int, seed: int) -> list[tuple[str, str, float]]:
    """SetFit's pair generation: per example and iteration, one pair with a same-class text (1.0) and one with an
    other-class text (0.0).

    >>> [s for _, _, s in setfit_pairs([("a1", "A"), ("a2", "A"), ("b1", "B")], 1, seed=0)]
    [1.0, 0.0, 1.0, 0.0, 1.0, 0.0]
    """
    return [pair for a, p, n in triplets(examples, iterations, seed) for pair in ((a, p, 1.0), (a, n, 0.0))]


def build_classification_task(args) -> tuple[object, list[dict], dict, dict]:
    """(the training rows, metrics.json "datasets", what the test step reads, "extra")."""
    folder = data_folder(args.data_dir, "agnews")
    pool = load_labelled(folder / "train_subset.csv")
    rows = (
        list(range(len(pool)))
        if args.per_class < 0
        else sample_per_class([y for _, y in pool], args.per_class, args.seed)
    )
    examples = [pool[i] for i in rows]
    check_not_empty(
        len(examples),
        f"--per-class {args.per_class} leaves no training example",
        "use a positive number (or -1 for all)",
    )
    test = load_labelled(folder / "test.csv")
    if args.eval_max_test > 0:
        test = test[: args.eval_max_test]
    classes = sorted({y for _, y in examples})
    if args.objective == "triplet":
        train = columns(triplets(examples, args.iterations, args.seed), ["anchor", "positive", "negative"])
    elif args.objective == "setfit":
        train = columns(
            setfit_pairs(examples, args.iterations, args.seed), ["sentence1", "sentence2", "score"]
        )
    else:  # batch-hard mines inside each batch; repeats give it more batches
        train = columns([(t, classes.index(y)) for t, y in examples * args.iterations], ["sentence", "label"])
    datasets = [
        dataset_entry("agnews", "train_subset", "train", folder, len(examples)),
        dataset_entry("agnews", "test", "eval", folder, len(test)),
    ]
    extra = {
        "per_class": args.per_class,
        "train_examples": len(examples),
        "classes": classes,
        "training_rows": len(train),
        "train_rows_of_subset": rows if len(rows) <= 512 else f"{len(rows)} rows",
    }
    return train, datasets, {"examples": examples, "test": test, "labels": load_labels(args.labels)}, extra
