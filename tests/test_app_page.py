"""What the page says agrees with what it shows (issue #21 §1–2), checked without a browser: one colour convention
for attributions across the app, the failure report and their exports; captions that match their colour scales;
one limit for k from one constant; plurals; the failure report's sample; the phone's result cards.

The browser half (the same items as a person sees them, at a laptop's and a phone's width) is in test_browser.py.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from plotly.colors import get_colorscale, hex_to_rgb, unlabel_rgb

from ctxir.app import figures
from ctxir.app.search import search
from ctxir.app.search_tab import compare_pooling, result_cards
from ctxir.app.text import plural
from ctxir.evaluation.report_html import ATTRIBUTION_LEGEND, LOWERS_RGB, RAISES_RGB, render_report
from ctxir.types import CtxirError


def _rgb(colour: str) -> tuple[int, int, int]:
    colour = colour.strip()
    return tuple(hex_to_rgb(colour)) if colour.startswith("#") else tuple(int(v) for v in unlabel_rgb(colour))


def _luminance(colour: str) -> float:
    r, g, b = _rgb(colour)
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


# ---------------------------------------------------------------- one colour convention for attributions


def test_gradio_highlighted_text_uses_the_attribution_colours():
    """The Explain views' highlighted text is Gradio's, coloured by its own JavaScript: a score > 0 red, < 0 violet.
    ctxir's constants are those two colours; if a Gradio upgrade changes them, this fails instead of the page
    silently disagreeing with the report."""
    import gradio

    assets = Path(gradio.__file__).parent / "templates" / "frontend" / "assets"
    scripts = [p.read_text(encoding="utf-8", errors="ignore") for p in assets.glob("*.js")]
    rule = [s for s in scripts if "is_scores_mode" in s and "rgba(" in s]
    assert rule, "Gradio's HighlightedText script was not found"
    text = "".join(rule)
    assert "rgba({}, {}, {}".format(*RAISES_RGB) in text and "rgba({}, {}, {}".format(*LOWERS_RGB) in text


def test_figures_and_the_report_colour_attributions_alike():
    up, down = figures.token_bars(["good", "bad"], [0.5, -0.5], "t").data[0].marker.color
    assert _rgb(up) == RAISES_RGB and _rgb(down) == LOWERS_RGB
    heat = figures.heatmap(
        np.array([[-1.0, 1.0]]), ["q"], ["a", "b"], "t", figures.HeatmapStyle(diverging=True)
    ).data[0]
    assert _rgb(heat.colorscale[0][1]) == LOWERS_RGB and _rgb(heat.colorscale[-1][1]) == RAISES_RGB
    cmap = figures.attribution_cmap()  # the PNG exports
    assert tuple(round(255 * c) for c in cmap(0.0)[:3]) == LOWERS_RGB
    assert tuple(round(255 * c) for c in cmap(1.0)[:3]) == RAISES_RGB
    bar_colours = [
        tuple(round(255 * c) for c in patch.get_facecolor()[:3])
        for patch in figures.token_bars_png(["good", "bad"], [0.5, -0.5], "t").axes[0].patches
    ]
    assert bar_colours == [RAISES_RGB, LOWERS_RGB]
    assert ATTRIBUTION_LEGEND == "red = raised the score, violet = lowered it"


def test_heatmap_draws_its_style():
    matrix = np.array([[0.1, 0.9], [0.4, 0.6]])
    style = figures.HeatmapStyle(value_name="cosine", row_name="token", zmin=0.0, decimals=2, height=500)
    fig = figures.heatmap(matrix, ["a", "b"], ["c", "d"], "t", style)
    trace = fig.data[0]
    assert trace.zmin == 0.0 and "cosine %{z:.3f}" in trace.hovertemplate and fig.layout.height == 500
    assert trace.hovertemplate.startswith("token <b>")


def test_the_failure_report_highlights_and_its_legend_use_the_same_colours():
    explanation = {
        "model": "bm25",
        "method": "term weights",
        "exact": True,
        "about": "",
        "score_name": "BM25",
        "difference": 0.5,
        "terms": [],
        "winner": {"score": 1.0, "tokens": [["loans", 0.8], ["otters", -0.4]]},
        "relevant": {"score": 0.5, "tokens": [["otters", 0.5]]},
    }
    case = {
        "qid": "q1",
        "query": "otters",
        "metric": "nDCG@10",
        "value": 0.5,
        "num_relevant": 1,
        "num_retrieved": 2,
        "results": [],
        "relevant": [],
        "pairs": [
            {
                "winner": {"doc_id": "d2", "rank": 1, "score": 1.0, "grade": None},
                "relevant": {"doc_id": "d1", "rank": 2, "score": 0.5, "grade": 1},
                "explanations": [explanation],
            }
        ],
    }
    page = render_report([case], {"system": "bm25", "metric": "nDCG@10", "mean": 0.5, "num_queries": 1})
    raises, lowers = (",".join(map(str, rgb)) for rgb in (RAISES_RGB, LOWERS_RGB))
    legend = re.search(r'<div class="meta legend">(.*?)</div>', page).group(1)
    assert f"rgba({raises}," in legend and "red raised the score" in legend
    assert f"rgba({lowers}," in legend and "violet lowered it" in legend
    highlighted = dict(
        re.findall(r'style="background:rgba\(([\d,]+),[\d.]+\)" title="[^"]*">(\w+)<', page)[:2]
    )
    assert highlighted == {raises: "loans", lowers: "otters"}
    assert "40,167,69" not in page  # the old green


# ---------------------------------------------------------------- captions match their figures


def test_the_sentence_similarity_caption_matches_its_colour_scale():
    from ctxir.app.similarity import SIMILARITY_LEGEND, SIMILARITY_SCALE

    scale = [colour for _, colour in get_colorscale(SIMILARITY_SCALE)]
    high, low = _luminance(scale[-1]), _luminance(scale[0])
    assert high > low  # the most alike pair is the brightest cell ...
    assert SIMILARITY_LEGEND.startswith("brighter (yellow) = more alike")  # ... and the caption says so
    assert "darker = more alike" not in SIMILARITY_LEGEND


def test_the_head_summary_title_matches_its_two_colour_scales():
    rows = [
        {
            "layer": layer,
            "head": head,
            "entropy": 1.0,
            "to_cls": 0.5,
            "to_sep": 0.1,
            "to_self": 0.1,
            "to_previous": 0.1,
            "to_next": 0.1,
            "max_weight": 0.5,
            "max_from": "a",
            "max_to": "b",
        }
        for layer in range(2)
        for head in range(2)
    ]
    fig = figures.head_grids(rows)
    title = figures.title_of(fig)
    entropy = fig.data[0].colorscale
    share = fig.data[1].colorscale
    # Magma: dark at low entropy; Blues: dark at a large share
    assert _luminance(entropy[0][1]) < _luminance(entropy[-1][1])
    assert _luminance(share[-1][1]) < _luminance(share[0][1])
    assert "shares: darker = larger" in title and "entropy: darker = lower" in title


def test_compare_poolings_caption_names_the_loaded_models_own_pooling(app_state):
    """The caption said "all-MiniLM-L6-v2 was trained with mean pooling" whatever bi-encoder was loaded; it now
    reads the loaded model's Pooling module."""
    from types import SimpleNamespace

    from ctxir.app.search_tab import pooling_note

    text = compare_pooling(app_state, "river otters", k=3).text
    assert text.endswith(
        "all-MiniLM-L6-v2 pools with mean pooling, so its CLS vector was never tuned for search."
    )
    cls_model = [SimpleNamespace(), SimpleNamespace(pooling_mode="cls")]
    assert pooling_note(cls_model, "my-model") == " my-model pools with cls pooling: CLS is its own pooling."
    assert pooling_note([SimpleNamespace()], "bare") == ""


