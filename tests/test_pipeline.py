import numpy as np
import pytest

from ctxir.evaluation.evaluate import tune_stage_fusion
from ctxir.rerank import Reranker
from ctxir.rerank.pipeline import Pipeline, StageFusion, merge_stages
from ctxir.retrieval import BM25Retriever
from ctxir.types import CtxirError, Hit

CORPUS = {
    "short": {"title": "", "text": "bank"},
    "long": {"title": "", "text": "the bank of the river where otters play all day"},
    "mid": {"title": "", "text": "bank account money"},
    "none": {"title": "", "text": "unrelated words"},
}


class LengthReranker(Reranker):
    name = "length"

    def score_pairs(self, query, texts):
        return np.array([len(t) for t in texts], dtype=float)


def test_merge_stages_keeps_both_ranks():
    first = [Hit("a", 3.0), Hit("b", 2.0), Hit("c", 1.0)]
    reranked = [Hit("c", 0.9), Hit("a", 0.5), Hit("b", 0.1)]
    merged = merge_stages(first, reranked)
    assert [(h.doc_id, h.first_stage_rank, h.rerank_rank, h.rank_change) for h in merged] == [
        ("c", 3, 1, 2),
        ("a", 1, 2, -1),
        ("b", 2, 3, -1),
    ]
    assert merged[0].first_stage_score == 1.0 and merged[0].score == 0.9


def test_pipeline_search_with_and_without_reranker():
    bm25 = BM25Retriever(CORPUS)
    plain = Pipeline(bm25).search("bank", top_k=2)
    assert [h.rank for h in plain.hits] == [1, 2] and all(h.rerank_rank is None for h in plain.hits)
    assert set(plain.timings_ms) == {"bm25"}
    result = Pipeline(bm25, LengthReranker(), depth=10).search("bank", top_k=3)
    assert [h.doc_id for h in result.hits] == ["long", "mid", "short"]  # longest text first
    first_order = [h.doc_id for h in bm25.query("bank", 10)]
    assert [h.first_stage_rank for h in result.hits] == [first_order.index(h.doc_id) + 1 for h in result.hits]
    assert set(result.timings_ms) == {"bm25", "length"}


def test_pipeline_run_gives_one_run_per_stage():
    runs = Pipeline(BM25Retriever(CORPUS), LengthReranker(), depth=10).run({"q": "bank"}, show_progress=False)
    assert set(runs) == {"first_stage", "rerank"}
    assert max(runs["rerank"]["q"], key=runs["rerank"]["q"].get) == "long"
    assert "none" not in runs["first_stage"]["q"]


def test_stage_fusion_weighted_is_hand_computed():
    first = [Hit("a", 10.0), Hit("b", 6.0), Hit("c", 2.0)]  # min–max: a 1, b 0.5, c 0
    reranked = [Hit("c", 4.0), Hit("b", 3.0), Hit("a", 0.0)]  # min–max: c 1, b 0.75, a 0
    fused = StageFusion("weighted", (1.0, 1.0)).fuse(first, reranked)
    assert [(h.doc_id, h.score) for h in fused] == [("b", 1.25), ("a", 1.0), ("c", 1.0)]
    # weight 0 on the first stage is plain re-ranking
    assert [h.doc_id for h in StageFusion("weighted", (0.0, 1.0)).fuse(first, reranked)] == ["c", "b", "a"]
    rrf = StageFusion("rrf", (1.0, 2.0), k=1).fuse(first, reranked)  # a: 1/2+2/4, b: 1/3+2/3, c: 1/4+2/2
    assert [(h.doc_id, round(h.score, 6)) for h in rrf] == [("c", 1.25), ("a", 1.0), ("b", 1.0)]


