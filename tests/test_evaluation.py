"""ctxir.evaluation against values computed by hand (the arithmetic is in the comments)."""

from __future__ import annotations

import dataclasses
import json
import math
import random

import numpy as np
import pytest
import pytrec_eval
import torch

from ctxir.evaluation import (
    EvalResult,
    evaluate_run,
    format_table,
    paired_recall_at_k,
    sts_correlation,
)
from ctxir.types import CtxirError, Hit, run_from_hits

L2 = math.log2

# ----------------------------------------------------------------------------- toy collection
#
# q1 graded.  qrels d1=2, d2=1, d3=0 (judged non-relevant), d4/d5 unjudged.
#    ranking:  1 d3(0)  2 d1(2)  3 d4(-)  4 d2(1)  5 d5(-)        R = 2 relevant
#    nDCG@3 = (2/log2 3) / (2/log2 2 + 1/log2 3)              = 1.26186 / 2.63093 = 0.47962
#    nDCG@5 = (2/log2 3 + 1/log2 5) / (2 + 1/log2 3)           = 1.69254 / 2.63093 = 0.64332
#    nDCG@1 = 0 (d3 is non-relevant)
#    MRR@1 = 0, MRR@3 = MRR@5 = MRR@10 = 1/2
#    P@1 = 0, P@3 = 1/3, P@5 = 2/5, P@10 = 2/10
#    Recall@1 = 0, Recall@3 = 1/2, Recall@5 = Recall@10 = 1
#    MAP = (1/2 + 2/4) / 2 = 0.5 ;  MAP@3 = (1/2) / 2 = 0.25 (divides by R, not min(k, R))
#
# q2 binary, the only relevant doc at rank 4.  qrels e=1.
#    ranking:  a b c e f
#    MRR@3 = 0, MRR@5 = MRR@10 = 1/4
#    P@3 = 0, P@5 = 1/5 ;  Recall@3 = 0, Recall@5 = 1
#    nDCG@3 = 0, nDCG@5 = (1/log2 5) / 1 = 0.43068
#    MAP = 1/4 ;  MAP@3 = 0
#
# q3 binary, two relevant, only 3 docs retrieved.  qrels g=1, h=1.
#    ranking:  1 g  2 x  3 h
#    MRR@k = 1 for every k ;  P@1 = 1, P@3 = 2/3, P@5 = 2/5 (trec_eval divides by k even past the end)
#    Recall@1 = 1/2, Recall@3 = 1
#    nDCG@3 = (1 + 1/log2 4) / (1 + 1/log2 3) = 1.5 / 1.63093 = 0.91972
#    MAP = (1/1 + 2/3) / 2 = 0.83333

QRELS = {
    "q1": {"d1": 2, "d2": 1, "d3": 0},
    "q2": {"e": 1},
    "q3": {"g": 1, "h": 1},
}
RUN = {
    "q1": {"d3": 0.9, "d1": 0.8, "d4": 0.7, "d2": 0.6, "d5": 0.5},
    "q2": {"a": 0.9, "b": 0.8, "c": 0.7, "e": 0.6, "f": 0.5},
    "q3": {"g": 0.9, "x": 0.8, "h": 0.7},
}
KS = (1, 3, 5, 10)

Q1_NDCG3 = (2 / L2(3)) / (2 + 1 / L2(3))
Q1_NDCG5 = (2 / L2(3) + 1 / L2(5)) / (2 + 1 / L2(3))
Q2_NDCG5 = 1 / L2(5)
Q3_NDCG3 = (1 + 1 / L2(4)) / (1 + 1 / L2(3))

HAND = {
    "q1": {
        "nDCG@1": 0.0, "nDCG@3": Q1_NDCG3, "nDCG@5": Q1_NDCG5,
        "MRR@1": 0.0, "MRR@3": 0.5, "MRR@5": 0.5, "MRR@10": 0.5,
        "P@1": 0.0, "P@3": 1 / 3, "P@5": 2 / 5, "P@10": 2 / 10,
        "Recall@1": 0.0, "Recall@3": 0.5, "Recall@5": 1.0, "Recall@10": 1.0,
        "MAP": 0.5, "MAP@3": 0.25,
    },
    "q2": {
        "nDCG@3": 0.0, "nDCG@5": Q2_NDCG5,
        "MRR@1": 0.0, "MRR@3": 0.0, "MRR@5": 0.25, "MRR@10": 0.25,
        "P@3": 0.0, "P@5": 1 / 5,
        "Recall@3": 0.0, "Recall@5": 1.0,
        "MAP": 0.25, "MAP@3": 0.0,
    },
    "q3": {
        "nDCG@3": Q3_NDCG3,
        "MRR@1": 1.0, "MRR@3": 1.0, "MRR@10": 1.0,
        "P@1": 1.0, "P@3": 2 / 3, "P@5": 2 / 5,
        "Recall@1": 0.5, "Recall@3": 1.0,
        "MAP": (1 + 2 / 3) / 2,
    },
}  # fmt: skip


