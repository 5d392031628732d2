"""Retrieve → re-rank, keeping each stage's score and rank so a user sees what the re-ranker changed."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from tqdm.auto import tqdm

from ctxir.checks import check_choice, check_query, check_top_k
from ctxir.rerank.rankers import Reranker
from ctxir.rerank.registry import RERANK_MODES
from ctxir.rerank.stage_fusion import StageFusion
from ctxir.retrieval.registry import FIRST_STAGES, HybridSettings, StageParts, get_first_stage
from ctxir.retrieval.retrievers import Retriever
from ctxir.types import CtxirError, Hit, Queries, Run, run_from_hits


@dataclass(frozen=True, slots=True)
class RankedHit:
    """One document of a ``SearchResult``: its final score and rank, and each stage's own (ranks from 1).

    >>> first = [Hit("a", 12.0), Hit("b", 9.0), Hit("c", 4.0)]  # BM25, best first
    >>> reranked = [Hit("c", 0.9), Hit("a", 0.2), Hit("b", 0.1)]  # the re-ranker's order
    >>> hits = merge_stages(first, reranked)
    >>> [(h.doc_id, h.first_stage_rank, h.rank, h.rank_change) for h in hits]
    [('c', 3, 1, 2), ('a', 1, 2, -1), ('b', 2, 3, -1)]
    >>> hits[0]
    RankedHit(doc_id='c', score=0.9, rank=1, first_stage_score=4.0, first_stage_rank=3, rerank_score=0.9, rerank_rank=1)
    """

    doc_id: str
    score: float  # the final stage's score
    rank: int  # final rank, from 1
    first_stage_score: float
    first_stage_rank: int
    rerank_score: float | None = None
    rerank_rank: int | None = None

    @property
    def rank_change(self) -> int:
        """First-stage rank − final rank (positive: moved up); 0 without a re-ranker."""
        return 0 if self.rerank_rank is None else self.first_stage_rank - self.rank


@dataclass
class SearchResult:
    """What ``Pipeline.search`` returns: the ranked hits and each stage's time in milliseconds.

    >>> from ctxir.retrieval import BM25Retriever
    >>> result = Pipeline(BM25Retriever({"d1": {"title": "", "text": "Otters swim in rivers."}})).search("otters")
    >>> [(h.rank, h.doc_id, round(h.score, 3)) for h in result.hits], list(result.timings_ms)
    ([(1, 'd1', 0.115)], ['bm25'])
    """

    hits: list[RankedHit]
    timings_ms: dict[str, float] = field(default_factory=dict)


class Pipeline:
    """``first_stage`` retrieves ``depth`` candidates; ``reranker`` (optional) re-scores them; with ``fusion`` the
    final order fuses both stages' scores (``rerank_score``/``rerank_rank`` stay the re-ranker's own).

    >>> from ctxir.retrieval import BM25Retriever
    >>> corpus = {"d1": {"title": "Otters", "text": "Otters dig dens in the river bank."},
    ...           "d2": {"title": "Banks", "text": "Banks lend money to savers."},
    ...           "d3": {"title": "", "text": "Bats hunt moths over the river at night."}}
    >>> pipeline = Pipeline(BM25Retriever(corpus))  # no re-ranker: the first stage's ranking
    >>> [(h.rank, h.doc_id, h.rerank_rank) for h in pipeline.search("river otters", top_k=10).hits]
    [(1, 'd1', None), (2, 'd3', None)]
    """

    def __init__(
        self,
        first_stage: Retriever,
        reranker: Reranker | None = None,
        depth: int = 100,
        fusion: StageFusion | None = None,
    ):
        if fusion is not None and reranker is None:
            raise CtxirError("fusion needs a reranker: pass one, or drop fusion")
        self.first_stage, self.reranker, self.depth = first_stage, reranker, check_top_k(depth)
        self.fusion = fusion

    @property
    def corpus(self):
        return self.first_stage.corpus

    def search(self, query: str, top_k: int = 10) -> SearchResult:
        query, top_k = check_query(query), check_top_k(top_k)
        start = time.perf_counter()
        first = self.first_stage._search([query], max(top_k, self.depth) if self.reranker else top_k)[0]
        timings = {self.first_stage.name: (time.perf_counter() - start) * 1000}
        if self.reranker is None:
            hits = [RankedHit(h.doc_id, h.score, r, h.score, r) for r, h in enumerate(first[:top_k], 1)]
            return SearchResult(hits, timings)
        start = time.perf_counter()
        reranked = self.reranker._rerank(query, first[: self.depth], self.corpus)
        timings[self.reranker.name] = (time.perf_counter() - start) * 1000
        final = self.fusion.fuse(first, reranked) if self.fusion else None
        return SearchResult(merge_stages(first, reranked, final)[:top_k], timings)

    def run(self, queries: Queries, show_progress: bool = True) -> dict[str, Run]:
        """{"first_stage": run, "rerank": run[, "fused": run]}."""
        first = self.first_stage.search(queries, self.depth)
        runs = {"first_stage": run_from_hits(first)}
        if self.reranker is not None:
            reranked = {
                qid: self.reranker._rerank(queries[qid], first[qid][: self.depth], self.corpus)
                for qid in tqdm(queries, desc=f"re-ranking ({self.reranker.name})", disable=not show_progress)
            }
            runs["rerank"] = run_from_hits(reranked)
            if self.fusion is not None:
                runs["fused"] = run_from_hits({q: self.fusion.fuse(first[q], reranked[q]) for q in queries})
        return runs


def mode_fusion(
    reranker: Reranker | None, mode: str = "fused", first_stage: str | None = None
) -> StageFusion | None:
    """A Pipeline's ``fusion`` in re-rank ``mode``: the re-ranker's ``stage_fusion`` if "fused", else None."""
    check_choice(mode, "re-rank mode", RERANK_MODES)
    if reranker is None or mode == "alone":
        return None
    return (getattr(reranker, "stage_fusion", None) or StageFusion.default()).for_first_stage(first_stage)


def merge_stages(first: list[Hit], reranked: list[Hit], final: list[Hit] | None = None) -> list[RankedHit]:
    """Join the rankings by document, in the order of ``final`` (a fusion of both) or else the re-ranker's."""
    # (score, rank) of each stage, in RankedHit's field order
    first_stage = {h.doc_id: (h.score, r) for r, h in enumerate(first, 1)}
    rerank = {h.doc_id: (h.score, r) for r, h in enumerate(reranked, 1)}
    return [
        RankedHit(h.doc_id, h.score, r, *first_stage[h.doc_id], *rerank[h.doc_id])
        for r, h in enumerate(reranked if final is None else final, 1)
    ]


def build_first_stages(
    corpus,
    kinds: Sequence[str] = FIRST_STAGES,
    encoders: Sequence = (),
    *,
    bm25_options: dict | None = None,
    hybrid: HybridSettings | None = None,
    index: str | None = None,
    show_progress: bool = False,
) -> dict[str, Retriever]:
    """``{kind: retriever}`` for each of ``kinds`` over ``corpus``, parts built once and shared."""
    hybrid = hybrid or HybridSettings()
    stages = [get_first_stage(kind) for kind in kinds]
    needing = [stage.name for stage in stages if stage.uses_bi_encoder]
    if needing and not encoders:
        raise CtxirError(
            f"first stage {' and '.join(map(repr, needing))} ranks by a bi-encoder's cosine; stages that do "
            "need a bi-encoder: pass encoders=[BiEncoder(...)]"
        )
    fused = any(stage.fuses for stage in stages)  # a stage that fuses takes every bi-encoder
    parts = StageParts(
        corpus, encoders if fused else encoders[:1], bm25_options or {}, hybrid, index, show_progress
    )
    return {stage.name: stage.build(parts) for stage in stages}
