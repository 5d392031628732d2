"""Training runs write an anchor beside a test figure only where the two cover the same queries (and depth): the
rows a card check would refuse are never written (training/runner.py's anchor_fields)."""

from __future__ import annotations

from ctxir.publish.card_check import row_problems
from ctxir.testing import metrics_record
from training.runner import anchor_fields
from training.train_cross_encoder import ANCHORS


def row(queries: int, depth: int, subset: str | None = None) -> dict:
    out = {
        "dataset": "scifact",
        "split": "test",
        "task": "reranking",
        "metric": "nDCG@10",
        "before": 0.8081,
        "after": 0.8926,
        "anchor": None,
        "anchor_name": None,
        "config": f"rerank BM25 top-{depth}, {queries} queries",
        "queries": queries,
        "first_stage": "bm25",
        "depth": depth,
    }
    return {**out, "subset": subset} if subset else out


def test_an_anchor_on_other_queries_or_depth_is_left_out_and_one_on_the_same_is_cited_in_full():
    beir = ANCHORS[("scifact", "nDCG@10")]
    assert anchor_fields(beir, row(50, 20, "the first 50 SciFact test queries")) == {}  # the 0.8926 case
    assert anchor_fields(beir, row(300, 20)) == {}  # all queries, but top 20 against BEIR's top 100
    same = anchor_fields(beir, row(300, 100))
    assert same == {
        "anchor": 0.688,
        "anchor_name": "BEIR BM25 + cross-encoder (ms-marco-MiniLM-L6)",
        "anchor_source": "Thakur et al. 2021 (BEIR), Table 2",
        "anchor_queries": 300,
        "anchor_first_stage": "bm25",
        "anchor_depth": 100,
    }
    # what the runner writes passes the card check; the pair it leaves out would not
    metrics = metrics_record("cross-encoder")
    metrics["evaluations"] = [{**row(300, 100), **same}]
    assert row_problems(metrics) == []
    forced = {**same, "anchor_queries": 300}
    metrics["evaluations"] = [{**row(50, 20, "the first 50 SciFact test queries"), **forced}]
    assert any("on queries 50 but its anchor 0.688" in p for p in row_problems(metrics))


def test_an_anchor_given_as_value_and_name_only_is_written_as_is_and_the_check_asks_for_its_source():
    fields = anchor_fields((0.831, "SetFit all-MiniLM-L6-v2, 8 per class"), row(300, 20))
    assert fields == {"anchor": 0.831, "anchor_name": "SetFit all-MiniLM-L6-v2, 8 per class"}
    metrics = metrics_record("cross-encoder")
    metrics["evaluations"] = [{**row(300, 20), **fields}]
    assert any("cites no anchor_source, anchor_queries" in p for p in row_problems(metrics))
