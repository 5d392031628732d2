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
Outputs in --output-dir: the model (loads with CrossEncoder(path), ctxir.encoders.models.load_cross_encoder and
``ctxir evaluate --rerank cross-encoder --reranker-model DIR``), metrics.json, training_log.jsonl,
train.log, checkpoints/ while training (kept with --keep-checkpoints; --resume last continues from them).
"""

from __future__ import annotations

import math
import random
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

if __package__ in (None, ""):  # `python training/train_cross_encoder.py` from the repo root
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sentence_transformers.cross_encoder import CrossEncoderTrainingArguments

from ctxir import kinds
from ctxir.encoders.models import (
    ADAPTER_CONFIG,
    DEFAULT_BI_ENCODER,
    load_cross_encoder,
    resolve_model,
    set_max_length,
)
from ctxir.files import read_json, write_json
from ctxir.rerank.passages import Passages
from ctxir.types import CtxirError, doc_text
from training.common import (
    TrainerRunArgs,
    check_not_empty,
    cli_main,
    data_folder,
    dataset_entry,
    general_entries,
    heldout_queries,
    take,
    trainer_setting,
    unseen_heldout_queries,
)
from training.runner import ModelSpec, Scores, TaskData, train

LOSSES = {"scifact": ("bce", "lambda", "listnet"), "stsb": ("bce", "mse")}
LOSS_NAMES = {
    "bce": "BinaryCrossEntropyLoss",
    "mse": "MSELoss",
    "lambda": "LambdaLoss",
    "listnet": "ListNetLoss",
}
NEGATIVE_STAGES = (kinds.BM25, kinds.HYBRID)
LISTWISE = ("lambda", "listnet")  # one row = (query, [positive, negatives…], [1, 0, …])
# LoRA on every linear layer of each BERT block; the pooler and the fresh classifier are trained in full (tiny).
LORA_TARGETS = ["query", "key", "value", "dense"]
LORA_FULL_MODULES = ["classifier", "pooler"]
# the segment-cosine head's weights (module 1 of the chain) in the loss model's parameter names
HEAD_PARAMETERS = r"(^|\.)1\.(scale|bias|linear\.)"
# its term-match term (--term-match): the term-importance read-out and the kernels' linear read-out
# and --importance-pooling's mix (a bare parameter: no dot after its name)
MATCH_PARAMETERS = r"(^|\.)1\.(term_weight\.|term_linear\.|pool_mix$)"
ANCHORS = {
    ("scifact", "nDCG@10"): (0.688, "BEIR BM25 + cross-encoder (ms-marco-MiniLM-L6)"),
    ("stsb", "spearman"): (0.8833, "BERT-NLI-STSb-base cross-encoder"),
}


@dataclass
class CrossEncoderArgs(TrainerRunArgs, CrossEncoderTrainingArguments):
    task: Literal["scifact", "stsb"] = field(
        default="scifact", metadata={"help": "scifact re-ranker or stsb"}
    )
    model: str = field(
        default=DEFAULT_BI_ENCODER,
        metadata={
            "help": "starting model: Hub id or folder; a bi-encoder/plain BERT gets a fresh one-logit head"
        },
    )
    loss: Literal["auto", "bce", "mse", "lambda", "listnet"] = field(
        default="auto",
        metadata={
            "help": "auto = bce; scifact also lambda / listnet (listwise over the positive and its negatives)"
        },
    )
    head: Literal["cls", "mean", "segment-cosine"] = field(
        default="cls",
        metadata={
            "help": "cls = the usual classifier on [CLS] (through BERT's pooler); mean = a linear score on the mean of "
            "all token vectors, which a mean-pooling bi-encoder body such as all-MiniLM-L6-v2 already makes "
            "meaningful (its [CLS] was never trained); segment-cosine = scale · cos(mean query tokens, mean "
            "document tokens) of one joint pass + a zero-initialised linear term (ctxir.encoders.heads): starts "
            "near the bi-encoder instead of at random"
        },
    )
    train_layers: int = field(
        default=0,
        metadata={
            "help": "segment-cosine: train only the top N transformer layers (+ head), the embeddings and lower layers "
            "frozen; the output then holds only those layers (float16) over --model's base: 2 of MiniLM's 6 "
            "= 7 MB (0 = train and save every layer)"
        },
    )
    head_learning_rate: float = field(
        default=0.0,
        metadata={"help": "learning rate of the segment-cosine head's few weights (0 = --learning-rate)"},
    )
    term_match: bool = field(
        default=False,
        metadata={
            "help": "segment-cosine: add the head's learned term-match term (exact token matches and cosine-band "
            "kernels per query token, weighted by a learned term importance; ctxir.encoders.heads), "
            "zero-initialised, so a shipped head continues from the scores it had"
        },
    )
    importance_pooling: bool = field(
        default=False,
        metadata={
            "help": "segment-cosine with --term-match: pool the query by the term-match term's importance too, mixed "
            "into its plain mean by a weight that starts at 0 (ctxir.encoders.heads), so a shipped head continues "
            "from the scores it had; trained at --match-learning-rate"
        },
    )
    match_learning_rate: float = field(
        default=0.0,
        metadata={"help": "--term-match: learning rate of the term-match weights (0 = --head-learning-rate)"},
    )
    negative_rounds: int = field(
        default=1,
        metadata={
            "help": "scifact listwise: N groups per training query, each with its BM25 negatives drawn afresh from "
            "the top --negative-pool non-relevant hits; one epoch then = N epochs with re-sampled negatives"
        },
    )
    negative_pool: int = field(
        default=0,
        metadata={
            "help": "scifact: draw the --num-negatives BM25 negatives of each group from this many top non-relevant "
            "hits (0 = always the top --num-negatives)"
        },
    )
    num_dense_negatives: int = field(
        default=-1,
        metadata={
            "help": "scifact --negatives both|dense: bi-encoder negatives per group (-1 = --num-negatives)"
        },
    )
    dev_split: Literal["random", "unseen"] = field(
        default="random",
        metadata={
            "help": "scifact dev claims: random = any training claims (the bi-encoder's rule: a pipeline of both is tuned "
            "on claims neither saw); unseen = claims whose cited abstracts no other training claim cites (what a "
            "new corpus looks like; the re-ranker recipe chooses its settings there)"
        },
    )
    lora_r: int = field(
        default=0,
        metadata={
            "help": "0 = full fine-tuning; r > 0 = a LoRA adapter of rank r (PEFT) over the starting model, with the "
            "pooler and classifier trained in full: the output folder holds only the adapter (a few MB)"
        },
    )
    lora_alpha: float = field(default=0.0, metadata={"help": "LoRA scaling alpha (0 = 2 × --lora-r)"})
    pseudo_queries: int = field(
        default=0,
        metadata={
            "help": "scifact: also train on N corpus titles as queries for their own abstract (-1 = every document; "
            "in-domain pairs from the corpus alone, no qrels), with the same kind of negatives"
        },
    )
    teacher: Literal["none", "hybrid"] = field(
        default="none",
        metadata={
            "help": "scifact listwise: the groups' labels. none = 1 for a judged positive, 0 for a negative; hybrid = "
            "distil from BM25 + the bi-encoder --dense-model: each document's BM25 score and cosine, z-scored over "
            "its query's BM25 top --negative-pool, summed, times --teacher-scale, plus --gold-weight for a judged "
            "positive. The hybrid grades every candidate on any abstract, so the model learns relevance beyond "
            "the few abstracts that training claims cite (MarginMSE-style distillation, listwise)"
        },
    )
    teacher_scale: float = field(
        default=1.0,
        metadata={
            "help": "--teacher hybrid: multiplies the summed z-scores (ListNet softmaxes the labels: larger = sharper)"
        },
    )
    gold_weight: float = field(
        default=2.0,
        metadata={
            "help": "--teacher hybrid: added to a judged positive's label (a claim's cited abstract, a title's own)"
        },
    )
    general: str = field(
        default="",
        metadata={
            "help": "scifact: also train on general-domain relevance pairs from <data-dir>/general/, a comma list of "
            "squad (questions → their Wikipedia paragraph), wikiqa (Bing queries → answer sentences), msmarco "
            "(the triples sample), wikiqa-topics (a WikiQA summary's first 50 words → the rest of that summary: "
            "paragraph-long queries judged by subject): each query a group of its positive and negatives drawn like the claims' "
            "(--negative-stages over its own collection, plus one the source marks non-relevant), so the model "
            "learns relevance beyond SciFact; their groups are spread over the --negative-rounds like titles"
        },
    )
    general_queries: int = field(
        default=800, metadata={"help": "--general: queries taken per source, seeded (-1 = all)"}
    )
    negative_stages: str = field(
        default="bm25",
        metadata={
            "help": "scifact and --general: the first stages whose top --negative-pool non-relevant hits make the pool "
            "each group's --num-negatives are drawn from (bm25, hybrid: the app's; interleaved best first), so "
            "the model sees the candidates every first stage hands it"
        },
    )
    output_dir: str = field(default="", metadata={"help": "default outputs/cross-encoder-<task>"})
    max_samples: int = field(
        default=-1,
        metadata={
            "help": "use N training pairs, seeded (-1 = all); scifact: N (claim, positive) pairs, negatives added"
        },
    )
    per_device_train_batch_size: int = trainer_setting("per_device_train_batch_size", 16)
    max_length: int = field(
        default=256,
        metadata={
            "help": "tokens per (query, document) input (0 = the model's own; never beyond its position embeddings)"
        },
    )
    negatives: Literal["bm25", "dense", "both"] = field(
        default="bm25", metadata={"help": "scifact: where hard negatives come from"}
    )
    num_negatives: int = field(default=4, metadata={"help": "scifact: hard negatives per claim (per source)"})
    negatives_range_min: int = field(default=0, metadata={"help": "skip the N best non-relevant hits"})
    random_negatives: int = field(
        default=0,
        metadata={
            "help": "scifact: also N random corpus documents per query; with hard negatives alone a short run learns "
            "'high word overlap = not relevant' (every negative was chosen for its overlap)"
        },
    )
    dense_model: str = field(
        default=DEFAULT_BI_ENCODER, metadata={"help": "bi-encoder for --negatives dense"}
    )
    pos_weight: float = field(
        default=0.0, metadata={"help": "BCE weight of positives (0 = negatives/positives)"}
    )
    rerank_depth: int = field(
        default=100, metadata={"help": "scifact test: BM25 candidates re-ranked per query"}
    )
    dev_queries: int = field(
        default=50,
        metadata={
            "help": "scifact: training queries held out for the CrossEncoderRerankingEvaluator (0 = none)"
        },
    )
    dev_depth: int = field(default=20, metadata={"help": "scifact dev evaluator: BM25 candidates per query"})
    eval_max_queries: int = field(default=0, metadata={"help": "scifact test: first N queries (0 = all)"})
    eval_before: bool = field(
        default=True, metadata={"help": "also evaluate the starting model (a fresh head scores at random)"}
    )
    eval_steps: int = trainer_setting("eval_steps", 0, "run the dev evaluator every N steps (0 = never)")
    train_passages: Literal["first", "best"] = field(
        default="first",
        metadata={
            "help": "scifact: what the model reads of an abstract longer than --max-length. first = its first tokens "
            "(FirstP); best = its MaxP window (ctxir.rerank.Passages: 70 words every 50, after the title) that "
            "shares the most query words, IDF-weighted, for the positive and each negative alike: the windows a "
            "MaxP re-ranker (a folder's passages.json) scores at inference. The dev evaluator and the test "
            "re-ranking then score documents by their best window too"
        },
    )


# ---------------------------------------------------------------- data


def build_stsb(args: CrossEncoderArgs) -> TaskData:
    from datasets import Dataset
    from sentence_transformers.cross_encoder.evaluation import CrossEncoderCorrelationEvaluator

    from ctxir.data import load_sts

    folder = data_folder(args.data_dir, "stsb")
    train = take(load_sts(folder, "train"), args.max_samples, args.seed)
    check_not_empty(
        len(train),
        f"--max-samples {args.max_samples} leaves no STS-B train pairs",
        "use --max-samples -1 (all) or a positive number",
    )
    dev, test = load_sts(folder, "dev"), load_sts(folder, "test")
    dataset = Dataset.from_dict(
        {
            "sentence1": [a for a, _, _ in train],
            "sentence2": [b for _, b, _ in train],
            "score": [s / 5.0 for _, _, s in train],
        }
    )
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


def bm25_negatives(
    bm25, queries: dict[str, str], positives: dict[str, set[str]], num: int, skip: int
) -> dict[str, list[str]]:
    """{qid: the top ``num`` non-relevant BM25 hits after skipping ``skip``}: the re-ranker's own candidates."""
    depth = skip + num + max(len(p) for p in positives.values())
    hits = bm25.search(queries, depth)
    return {
        q: [h.doc_id for h in hits[q] if h.doc_id not in positives[q]][skip : skip + num] for q in queries
    }