@pytest.fixture(scope="module")
def toy() -> EvalResult:
    return evaluate_run(QRELS, RUN, k_values=KS)


# ----------------------------------------------------------------------------- evaluate_run


def test_hand_computed_numbers_are_sane():
    # guard the hand arithmetic itself against typos
    assert abs(Q1_NDCG3 - 0.47962) < 1e-5
    assert abs(Q1_NDCG5 - 0.64332) < 1e-5
    assert abs(Q2_NDCG5 - 0.43068) < 1e-5
    assert abs(Q3_NDCG3 - 0.91972) < 1e-5


@pytest.mark.parametrize("qid", sorted(HAND))
def test_per_query_matches_hand_values(toy, qid):
    for metric, expected in HAND[qid].items():
        assert toy.per_query[qid][metric] == pytest.approx(expected, abs=1e-9), (qid, metric)


def test_aggregate_is_mean_of_hand_values(toy):
    assert toy.num_queries == 3
    assert toy.missing_queries == ()
    assert toy.aggregate["MRR@3"] == pytest.approx((0.5 + 0 + 1) / 3)
    assert toy.aggregate["MRR@10"] == pytest.approx((0.5 + 0.25 + 1) / 3)  # 0.58333
    assert toy.aggregate["nDCG@3"] == pytest.approx((Q1_NDCG3 + 0 + Q3_NDCG3) / 3)
    assert toy.aggregate["MAP"] == pytest.approx((0.5 + 0.25 + 5 / 6) / 3)  # 0.52778
    assert toy.aggregate["P@5"] == pytest.approx((2 / 5 + 1 / 5 + 2 / 5) / 3)
    assert toy.aggregate["Recall@3"] == pytest.approx((0.5 + 0 + 1) / 3)
    for metric, value in toy.aggregate.items():
        assert value == pytest.approx(np.mean([toy.per_query[q][metric] for q in QRELS]))


def test_output_keys_and_order(toy):
    expected = (
        [f"nDCG@{k}" for k in KS]
        + [f"MRR@{k}" for k in KS]
        + ["MAP"]
        + [f"MAP@{k}" for k in KS]
        + [f"Recall@{k}" for k in KS]
        + [f"P@{k}" for k in KS]
    )
    assert list(toy.aggregate) == expected
    assert all(list(v) == expected for v in toy.per_query.values())


def test_metric_subset_and_k_normalisation():
    res = evaluate_run(QRELS, RUN, k_values=[10, 3, 3], metrics=["MRR"])
    assert list(res.aggregate) == ["MRR@3", "MRR@10"]


def test_result_is_frozen_and_serialisable(toy):
    with pytest.raises(dataclasses.FrozenInstanceError):
        toy.num_queries = 5  # type: ignore[misc]
    d = toy.to_dict()
    assert json.loads(json.dumps(d)) == d
    assert d["num_queries"] == 3 and d["per_query"]["q2"]["MRR@10"] == 0.25
    d["aggregate"]["MAP"] = -1.0  # a copy: the result is untouched
    assert toy.aggregate["MAP"] != -1.0


def test_run_only_qid_is_ignored(toy):
    run = {**RUN, "q_extra": {"d1": 1.0}}
    res = evaluate_run(QRELS, run, k_values=KS)
    assert res.num_queries == 3 and "q_extra" not in res.per_query
    assert res.aggregate == toy.aggregate


def test_judged_query_missing_from_run_counts_as_zero(toy):
    qrels = {**QRELS, "q4": {"z": 1}}
    res = evaluate_run(qrels, RUN, k_values=KS)
    assert res.num_queries == 4
    assert res.missing_queries == ("q4",)
    assert set(res.per_query["q4"].values()) == {0.0}
    assert res.aggregate["MRR@10"] == pytest.approx((0.5 + 0.25 + 1 + 0) / 4)
    for metric in toy.aggregate:
        assert res.aggregate[metric] == pytest.approx(toy.aggregate[metric] * 3 / 4)


