"""Figures from a forward pass's ``Internals`` (or plain arrays) — never from a model, as bertviz's views.

embeddings: projections, per-layer cosine curves, heatmaps, score bars (matplotlib, saved as PNG).
attention: bertviz head/model views made to draw offline, a per-head heatmap and summary.
offline: the d3/jQuery inlining that lets bertviz's HTML run without internet.
"""

from ctxir.viz.attention import (
    MAX_ATTENTION_CELLS,
    attention_heatmap,
    attention_weights_figure,
    bertviz_document,
    check_attention_size,
    head_summary,
    head_summary_figure,
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
from ctxir.viz.offline import iframe, offline_document, script_files, with_script_urls

__all__ = [
    "MAX_ATTENTION_CELLS",
    "MatrixStyle",
    "attention_heatmap",
    "attention_weights_figure",
    "bertviz_document",
    "check_attention_size",
    "consecutive_layer_similarity",
    "cosine_matrix",
    "curves_figure",
    "head_summary",
    "head_summary_figure",
    "heatmap_figure",
    "iframe",
    "layer_cosines",
    "offline_document",
    "project",
    "projection_figure",
    "save_png",
    "scores_figure",
    "script_files",
    "with_script_urls",
]
