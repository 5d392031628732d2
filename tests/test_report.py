"""The failure report (ctxir.evaluation.report, its HTML and CLI, ctxir.explain.failures): the worst queries of a
run, what they missed, and why the document above won (issue #12 §2)."""

import json
import math
import re

import pytest

from ctxir.evaluation.report import failure_cases, load_report, main, metric_values, report_meta, write_report
from ctxir.evaluation.report_html import render_report
from ctxir.explain.failures import explain_failures
from ctxir.types import CtxirError, doc_text

CORPUS = {
    "d1": {"title": "Otters", "text": "Otters play on the river bank."},
    "d2": {"title": "<script>alert('x')</script>", "text": "Savings & loans at the bank."},
    "d3": {"title": "Judged off-topic", "text": "Python code."},
    "d4": {"title": "Snakes", "text": "A python snake eats prey."},
    "d5": {"title": "Missed", "text": "Deposit money in an account."},
    "d6": {"title": "Low", "text": "Bank accounts pay interest."},
}
QUERIES = {
    "qa": "money at the bank",
    "qb": "river otters",
    "qc": "python snake",
    "qz": "nothing relevant",
    "q0": "deposit",
    "q00": "account",
}
QRELS = {
    "qa": {"d5": 2, "d6": 1, "d3": 0},  # d5 not retrieved, d6 at rank 3, d3 judged non-relevant
    "qb": {"d1": 1},  # found first: perfect
    "qc": {"d4": 1},  # at rank 2, under an unjudged document
    "qz": {"d1": 0},  # no relevant document: nothing to drill into
    "q0": {"d5": 1},  # nothing retrieved
    "q00": {"d6": 1},  # retrieved, far too low
}
RUN = {
    "qa": {"d2": 5.0, "d3": 4.0, "d6": 3.0, "d1": 1.0},
    "qb": {"d1": 2.0, "d2": 1.0},
    "qc": {"d3": 2.0, "d4": 1.0},
    "qz": {"d1": 1.0},
    "q0": {},
    "q00": {f"x{i}": 20.0 - i for i in range(12)} | {"d6": 1.0},
}


def cases(**kwargs):
    return failure_cases(QRELS, RUN, CORPUS, QUERIES, **kwargs)


def test_worst_queries_lowest_first_ties_by_qid_without_unanswerable_ones():
    values = metric_values(QRELS, RUN)
    assert values["q0"] == values["q00"] == 0.0 and values["qb"] == 1.0
    # 0 < qa (relevant at rank 3 of a possible 1, 2) < qc (rank 2) < qb; qz has no relevant document
    assert [c["qid"] for c in cases()] == ["q0", "q00", "qa", "qc", "qb"]
    assert [c["qid"] for c in cases(worst=2)] == ["q0", "q00"]
    assert cases()[2]["value"] == pytest.approx(values["qa"]) and 0 < values["qa"] < values["qc"] < 1


def test_a_case_lists_top_results_missed_and_low_ranked_relevant_documents():
    case = next(c for c in cases(top=2) if c["qid"] == "qa")
    assert case["query"] == "money at the bank" and case["num_relevant"] == 2 and case["num_retrieved"] == 4
    assert [(r["rank"], r["doc_id"], r["score"], r["grade"]) for r in case["results"]] == [
        (1, "d2", 5.0, None),
        (2, "d3", 4.0, 0),
    ]  # unjudged, judged non-relevant
    assert case["results"][0]["title"] == CORPUS["d2"]["title"]
    assert [(r["doc_id"], r["grade"], r["rank"], r["score"], r["status"]) for r in case["relevant"]] == [
        ("d5", 2, None, None, "missed"),
        ("d6", 1, 3, 3.0, "low"),
    ]