def test_a_fusion_json_may_give_each_first_stage_its_own_method(tmp_path):
    from ctxir.files import write_json

    write_json(
        tmp_path / "fusion.json",
        {
            "method": "weighted",
            "weights": [0.5, 1.0],
            "k": 60,
            "chosen_on": "dev",
            "first_stages": {
                "hybrid": {"method": "rrf", "weights": [1.5, 1.0]},
                "dense": {"weights": [2.0, 1.0]},
            },
        },
    )
    fusion = StageFusion.from_file(tmp_path / "fusion.json")
    hybrid, dense = fusion.for_first_stage("hybrid"), fusion.for_first_stage("dense")
    assert (hybrid.method, hybrid.weights) == ("rrf", (1.5, 1.0))
    # no method of its own: the top level's
    assert (dense.method, dense.weights) == ("weighted", (2.0, 1.0))
    assert fusion.for_first_stage("bm25").method == "weighted"
    assert fusion.record()["first_stages"]["hybrid"] == {"weights": [1.5, 1.0], "method": "rrf"}
    with pytest.raises(
        CtxirError, match=r"stage fusion method 'calibrated' is not known: use one of 'rrf', 'weighted'"
    ):
        StageFusion("rrf", (1.0, 1.0), by_first_stage=(("dense", (1.0, 1.0), "calibrated"),))


def test_stage_fusion_ignores_first_stage_hits_beyond_the_reranked_depth():
    first = [Hit("a", 3.0), Hit("b", 2.0), Hit("z", 1.0)]
    fused = StageFusion().fuse(first, [Hit("b", 1.0), Hit("a", 0.0)])
    assert {h.doc_id for h in fused} == {"a", "b"}


def test_pipeline_with_fusion_keeps_the_rerankers_own_scores():
    bm25 = BM25Retriever(CORPUS)
    pipeline = Pipeline(bm25, LengthReranker(), depth=10, fusion=StageFusion("weighted", (1.0, 1.0)))
    hits = pipeline.search("bank", top_k=3).hits
    reranked = Pipeline(bm25, LengthReranker(), depth=10).search("bank", top_k=3).hits
    by_id = {h.doc_id: h for h in reranked}
    for hit in hits:
        assert (hit.rerank_score, hit.rerank_rank) == (
            by_id[hit.doc_id].rerank_score,
            by_id[hit.doc_id].rerank_rank,
        )
    # "short" is BM25's best and the re-ranker's worst: fused it sits between
    assert [h.doc_id for h in reranked] == ["long", "mid", "short"] and hits[0].doc_id != "short"
    assert set(pipeline.run({"q": "bank"}, show_progress=False)) == {"first_stage", "rerank", "fused"}


class Fixed(Reranker):
    """Scores each document by a fixed table: a re-ranker whose order the test writes down."""

    name = "fixed"

    def __init__(self, scores: dict[str, float]):
        self.scores = scores

    def score_pairs(self, query, texts):
        return np.array([self.scores[t] for t in texts], dtype=float)


def test_fused_and_alone_modes_give_the_hand_checked_orders():
    from ctxir.rerank.pipeline import mode_fusion
    from ctxir.retrieval import Retriever

    class InOrder(Retriever):  # the first stage ranks a, b, c, d
        def _search(self, texts, top_k):
            return [[Hit(d, 4.0 - i) for i, d in enumerate("abcd")][:top_k] for _ in texts]

    corpus = {d: {"title": "", "text": d} for d in "abcd"}
    reverse = Fixed({"a": 1.0, "b": 2.0, "c": 3.0, "d": 4.0})  # the re-ranker ranks d, c, b, a
    first = InOrder(corpus)
    alone = Pipeline(first, reverse, depth=4, fusion=mode_fusion(reverse, "alone")).search("q", top_k=4).hits
    assert [h.doc_id for h in alone] == ["d", "c", "b", "a"]
    # fused, RRF k=60, 1:1: a and d get 1/61 + 1/64 = 0.032018, b and c 1/62 + 1/63 = 0.032002; ties by doc id
    fused = Pipeline(first, reverse, depth=4, fusion=mode_fusion(reverse)).search("q", top_k=4).hits
    assert [h.doc_id for h in fused] == ["a", "d", "b", "c"]
    assert fused[0].score == pytest.approx(1 / 61 + 1 / 64) and fused[2].score == pytest.approx(
        1 / 62 + 1 / 63
    )
    assert [(h.first_stage_rank, h.rerank_rank, h.rank_change) for h in fused] == [
        (1, 4, 0),
        (4, 1, 2),
        (2, 3, -1),
        (3, 2, -1),
    ]
    # a model folder's fusion.json (here weights 0 : 1) replaces the default: the re-ranker's order again
    reverse.stage_fusion = StageFusion("weighted", (0.0, 1.0))
    assert [
        h.doc_id
        for h in Pipeline(first, reverse, depth=4, fusion=mode_fusion(reverse)).search("q", top_k=4).hits
    ] == ["d", "c", "b", "a"]
    runs = Pipeline(first, reverse, depth=4, fusion=mode_fusion(Fixed({}))).run(
        {"q": "q"}, show_progress=False
    )
    assert set(runs) == {"first_stage", "rerank", "fused"}
    with pytest.raises(CtxirError, match="re-rank mode 'mixed' is not known: use one of 'fused', 'alone'"):
        mode_fusion(reverse, "mixed")


