import numpy as np

from ctxir.pipeline import Pipeline, merge_stages
from ctxir.rerank import Reranker
from ctxir.retrieval import BM25Retriever
from ctxir.types import Hit

CORPUS = {"short": {"title": "", "text": "bank"},
          "long": {"title": "", "text": "the bank of the river where otters play all day"},
          "mid": {"title": "", "text": "bank account money"},
          "none": {"title": "", "text": "unrelated words"}}


class LengthReranker(Reranker):
    name = "length"

    def score_pairs(self, query, texts):
        return np.array([len(t) for t in texts], dtype=float)


def test_merge_stages_keeps_both_ranks():
    first = [Hit("a", 3.0), Hit("b", 2.0), Hit("c", 1.0)]
    reranked = [Hit("c", 0.9), Hit("a", 0.5), Hit("b", 0.1)]
    merged = merge_stages(first, reranked)
    assert [(h.doc_id, h.first_stage_rank, h.rerank_rank, h.rank_change) for h in merged] == \
        [("c", 3, 1, 2), ("a", 1, 2, -1), ("b", 2, 3, -1)]
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