def test_empty_result_list_counts_as_zero_and_missing():
    res = evaluate_run(QRELS, {**RUN, "q2": {}}, k_values=KS)
    assert res.num_queries == 3 and res.missing_queries == ("q2",)
    assert set(res.per_query["q2"].values()) == {0.0}


def test_query_with_only_irrelevant_judgments_scores_zero_and_counts():
    # q5 is judged, but its only judgment is non-relevant: every metric is 0, and it is in the mean.
    qrels = {**QRELS, "q5": {"n1": 0}}
    run = {**RUN, "q5": {"n1": 0.9, "n2": 0.1}}
    res = evaluate_run(qrels, run, k_values=KS)
    assert res.num_queries == 4 and res.missing_queries == ()
    assert set(res.per_query["q5"].values()) == {0.0}
    assert res.aggregate["MAP"] == pytest.approx((0.5 + 0.25 + 5 / 6 + 0) / 4)


def test_qid_with_no_judgments_is_dropped():
    res = evaluate_run({**QRELS, "q6": {}}, RUN, k_values=KS)
    assert res.num_queries == 3 and "q6" not in res.per_query


def test_ties_keep_the_runs_listed_order_by_default():
    # the same tie, listed a then b: a ranks first, as a list showing a before b does; listed b then a: b first
    qrels = {"q": {"a": 1}}
    res = evaluate_run(qrels, {"q": {"a": 1.0, "b": 1.0}}, k_values=(1, 2), metrics=["mrr", "precision"])
    assert res.per_query["q"] == {"MRR@1": 1.0, "MRR@2": 1.0, "P@1": 1.0, "P@2": 0.5}
    assert (
        evaluate_run(qrels, {"q": {"b": 1.0, "a": 1.0}}, k_values=(1,), metrics=["mrr"]).aggregate["MRR@1"]
        == 0
    )
    # a higher score still outranks an earlier listing: c (2.0), listed last, is first
    res = evaluate_run({"q": {"c": 1}}, {"q": {"a": 1.0, "b": 1.0, "c": 2.0}}, k_values=(1,), metrics=["mrr"])
    assert res.aggregate["MRR@1"] == 1.0
    # a run from a ranked list with a tie (RRF): scored in the list's order
    hits = {"q": [Hit("b", 0.5), Hit("a", 0.5), Hit("c", 0.1)]}
    assert (
        evaluate_run({"q": {"b": 1}}, run_from_hits(hits), k_values=(1,), metrics=["mrr"]).aggregate["MRR@1"]
        == 1
    )


def _truncate(docs: dict[str, float], k: int) -> dict[str, float]:
    # the listed order: score desc, ties as listed; scored k − rank so trec_eval keeps that order
    top = sorted(docs, key=lambda doc: -docs[doc])[:k]
    return {doc: float(k - i) for i, doc in enumerate(top)}


def test_mrr_at_k_equals_recip_rank_of_truncated_run():
    rng = random.Random(0)
    docs = [f"d{i}" for i in range(30)]
    qrels = {f"q{i}": {d: rng.choice([0, 0, 1, 2]) for d in rng.sample(docs, 5)} for i in range(40)}
    # coarse scores force many ties, including at the cutoffs
    run = {q: {d: float(rng.randint(0, 4)) for d in rng.sample(docs, 20)} for q in qrels}
    ks = (1, 2, 3, 5, 10)
    res = evaluate_run(qrels, run, k_values=ks, metrics=["mrr"])
    ev = pytrec_eval.RelevanceEvaluator(qrels, {"recip_rank"})
    for k in ks:
        truncated = ev.evaluate({q: _truncate(d, k) for q, d in run.items()})
        for q in qrels:
            assert res.per_query[q][f"MRR@{k}"] == pytest.approx(truncated[q]["recip_rank"]), (q, k)


def test_integral_float_grades_accepted_fractional_rejected(toy):
    as_floats = {q: {d: float(v) for d, v in docs.items()} for q, docs in QRELS.items()}
    assert evaluate_run(as_floats, RUN, k_values=KS).aggregate == toy.aggregate
    with pytest.raises(CtxirError, match=r"qrels\['q'\]\['d'\] = 0.5 is not an integer"):
        evaluate_run({"q": {"d": 0.5}}, {"q": {"d": 1.0}})