def test_the_pair_to_explain_is_the_highest_ranked_non_relevant_document_above_it():
    by_qid = {c["qid"]: c for c in cases()}
    # the grade-2 document first; the winner is the top non-relevant document, unjudged or judged 0
    assert [(p["winner"]["doc_id"], p["relevant"]["doc_id"]) for p in by_qid["qa"]["pairs"]] == [
        ("d2", "d5"),
        ("d2", "d6"),
    ]
    assert by_qid["qa"]["pairs"][0]["winner"] == {"doc_id": "d2", "rank": 1, "score": 5.0, "grade": None}
    assert [(p["winner"]["doc_id"], p["relevant"]["rank"]) for p in by_qid["qc"]["pairs"]] == [("d3", 2)]
    assert by_qid["q00"]["pairs"][0]["winner"]["doc_id"] == "x0"
    assert by_qid["qb"]["pairs"] == [] and by_qid["q0"]["pairs"] == []  # nothing above it; nothing retrieved


def test_ranks_follow_the_metrics_tie_rule_so_they_agree_with_it():
    # equal scores keep the run's listed order (evaluate_run's default): d4 listed first is first, the query perfect
    [case] = failure_cases({"qc": {"d4": 1}}, {"qc": {"d4": 1.0, "d3": 1.0}}, CORPUS, QUERIES)
    assert case["value"] == 1.0 and case["relevant"][0]["rank"] == 1 and case["pairs"] == []
    # listed second, it is second, by the rank the case shows and by the metric's value alike
    [case] = failure_cases({"qc": {"d4": 1}}, {"qc": {"d3": 1.0, "d4": 1.0}}, CORPUS, QUERIES)
    assert case["relevant"][0]["rank"] == 2 and case["value"] == pytest.approx(1 / math.log2(3))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"metric": "nDCG"}, "metric 'nDCG' is not known"),
        ({"metric": "F1@10"}, "metric 'F1@10' is not known"),
        ({"worst": 0}, "worst must be a whole number"),
        ({"top": "10"}, "top must be a whole number"),
    ],
)
def test_bad_arguments_are_named(kwargs, match):
    with pytest.raises(CtxirError, match=match):
        cases(**kwargs)


def test_a_judged_query_without_text_is_named():
    with pytest.raises(CtxirError, match="no text for judged query 'q0'"):
        failure_cases(QRELS, RUN, CORPUS, {q: t for q, t in QUERIES.items() if q != "q0"})


def test_bm25_explanation_is_its_own_score_split_over_query_terms():
    from ctxir.retrieval import BM25Retriever

    bm25 = BM25Retriever(CORPUS)
    query = "bank account for money money"  # "money" twice: BM25 counts it twice
    [case] = failure_cases({"q": {"d5": 1}}, {"q": {"d6": 2.0, "d5": 1.0}}, CORPUS, {"q": query})
    [explained] = explain_failures([case], CORPUS, bm25=bm25)
    ex = explained["pairs"][0]["explanations"][0]
    assert ex["model"] == "bm25" and ex["exact"] is True
    own = {h.doc_id: h.score for h in bm25.query(query, top_k=6)}
    assert ex["winner"]["score"] == pytest.approx(own["d6"], rel=1e-5)
    assert ex["relevant"]["score"] == pytest.approx(own["d5"], rel=1e-5)
    assert ex["difference"] == pytest.approx(own["d6"] - own["d5"], rel=1e-4)
    terms = {t["term"]: t for t in ex["terms"]}
    assert terms["money ×2"]["winner"] == 0 and terms["money ×2"]["relevant"] > 0  # only d5 has "money"
    assert terms["bank"]["winner"] > 0 and terms["bank"]["relevant"] == 0
    assert sum(t["winner"] for t in ex["terms"]) == pytest.approx(own["d6"], rel=1e-4)
    # the highlighted segments are the document's text, words where BM25 found them
    assert "".join(t for t, _ in ex["winner"]["tokens"]) == doc_text(CORPUS["d6"])
    assert [t for t, v in ex["winner"]["tokens"] if v] == ["Bank", "accounts"]
    assert case["pairs"][0].get("explanations") is None  # the input is not modified