def test_the_highlighted_words_ring_is_no_sentence_colour():
    points = {("pca", 0): np.array([[0.0, 0.0], [1.0, 1.0], [2.0, 0.0], [3.0, 1.0]])}
    fig = figures.projection(
        points, ["bank", "a", "bank", "b"], [0, 1, 2, 3], ["s1", "s2", "s3", "s4"], [True, False, True, False]
    )
    ring = {trace.marker.line.color for trace in fig.data}
    assert ring == {figures.HIGHLIGHT_RING}
    assert figures.HIGHLIGHT_RING not in {trace.marker.color for trace in fig.data}
    # far from every sentence colour (the old red ring was sentence 4's colour exactly)
    assert all(np.abs(np.subtract(_rgb(figures.HIGHLIGHT_RING), _rgb(c))).sum() > 150 for c in figures.COLORS)
    assert "black ring" in figures.title_of(fig)


def test_axis_labels_are_cut_with_an_ellipsis_not_mid_word(app_state):
    from ctxir.app.similarity import sentence_similarity

    labels = figures.unique(["1. The central bank raised interest rates to slow inflation.", "short"], 30)
    assert labels[0] == "1. The central bank raised in…" and len(labels[0]) == 30
    assert labels[1] == "short"
    # the PNG's and the API table's sentence labels too (they were cut at 45 characters with no mark)
    rows = sentence_similarity(
        app_state, ["The central bank raised interest rates to slow inflation.", "Rates went up."]
    ).rows
    assert [r["sentence"] for r in rows] == [
        "1. The central bank raised interest rates to sl…",
        "2. Rates went up.",
    ]


# ---------------------------------------------------------------- k: one limit from one constant