def test_nan_score_rejected():
    with pytest.raises(CtxirError, match="run\\['q'\\]\\['d'\\]"):
        evaluate_run({"q": {"d": 1}}, {"q": {"d": float("nan")}})


def test_no_overlap_error_names_both_id_sets():
    with pytest.raises(CtxirError) as exc:
        evaluate_run({"a": {"x": 1}, "b": {"y": 1}}, {"1": {"x": 1.0}, "2": {"y": 1.0}})
    msg = str(exc.value)
    assert "share no query ids" in msg
    assert "['1', '2']" in msg and "['a', 'b']" in msg and "split" in msg


@pytest.mark.parametrize("qrels", [{}, {"q": {}}])
def test_empty_qrels_error(qrels):
    with pytest.raises(CtxirError, match="nothing to evaluate"):
        evaluate_run(qrels, RUN)


def test_unknown_metric_error_lists_valid():
    with pytest.raises(CtxirError) as exc:
        evaluate_run(QRELS, RUN, metrics=["ndcg", "bleu"])
    msg = str(exc.value)
    assert "bleu" in msg
    for valid in ("ndcg", "mrr", "map", "recall", "precision"):
        assert valid in msg


@pytest.mark.parametrize("ks", [(0,), (10, -1), (), (2.5,), (True,)])
def test_bad_k_values_rejected(ks):
    # k=0 must be caught before pytrec_eval: trec_eval segfaults on a cutoff of 0
    with pytest.raises(CtxirError, match="k"):
        evaluate_run(QRELS, RUN, k_values=ks)


# ----------------------------------------------------------------------------- sts_correlation


def test_sts_monotone_nonlinear():
    # y = x^2 on 1..5 is perfectly monotone → Spearman 1.
    # Pearson by hand: x̄ = 3, ȳ = 11; dx = -2,-1,0,1,2; dy = -10,-7,-2,5,14
    #   Σdxdy = 20+7+0+5+28 = 60; Σdx² = 10; Σdy² = 100+49+4+25+196 = 374
    #   r = 60 / sqrt(10 · 374) = 60 / 61.1555 = 0.98110
    out = sts_correlation([1, 2, 3, 4, 5], [1, 4, 9, 16, 25])
    assert out["spearman"] == pytest.approx(1.0)
    assert out["pearson"] == pytest.approx(0.98110, abs=1e-5)
    assert out["pearson"] < 1.0
    assert out["n"] == 5


def test_sts_spearman_one_swap():
    # ranks of gold: 1,3,2,4,5 → d = 0,1,1,0,0, Σd² = 2 → ρ = 1 - 6·2 / (5·(25-1)) = 1 - 12/120 = 0.9
    out = sts_correlation(np.array([0.1, 0.2, 0.3, 0.4, 0.5]), torch.tensor([1.0, 3.0, 2.0, 4.0, 5.0]))
    assert out["spearman"] == pytest.approx(0.9)
    # Pearson of ranks (1,2,3,4,5) vs (1,3,2,4,5): dx = -2,-1,0,1,2; dy = -2,0,-1,1,2
    #   Σdxdy = 4+0+0+1+4 = 9; Σdx² = Σdy² = 10 → r = 0.9 (equally spaced values, so Pearson = Spearman)
    assert out["pearson"] == pytest.approx(0.9)


@pytest.mark.parametrize(
    ("pred", "gold", "match"),
    [
        ([1, 2, 3], [1, 2], "pair up"),
        ([1], [1], "at least 2"),
        ([1, 1, 1], [1, 2, 3], "predicted is constant"),
        ([1, 2, 3], [2, 2, 2], "gold is constant"),
        ([1, float("nan"), 3], [1, 2, 3], "NaN"),
    ],
)
def test_sts_errors(pred, gold, match):
    with pytest.raises(CtxirError, match=match):
        sts_correlation(pred, gold)


# ----------------------------------------------------------------------------- paired_recall_at_k

# row 0: target 0.9 is the row max                              → rank 1
# row 1: target 0.5; 0.8 beats it, 0.5 ties (pessimistic: after) → rank 3
# row 2: target 0.6; only 0.7 beats it                          → rank 2
SIM = [
    [0.9, 0.1, 0.2],
    [0.8, 0.5, 0.5],
    [0.3, 0.7, 0.6],
]