def dense_negatives(
    args: CrossEncoderArgs, corpus: dict, queries: dict[str, str], positives: dict[str, set[str]], device: str
) -> dict[str, list[str]]:
    """{qid: doc ids} mined by sentence-transformers' mine_hard_negatives with the bi-encoder --dense-model."""
    from datasets import Dataset
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.util import mine_hard_negatives

    text_to_id = {doc_text(doc): d for d, doc in corpus.items()}
    pairs = [(q, d) for q in queries for d in sorted(positives[q])]
    data = Dataset.from_dict(
        {"query": [queries[q] for q, _ in pairs], "positive": [doc_text(corpus[d]) for _, d in pairs]}
    )
    model = SentenceTransformer(resolve_model(args.dense_model), device=device)
    mined = mine_hard_negatives(
        data,
        model,
        corpus=list(text_to_id),
        range_min=args.negatives_range_min,
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

    stages = _names(args.negative_stages)
    size = max(args.num_negatives, args.negative_pool)
    pools = {kinds.BM25: bm25_negatives(bm25, queries, positives, size, args.negatives_range_min)}
    if kinds.HYBRID in stages:  # the app's hybrid (BM25 + the packaged MiniLM, RRF over each one's top 100)
        hybrid = build_first_stages(corpus, [kinds.HYBRID], [BiEncoder(device=device)], show_progress=True)[
            kinds.HYBRID
        ]
        pools[kinds.HYBRID] = bm25_negatives(hybrid, queries, positives, size, args.negatives_range_min)
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


def _names(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    for name in names:
        if name not in NEGATIVE_STAGES:
            raise CtxirError(
                f"--negative-stages names {name!r}: use a comma list of {', '.join(NEGATIVE_STAGES)}"
            )
    return names or [kinds.BM25]


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
    """--negative-rounds groups per claim, each with --num-negatives BM25 negatives drawn from its pool (seeded).

    Title pseudo-queries are spread over the rounds (each title in one round only), so they add abstracts the
    claims never cite without outnumbering the claims.
    """
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
        floor = (
            min(bm25_scores[q].values()) if bm25_scores[q] else 0.0
        )  # below its top 200: no better than that
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
        "negative_stages": _names(args.negative_stages),
        "heldout_query_ids": dev_ids,
        "train_query_ids": claim_ids,
    }
    return TaskData(
        dataset,
        datasets,
        dev_evaluator,
        {"rerank": (corpus, test_queries, test_qrels, bm25)},
        extra,
        loss_options={"pos_weight": args.pos_weight or n_neg / max(n_pos, 1)},
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
    pairs = take(
        [(q, d) for q in qids if q not in set(dev_ids) for d in sorted(positives[q])],
        args.max_samples,
        args.seed,
    )
    check_not_empty(
        len(pairs),
        f"--max-samples {args.max_samples} leaves no (claim, abstract) pairs",
        "use --max-samples -1 (all) or a positive number",
    )
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
    from datasets import Dataset

    if args.loss not in LISTWISE:
        rows = [(train.queries[q], train.text(q, d), 1.0) for q, d in train.pairs]
        rows += [
            (train.queries[q], train.text(q, d), 0.0)
            for q in sorted(train.negatives)
            for d in train.negatives[q]
        ]
        return Dataset.from_dict(
            {"query": [r[0] for r in rows], "document": [r[1] for r in rows], "label": [r[2] for r in rows]}
        )
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
    return Dataset.from_dict(
        {
            "query": [train.queries[q] for q, _, _ in groups],
            "docs": [[train.text(q, d) for d in pos + neg] for q, pos, neg in groups],
            "labels": labels,
        }
    )


def scifact_dev_evaluator(
    args: CrossEncoderArgs,
    bm25,
    corpus: dict,
    queries: dict[str, str],
    positives: dict[str, set[str]],
    dev_ids: list[str],
):
    """sentence-transformers' re-ranking evaluator over BM25's top --dev-depth of the held-out claims."""
    from sentence_transformers.cross_encoder.evaluation import CrossEncoderRerankingEvaluator

    dev_hits = bm25.search({q: queries[q] for q in dev_ids}, args.dev_depth)
    if args.train_passages == "best":
        return maxp_evaluator(
            {q: queries[q] for q in dev_ids},
            dev_hits,
            corpus,
            {q: {d: 1 for d in positives[q]} for q in dev_ids},
            args.per_device_train_batch_size,
        )
    samples = [
        {
            "query": queries[q],
            "positive": [doc_text(corpus[d]) for d in sorted(positives[q])],
            "documents": [doc_text(corpus[h.doc_id]) for h in dev_hits[q]],
        }
        for q in dev_ids
    ]
    return CrossEncoderRerankingEvaluator(
        samples,
        at_k=10,
        always_rerank_positives=False,
        name="scifact-train-heldout",
        batch_size=args.per_device_train_batch_size,
        write_csv=False,
    )


def maxp_evaluator(queries: dict[str, str], hits: dict, corpus: dict, qrels: dict, batch_size: int):
    """The dev evaluator of a model trained on windows (--train-passages best): nDCG@10 of re-ranking the held-out
    claims' BM25 candidates, each document scored by its best window, as ctxir re-ranks with a passages.json.
    Its metric names are CrossEncoderRerankingEvaluator's, so the training logs of both kinds line up."""
    # the class is made here: sentence-transformers' Trainer needs a BaseEvaluator, and importing it at the top
    # would load sentence-transformers for every --help
    from sentence_transformers.base.evaluation.evaluator import BaseEvaluator

    from ctxir.evaluation import evaluate_run
    from ctxir.rerank import CrossEncoderReranker

    class MaxPRerankingEvaluator(BaseEvaluator):
        name = "scifact-train-heldout"

        def __init__(self):
            super().__init__()
            self.primary_metric = f"{self.name}_ndcg@10"

        def __call__(
            self, model, output_path: str | None = None, epoch: int = -1, steps: int = -1
        ) -> dict[str, float]:
            reranker = CrossEncoderReranker(model, batch_size=batch_size, passages=Passages())
            run = {
                q: {h.doc_id: h.score for h in reranker.rerank(text, hits[q], corpus)}
                for q, text in queries.items()
            }
            aggregate = evaluate_run(qrels, run).aggregate
            metrics = {
                f"{self.name}_ndcg@10": float(aggregate["nDCG@10"]),
                f"{self.name}_mrr@10": float(aggregate["MRR@10"]),
            }
            self.store_metrics_in_model_card_data(model, metrics, epoch, steps)
            return metrics

    return MaxPRerankingEvaluator()


def wikiqa_dev_evaluator(args: CrossEncoderArgs):
    """WikiQA's dev split as sentence-transformers' re-ranking evaluator: each answered question's summary
    sentences re-ranked (nDCG@10): a general-domain dev set beside SciFact's held-out claims."""
    from sentence_transformers.cross_encoder.evaluation import CrossEncoderRerankingEvaluator

    from ctxir.data.general import load_wikiqa

    dev = load_wikiqa(Path(args.data_dir) / "general" / "wikiqa" / "WikiQA-dev.tsv")
    # the summary's sentences in their own order ("D1-0", "D1-1", …): the evaluator's base order is no oracle
    order = {d: i for i, d in enumerate(dev.corpus)}
    samples = [
        {
            "query": dev.queries[q],
            "positive": [doc_text(dev.corpus[d]) for d in sorted(dev.qrels[q])],
            "documents": [
                doc_text(dev.corpus[d])
                for d in sorted([*dev.qrels[q], *dev.negatives[q]], key=order.__getitem__)
            ],
        }
        for q in sorted(dev.queries)
        if dev.negatives[q]
    ]  # nDCG needs two candidates at least
    return CrossEncoderRerankingEvaluator(
        samples,
        at_k=10,
        always_rerank_positives=False,
        name="wikiqa-dev",
        batch_size=args.per_device_train_batch_size,
        write_csv=False,
    )


def mixed_dev_evaluator(evaluators: list):
    """Several dev evaluators as one: every metric of each, and ``dev-mix_ndcg@10``, their mean nDCG@10, as the
    primary metric (--load-best keeps the step best on SciFact claims and general questions together)."""
    from sentence_transformers.base.evaluation.evaluator import BaseEvaluator

    from training.runner import dev_metric_key

    class MixedEvaluator(BaseEvaluator):
        name = "dev-mix"

        def __init__(self):
            super().__init__()
            self.primary_metric = f"{self.name}_ndcg@10"

        def __call__(
            self, model, output_path: str | None = None, epoch: int = -1, steps: int = -1
        ) -> dict[str, float]:
            metrics = {}
            for evaluator in evaluators:
                metrics.update(evaluator(model, output_path, epoch, steps))
            primary = [metrics[dev_metric_key(evaluator)] for evaluator in evaluators]
            metrics[self.primary_metric] = sum(primary) / len(primary)
            self.store_metrics_in_model_card_data(model, metrics, epoch, steps)
            return metrics

    return MixedEvaluator()


# ---------------------------------------------------------------- evaluation


def evaluate(model, data: TaskData, args: CrossEncoderArgs, model_id: str = "") -> Scores:
    """{(dataset, split, metric): value} on the test split; SciFact through ctxir's Pipeline and pytrec_eval."""
    scores: Scores = {}
    if "sts" in data.test:
        from sentence_transformers.cross_encoder.evaluation import CrossEncoderCorrelationEvaluator

        test = data.test["sts"]
        result = CrossEncoderCorrelationEvaluator(
            [[a, b] for a, b, _ in test],
            [s for _, _, s in test],
            name="stsb-test",
            batch_size=args.per_device_train_batch_size,
            write_csv=False,
        )(model)
        scores[("stsb", "test", "spearman")] = float(result["stsb-test_spearman"])
        scores[("stsb", "test", "pearson")] = float(result["stsb-test_pearson"])
    if "rerank" in data.test:
        from ctxir.evaluation import evaluate_run
        from ctxir.rerank import CrossEncoderReranker
        from ctxir.rerank.pipeline import Pipeline

        _, queries, qrels, bm25 = data.test["rerank"]
        passages = Passages() if args.train_passages == "best" else None  # scored as it was trained
        runs = Pipeline(
            bm25,
            CrossEncoderReranker(model, batch_size=args.per_device_train_batch_size, passages=passages),
            depth=args.rerank_depth,
        ).run(queries)
        aggregate = evaluate_run(qrels, runs["rerank"]).aggregate
        for metric in ("nDCG@10", "MRR@10"):
            scores[("scifact", "test", metric)] = float(aggregate[metric])
        # BM25 alone on the same queries; Recall@depth bounds what any re-ranker of its top-depth can find.
        first = evaluate_run(qrels, runs["first_stage"], k_values=(10, args.rerank_depth)).aggregate
        data.extra["first_stage"] = {
            "retriever": kinds.BM25,
            "depth": args.rerank_depth,
            "test": {
                m: round(float(first[m]), 4) for m in ("nDCG@10", "MRR@10", f"Recall@{args.rerank_depth}")
            },
        }
    return scores


def describe(name: str, data: TaskData, args: CrossEncoderArgs) -> tuple[str, str]:
    if name == "scifact":
        return "reranking", f"rerank BM25 top-{args.rerank_depth}, {len(data.test['rerank'][1])} queries"
    return "sts", f"cross-encoder score, {len(data.test['sts'])} pairs"


# ---------------------------------------------------------------- the model kind


def build_loss(args: CrossEncoderArgs, model, data: TaskData):
    import torch
    from sentence_transformers.cross_encoder import losses

    if args.loss == "mse":
        return losses.MSELoss(model)
    if args.loss == "lambda":
        return losses.LambdaLoss(model)
    if args.loss == "listnet":
        return losses.ListNetLoss(model)
    # pos_weight balances the few positives against the many negatives (SBERT's recommended setting).
    pos_weight = data.loss_options.get("pos_weight")
    return losses.BinaryCrossEntropyLoss(model, pos_weight=torch.tensor(pos_weight) if pos_weight else None)


def check(args: CrossEncoderArgs) -> None:
    if args.loss == "auto":
        args.loss = "bce"
    if args.loss not in LOSSES[args.task]:
        raise CtxirError(
            f"--loss {args.loss!r} does not fit --task {args.task!r}: use one of "
            f"{', '.join(LOSSES[args.task])}"
        )
    if args.task == "scifact" and (args.num_negatives < 1 or args.rerank_depth < 1):
        raise CtxirError(
            f"--num-negatives and --rerank-depth must be ≥ 1, got {args.num_negatives!r} and "
            f"{args.rerank_depth!r}"
        )
    if args.lora_r < 0:
        raise CtxirError(f"--lora-r must be 0 (full fine-tuning) or a rank ≥ 1, got {args.lora_r!r}")
    if args.train_layers < 0 or (args.train_layers and args.head != "segment-cosine"):
        raise CtxirError(
            f"--train-layers {args.train_layers!r}: use 0 (every layer), or N ≥ 1 with --head "
            "segment-cosine (only its body saves just the trained layers)"
        )
    if args.term_match and args.head != "segment-cosine":
        raise CtxirError(
            f"--term-match adds a term to the segment-cosine head: use it with --head segment-cosine, "
            f"not --head {args.head!r}"
        )
    if args.importance_pooling and not args.term_match:
        raise CtxirError(
            "--importance-pooling pools the query by the term-match term's importance: add --term-match true"
        )
    if args.train_layers and args.lora_r:
        raise CtxirError("--train-layers and --lora-r are two ways to ship a small model: pick one")
    if args.negative_rounds < 1 or args.negative_pool < 0:
        raise CtxirError(
            f"--negative-rounds must be ≥ 1 and --negative-pool ≥ 0, got {args.negative_rounds!r} and "
            f"{args.negative_pool!r}"
        )
    if args.teacher != "none" and (args.task != "scifact" or args.loss not in LISTWISE):
        raise CtxirError(
            f"--teacher {args.teacher!r} grades the documents of listwise groups: use it with --task "
            f"scifact and --loss {' or '.join(LISTWISE)}, or --teacher none"
        )
    _names(args.negative_stages)
    if args.general and (args.task != "scifact" or args.loss not in LISTWISE):
        raise CtxirError(
            f"--general {args.general!r} adds listwise groups beside SciFact's claims: use it with --task "
            f"scifact and --loss {' or '.join(LISTWISE)}, or drop --general"
        )
    if (args.negative_rounds > 1 or args.negative_pool) and args.loss not in LISTWISE:
        raise CtxirError(
            f"--negative-rounds/--negative-pool re-sample negatives per group: use a listwise --loss "
            f"({', '.join(LISTWISE)}), not {args.loss!r}"
        )


def load(args: CrossEncoderArgs, device: str):
    from sentence_transformers import CrossEncoder

    path = resolve_model(args.model)
    if args.head == "segment-cosine":
        model = load_segment_cosine(args, path, device)
    elif args.head == "mean":
        from sentence_transformers.base.modules import Dense, Transformer
        from sentence_transformers.sentence_transformer.modules import Pooling

        body = Transformer(path, transformer_task="feature-extraction")
        hidden = body.model.config.hidden_size
        model = CrossEncoder(
            modules=[
                body,
                Pooling(hidden, "mean"),
                Dense(hidden, 1, activation_function=None, module_output_name="scores"),
            ],
            device=device,
        )
    else:  # a body without a classifier (a bi-encoder, plain BERT) gets a fresh one-logit head
        model = CrossEncoder(path, num_labels=1, device=device)
    # ctxir's one rule: 0 = the model's own limit, else that many tokens, never beyond its position embeddings
    set_max_length(model, args.max_length, name="--max-length")
    if args.lora_r > 0:
        from peft import LoraConfig

        # the mean head's Dense sits outside the transformer and trains in full anyway
        model.add_adapter(
            LoraConfig(
                r=args.lora_r,
                lora_alpha=args.lora_alpha or 2 * args.lora_r,
                lora_dropout=0.1,
                target_modules=LORA_TARGETS,
                modules_to_save=LORA_FULL_MODULES if args.head == "cls" else None,
            )
        )
    return model


def load_segment_cosine(args: CrossEncoderArgs, path: str, device: str):
    """A fresh segment-cosine cross-encoder over --model's body, or (from a ctxir cross-encoder folder, e.g. the
    shipped one) that model itself, to continue training it: each stage resumes from the last shipped weights."""
    import torch
    from sentence_transformers import CrossEncoder

    from ctxir.encoders.heads import TOP_LAYERS_CONFIG, SegmentCosineHead, TopLayersTransformer

    if (Path(path) / TOP_LAYERS_CONFIG).is_file():
        model = load_cross_encoder.__wrapped__(path, device)
        body, base = model[0], model[0].base_model
    else:
        body, base = TopLayersTransformer(path, transformer_task="feature-extraction"), args.model
        body.model.config.num_labels = (
            1  # CrossEncoder.num_labels reads the body's config: one score per pair
        )
        model = CrossEncoder(
            modules=[body, SegmentCosineHead(body.model.config.hidden_size)],
            device=device,
            activation_fn=torch.nn.Identity(),
        )
    if args.term_match:
        model[1].add_term_match()
    if args.importance_pooling:
        model[1].add_importance_pooling()
    layers = body.model.config.num_hidden_layers
    if args.train_layers > layers:
        raise CtxirError(f"--train-layers {args.train_layers!r} exceeds the body's {layers} layers")
    body.freeze_below(layers - args.train_layers if args.train_layers else 0, base)
    if not args.train_layers:  # every layer trains: the embeddings too
        for parameter in body.model.parameters():
            parameter.requires_grad = True
    return model


def save(model, out: Path, args: CrossEncoderArgs) -> None:
    model.save_pretrained(str(out))
    if args.lora_r > 0:
        name_adapter_base(out, args.model)


def _trainer_classes():
    from sentence_transformers.cross_encoder.trainer import CrossEncoderTrainer

    return CrossEncoderTrainingArguments, CrossEncoderTrainer


SPEC = ModelSpec(
    model_type=kinds.CROSS_ENCODER,
    script="train_cross_encoder",
    default_output=lambda args: f"outputs/cross-encoder-{args.task}",
    data_names=lambda args: [args.task],
    check=check,
    load=load,
    build_data=lambda args, model, device: (
        build_scifact(args, device) if args.task == "scifact" else build_stsb(args)
    ),
    build_loss=build_loss,
    evaluate=evaluate,
    describe=describe,
    save=save,
    # uncached: a folder trained again in the same process must not come back as the earlier model
    reload=lambda out, device: load_cross_encoder.__wrapped__(str(out), device),
    objective_name=lambda args: LOSS_NAMES[args.loss],
    trainer_classes=_trainer_classes,
    anchors=ANCHORS,
    extra=lambda args, model, data: {
        "pos_weight": data.loss_options.get("pos_weight"),
        "lora_r": args.lora_r,
        "trained_parameters": trained_parameters(model),
    },
    training_options=lambda args: head_learning_rates(args),
)


def head_learning_rates(args: CrossEncoderArgs) -> dict:
    """The trainer's per-parameter learning rates: the head's (and its term-match term's) own, when given."""
    if args.head != "segment-cosine":
        return {}
    mapping = {}
    if args.head_learning_rate:
        mapping[HEAD_PARAMETERS] = args.head_learning_rate
    if args.term_match and (args.match_learning_rate or args.head_learning_rate):
        mapping[MATCH_PARAMETERS] = args.match_learning_rate or args.head_learning_rate
    return {"learning_rate_mapping": mapping} if mapping else {}


def trained_parameters(model) -> int:
    """Parameters the run trained: a top-layers body's trained layers + its head, else every parameter."""
    from ctxir.encoders.heads import TopLayersTransformer, layer_of

    body = model[0] if hasattr(model, "__getitem__") else None
    if not isinstance(body, TopLayersTransformer):
        return sum(p.numel() for p in model.parameters())
    top = sum(
        p.numel()
        for n, p in body.model.named_parameters()
        if layer_of(n) is not None and layer_of(n) >= body.trained_from
    )
    return top + sum(p.numel() for m in list(model)[1:] for p in m.parameters())


def run(args: CrossEncoderArgs) -> dict:
    return train(args, SPEC)


def name_adapter_base(folder: Path, base: str) -> None:
    """Record the base by the name it was given (a Hub id), not the local folder it resolved to here.

    The adapter then loads on any machine: from the Hub, or offline from the packaged MiniLM (ctxir.encoders.models).
    """
    path = folder / ADAPTER_CONFIG
    config = read_json(path)
    config["base_model_name_or_path"] = base
    write_json(path, config)


def main(argv: list[str] | None = None) -> int:
    return cli_main(CrossEncoderArgs, run, argv)


if __name__ == "__main__":
    sys.exit(main())
