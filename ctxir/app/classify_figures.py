"""The Classify tab's Plotly figures, drawn from the /classify answer: score bars, the 2-D class map."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from ctxir.app import figures
from ctxir.app.text import snippet


def class_scores(
    texts: list[str], classes: list[str], scores: list[list[float]], score_name: str
) -> go.Figure:
    """Grouped horizontal bars: one group per text ("text 1"...), one bar per label, the predicted one outlined;
    hovering a bar shows the text, the label and the score."""
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
                    "color": figures.COLORS[c % len(figures.COLORS)],
                    "line": {"width": [2.5 if b == c else 0 for b in best], "color": "#111111"},
                },
                customdata=hover,
                hovertemplate=f"%{{customdata}}<br>{label[:40]}: <b>%{{x:.3f}}</b><extra></extra>",
            )
        )
    fig.update_yaxes(autorange="reversed", type="category", automargin=True)
    fig.update_xaxes(title_text=score_name)
    return figures._layout(
        fig,
        f"{score_name} of every label, per text (outlined = predicted)",
        int(120 + len(texts) * (14 * len(classes) + 18)),
        barmode="group",
        legend={"orientation": "h", "y": -0.12, "x": 0, "yanchor": "top"},
    )


def class_map(points: list[dict], title: str) -> go.Figure:
    """Texts (◆, by predicted class), labelled examples (●) and label embeddings (★) in 2-D, one colour per class;
    hover shows the text."""
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
                        "color": figures.COLORS[c % len(figures.COLORS)],
                        "line": {"width": 1.5 if kind != "example" else 0, "color": "#111111"},
                    },
                    customdata=[snippet(p["text"], 120) for p in chosen],
                    hovertemplate=f"<b>{label[:30]}</b> ({word})<br>%{{customdata}}<extra></extra>",
                )
            )
    fig.update_xaxes(showticklabels=False, zeroline=False)
    fig.update_yaxes(showticklabels=False, zeroline=False)
    return figures._layout(fig, title, 520, legend={"orientation": "h", "y": -0.02, "x": 0, "yanchor": "top"})