def test_bi_encoder_explanation_splits_each_cosine_exactly(tiny_st):
    import numpy as np

    [case] = failure_cases({"q": {"d1": 1}}, {"q": {"d4": 2.0, "d1": 1.0}}, CORPUS, {"q": "river otters"})
    [explained] = explain_failures([case], CORPUS, bi_encoder=tiny_st)
    ex = explained["pairs"][0]["explanations"][0]
    assert (ex["model"], ex["method"], ex["exact"]) == ("bi-encoder", "exact", True)
    vectors = tiny_st.encode(
        ["river otters", doc_text(CORPUS["d4"]), doc_text(CORPUS["d1"])], normalize_embeddings=True
    )
    assert ex["winner"]["score"] == pytest.approx(float(vectors[0] @ vectors[1]), abs=1e-5)
    assert ex["relevant"]["score"] == pytest.approx(float(vectors[0] @ vectors[2]), abs=1e-5)
    # every query token's contribution is there (word-pieces joined), adding up to each cosine
    assert sum(t["winner"] for t in ex["terms"]) == pytest.approx(ex["winner"]["score"], abs=1e-3)
    assert sum(t["relevant"] for t in ex["terms"]) == pytest.approx(ex["relevant"]["score"], abs=1e-3)
    assert {"[CLS]", "river", "otters", "[SEP]"} <= {t["term"] for t in ex["terms"]}
    assert np.sum([v for _, v in ex["winner"]["tokens"]]) == pytest.approx(ex["winner"]["score"], abs=1e-3)
    assert len(ex["winner"]["top_pairs"]) == 8


def test_reranker_explanation_uses_integrated_gradients(tiny_bert_dir):
    import torch
    from sentence_transformers import CrossEncoder

    torch.manual_seed(1)
    model = CrossEncoder(str(tiny_bert_dir), num_labels=1, device="cpu")
    [case] = failure_cases({"q": {"d1": 1}}, {"q": {"d4": 2.0, "d1": 1.0}}, CORPUS, {"q": "river otters"})
    [explained] = explain_failures([case], CORPUS, reranker=model, n_steps=8)
    ex = explained["pairs"][0]["explanations"][0]
    assert (ex["model"], ex["method"], ex["exact"]) == ("cross-encoder", "integrated-gradients", False)
    scores = model.predict([("river otters", doc_text(CORPUS[d])) for d in ("d4", "d1")])
    assert ex["winner"]["score"] == pytest.approx(float(scores[0]), abs=1e-5)
    assert ex["difference"] == pytest.approx(float(scores[0] - scores[1]), abs=1e-5)
    assert ex["winner"]["completeness_error"] is not None and ex["winner"]["tokens"][-1][0] == "[SEP]"
    assert {"river", "otters"} <= {t["term"] for t in ex["terms"]}


def test_explain_failures_needs_a_model_and_bounds_the_pairs():
    with pytest.raises(CtxirError, match="explain_failures needs a model"):
        explain_failures(cases(), CORPUS)
    from ctxir.retrieval import BM25Retriever

    explained = {c["qid"]: c for c in explain_failures(cases(), CORPUS, bm25=BM25Retriever(CORPUS))}
    assert [len(p.get("explanations", [])) for p in explained["qa"]["pairs"]] == [1, 0]  # one pair per query


def test_html_escapes_every_text_and_loads_nothing_from_outside():
    from ctxir.retrieval import BM25Retriever

    hostile = dict(QUERIES, qa="money <img src=x onerror=alert(1)> at the bank")
    explained = explain_failures(
        failure_cases(QRELS, RUN, CORPUS, hostile), CORPUS, bm25=BM25Retriever(CORPUS)
    )
    meta = report_meta(QRELS, RUN, "nDCG@10", system="bm25 <b>", config={"data": "<data>", "split": "test"})
    page = render_report(explained, meta)
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in page  # d2's title, shown as text
    assert (
        "&lt;img src=x onerror=alert(1)&gt;" in page and "&lt;data&gt;" in page and "bm25 &lt;b&gt;" in page
    )
    assert "<script" not in page.lower() and "<img" not in page.lower() and "<link" not in page.lower()
    assert "@import" not in page and "url(" not in page
    # the only links are to the page's own sections
    assert set(re.findall(r'(?:href|src)="([^"]*)"', page)) == {f"#case-{i}" for i in range(1, 6)}
    assert page.startswith("<!DOCTYPE html>") and page.count("<h2 ") == 5
    assert 'class="tok"' in page  # highlighted BM25 matches
    fragment = render_report(explained, meta, standalone=False)
    assert fragment.startswith('<div class="ctxir-report">') and "<html" not in fragment