def test_stage_fusion_rejects_bad_settings():
    with pytest.raises(CtxirError, match="'mean'"):
        StageFusion("mean")
    with pytest.raises(CtxirError, match="re-ranker > 0"):
        StageFusion("weighted", (1.0, 0.0))
    with pytest.raises(CtxirError, match="needs a reranker"):
        Pipeline(BM25Retriever(CORPUS), None, fusion=StageFusion())


def test_tune_stage_fusion_picks_the_fusion_that_fixes_each_stages_mistake():
    # q1: the re-ranker is right, q2: only the first stage is; fusing both gets both right.
    first = {
        "q1": [Hit("x", 2.0), Hit("r1", 1.9), Hit("y", 0.0)],
        "q2": [Hit("r2", 2.0), Hit("x", 1.0), Hit("y", 0.0)],
    }
    reranked = {
        "q1": [Hit("r1", 1.0), Hit("x", 0.9), Hit("y", 0.0)],
        "q2": [Hit("x", 1.0), Hit("r2", 0.95), Hit("y", 0.0)],
    }
    qrels = {"q1": {"r1": 1}, "q2": {"r2": 1}}
    best = tune_stage_fusion(first, reranked, qrels)
    assert best["nDCG@10"] == 1.0 and best["weights"][0] > 0
    fusion = StageFusion.from_tuning(best)
    assert [fusion.fuse(first[q], reranked[q])[0].doc_id for q in ("q1", "q2")] == ["r1", "r2"]
    plain = [row for row in best["grid"] if row["weights"][0] == 0.0]
    assert plain and all(row["nDCG@10"] < 1.0 for row in plain)


def test_first_stages_are_built_once_and_shared(tiny_st):
    from ctxir.encoders import BiEncoder
    from ctxir.rerank.pipeline import HybridSettings, build_first_stages
    from ctxir.rerank.registry import load_reranker

    stages = build_first_stages(
        CORPUS,
        ["bm25", "dense", "hybrid"],
        [BiEncoder(tiny_st, cache=None)],
        bm25_options={"k1": 0.9},
        hybrid=HybridSettings(fusion="weighted", k=30.0, weights=[2, 1], depth=7),
    )
    assert stages["hybrid"].retrievers == [stages["bm25"], stages["dense"]]  # the same objects, not copies
    assert stages["bm25"].config["k1"] == 0.9 and stages["hybrid"].config["weights"] == [2.0, 1.0]
    hybrid = stages["hybrid"]
    assert (hybrid.fusion, hybrid.k, hybrid.depth) == ("weighted", 30.0, 7)
    assert list(build_first_stages(CORPUS, ["bm25"])) == ["bm25"]
    with pytest.raises(CtxirError, match="first stage 'sparse' is not known"):
        build_first_stages(CORPUS, ["sparse"])
    with pytest.raises(CtxirError, match="need a bi-encoder"):
        build_first_stages(CORPUS, ["dense"])
    assert load_reranker("none") is None
    with pytest.raises(CtxirError, match="re-ranker 'bm25' is not known"):
        load_reranker("bm25")


def test_the_app_builds_its_first_stages_with_the_library_builder(app_state):
    index = app_state.index(None)
    assert index.hybrid.retrievers == [index.bm25, index.dense]
    assert index.retriever("hybrid") is index.stages["hybrid"]