def test_k_has_one_limit_and_out_of_range_is_an_error(app_state):
    limit = app_state.config.max_k
    assert limit == 50
    assert (
        len(search(app_state, "river otters", first_stage="dense", k=limit).rows) == limit
    )  # of 51 documents
    for bad in (0, limit + 1, 80, 2.5):
        with pytest.raises(CtxirError, match=rf"k must be a whole number from 1 to {limit}, got {bad!r}"):
            search(app_state, "river otters", first_stage="bm25", k=bad)
        with pytest.raises(CtxirError, match=rf"k must be a whole number from 1 to {limit}, got {bad!r}"):
            compare_pooling(app_state, "river otters", k=bad)
    depth = app_state.config.max_rerank_depth
    with pytest.raises(CtxirError, match=rf"re-rank depth must be a whole number from 1 to {depth}, got 101"):
        search(app_state, "river otters", first_stage="bm25", depth=101)


def test_the_k_inputs_state_the_limit_their_view_checks(app_state):
    """The page's k and depth inputs are numbers (a slider's box quietly clamps a typed 80 to its maximum) whose
    labels carry the same limits the views check."""
    import gradio as gr

    from ctxir.app.blocks import build_demo

    demo = build_demo(app_state)
    labels = {c.label: c for c in demo.blocks.values() if isinstance(c, gr.Number | gr.Slider) and c.label}
    cfg = app_state.config
    ks = [c for c in demo.blocks.values() if isinstance(c, gr.Number) and c.label == f"k (1–{cfg.max_k})"]
    assert len(ks) == 2  # search's k and compare pooling's k
    assert isinstance(labels[f"depth (1–{cfg.max_rerank_depth})"], gr.Number)


def test_one_result_is_singular(app_state):
    assert plural(1, "result") == "1 result" and plural(10, "result") == "10 results"
    assert plural(1, "worst query", "worst queries") == "1 worst query"
    assert search(app_state, "river otters", first_stage="bm25", k=1).text.startswith("**1 result** from")
    assert search(app_state, "river otters", first_stage="bm25", k=2).text.startswith("**2 results** from")


# ---------------------------------------------------------------- the failure report's sample


def test_the_failure_report_sample_needs_no_upload(app_state):
    from ctxir.app.report_tab import sample_report
    from ctxir.data import load_qrels
    from ctxir.evaluation.report import metric_values
    from ctxir.retrieval import BM25Retriever
    from ctxir.types import run_from_hits

    r = sample_report(app_state, worst=3)
    cases, meta = r.data["cases"], r.data["meta"]
    assert [c["value"] for c in cases] == sorted(c["value"] for c in cases) and len(cases) == 3
    assert meta["system"] == "bm25" and meta["num_queries"] == 83  # every demo query is judged
    # the mean is BM25's nDCG@10 over the shipped qrels, as the library computes it
    from ctxir.data import load_queries
    from ctxir.data.demo import ASSETS, demo_corpus

    corpus, queries = demo_corpus(), load_queries(ASSETS / "demo_queries.jsonl")
    run = run_from_hits(BM25Retriever(corpus, cache=False).search(queries, top_k=100))
    values = metric_values(load_qrels(ASSETS / "demo_qrels.tsv"), run)
    assert meta["mean"] == pytest.approx(sum(values.values()) / len(values))
    assert min(values.values()) == pytest.approx(cases[0]["value"])
    # each worst query with a pair to explain carries BM25's exact term explanation
    explained = [p for c in cases for p in c["pairs"][:1] if "explanations" in p]
    assert explained and all(p["explanations"][0]["model"] == "bm25" for p in explained)
    assert "Failure report — bm25" in r.html and "violet lowered it" in r.html
    assert r.text.startswith("**3 worst queries** of `bm25`")
    with pytest.raises(CtxirError, match="worst queries must be a whole number from 1 to 50, got 0"):
        sample_report(app_state, worst=0)


# ---------------------------------------------------------------- the phone's result cards


def test_result_cards_show_title_text_and_scores_escaped():
    hits = [
        {
            "rank": 1,
            "doc_id": 'd<1>"',
            "dense_score": 0.7,
            "dense_rank": 1,
            "rerank_score": None,
            "rerank_rank": None,
            "fused_score": None,
            "rank_change": None,
            "title": "<b>Otters</b>",
            "text": "River otters <img src=x onerror=alert(1)> dig dens.",
        }
    ]
    cards = result_cards(hits, "dense")
    assert cards.count('class="ctxir-card"') == 1
    assert 'data-doc="d&lt;1&gt;&quot;"' in cards
    assert "&lt;b&gt;Otters&lt;/b&gt;" in cards and "&lt;img src=x" in cards and "<img" not in cards
    assert "dense_score 0.7" in cards and "rerank" not in cards  # the table's columns, empty ones left out
    assert result_cards([], "dense") == ""


def test_shares_fill_the_box():
    from ctxir.app.ui import shares

    widths = shares([60, 120, 340])
    assert sum(float(w[:-1]) for w in widths) == pytest.approx(100, abs=0.02)
    assert widths[2] == "65.38%"
