"""ctxir.viz: figures and numbers from Internals / arrays, and the offline bertviz document (no model needed)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from matplotlib.figure import Figure

from ctxir.types import CtxirError, Internals
from ctxir.viz.attention import (
    attention_weights_figure,
    bertviz_document,
    check_attention_size,
    d3_v5_source,
    head_summary,
    head_summary_figure,
    iframe,
    jquery_source,
    offline_document,
    script_files,
    with_script_urls,
)
from ctxir.viz.embeddings import (
    MatrixStyle,
    consecutive_layer_similarity,
    cosine_matrix,
    curves_figure,
    heatmap_figure,
    layer_cosines,
    project,
    projection_figure,
    save_png,
    scores_figure,
)

TOKENS = ["[CLS]", "the", "river", "bank", "[SEP]", "money", "bank", "[SEP]"]


def make_internals(tokens=TOKENS, layers=2, heads=3, hidden=8, seed=0, b_start=5) -> Internals:
    rng = np.random.default_rng(seed)
    n = len(tokens)
    logits = rng.normal(size=(layers, heads, n, n))
    attn = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)  # each row sums to 1
    return Internals(
        tokens=list(tokens),
        token_ids=list(range(n)),
        token_type_ids=[0] * n,
        hidden_states=rng.normal(size=(layers + 1, n, hidden)).astype(np.float32),
        attentions=attn.astype(np.float32),
        sentence_b_start=b_start,
    )


def test_offline_document_drops_cdn_loads_and_inlines_d3_and_jquery():
    import torch
    from bertviz import head_view

    internals = make_internals()
    raw = head_view(
        [torch.from_numpy(a).unsqueeze(0) for a in internals.attentions],
        internals.tokens,
        html_action="return",
    ).data
    assert "cdnjs.cloudflare.com" in raw  # what bertviz 1.4.1 does: the reason this module exists
    doc = offline_document(raw)
    assert "cdnjs" not in doc
    assert not re.search(r"src=[\"']?https?://", doc)
    assert d3_v5_source()[:200] in doc and jquery_source()[:200] in doc
    assert "window.require = window.requirejs" in doc
    # d3 and jQuery come before the shim (so they register as globals, not AMD modules), bertviz after it.
    assert doc.index(jquery_source()[:200]) < doc.index("window.requirejs") < doc.index("requirejs(['jquery'")


def test_offline_document_keeps_user_tokens_from_closing_the_script():
    doc = bertviz_document(make_internals(tokens=["[CLS]", "</script><b>x", "[SEP]"], b_start=None))
    body = doc[doc.index("requirejs(['jquery'") :]
    assert "</script><b>" not in body
    assert "<\\/script><b>x" in body


def test_bertviz_document_rounds_weights_and_limits_layers():
    internals = make_internals()
    doc = bertviz_document(internals, "model", layers=[1], heads=[0, 2], decimals=3)
    params = doc[doc.index("const params = ") :]
    numbers = re.findall(r"\d+\.\d+", params[: params.index("const config")])
    assert numbers and all(len(x.split(".")[1]) <= 3 for x in numbers)
    assert '"include_layers": [1]' in doc and '"include_heads": [0, 2]' in doc
    full = bertviz_document(internals, "head", decimals=6)
    short = bertviz_document(internals, "head", decimals=2)
    assert len(short) < len(full)


def test_check_attention_size_refuses_long_inputs_and_huge_views():
    internals = make_internals()
    assert check_attention_size(internals) == ([0, 1], [0, 1, 2])
    with pytest.raises(CtxirError, match=r"8 tokens but the attention view draws at most 4"):
        check_attention_size(internals, max_tokens=4)
    with pytest.raises(CtxirError, match=r"choose at most 1 layer"):
        check_attention_size(internals, max_cells=8 * 8 * 3)
    with pytest.raises(CtxirError, match=r"layer 5 does not exist: this model has layers 0 to 1"):
        check_attention_size(internals, layers=[5])
    with pytest.raises(CtxirError, match="view 'graph' is not known"):
        bertviz_document(internals, "graph")


def test_head_summary_recognises_cls_self_and_previous_token_heads():
    n = 5
    attn = np.zeros((1, 3, n, n))
    attn[0, 0, :, 0] = 1.0  # head 0: everything looks at [CLS]
    attn[0, 1] = np.eye(n)  # head 1: each token looks at itself
    attn[0, 2, 0, 0] = 1.0
    attn[0, 2, np.arange(1, n), np.arange(n - 1)] = 1.0  # head 2: the previous token
    internals = Internals(
        ["[CLS]", "a", "b", "c", "[SEP]"],
        list(range(n)),
        [0] * n,
        np.zeros((2, n, 4)),
        attn.astype(np.float32),
    )
    rows = {r["head"]: r for r in head_summary(internals)}
    assert rows[0]["to_cls"] == 1.0 and rows[0]["entropy"] == 0.0
    assert rows[1]["to_self"] == 1.0 and rows[1]["to_cls"] == 0.2
    assert rows[2]["to_previous"] == 0.8
    assert (rows[0]["max_from"], rows[0]["max_to"]) == ("[CLS]", "[CLS]")
    assert isinstance(head_summary_figure(list(rows.values())), Figure)


def test_attention_heatmap_labels_every_token(tmp_path):
    internals = make_internals()
    fig = attention_weights_figure(
        internals.attentions[1, 2], internals.tokens, 1, 2, internals.sentence_b_start
    )
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == TOKENS
    np.testing.assert_allclose(ax.images[0].get_array(), internals.attentions[1, 2])
    path = save_png(fig, tmp_path / "heat.png")
    assert Path(path).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_projections_and_their_limits():
    rng = np.random.default_rng(1)
    # two well separated clusters stay separated in both projections
    x = np.concatenate([rng.normal(0, 0.1, (10, 16)), rng.normal(5, 0.1, (10, 16))])
    for method in ("pca", "tsne"):
        xy = project(x, method)
        assert xy.shape == (20, 2)
        within = np.linalg.norm(xy[:10] - xy[:10].mean(0), axis=1).mean()
        between = np.linalg.norm(xy[:10].mean(0) - xy[10:].mean(0))
        assert between > 3 * within
    with pytest.raises(CtxirError, match="at least 3 tokens"):
        project(x[:2])
    with pytest.raises(CtxirError, match="projection 'umap' is not known"):
        project(x, "umap")
    points = {("pca", 0): project(x, "pca"), ("pca", 6): project(x, "pca")}
    fig = projection_figure(
        points,
        [f"t{i}" for i in range(20)],
        [0] * 10 + [1] * 10,
        ["a", "b"],
        highlight=[i == 3 for i in range(20)],
    )
    assert len(fig.axes) == 2 and fig.axes[1].get_title() == "PCA · layer 6"


def test_layer_cosines_and_consecutive_layers():
    a = np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    b = np.array([[2.0, 0.0], [0.0, 3.0], [0.0, 1.0]])
    np.testing.assert_allclose(layer_cosines(a, b), [1.0, 0.0, 1.0])
    hidden = np.stack([a, a, b])  # (layers+1=3, tokens=3, hidden=2)
    sim = consecutive_layer_similarity(hidden)
    assert sim.shape == (2, 3)
    np.testing.assert_allclose(sim[0], 1.0)
    np.testing.assert_allclose(sim[1], [1.0, 0.0, 1.0])
    m = cosine_matrix(np.array([[1.0, 0.0], [0.0, 2.0], [1.0, 1.0]]))
    np.testing.assert_allclose(np.diag(m), 1.0)
    assert m[0, 1] == pytest.approx(0.0) and m[0, 2] == pytest.approx(2**-0.5)


def test_chart_helpers(tmp_path):
    fig = curves_figure({"1 vs 2": [0.9, 0.5, 0.7]}, "title")
    assert [tuple(line.get_ydata()) for line in fig.axes[0].lines] == [(0.9, 0.5, 0.7)]
    heat = heatmap_figure(np.eye(3), ["a", "b", "c"], ["1", "2", "3"], "sim")
    assert len(heat.axes[0].texts) == 9  # small grids print their values
    styled = heatmap_figure(
        np.eye(3),
        ["a", "b", "c"],
        ["1", "2", "3"],
        "sim",
        MatrixStyle(vmin=-1.0, vmax=2.0, annotate=False, xlabel="x", ylabel="y"),
    )
    ax = styled.axes[0]
    assert ax.images[0].get_clim() == (-1.0, 2.0) and not ax.texts  # the style's range; annotate=False wins
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("x", "y")
    bars = scores_figure(["doc one", "doc two"], {"ce": [1.5, -2.0], "lr": [None, None], "cos": [0.3, 0.1]})
    assert [ax.get_title() for ax in bars.axes] == ["ce", "cos"]  # a column without scores is left out
    with pytest.raises(CtxirError, match="no scores to plot"):
        scores_figure(["d"], {"ce": [None]})
    assert save_png(bars, tmp_path / "bars.png").endswith("bars.png")


def test_iframe_escapes_the_document():
    html = iframe('<p class="x">a & b</p>', "321px")
    assert html.startswith("<iframe") and "height:321px" in html
    assert 'srcdoc="&lt;p class=&quot;x&quot;&gt;a &amp; b&lt;/p&gt;"' in html


def test_a_page_that_serves_jquery_and_d3_links_them_in_the_order_the_document_inlined_them():
    standalone = offline_document("<div id='bertviz'></div><script>requirejs(['jquery', 'd3'], f);</script>")
    linked = with_script_urls(standalone, lambda name: f"gradio_api/file=/out/{name}")
    jquery, d3 = (f'<script src="gradio_api/file=/out/{name}"></script>' for name in script_files())
    assert (
        linked.index(jquery) < linked.index(d3) < linked.index("window.requirejs")
    )  # d3 and jQuery before the shim
    assert jquery_source()[:500] not in linked and d3_v5_source()[:500] not in linked
    assert len(linked) < len(standalone) - 300_000 and "requirejs(['jquery', 'd3'], f)" in linked
    with pytest.raises(CtxirError, match=r"does not inline 'jquery-.*offline_document"):
        with_script_urls("<html><body>bertviz</body></html>", lambda name: name)


def test_pngs_asked_for_from_many_threads_open_the_fonts_once(tmp_path):
    """matplotlib keeps one set of open font files per drawing thread (its font cache is keyed by thread id): the
    app's worker threads come and go, so each new one opened the fonts again (the 30-minute soak's growing file
    descriptors). save_png draws on one thread, so callers on new threads add no font-cache entry."""
    import threading

    from matplotlib import font_manager

    def draw(i: int) -> None:
        fig = scores_figure(["doc one", "doc two"], {"ce": [1.5, -2.0]})
        save_png(fig, tmp_path / f"bars-{i}.png")

    draw(0)
    before = font_manager._get_font.cache_info().currsize
    for i in range(1, 6):
        thread = threading.Thread(target=draw, args=(i,))
        thread.start()
        thread.join()
    assert font_manager._get_font.cache_info().currsize == before
    assert len(list(tmp_path.glob("bars-*.png"))) == 6
