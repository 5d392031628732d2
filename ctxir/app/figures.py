"""Interactive Plotly figures for the app, drawn offline by Gradio's ``gr.Plot``, and their HTML export."""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import plotly.colors
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ctxir.app.text import snippet
from ctxir.evaluation.report_html import LOWERS_RGB, RAISES_RGB
from ctxir.viz.attention import HEAD_STATS
from ctxir.viz.embeddings import PROJECTIONS, new_figure, projection_title

COLORS = plotly.colors.qualitative.D3
# attributions: red = raised the score, violet = lowered it (the HighlightedText and failure report colours)
RAISES, LOWERS = (f"#{r:02x}{g:02x}{b:02x}" for r, g, b in (RAISES_RGB, LOWERS_RGB))
DIVERGING = [[0.0, LOWERS], [0.5, "#f7f7f7"], [1.0, RAISES]]
HIGHLIGHT_RING = "#111111"  # the highlighted word's ring in the projection: no sentence colour is near black


def _layout(fig: go.Figure, title: str, height: int, **extra) -> go.Figure:
    """Common look; the title kept in ``layout.meta`` (the export prints it, the app shows it as the label)."""
    # t=48: the app's plot label sits over the figure's top-left corner; subplot titles start below it
    fig.update_layout(
        meta={"title": title},
        height=height,
        margin={"l": 10, "r": 10, "t": 48, "b": 10},
        font={"size": 13},
        template="plotly_white",
        hoverlabel={"font_size": 13},
        **extra,
    )
    fig.update_annotations(font_size=13)  # subplot titles
    return fig


def title_of(fig: go.Figure) -> str:
    return (fig.layout.meta or {}).get("title", "")


def unique(labels: Sequence[str], max_chars: int = 24) -> list[str]:
    """Axis categories for tokens: a repeated token gets zero-width spaces appended."""
    seen: dict[str, int] = {}
    out = []
    for label in labels:
        label = str(label)
        label = label if len(label) <= max_chars else label[: max_chars - 1].rstrip() + "…"
        out.append(label + "\u200b" * seen.get(label, 0))
        seen[label] = seen.get(label, 0) + 1
    return out


@dataclass(frozen=True)
class HeatmapStyle:
    """How :func:`heatmap` names and colours its cells."""

    value_name: str = "value"
    row_name: str = "row"
    col_name: str = "column"
    zmin: float | None = None
    zmax: float | None = None
    diverging: bool = False
    colorscale: str = "Viridis"
    height: int | None = None
    decimals: int = 3
    show_values: bool | None = None


def heatmap(
    matrix,
    row_labels: Sequence[str],
    col_labels: Sequence[str],
    title: str,
    style: HeatmapStyle | None = None,
    *,
    hover_labels: Sequence[str] | None = None,
) -> go.Figure:
    """A heatmap whose hover names the row and column labels (tokens, sentences) and the value."""
    style = style or HeatmapStyle()
    zmin, zmax, decimals, value_name = style.zmin, style.zmax, style.decimals, style.value_name
    z = np.asarray(matrix, dtype=np.float64)
    rows, cols = z.shape
    names = [hover_labels] * 2 if hover_labels is not None else [row_labels, col_labels]
    columns, rows_ = np.meshgrid([str(c) for c in names[1]], [str(r) for r in names[0]])
    custom = np.dstack([rows_, columns])  # (row name, column name) per cell
    if style.diverging:
        bound = float(np.nanmax(np.abs(z))) if z.size else 1.0
        zmin, zmax, scale = -(bound or 1.0), bound or 1.0, DIVERGING
    else:
        scale = style.colorscale
    trace = go.Heatmap(
        z=z,
        x=unique(col_labels),
        y=unique(row_labels),
        customdata=custom,
        zmin=zmin,
        zmax=zmax,
        colorscale=scale,
        colorbar={"title": {"text": value_name, "side": "right"}, "thickness": 12},
        hovertemplate=f"{style.row_name} <b>%{{customdata[0]}}</b><br>{style.col_name} <b>%{{customdata[1]}}</b>"
        f"<br>{value_name} %{{z:.{decimals + 1}f}}<extra></extra>",
    )
    if style.show_values if style.show_values is not None else rows * cols <= 150:
        trace.update(texttemplate=f"%{{z:.{max(decimals - 1, 1)}f}}", textfont={"size": 11})
    fig = go.Figure(trace)
    # short column labels (sentence numbers) stand upright; tokens are slanted to fit side by side
    short = all(len(str(c)) <= 3 for c in col_labels)
    fig.update_xaxes(type="category", tickangle=0 if short else -60, showgrid=False, automargin=True)
    fig.update_yaxes(type="category", autorange="reversed", showgrid=False, automargin=True)
    return _layout(fig, title, style.height or int(min(900, max(340, 160 + 22 * rows))))