def test_report_json_round_trips_through_load_report(tmp_path):
    from ctxir.retrieval import BM25Retriever

    explained = explain_failures(cases(), CORPUS, bm25=BM25Retriever(CORPUS))
    meta = report_meta(QRELS, RUN, "nDCG@10", system="bm25", config={"data": "toy"})
    html_path, json_path = write_report(tmp_path / "out" / "report.html", explained, meta)
    assert (
        html_path.read_text().startswith("<!DOCTYPE html>") and json_path == tmp_path / "out" / "report.json"
    )
    expected = json.loads(json.dumps({"meta": meta, "cases": explained}))
    assert load_report(html_path) == expected and load_report(json_path) == expected
    with pytest.raises(CtxirError, match=r"must end in \.html"):
        write_report(tmp_path / "report.json", explained, meta)
    (tmp_path / "other.json").write_text('{"metrics": {}}')
    with pytest.raises(CtxirError, match="is not a ctxir failure report"):
        load_report(tmp_path / "other.json")
    with pytest.raises(CtxirError, match="does not exist"):
        load_report(tmp_path / "absent.html")


# --- the command lines ------------------------------------------------------------------------------------------


@pytest.fixture
def beir_dir(tmp_path, write_beir):
    # q3 shares no word with its relevant d2, so BM25 returns only d1
    return write_beir(
        tmp_path / "toy",
        {"q1": "river otters", "q2": "snake prey", "q3": "river money"},
        {"test": {"q1": {"d1": 1}, "q2": {"d3": 1}, "q3": {"d2": 1}}},
    )


def test_evaluate_report_flag_writes_html_and_json_and_saves_runs(beir_dir, tmp_path, capsys):
    from ctxir.evaluation.evaluate import main as evaluate

    results, report = tmp_path / "results.json", tmp_path / "report.html"
    assert (
        evaluate(
            [
                "--data",
                str(beir_dir),
                "--retriever",
                "bm25",
                "--output",
                str(results),
                "--report",
                str(report),
                "--report-queries",
                "2",
            ]
        )
        == 0
    )
    assert f"wrote {report} and {tmp_path / 'report.json'}" in capsys.readouterr().out
    loaded = load_report(report)
    assert [c["qid"] for c in loaded["cases"]] == ["q3", "q1"]  # q3 missed, then ties at 1.0 by qid
    q3 = loaded["cases"][0]
    assert q3["relevant"] == [
        {
            "doc_id": "d2",
            "title": "",
            "snippet": "savings account at the bank",
            "in_corpus": True,
            "grade": 1,
            "rank": None,
            "score": None,
            "status": "missed",
        }
    ]
    ex = q3["pairs"][0]["explanations"][0]
    assert (q3["pairs"][0]["winner"]["doc_id"], ex["model"]) == ("d1", "bm25")
    assert {t["term"]: t["relevant"] for t in ex["terms"]} == {"river": 0.0, "money (in no document)": 0.0}
    assert loaded["meta"]["system"] == "bm25" and loaded["meta"]["mean"] == pytest.approx(2 / 3)
    assert "river money" in report.read_text()
    saved = json.loads(results.read_text())
    assert saved["runs"]["bm25"]["q3"] == {"d1": pytest.approx(q3["results"][0]["score"])}

    # later, from the results JSON alone (the positional argument), with and without models
    again = tmp_path / "again.html"
    assert main([str(results), "--output", str(again), "--worst", "1"]) == 0
    assert load_report(again)["cases"][0]["pairs"][0]["explanations"][0]["model"] == "bm25"
    assert main([str(results), "--output", str(again), "--explain", "none"]) == 0
    assert "explanations" not in load_report(again)["cases"][0]["pairs"][0]


