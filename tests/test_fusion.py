"""ctxir.retrieval.fusion: the one fusion used by hybrid retrieval, stage fusion and tuning, checked against ranx."""

import math
import random

import pytest

from ctxir.evaluation.evaluate import tune_fusion_rankings, tune_hybrid
from ctxir.rerank.pipeline import StageFusion
from ctxir.retrieval import BM25Retriever, HybridRetriever
from ctxir.retrieval.fusion import fuse, reciprocal_rank_fusion, scored_only, weighted_score_fusion
from ctxir.types import CtxirError, Hit


def random_rankings(rng: random.Random, n_lists: int = 3, docs: int = 30) -> list[list[Hit]]:
    rankings = []
    for _ in range(n_lists):
        chosen = rng.sample([f"d{i}" for i in range(docs)], rng.randint(5, docs))
        # distinct scores: ranx and ctxir break exact ties differently, which would test tie order, not fusion
        scores = sorted(rng.sample(range(1, 10_000), len(chosen)), reverse=True)
        rankings.append([Hit(d, s / 97.0) for d, s in zip(chosen, scores, strict=True)])
    return rankings


def as_ranx(ranking: list[Hit], qid: str = "q"):
    from ranx import Run

    return Run({qid: {h.doc_id: h.score for h in ranking}})


@pytest.mark.parametrize("seed", range(5))
def test_fuse_agrees_with_ranx(seed):
    ranx = pytest.importorskip("ranx")
    rankings = random_rankings(random.Random(seed))
    runs = [as_ranx(r) for r in rankings]
    expected = ranx.fuse(runs, method="rrf", params={"k": 60}).to_dict()["q"]
    ours = {h.doc_id: h.score for h in fuse(rankings, "rrf", k=60)}
    assert ours == pytest.approx(expected, rel=1e-9)
    weights = [0.2, 0.5, 0.3]
    expected = ranx.fuse(runs, norm="min-max", method="wsum", params={"weights": weights}).to_dict()["q"]
    ours = {h.doc_id: h.score for h in fuse(rankings, "weighted", weights=weights)}
    assert ours == pytest.approx(expected, rel=1e-9, abs=1e-12)


def test_weighted_rrf_is_hand_computed():
    a, b = [Hit("x", 3), Hit("y", 2)], [Hit("y", 9), Hit("z", 1)]
    fused = {h.doc_id: h.score for h in fuse([a, b], "rrf", k=1, weights=[2, 1])}
    assert fused == pytest.approx({"x": 2 / 2, "y": 2 / 3 + 1 / 2, "z": 1 / 3})
    assert fuse([a, b], "rrf", k=None) == reciprocal_rank_fusion([a, b], 60)
    assert fuse([a, b], "weighted") == weighted_score_fusion([a, b])


def test_fuse_rejects_unknown_methods_and_bad_weights():
    with pytest.raises(CtxirError, match="'mean' is not known: use one of rrf, weighted"):
        fuse([[Hit("a", 1)]], "mean")
    with pytest.raises(CtxirError, match="one per ranking"):
        fuse([[Hit("a", 1)], [Hit("b", 1)]], "rrf", weights=[1])


def test_stage_fusion_and_hybrid_use_the_same_fuse():
    first = [Hit("a", 3.0), Hit("b", 2.0), Hit("c", 1.0), Hit("d", 0.5)]
    reranked = [Hit("c", 0.9), Hit("a", 0.2), Hit("b", 0.1)]
    for method, weights, k in (("weighted", (0.5, 1.0), 60), ("rrf", (1.0, 2.0), 5)):
        assert StageFusion(method, weights, k).fuse(first, reranked) == fuse(
            [scored_only(first, reranked), reranked], method, k, weights
        )
    corpus = {
        str(i): {"title": "", "text": text}
        for i, text in enumerate(
            ["otters by the river", "river banks flood", "a savings bank account", "bank interest rates"]
        )
    }
    hybrid = HybridRetriever(
        [BM25Retriever(corpus), BM25Retriever(corpus, k1=0.5)], fusion="weighted", weights=[1.0, 2.0]
    )
    parts = [r.query("river bank", 100) for r in hybrid.retrievers]
    assert hybrid.query("river bank", 10) == fuse(parts, "weighted", weights=[1.0, 2.0])


def test_retriever_config_follows_in_place_tuning():
    corpus = {
        str(i): {"title": "", "text": text}
        for i, text in enumerate(
            [
                "otters by the river",
                "river banks flood",
                "a savings bank account",
                "bank interest rates",
                "python snakes",
                "python code",
            ]
        )
    }
    hybrid = HybridRetriever([BM25Retriever(corpus), BM25Retriever(corpus, k1=0.2, b=0.1)], depth=10)
    assert hybrid.config == {
        "retriever": "hybrid",
        "fusion": "rrf",
        "k": 60.0,
        "weights": [1.0, 1.0],
        "depth": 10,
        "parts": ["bm25", "bm25"],
    }
    best = tune_hybrid(hybrid, {"q1": "river", "q2": "bank account"}, {"q1": {"0": 1}, "q2": {"2": 1}})
    # the record is read from the attributes tuning set: they cannot disagree
    assert (hybrid.config["fusion"], hybrid.config["weights"]) == (best["fusion"], best["weights"])
    assert hybrid.config["k"] == hybrid.k
    assert BM25Retriever(corpus, stemmer=None).config["stemmer"] is None


def test_tuning_grid_uses_fuse():
    per = [{"q": [Hit("a", 2), Hit("b", 1)]}, {"q": [Hit("b", 5), Hit("a", 1)]}]
    best = tune_fusion_rankings(per, {"q": {"b": 1}}, rrf_ks=(60,), weights=(1.0, 2.0))
    row = next(r for r in best["grid"] if r["fusion"] == "rrf" and r["weights"] == [2.0, 1.0])
    # a: 2/61 + 1/62 > b: 2/62 + 1/61, so the relevant "b" is second: nDCG@10 = 1/log2(3)
    assert row["nDCG@10"] == pytest.approx(1 / math.log2(3))
    row = next(r for r in best["grid"] if r["fusion"] == "weighted" and r["weights"] == [2.0, 1.0])
    assert row["nDCG@10"] == pytest.approx(1 / math.log2(3))  # a: 2·1 + 1·0 > b: 2·0 + 1·1
    assert best["weights"] != [2.0, 1.0]
