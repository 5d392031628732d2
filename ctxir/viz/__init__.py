"""Figures from a forward pass's ``Internals`` (or plain arrays) — never from a model, as bertviz's views.

embeddings: projections, per-layer cosine curves, heatmaps, score bars (matplotlib, saved as PNG).
attention: bertviz head/model views made to draw offline, a per-head heatmap and summary.
offline: the d3/jQuery inlining that lets bertviz's HTML run without internet.
differences: per-query differences of systems from a baseline, worst to best (matplotlib PNG, plotly HTML).
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
from ctxir.viz.differences import (
    QueryDifferences,
    check_plot_path,
    differences_figure,
    differences_plotly,
    query_differences,
    save_differences,
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
    "QueryDifferences",
    "attention_heatmap",
    "attention_weights_figure",
    "bertviz_document",
    "check_attention_size",
    "check_plot_path",
    "consecutive_layer_similarity",
    "cosine_matrix",
    "curves_figure",
    "differences_figure",
    "differences_plotly",
    "head_summary",
    "head_summary_figure",
    "heatmap_figure",
    "iframe",
    "layer_cosines",
    "offline_document",
    "project",
    "projection_figure",
    "query_differences",
    "save_differences",
    "save_png",
    "scores_figure",
    "script_files",
    "with_script_urls",
]