def token_bars(
    tokens: Sequence[str], values: Sequence[float], title: str, split: int | None = None
) -> go.Figure:
    """One bar per token (red raised the score, violet lowered it); ``split`` marks where the document starts."""
    values = np.asarray(values, dtype=np.float64)
    fig = go.Figure(
        go.Bar(
            x=unique(tokens),
            y=values,
            marker_color=[RAISES if v > 0 else LOWERS for v in values],
            customdata=list(tokens),
            hovertemplate="<b>%{customdata}</b><br>attribution %{y:.4f}<extra></extra>",
        )
    )
    fig.update_xaxes(type="category", tickangle=-60, automargin=True)
    fig.update_yaxes(title_text="attribution", zeroline=True, zerolinecolor="#888")
    if split is not None:
        fig.add_vline(x=split - 0.5, line_dash="dot", line_color="#888")
    return _layout(fig, title, 340)


def score_bars(documents: Sequence[str], columns: dict[str, Sequence[float | None]]) -> go.Figure:
    """One horizontal bar chart per score, stacked."""
    shown = {name: values for name, values in columns.items() if any(v is not None for v in values)}
    labels = [f"doc {i + 1}" for i in range(len(documents))]
    texts = [f"{i + 1}. {d[:90]}{'…' if len(d) > 90 else ''}" for i, d in enumerate(documents)]
    fig = make_subplots(
        rows=max(1, len(shown)),
        cols=1,
        subplot_titles=list(shown),
        vertical_spacing=0.5 / max(1, len(documents)) / max(1, len(shown)) + 0.06,
    )
    for r, (name, values) in enumerate(shown.items(), 1):
        vals = [np.nan if v is None else float(v) for v in values]
        best = np.nanmax(vals)
        fig.add_trace(
            go.Bar(
                y=labels,
                x=vals,
                orientation="h",
                name=name,
                showlegend=False,
                marker_color=["#2ca02c" if v == best else "#1f77b4" for v in vals],
                customdata=texts,
                text=[f"{v:.3f}" for v in vals],
                textposition="auto",
                textangle=0,
                constraintext="none",  # a short bar's value beside it, never sideways
                hovertemplate=f"%{{customdata}}<br>{name} <b>%{{x:.4f}}</b><extra></extra>",
            ),
            r,
            1,
        )
    fig.update_yaxes(autorange="reversed", automargin=True, type="category")
    return _layout(
        fig,
        "scores per document, each model on its own scale (green = its highest)",
        int(70 + len(shown) * (50 + 26 * len(documents))),
    )


def projection(
    points: dict[tuple[str, int], np.ndarray],
    labels: Sequence[str],
    groups: Sequence[int],
    group_names: Sequence[str],
    highlight: Sequence[bool],
) -> go.Figure:
    """Grid of token scatter plots (rows = methods, columns = layers); hover shows the token and its sentence."""
    methods = sorted({m for m, _ in points}, key=PROJECTIONS.index)
    layers = sorted({layer for _, layer in points})
    fig = make_subplots(
        rows=len(methods),
        cols=len(layers),
        subplot_titles=[projection_title(m, layer) for m in methods for layer in layers],
        horizontal_spacing=0.04,
        vertical_spacing=0.1,
    )
    labels = list(labels)
    for r, method in enumerate(methods, 1):
        for c, layer in enumerate(layers, 1):
            xy = np.asarray(points[(method, layer)])
            for g, name in enumerate(group_names):
                idx = [i for i, gi in enumerate(groups) if gi == g]
                fig.add_trace(
                    go.Scatter(
                        x=xy[idx, 0],
                        y=xy[idx, 1],
                        mode="markers+text",
                        text=[labels[i] for i in idx],
                        textposition="top center",
                        textfont={"size": 10, "color": "#555"},
                        marker={
                            "size": [15 if highlight[i] else 9 for i in idx],
                            "color": COLORS[g % len(COLORS)],
                            "line": {
                                "width": [3 if highlight[i] else 0 for i in idx],
                                "color": HIGHLIGHT_RING,
                            },
                        },
                        # a legend line that fits a phone's width; hover gives the longer text
                        name=name if len(name) <= 44 else name[:43] + "…",
                        legendgroup=str(g),
                        showlegend=r == 1 and c == 1,
                        customdata=[name[:70]] * len(idx),
                        hovertemplate="<b>%{text}</b><br>%{customdata}<extra></extra>",
                    ),
                    r,
                    c,
                )
    fig.update_xaxes(showticklabels=False, zeroline=False)
    fig.update_yaxes(showticklabels=False, zeroline=False)
    return _layout(
        fig,
        "token vectors in 2-D: colour = sentence, black ring = the highlighted word (hover a point)",
        440 * len(methods) + 90,
        legend={"orientation": "h", "y": -0.02, "x": 0, "yanchor": "top"},
    )