def test_report_errors_are_messages(beir_dir, tmp_path, capsys):
    from ctxir.evaluation.evaluate import main as evaluate

    out = tmp_path / "r.json"
    assert (
        evaluate(
            [
                "--data",
                str(beir_dir),
                "--retriever",
                "bm25",
                "--output",
                str(out),
                "--report",
                str(tmp_path / "r.html"),
            ]
        )
        == 2
    )
    assert "writes its data to" in capsys.readouterr().err and not out.exists()
    assert (
        evaluate(["--data", str(beir_dir), "--retriever", "bm25", "--report", str(tmp_path / "r.txt")]) == 2
    )
    assert "must end in .html" in capsys.readouterr().err
    old = tmp_path / "old.json"
    old.write_text(json.dumps({"per_query": {"bm25": {}}, "config": {"data": str(beir_dir)}}))
    assert main([str(old), "--output", str(tmp_path / "x.html")]) == 2
    assert "holds no runs" in capsys.readouterr().err
    assert main([str(tmp_path / "absent.json")]) == 2
    assert "is not a file" in capsys.readouterr().err
    assert main([str(old), "--output", str(tmp_path / "old.html")]) == 2
    assert "over the results" in capsys.readouterr().err and "per_query" in old.read_text()


def test_dense_report_explains_with_the_pipelines_minilm(beir_dir, tmp_path, minilm_path):
    from ctxir.evaluation.evaluate import main as evaluate

    # judged so that any reasonable model fails: the snake document must outrank the relevant code one
    (beir_dir / "qrels" / "hard.tsv").write_text("query-id\tcorpus-id\tscore\nq2\td4\t1\n")
    report = tmp_path / "dense.html"
    assert (
        evaluate(
            [
                "--data",
                str(beir_dir),
                "--split",
                "hard",
                "--retriever",
                "dense",
                "--model",
                str(minilm_path),
                "--cache-dir",
                str(tmp_path / "cache"),
                "--output",
                str(tmp_path / "d.json"),
                "--report",
                str(report),
            ]
        )
        == 0
    )
    [worst] = load_report(report)["cases"]
    assert worst["value"] < 1 and worst["pairs"][0]["winner"]["doc_id"] == "d3"
    ex = worst["pairs"][0]["explanations"][0]
    assert (ex["model"], ex["method"]) == ("bi-encoder", "exact")
    assert ex["winner"]["score"] == pytest.approx(worst["pairs"][0]["winner"]["score"], abs=1e-4)
    assert report.is_file() and (tmp_path / "dense.json").is_file()


def test_reranked_report_explains_the_reranker_then_the_first_stage(beir_dir, tmp_path, tiny_bert_dir):
    from ctxir.evaluation.evaluate import main as evaluate

    report = tmp_path / "rerank.html"
    # --rerank-mode alone: the run reported is the re-ranker's own, so its scores are the ones explained
    assert (
        evaluate(
            [
                "--data",
                str(beir_dir),
                "--retriever",
                "bm25",
                "--rerank",
                "cross-encoder",
                "--reranker-model",
                str(tiny_bert_dir),
                "--device",
                "cpu",
                "--output",
                str(tmp_path / "r.json"),
                "--report",
                str(report),
                "--report-queries",
                "1",
                "--rerank-mode",
                "alone",
            ]
        )
        == 0
    )
    loaded = load_report(report)
    assert loaded["meta"]["system"] == "bm25 + cross-encoder"
    [case] = loaded["cases"]
    assert [e["model"] for e in case["pairs"][0]["explanations"]] == ["cross-encoder", "bm25"]
    ex = case["pairs"][0]["explanations"][0]
    # the score explained is the one the re-ranked run holds for the winner
    assert ex["winner"]["score"] == pytest.approx(case["pairs"][0]["winner"]["score"], abs=1e-4)


def test_report_for_pipeline_keeps_the_worst_queries_its_options_ask_for(tmp_path):
    from ctxir.evaluation.report import report_for_pipeline
    from ctxir.rerank.pipeline import Pipeline
    from ctxir.retrieval.retrievers import BM25Retriever

    _, json_path = report_for_pipeline(
        tmp_path / "a.html",
        Pipeline(BM25Retriever(CORPUS)),
        RUN,
        "bm25",
        CORPUS,
        QUERIES,
        QRELS,
        config={"retriever": "bm25"},
        worst=1,
        top=2,
    )
    report = json.loads(json_path.read_text())
    assert len(report["cases"]) == 1 and len(report["cases"][0]["results"]) <= 2
    assert report["meta"]["config"] == {"retriever": "bm25"} and report["meta"]["metric"] == "nDCG@10"
