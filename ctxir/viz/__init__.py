"""Figures from a forward pass's ``Internals`` or plain arrays, never from a model, as bertviz's views."""

from ctxir.viz.attention import bertviz_document, head_summary, script_files  # noqa: F401 -- public API
from ctxir.viz.embeddings import (  # noqa: F401 -- public API
    MatrixStyle,
    cosine_matrix,
    curves_figure,
    heatmap_figure,
    layer_cosines,
    save_png,
    scores_figure,
)
