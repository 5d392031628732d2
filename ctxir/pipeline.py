"""Retrieve → re-rank, keeping each stage's score and rank so a user sees what the re-ranker changed."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from tqdm.auto import tqdm

from ctxir.rerank import Reranker
from ctxir.retrieval import Retriever, check_query, check_top_k
from ctxir.types import Hit, Queries, Run, run_from_hits


@dataclass(frozen=True, slots=True)
class RankedHit:
    doc_id: str
    score: float  # the final stage's score
    rank: int  # final rank, from 1
    first_stage_score: float
    first_stage_rank: int
    rerank_score: float | None = None
    rerank_rank: int | None = None

    @property
    def rank_change(self) -> int:
        """Positive = the re-ranker moved this document up."""
        return 0 if self.rerank_rank is None else self.first_stage_rank - self.rerank_rank


@dataclass
class SearchResult:
    hits: list[RankedHit]
    timings_ms: dict[str, float] = field(default_factory=dict)


class Pipeline:
    """``first_stage`` retrieves ``depth`` candidates; ``reranker`` (optional) re-scores them."""

    def __init__(self, first_stage: Retriever, reranker: Reranker | None = None, depth: int = 100):
        self.first_stage, self.reranker, self.depth = first_stage, reranker, check_top_k(depth)

    @property
    def corpus(self):
        return self.first_stage.corpus

    def search(self, query: str, top_k: int = 10) -> SearchResult:
        check_query(query)
        top_k = check_top_k(top_k)
        start = time.perf_counter()
        first = self.first_stage.query(query, max(top_k, self.depth) if self.reranker else top_k)
        timings = {self.first_stage.name: (time.perf_counter() - start) * 1000}
        if self.reranker is None:
            hits = [RankedHit(h.doc_id, h.score, r, h.score, r) for r, h in enumerate(first[:top_k], 1)]
            return SearchResult(hits, timings)
        start = time.perf_counter()
        reranked = self.reranker.rerank(query, first[:self.depth], self.corpus)
        timings[self.reranker.name] = (time.perf_counter() - start) * 1000
        return SearchResult(merge_stages(first, reranked)[:top_k], timings)

    def run(self, queries: Queries, show_progress: bool = True) -> dict[str, Run]:
        """Batch evaluation: {"first_stage": run, "rerank": run} (the latter only with a re-ranker)."""
        first = self.first_stage.search(queries, self.depth)
        runs = {"first_stage": run_from_hits(first)}
        if self.reranker is not None:
            reranked = {qid: self.reranker.rerank(queries[qid], first[qid][:self.depth], self.corpus)
                        for qid in tqdm(queries, desc=f"re-ranking ({self.reranker.name})", disable=not show_progress)}
            runs["rerank"] = run_from_hits(reranked)
        return runs


def merge_stages(first: list[Hit], reranked: list[Hit]) -> list[RankedHit]:
    """Join the two rankings by document: final order is the re-ranker's."""
    first_rank = {h.doc_id: (r, h.score) for r, h in enumerate(first, 1)}
    return [RankedHit(h.doc_id, h.score, r, first_rank[h.doc_id][1], first_rank[h.doc_id][0], h.score, r)
            for r, h in enumerate(reranked, 1)]
