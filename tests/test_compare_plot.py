"""Per-query difference plots (issue #66 item 3): ``ctxir compare --plot FILE`` (.png or interactive .html) draws each
system against the baseline, query by query, worst to best, wins and losses counted and the paired test's p in the
title; a failure report with a baseline shows the same figure, in the app's tab too."""

from __future__ import annotations

import json
import re
from types import SimpleNamespace

import pytest

from ctxir.cli import main
from ctxir.evaluation.compare import compare_systems
from ctxir.evaluation.report import failure_cases, report_from_results, write_report
from ctxir.evaluation.report_html import render_report
from ctxir.types import CtxirError
from ctxir.viz.differences import (
    differences_figure,
    differences_plotly,
    format_p,
    query_differences,
    save_differences,
)

BASE = {"q1": 0.25, "q2": 0.5, "q3": 1.0, "q4": 0.0, "q5": 1.0, "q6": 0.5}
# per query minus BASE: q1 +0.5, q2 -0.25, q3 0, q4 +0.25, q5 -1.0, q6 +0.5
BETTER = {"q1": 0.75, "q2": 0.25, "q3": 1.0, "q4": 0.25, "q5": 0.0, "q6": 1.0}
WORSE = {q: 0.0 for q in BASE}


def test_each_systems_differences_are_sorted_worst_to_best_and_counted():
    better, worse = query_differences(
        {"bm25": BASE, "dense": BETTER, "none": WORSE},
        "bm25",
        "nDCG@10",
        pvalues={"dense": 0.5, "none": 0.03125},
    )
    assert better.qids == ("q5", "q2", "q3", "q4", "q1", "q6")  # equal differences by query id
    assert better.deltas.tolist() == [-1.0, -0.25, 0.0, 0.25, 0.5, 0.5]
    assert (better.wins, better.losses, better.ties) == (3, 2, 1)
    assert better.title == "dense vs bm25 · nDCG@10: 3 wins, 2 losses, 1 tie · p = 0.5000"
    assert (worse.wins, worse.losses, worse.ties) == (0, 5, 1) and worse.qids[-1] == "q4"
    with pytest.raises(
        CtxirError, match=r"'dense' has values for 5 queries and 'bm25' for 6; .* \(e\.g\. 'q6'\)"
    ):
        query_differences(
            {"bm25": BASE, "dense": {q: v for q, v in BETTER.items() if q != "q6"}}, "bm25", "m"
        )
    with pytest.raises(CtxirError, match=r"baseline 'bm2' is not among the systems 'bm25', 'dense'"):
        query_differences({"bm25": BASE, "dense": BETTER}, "bm2", "m")


def test_both_figures_draw_the_sorted_bars_under_the_title():
    differences = query_differences({"bm25": BASE, "dense": BETTER, "$none$": WORSE}, "bm25", "nDCG@10")
    fig = differences_figure(differences)
    axes = fig.axes
    assert [ax.get_title() for ax in axes] == [d.title for d in differences]
    heights = [bar.get_height() for bar in axes[0].patches]
    assert heights == [-1.0, -0.25, 0.0, 0.25, 0.5, 0.5]  # worst first
    assert [t.get_text() for t in axes[0].get_xticklabels()] == ["q5", "q2", "q3", "q4", "q1", "q6"]
    interactive = differences_plotly(differences)
    assert [a.text for a in interactive.layout.annotations] == [d.title for d in differences]
    assert list(interactive.data[0].y) == heights and interactive.data[0].customdata[0] == "q5"


def _results(folder, name: str, values: dict) -> str:
    """A results JSON as ``ctxir evaluate`` writes it, as far as ``ctxir compare`` reads it."""
    path = folder / f"{name}.json"
    per_query = {q: {"nDCG@10": v, "MRR@10": 1.0 - v} for q, v in values.items()}
    path.write_text(json.dumps({"system": name, "per_query": {name: per_query}}))
    return str(path)


@pytest.mark.parametrize("suffix", [".png", ".html"])
def test_compare_plot_writes_the_format_its_suffix_names_with_compares_p(suffix, tmp_path, capsys):
    files = [
        _results(tmp_path, "bm25", BASE),
        _results(tmp_path, "dense", BETTER),
        _results(tmp_path, "none", WORSE),
    ]
    plot, output = tmp_path / "plots" / f"compare{suffix}", tmp_path / "compare.json"
    argv = ["compare", *files, "--metrics", "nDCG@10,MRR@10", "--plot", str(plot), "--output", str(output)]
    assert main(argv) == 0
    assert f"wrote {plot}" in capsys.readouterr().out
    saved = json.loads(output.read_text())
    rows = [r for r in saved["comparisons"] if r["metric"] == "nDCG@10"]  # the first metric is drawn
    data = plot.read_bytes()
    if suffix == ".png":
        assert data.startswith(b"\x89PNG\r\n\x1a\n")
        return
    page = data.decode("utf-8")
    assert page.lower().startswith("<!doctype html>") and "Plotly.newPlot" in page
    assert not re.search(r"<script[^>]+src=", page)  # plotly.js inlined: the page opens alone, offline
    for row in rows:
        assert f"{row['system']} vs bm25 · nDCG@10" in page and f"p = {format_p(row['p'])}" in page
    assert "none vs bm25 · nDCG@10: 0 wins, 5 losses, 1 tie" in page and "MRR@10:" not in page


