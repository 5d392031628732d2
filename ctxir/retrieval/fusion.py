"""Rank fusion over ranked lists of ``Hit``: hybrid retrieval's, ``Pipeline``'s re-ranker/first-stage fusion's and
the fusion tuning's (``tests/test_fusion.py`` checks it against ``ranx.fuse``)."""

from __future__ import annotations

from collections.abc import Sequence

from ctxir.types import CtxirError, Hit

FUSIONS = ("rrf", "weighted")
DEFAULT_RRF_K = 60.0


def fuse(
    rankings: Sequence[Sequence[Hit]],
    method: str = "rrf",
    k: float | None = DEFAULT_RRF_K,
    weights: Sequence[float] | None = None,
    shared_ties: bool = False,
) -> list[Hit]:
    """Fuse ranked lists into one ranking, best first, ties by doc id: ``reciprocal_rank_fusion`` ("rrf", ``k`` None
    = 60) or ``weighted_score_fusion`` ("weighted"); ``weights`` default all 1.

    >>> from ctxir.types import Hit
    >>> bm25 = [Hit("a", 12.0), Hit("b", 9.0)]
    >>> dense = [Hit("b", 0.8), Hit("c", 0.7)]
    >>> [h.doc_id for h in fuse([bm25, dense])]  # rrf, k=60: b is in both lists
    ['b', 'a', 'c']
    >>> fuse([bm25, dense], "max")
    Traceback (most recent call last):
        ...
    ctxir.types.CtxirError: fusion 'max' is not known: use one of rrf, weighted
    """
    if method == "rrf":
        return reciprocal_rank_fusion(rankings, DEFAULT_RRF_K if k is None else k, weights, shared_ties)
    if method == "weighted":
        return weighted_score_fusion(rankings, weights)
    raise CtxirError(f"fusion {method!r} is not known: use one of {', '.join(FUSIONS)}")


def reciprocal_rank_fusion(
    rankings: Sequence[Sequence[Hit]],
    k: float = DEFAULT_RRF_K,
    weights: Sequence[float] | None = None,
    shared_ties: bool = False,
) -> list[Hit]:
    """Cormack et al. (2009): score(d) = Σ_i w_i / (k + rank_i(d)), ranks from 1, so score scales do not matter.

    >>> from ctxir.types import Hit
    >>> bm25 = [Hit("a", 12.0), Hit("b", 9.0)]
    >>> dense = [Hit("b", 0.8), Hit("c", 0.7)]
    >>> [(h.doc_id, round(h.score, 4)) for h in reciprocal_rank_fusion([bm25, dense], k=60)]  # b: 1/62 + 1/61
    [('b', 0.0325), ('a', 0.0164), ('c', 0.0161)]

    With ``shared_ties`` equal scores share their group's first rank (1, 2, 2, 4), so the other lists order them:

    >>> first, second = [Hit("x", 1.0), Hit("y", 1.0)], [Hit("y", 0.9), Hit("x", 0.1)]
    >>> [h.doc_id for h in reciprocal_rank_fusion([first, second], weights=[3.0, 1.0])]
    ['x', 'y']
    >>> [h.doc_id for h in reciprocal_rank_fusion([first, second], weights=[3.0, 1.0], shared_ties=True)]
    ['y', 'x']
    """
    weights = check_weights(weights, len(rankings))
    if k < 0:
        raise CtxirError(f"rrf k must be ≥ 0, got {k!r}")
    fused: dict[str, float] = {}
    for ranking, weight in zip(rankings, weights, strict=True):
        rank = 0
        for position, hit in enumerate(ranking, start=1):
            # its position, or with shared_ties the first position of its run of equal scores
            if not (shared_ties and position > 1 and hit.score == ranking[position - 2].score):
                rank = position
            fused[hit.doc_id] = fused.get(hit.doc_id, 0.0) + weight / (k + rank)
    return sorted_hits(fused)


def weighted_score_fusion(
    rankings: Sequence[Sequence[Hit]], weights: Sequence[float] | None = None
) -> list[Hit]:
    """Convex combination of min–max normalised scores; a document missing from a list scores 0 there.

    >>> from ctxir.types import Hit
    >>> bm25 = [Hit("a", 12.0), Hit("b", 9.0)]  # normalised: a 1, b 0
    >>> dense = [Hit("b", 0.8), Hit("c", 0.7)]  # normalised: b 1, c 0
    >>> [(h.doc_id, round(h.score, 4)) for h in weighted_score_fusion([bm25, dense], weights=[0.3, 0.7])]
    [('b', 0.7), ('a', 0.3), ('c', 0.0)]
    """
    weights = check_weights(weights, len(rankings))
    fused: dict[str, float] = {}
    for ranking, weight in zip(rankings, weights, strict=True):
        if not ranking:
            continue
        low = min(h.score for h in ranking)
        span = max(h.score for h in ranking) - low
        for hit in ranking:
            # a list whose scores are all equal carries no order: every document in it gets the full weight
            normalised = (hit.score - low) / span if span > 0 else 1.0
            fused[hit.doc_id] = fused.get(hit.doc_id, 0.0) + weight * normalised
    return sorted_hits(fused)


def check_weights(weights: Sequence[float] | None, n: int) -> list[float]:
    if weights is None:
        return [1.0] * n
    weights = [float(w) for w in weights]
    if len(weights) != n or any(w < 0 for w in weights) or not any(weights):
        raise CtxirError(
            f"weights {weights!r} must be {n} non-negative numbers, not all zero (one per ranking)"
        )
    return weights


def scored_only(first: Sequence[Hit], reranked: Sequence[Hit]) -> list[Hit]:
    """The first-stage hits a re-ranker scored: re-ranker/first-stage fusion is over those candidates only."""
    candidates = {h.doc_id for h in reranked}
    return [h for h in first if h.doc_id in candidates]


def sorted_hits(scores: dict[str, float]) -> list[Hit]:
    """``{doc_id: score}`` as hits, best first, ties by doc id."""
    return [Hit(d, s) for d, s in sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))]
