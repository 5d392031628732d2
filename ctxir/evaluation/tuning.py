"""Choose hybrid-fusion settings on training queries (never on the test queries they are reported on)."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from ctxir.evaluation.metrics import evaluate_run
from ctxir.retrieval.fusion import fuse, scored_only
from ctxir.retrieval.retrievers import HybridRetriever
from ctxir.types import Hit, Qrels, Queries, run_from_hits

RRF_KS = (1, 2, 5, 10, 20, 40, 60, 100)
WEIGHTS = (0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 4.0)  # each retriever's weight but the last, which stays 1


def tune_fusion_rankings(
    per_retriever: Sequence[dict[str, list[Hit]]],
    qrels: Qrels,
    metric: str = "nDCG@10",
    rrf_ks: Sequence[float] = RRF_KS,
    weights: Sequence[float] = WEIGHTS,
) -> dict:
    """Grid search over fusion, rrf k and every retriever's weight but the last (which stays 1) over
    ``per_retriever`` ({qid: hits} each); the best {"fusion", "k", "weights", metric} and the "grid"."""
    k_value = int(metric.split("@")[1]) if "@" in metric else 10
    qids = list(per_retriever[0])
    weight_sets = [[*ws, 1.0] for ws in itertools.product(weights, repeat=len(per_retriever) - 1)]
    grid = []
    for fusion, k, ws in itertools.chain(
        (("rrf", k, ws) for k, ws in itertools.product(rrf_ks, weight_sets)),
        (("weighted", None, ws) for ws in weight_sets),
    ):
        fused = {q: fuse([r[q] for r in per_retriever], fusion, k, ws) for q in qids}
        score = evaluate_run(qrels, run_from_hits(fused), k_values=(k_value,)).aggregate[metric]
        grid.append({"fusion": fusion, "k": k, "weights": ws, metric: score})
    # Ties go to the earlier (simpler, smaller-k) setting: max() keeps the first maximum.
    best = max(grid, key=lambda row: row[metric])
    return {**best, "metric": metric, "grid": grid}


def tune_stage_fusion(
    first: dict[str, list[Hit]], reranked: dict[str, list[Hit]], qrels: Qrels, metric: str = "nDCG@10"
) -> dict:
    """Choose how to fuse a re-ranker (``reranked``: {qid: hits}) with its ``first`` stage; weight 0 = re-ranker alone."""
    first = {q: scored_only(first[q], reranked[q]) for q in reranked}
    # Tie-break toward plain re-ranking: weight 0 comes first in the grid.
    return tune_fusion_rankings([first, reranked], qrels, metric, weights=(0.0, *WEIGHTS))


def tune_hybrid(hybrid: HybridRetriever, queries: Queries, qrels: Qrels, metric: str = "nDCG@10") -> dict:
    """Tune ``hybrid`` in place on ``queries``/``qrels`` (a training split) and return the choice."""
    per_retriever = [r.search(queries, hybrid.depth) for r in hybrid.retrievers]
    best = tune_fusion_rankings(per_retriever, qrels, metric)
    hybrid.fusion, hybrid.weights = best["fusion"], best["weights"]
    hybrid.k = best["k"] if best["k"] is not None else hybrid.k
    return best