def test_another_suffix_is_refused_before_any_work(tmp_path, capsys):
    # the results files do not exist: the plot's name is checked first
    assert main(["compare", "a.json", "b.json", "--plot", str(tmp_path / "compare.pdf")]) == 2
    err = capsys.readouterr().err
    assert f"--plot {str(tmp_path / 'compare.pdf')!r} must end in .png (a picture, by matplotlib) or" in err
    assert (
        ".html (an interactive page, by plotly): name the file" in err
        and not (tmp_path / "compare.pdf").exists()
    )
    with pytest.raises(CtxirError, match=r"plot 'compare\.svg' must end in \.png"):
        save_differences("compare.svg", query_differences({"a": BASE, "b": BETTER}, "a", "m"))


# ---------------------------------------------------------------- the failure report

CORPUS = {d: {"title": "", "text": f"document {d}"} for d in ("d1", "d2", "d3")}
QUERIES = {f"q{i}": f"query {i}" for i in range(1, 5)}
QRELS = {f"q{i}": {"d1": 1} for i in range(1, 5)}
FIRST = {q: {"d2": 2.0, "d1": 1.0} for q in QUERIES}  # d1 at rank 2 everywhere: MRR 0.5
RERANKED = {
    "q1": {"d1": 2.0, "d2": 1.0},
    "q2": {"d1": 2.0, "d2": 1.0},
    "q3": {"d2": 2.0, "d1": 1.0},
    "q4": {"d2": 2.0, "d3": 1.0},
}


def _report(runs: dict) -> tuple[list, dict]:
    results = {"config": {"retriever": "bm25"}, "runs": runs}
    return report_from_results(results, CORPUS, QUERIES, QRELS, metric="MRR@10")


def test_a_report_with_a_baseline_carries_the_comparison_and_draws_it(tmp_path):
    cases, meta = _report({"bm25": FIRST, "bm25 + cross-encoder": RERANKED})
    comparison = meta["comparison"]
    assert comparison["baseline"] == "bm25" and comparison["metric"] == "MRR@10"
    assert comparison["per_query"]["bm25 + cross-encoder"] == {"q1": 1.0, "q2": 1.0, "q3": 0.5, "q4": 0.0}
    compared = compare_systems(
        {
            name: {q: {"MRR@10": v} for q, v in values.items()}
            for name, values in comparison["per_query"].items()
        },
        ["MRR@10"],
    )
    assert comparison["p"] == {"bm25 + cross-encoder": compared["comparisons"][0]["p"]}
    page = render_report(cases, meta)
    assert page.count('<img class="differences" src="data:image/png;base64,') == 1
    assert "bm25 + cross-encoder vs bm25 · MRR@10: 2 wins, 1 loss, 1 tie · p = " in page  # its alt text
    _, alone = _report({"bm25": FIRST})
    assert "comparison" not in alone and "<img" not in render_report(cases, alone)


def test_the_apps_report_tab_shows_the_figure_and_counts_the_wins(tmp_path):
    from ctxir.app.report_tab import failure_report

    cases, meta = _report({"bm25": FIRST, "bm25 + cross-encoder": RERANKED})
    _, report_json = write_report(tmp_path / "report.html", cases, meta)
    state = SimpleNamespace(
        config=SimpleNamespace(max_upload_mb=10)
    )  # a saved report reads no model or corpus
    shown = failure_report(state, report_json)
    assert '<img class="differences" src="data:image/png;base64,' in shown.html
    assert (
        "Query by query against `bm25` (MRR@10, the figure above the cases): `bm25 + cross-encoder` 2 wins, 1 loss"
        in (shown.text)
    )
    assert shown.data["meta"]["comparison"]["p"] == meta["comparison"]["p"]
    assert failure_cases(QRELS, RERANKED, CORPUS, QUERIES, "MRR@10")[0]["qid"] == "q4"  # the report's worst


def test_evaluate_report_compares_the_reranked_runs_with_the_first_stage(write_beir, tmp_path):
    from ctxir.evaluation.evaluate import main as evaluate
    from tests import tiny_models
    from tests.conftest import TINY_VOCAB

    queries = {"q1": "river bank otters", "q2": "bank account", "q3": "python snake", "q4": "python code"}
    qrels = {"test": {"q1": {"d1": 1}, "q2": {"d2": 1}, "q3": {"d3": 1}, "q4": {"d4": 1}}}
    folder = write_beir(tmp_path / "toy", queries, qrels)
    model = tiny_models.save_tiny_cross_encoder(tmp_path / "ce", TINY_VOCAB)
    argv = ["--data", str(folder), "--retriever", "bm25", "--rerank", "cross-encoder", "--reranker-model"]
    argv += [str(model), "--device", "cpu", "--output", str(tmp_path / "res.json"), "--report"]
    assert evaluate([*argv, str(tmp_path / "report.html")]) == 0
    comparison = json.loads((tmp_path / "report.json").read_text())["meta"]["comparison"]
    assert list(comparison["per_query"]) == ["bm25", "bm25 + cross-encoder", "bm25 + cross-encoder (fused)"]
    assert comparison["baseline"] == "bm25" and set(comparison["p"]) == set(list(comparison["per_query"])[1:])
    assert '<img class="differences"' in (tmp_path / "report.html").read_text()