def curves(curves_: dict[str, Sequence[float]], title: str) -> go.Figure:
    fig = go.Figure()
    for name, values in curves_.items():
        fig.add_trace(
            go.Scatter(
                x=list(range(len(values))),
                y=list(values),
                mode="lines+markers",
                name=name,
                hovertemplate=f"sentences {name}<br>layer %{{x}}<br>cosine %{{y:.3f}}<extra></extra>",
            )
        )
    fig.update_xaxes(title_text="layer (0 = embeddings)", dtick=1)
    fig.update_yaxes(title_text="cosine similarity")
    return _layout(fig, title, 380, legend={"orientation": "h", "y": -0.22, "x": 0, "yanchor": "top"})


def head_grids(rows: list[dict]) -> go.Figure:
    """Layers × heads grids of the per-head summary; hover gives layer, head, value and the strongest link."""
    n_layers = max(r["layer"] for r in rows) + 1
    n_heads = max(r["head"] for r in rows) + 1
    cols = 2
    n_rows = -(-len(HEAD_STATS) // cols)
    height = int(n_rows * (90 + 30 * n_layers) + 60)
    fig = make_subplots(
        rows=n_rows,
        cols=cols,
        subplot_titles=list(HEAD_STATS.values()),
        horizontal_spacing=0.08,
        vertical_spacing=min(0.3, 80 / height),
    )
    cell = {(r["layer"], r["head"]): r for r in rows}
    cells = [[cell[(layer, h)] for h in range(n_heads)] for layer in range(n_layers)]
    link = np.array(
        [[f"{c['max_from']} → {c['max_to']} ({c['max_weight']:.2f})" for c in row] for row in cells]
    )
    for i, (key, title) in enumerate(HEAD_STATS.items()):
        grid = np.array([[c[key] for c in row] for row in cells])
        r, c = divmod(i, cols)
        fig.add_trace(
            go.Heatmap(
                z=grid,
                x=list(range(n_heads)),
                y=list(range(n_layers)),
                customdata=link,
                colorscale="Magma" if key == "entropy" else "Blues",
                zmin=0,
                zmax=None if key == "entropy" else 1,
                showscale=False,
                texttemplate="%{z:.2f}" if n_layers * n_heads <= 100 else None,
                hovertemplate=f"layer %{{y}} · head %{{x}}<br>{title}: <b>%{{z:.3f}}</b>"
                "<br>strongest link %{customdata}<extra></extra>",
            ),
            r + 1,
            c + 1,
        )
    fig.update_xaxes(title_text="head", dtick=1, title_standoff=2)
    fig.update_yaxes(title_text="layer", dtick=1, autorange="reversed", title_standoff=2)
    return _layout(
        fig,
        "where each head looks, mean over tokens (shares: darker = larger; entropy: darker = lower, "
        "i.e. more focused; hover a cell)",
        height,
    )


def rank_moves(rows: list[dict], highlight: set[str], first_stage: str, reranker: str) -> go.Figure:
    """A slope chart: each document's first-stage rank (left) and re-ranked rank (right); green moved up."""
    fig = go.Figure()
    for row in rows:
        change = row["first"] - row["rerank"]
        color = "#2ca02c" if change > 0 else "#d62728" if change < 0 else "#bbbbbb"
        bold = row["doc_id"] in highlight
        label = f"{row['title'][:60]} ({row['doc_id']})"
        fig.add_trace(
            go.Scatter(
                x=[first_stage, reranker],
                y=[row["first"], row["rerank"]],
                mode="lines+markers",
                showlegend=False,
                line={"color": color, "width": 4 if bold else 1.5},
                marker={"size": 9 if bold else 6},
                customdata=[label, label],
                opacity=1.0 if bold or change == 0 else 0.75,
                hovertemplate=f"%{{customdata}}<br>rank %{{y}} · moved {change:+d}<extra></extra>",
            )
        )
    fig.update_yaxes(autorange="reversed", title_text="rank", dtick=max(1, len(rows) // 10))
    return _layout(
        fig,
        "rank before and after re-ranking: green moved up, red down, bold = explained (hover a line)",
        int(min(620, 200 + 14 * len(rows))),
    )


def html_document(figures: Sequence[go.Figure], title: str, plotly_js: str | None = None) -> str:
    """One page holding ``figures`` (each under its title), interactive and offline."""
    include: bool | str = plotly_js or True
    parts = [
        f"<h4>{html.escape(title_of(fig))}</h4>"
        + fig.to_html(
            include_plotlyjs=include if i == 0 else False, full_html=False, config={"responsive": True}
        )
        for i, fig in enumerate(figures)
    ]
    if plotly_js:  # after plotly.js's <script src> (loaded synchronously), before the first chart
        missing = (
            f'<p id="ctxir-plotly-missing" hidden style="color:#a00">The charts need {html.escape(plotly_js)} in '
            "the same folder as this page (it is in the same download list): save it there and reload.</p>"
            "<script>if (!window.Plotly) document.getElementById('ctxir-plotly-missing').hidden = false;</script>"
        )
        head, sep, rest = parts[0].partition(f'src="{plotly_js}"></script>')
        parts[0] = head + sep + missing + rest
    return (
        f'<!DOCTYPE html>\n<html><head><meta charset="utf-8"><title>{html.escape(title)}</title></head>'
        f'<body style="font-family:sans-serif"><h3>{html.escape(title)}</h3>{"".join(parts)}</body></html>'
    )


def attribution_cmap():
    """The matplotlib twin of ``DIVERGING`` (violet → white → red) for the PNG exports."""
    from matplotlib.colors import LinearSegmentedColormap

    return LinearSegmentedColormap.from_list("ctxir-attribution", [LOWERS, "#f7f7f7", RAISES])


def token_bars_png(tokens: Sequence[str], values: Sequence[float], title: str, split: int | None = None):
    """The matplotlib twin of ``token_bars`` for the PNG export."""
    values = np.asarray(values, dtype=np.float64)
    fig = new_figure((min(4 + 0.28 * len(tokens), 28), 3.8))
    ax = fig.subplots()
    ax.bar(range(len(values)), values, color=[RAISES if v > 0 else LOWERS for v in values])
    step = max(1, -(-len(tokens) // 100))
    ax.set_xticks(
        range(0, len(tokens), step), [tokens[i] for i in range(0, len(tokens), step)], rotation=90, fontsize=8
    )
    ax.axhline(0, color="gray", lw=0.8)
    if split is not None:
        ax.axvline(split - 0.5, color="gray", ls=":")
    ax.set_ylabel("attribution")
    ax.set_title(title)
    fig.set_layout_engine("tight")
    return fig


def class_scores(
    texts: list[str], classes: list[str], scores: list[list[float]], score_name: str
) -> go.Figure:
    """Grouped horizontal bars: one group per text ("text 1"...), one bar per label."""
    fig = go.Figure()
    names = [f"text {i + 1}" for i in range(len(texts))]
    hover = [snippet(t, 90) for t in texts]
    best = [int(np.argmax(row)) for row in scores]
    for c, label in enumerate(classes):
        fig.add_trace(
            go.Bar(
                y=names,
                x=[row[c] for row in scores],
                orientation="h",
                name=label[:40],
                marker={
                    "color": COLORS[c % len(COLORS)],
                    "line": {"width": [2.5 if b == c else 0 for b in best], "color": "#111111"},
                },
                customdata=hover,
                hovertemplate=f"%{{customdata}}<br>{label[:40]}: <b>%{{x:.3f}}</b><extra></extra>",
            )
        )
    fig.update_yaxes(autorange="reversed", type="category", automargin=True)
    fig.update_xaxes(title_text=score_name)
    return _layout(
        fig,
        f"{score_name} of every label, per text (outlined = predicted)",
        int(120 + len(texts) * (14 * len(classes) + 18)),
        barmode="group",
        legend={"orientation": "h", "y": -0.12, "x": 0, "yanchor": "top"},
    )


def class_map(points: list[dict], title: str) -> go.Figure:
    """Texts (◆, by predicted class), labelled examples (●) and label embeddings (★) in 2-D."""
    fig = go.Figure()
    classes = sorted({p["label"] for p in points})
    style = {
        "example": ("circle", 8, "examples"),
        "text": ("diamond", 13, "texts"),
        "label": ("star", 20, "label"),
    }
    for c, label in enumerate(classes):
        for kind, (symbol, size, word) in style.items():
            chosen = [p for p in points if p["label"] == label and p["kind"] == kind]
            if not chosen:
                continue
            fig.add_trace(
                go.Scatter(
                    x=[p["x"] for p in chosen],
                    y=[p["y"] for p in chosen],
                    mode="markers",
                    name=f"{label[:30]} · {word}",
                    legendgroup=label,
                    marker={
                        "symbol": symbol,
                        "size": size,
                        "color": COLORS[c % len(COLORS)],
                        "line": {"width": 1.5 if kind != "example" else 0, "color": "#111111"},
                    },
                    customdata=[snippet(p["text"], 120) for p in chosen],
                    hovertemplate=f"<b>{label[:30]}</b> ({word})<br>%{{customdata}}<extra></extra>",
                )
            )
    fig.update_xaxes(showticklabels=False, zeroline=False)
    fig.update_yaxes(showticklabels=False, zeroline=False)
    return _layout(fig, title, 520, legend={"orientation": "h", "y": -0.02, "x": 0, "yanchor": "top"})
