"""Hard negatives mined on the corpus itself (BM25 and dense), and the teacher's scores that label them (a margin,
not 0/1, so a negative that in fact answers the query costs little: GPL's argument for MarginMSE); the teacher
without a cross-encoder (``HybridTeacher``)."""

from __future__ import annotations

import json
import math
import random
import time
from collections import Counter
from collections.abc import Sequence

import numpy as np
from tqdm.auto import tqdm

from ctxir.adapt.queries import PseudoQuery
from ctxir.adapt.work import BudgetReached, read_jsonl
from ctxir.types import Corpus, doc_text

MINING_SOURCES = ("bm25", "dense")
COMPLEMENT_TEACHER = "complement"
CALIBRATION_ROWS = 256


def mine_negatives(
    corpus: Corpus,
    queries: Sequence[PseudoQuery],
    encoder,
    depth: int = 30,
    per_query: int = 1,
    seed: int = 42,
    show_progress: bool = True,
) -> list[dict]:
    """Per query ``{"qid", "negatives": [[doc_id, source], ...]}``, from BM25's and dense's top ``depth`` in turn."""
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
    """{qid: [score of the positive, of each negative]}, appended to ``labels_path`` by chunks a rerun continues."""
    done = {row["qid"]: row["scores"] for row in read_jsonl(labels_path)} if labels_path.is_file() else {}
    by_qid = {q.qid: q for q in queries}
    todo = [row for row in negatives if row["negatives"] and row["qid"] not in done]
    total = len(todo) + len(done)
    bar = tqdm(total=total, initial=len(done), desc="teacher scores", disable=not show_progress)
    with bar, open(labels_path, "a", encoding="utf-8") as out:
        for start in range(0, len(todo), chunk):
            part = todo[start : start + chunk]
            groups = [scored_texts(by_qid[row["qid"]], row, corpus) for row in part]
            if isinstance(teacher, HybridTeacher):
                scored = teacher.score_groups(
                    groups, [[source for _, source in row["negatives"]] for row in part]
                )
            else:  # a re-ranker: each text its best window's score, as when it re-ranks
                scored = [teacher.score_pairs(query, texts) for query, texts in groups]
            for row, scores in zip(part, scored, strict=True):
                done[row["qid"]] = [float(s) for s in scores]
                out.write(json.dumps({"qid": row["qid"], "scores": done[row["qid"]]}) + "\n")
            out.flush()
            bar.update(len(part))
            if deadline is not None and time.monotonic() > deadline and start + chunk < len(todo):
                raise BudgetReached(f"the teacher had scored {len(done):,} of {total:,} queries")
    return done


def scored_texts(query: PseudoQuery, row: dict, corpus: Corpus) -> tuple[str, list[str]]:
    """What a teacher scores for one query: (its text, [its positive, then each mined negative's text])."""
    return query.text, [query.positive, *(doc_text(corpus[d]) for d, _ in row["negatives"])]


class HybridTeacher:
    """``w_dense * cos_base + w_bm25 * bm25`` (BM25 computed here: a positive is its document less the query)."""

    def __init__(self, corpus: Corpus, encoder, show_progress: bool = False):
        import Stemmer
        from bm25s.tokenization import Tokenizer

        self.encoder, self.k1, self.b = encoder, 1.5, 0.75
        base = getattr(encoder, "name", "the base")
        self.model_name = f"{COMPLEMENT_TEACHER}: {base} cosine + BM25, cosine alone on bm25-mined negatives"
        self.tokenizer = Tokenizer(stemmer=Stemmer.Stemmer("english"), stopwords="en")
        docs = self._tokens([doc_text(doc) for doc in corpus.values()], show_progress)
        self.documents = len(docs)
        self.df = Counter(term for tokens in docs for term in set(tokens))
        self.mean_length = max(1e-9, sum(map(len, docs)) / max(1, len(docs)))
        self.weights: tuple[float, float] | None = None

    def _tokens(self, texts: Sequence[str], show_progress: bool = False) -> list[list[str]]:
        return self.tokenizer.tokenize(
            list(texts), update_vocab=True, return_as="string", show_progress=show_progress
        )

    def _idf(self, term: str) -> float:
        df = self.df.get(term, 0)
        return math.log(1 + (self.documents - df + 0.5) / (df + 0.5))

    def bm25(self, query: str, texts: Sequence[str]) -> np.ndarray:
        """(len(texts),) Lucene BM25 of ``query`` against each text, with this corpus's statistics."""
        terms = Counter(self._tokens([query])[0])
        scores = np.zeros(len(texts), dtype=np.float64)
        for i, tokens in enumerate(self._tokens(texts)):
            tf, norm = Counter(tokens), self.k1 * (1 - self.b + self.b * len(tokens) / self.mean_length)
            scores[i] = sum(
                self._idf(t) * tf[t] / (tf[t] + norm) * count for t, count in terms.items() if t in tf
            )
        return scores

    def parts(self, groups: Sequence[tuple[str, Sequence[str]]]) -> list[np.ndarray]:
        """Per group a (len(texts), 2) array: the base's cosine (queries and texts each encoded in one batch), BM25."""
        queries = self.encoder.encode([query for query, _ in groups], show_progress_bar=False, role="query")
        flat = [text for _, texts in groups for text in texts]
        vectors = self.encoder.encode(flat, show_progress_bar=False, role="document")  # (sum of texts, D)
        found, start = [], 0
        for q, (query, texts) in zip(queries, groups, strict=True):
            cosine = vectors[start : start + len(texts)] @ q
            found.append(np.stack([cosine, self.bm25(query, texts)], axis=1))
            start += len(texts)
        return found

    def calibrate(self, groups: Sequence[tuple[str, Sequence[str]]]) -> tuple[float, float]:
        """The weights: 1 / std of each part's margins (the positive's minus each other's); 0 if they never vary."""
        margins = np.concatenate([p[0] - p[1:] for p in self.parts(groups) if len(p) > 1])  # (rows, 2)
        spread = margins.std(axis=0) if len(margins) else np.zeros(2)
        self.weights = tuple(float(1 / s) if s > 0 else 0.0 for s in spread)
        return self.weights

    def score_groups(
        self, groups: Sequence[tuple[str, Sequence[str]]], sources: Sequence[Sequence[str]]
    ) -> list[np.ndarray]:
        """Per group the (len(texts),) weighted sums; a BM25-mined negative gets the positive's BM25 (cosine alone)."""
        if self.weights is None:
            raise RuntimeError("HybridTeacher.calibrate must run before score_groups")
        parts = self.parts(groups)
        for p, mined in zip(parts, sources, strict=True):
            p[[i + 1 for i, source in enumerate(mined) if source == "bm25"], 1] = p[0, 1]
        return [(p @ np.asarray(self.weights)).astype(np.float32) for p in parts]
