"""Hard negatives mined on the corpus itself (BM25 and dense), and the teacher's scores that label them (a margin,
not 0/1, so a negative that in fact answers the query costs little: GPL's argument for MarginMSE)."""

from __future__ import annotations

import json
import random
import time
from collections.abc import Sequence

import numpy as np
from tqdm.auto import tqdm

from ctxir.adapt.queries import WHOLE_FOR_TEACHER, PseudoQuery
from ctxir.adapt.work import BudgetReached, read_jsonl
from ctxir.types import Corpus, doc_text

MINING_SOURCES = ("bm25", "dense")


def mine_negatives(
    corpus: Corpus,
    queries: Sequence[PseudoQuery],
    encoder,
    depth: int = 30,
    per_query: int = 1,
    seed: int = 42,
    show_progress: bool = True,
) -> list[dict]:
    """One row per query: ``{"qid", "negatives": [[doc_id, source], ...]}``, ``per_query`` negatives drawn at random
    from the top ``depth`` of BM25 and of ``encoder``'s dense ranking in turn (never its own document, never twice)."""
    from ctxir.retrieval import BM25Retriever, DenseRetriever

    texts = {q.qid: q.text for q in queries}
    rankings = {
        "bm25": BM25Retriever(corpus, show_progress=show_progress).search(texts, top_k=depth + 1),
        "dense": DenseRetriever(corpus, encoder, index="exact", show_progress=show_progress).search(
            texts, top_k=depth + 1
        ),
    }
    rng = random.Random(seed)
    rows = []
    for n, query in enumerate(queries):
        pools = {
            source: [h.doc_id for h in rankings[source][query.qid] if h.doc_id != query.doc_id][:depth]
            for source in MINING_SOURCES
        }
        chosen: list[list[str]] = []
        for j in range(per_query):
            for source in (MINING_SOURCES[(n + j) % 2], MINING_SOURCES[(n + j + 1) % 2]):
                left = [d for d in pools[source] if d not in {c[0] for c in chosen}]
                if left:
                    chosen.append([rng.choice(left), source])
                    break
        rows.append({"qid": query.qid, "negatives": chosen})
    return rows


def teacher_scores(
    teacher,
    corpus: Corpus,
    queries: Sequence[PseudoQuery],
    negatives: Sequence[dict],
    labels_path,
    deadline: float | None = None,
    chunk: int = 32,
    show_progress: bool = True,
) -> dict[str, list[float]]:
    """{qid: [teacher score of (query, positive), of (query, negative 1), ...]}, each chunk of ``chunk`` queries
    appended to ``labels_path`` as it is scored, so a rerun scores only what is missing. A query with no negative
    is not scored. ``deadline`` (time.monotonic()): raise ``BudgetReached`` after the chunk that passes it."""
    done = {row["qid"]: row["scores"] for row in read_jsonl(labels_path)} if labels_path.is_file() else {}
    by_qid = {q.qid: q for q in queries}
    todo = [row for row in negatives if row["negatives"] and row["qid"] not in done]
    total = len(todo) + len(done)
    bar = tqdm(total=total, initial=len(done), desc="teacher scores", disable=not show_progress)
    whole = getattr(teacher, "full_positive", False)  # the source teacher reads each positive whole
    with open(labels_path, "a", encoding="utf-8") as out:
        for start in range(0, len(todo), chunk):
            part = todo[start : start + chunk]
            groups = [scored_texts(by_qid[row["qid"]], row, corpus, whole) for row in part]
            sources = [[source for _, source in row["negatives"]] for row in part]
            for row, scores in zip(part, score_groups(teacher, groups, sources), strict=True):
                done[row["qid"]] = [float(s) for s in scores]
                out.write(
                    json.dumps({"qid": row["qid"], "scores": done[row["qid"]]}, ensure_ascii=False) + "\n"
                )
            out.flush()
            bar.update(len(part))
            if deadline is not None and time.monotonic() > deadline and start + chunk < len(todo):
                bar.close()
                raise BudgetReached(f"the teacher had scored {len(done):,} of {total:,} queries")
    bar.close()
    return done


def scored_texts(query: PseudoQuery, row: dict, corpus: Corpus, whole: bool = False) -> tuple[str, list[str]]:
    """What a teacher scores for one query: (its text, [its positive, then each mined negative's text]); ``whole``
    (or a kind in ``WHOLE_FOR_TEACHER``): the positive is its source document as it is, the query still in it."""
    whole = whole or query.kind in WHOLE_FOR_TEACHER
    positive = doc_text(corpus[query.doc_id]) if whole else query.positive
    return query.text, [positive, *(doc_text(corpus[d]) for d, _ in row["negatives"])]


def score_groups(
    teacher, groups: Sequence[tuple[str, Sequence[str]]], sources: Sequence[Sequence[str]] | None = None
) -> list[np.ndarray]:
    """The teacher's scores of each (query, texts) group, batched across groups: a ``CrossEncoderReranker`` gives each
    text its best window's score (its passages.json), as when it re-ranks; any other ``Reranker`` scores group by
    group; a teacher with its own ``score_groups`` (hybrid_teacher.py) gets ``sources`` too."""
    if hasattr(teacher, "score_groups"):
        return teacher.score_groups(groups, sources)
    model, passages = getattr(teacher, "model", None), getattr(teacher, "passages", None)
    if model is None or not hasattr(model, "predict"):
        return [np.asarray(teacher.score_pairs(query, texts), dtype=np.float32) for query, texts in groups]
    pairs, owners = [], []  # every (query, window) pair, and the (group, text) it belongs to
    for g, (query, texts) in enumerate(groups):
        for t, text in enumerate(texts):
            windows = passages.split("", text) if passages is not None else [text]
            pairs += [(query, w) for w in windows]
            owners += [(g, t)] * len(windows)
    raw = np.asarray(
        model.predict(pairs, batch_size=teacher.batch_size, show_progress_bar=False, convert_to_numpy=True),
        dtype=np.float32,
    )
    raw = raw[:, -1] if raw.ndim == 2 else raw  # a multi-label head: the last column is "relevant"
    best = [np.full(len(texts), -np.inf, dtype=np.float32) for _, texts in groups]
    for (g, t), score in zip(owners, raw, strict=True):
        best[g][t] = max(best[g][t], score)
    return best