def test_paired_recall_hand_matrix():
    out = paired_recall_at_k(np.array(SIM), k_values=(1, 2, 3, 10))
    assert out["Recall@1"] == pytest.approx(1 / 3)
    assert out["Recall@2"] == pytest.approx(2 / 3)
    assert out["Recall@3"] == pytest.approx(1.0)
    assert out["Recall@10"] == pytest.approx(1.0)
    assert out["MRR"] == pytest.approx((1 + 1 / 3 + 1 / 2) / 3)  # 11/18 = 0.61111
    assert list(out) == ["Recall@1", "Recall@2", "Recall@3", "Recall@10", "MRR"]


def test_paired_recall_torch_and_full_tie():
    assert paired_recall_at_k(torch.tensor(SIM), k_values=(1, 2, 3)) == paired_recall_at_k(
        SIM, k_values=(1, 2, 3)
    )
    # a constant matrix: every target ties with all N-1 others → rank N = 4 (pessimistic, never rank 1)
    out = paired_recall_at_k(torch.ones(4, 4), k_values=(1, 3, 4))
    assert out == {"Recall@1": 0.0, "Recall@3": 0.0, "Recall@4": 1.0, "MRR": 0.25}


def test_paired_recall_identity_is_perfect():
    out = paired_recall_at_k(np.eye(5), k_values=(1,))
    assert out == {"Recall@1": 1.0, "MRR": 1.0}


@pytest.mark.parametrize(
    ("sim", "ks", "match"),
    [
        (np.ones((2, 3)), (1,), "square"),
        (np.ones(3), (1,), "square"),
        (np.zeros((0, 0)), (1,), "square"),
        (np.eye(3), (0,), "k"),
        (np.array([[1.0, np.nan], [0.0, 1.0]]), (1,), "NaN"),
    ],
)
def test_paired_recall_errors(sim, ks, match):
    with pytest.raises(CtxirError, match=match):
        paired_recall_at_k(sim, k_values=ks)


# ----------------------------------------------------------------------------- format_table


def test_format_table_exact():
    table = format_table(
        {"BM25": {"nDCG@10": 0.65, "MRR@10": 1 / 3}, "dense|v2": {"nDCG@10": 0.712345}},
        ["nDCG@10", "MRR@10"],
    )
    assert table == (
        "| System | nDCG@10 | MRR@10 |\n"
        "|---|---:|---:|\n"
        "| BM25 | 0.6500 | 0.3333 |\n"
        "| dense\\|v2 | 0.7123 | – |"
    )


def test_format_table_from_eval_results(toy):
    table = format_table({"toy": toy.aggregate}, ["MRR@3", "MAP"])
    assert table.splitlines()[2] == "| toy | 0.5000 | 0.5278 |"  # (0.5+0+1)/3 ; (0.5+0.25+0.8333)/3


def test_format_table_errors():
    with pytest.raises(CtxirError):
        format_table({}, ["MAP"])
    with pytest.raises(CtxirError):
        format_table({"a": {"MAP": 1.0}}, [])


def test_paired_test_counts_wins_and_tests_the_difference():
    from ctxir.evaluation import paired_test

    a = {q: {"nDCG@10": v} for q, v in zip("abcdef", [0.2, 0.4, 0.5, 0.1, 0.3, 0.6], strict=True)}
    b = {q: {"nDCG@10": v} for q, v in zip("abcdef", [0.5, 0.6, 0.5, 0.4, 0.6, 0.9], strict=True)}
    result = paired_test(a, b)
    assert (result["wins"], result["losses"], result["ties"]) == (5, 0, 1)
    assert result["delta"] == pytest.approx((0.3 + 0.2 + 0 + 0.3 + 0.3 + 0.3) / 6)
    # differences 0.3, 0.2, 0, 0.3, 0.3, 0.3: mean 0.2333, sd 0.1211 → t = 4.72 with 5 df → p ≈ 0.0052
    assert result["t_pvalue"] == pytest.approx(0.0052, abs=5e-4)
    same = paired_test(a, a)
    assert same["t_pvalue"] == 1.0 and same["ties"] == 6
    with pytest.raises(CtxirError, match="≥ 2 queries"):
        paired_test(a, {"zz": {"nDCG@10": 1.0}})
