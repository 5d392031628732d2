"""Figures from a forward pass's ``Internals`` or plain arrays, never from a model, as bertviz's views."""

from ctxir.viz.attention import (  # noqa: F401 -- public API
    MAX_ATTENTION_CELLS,
    attention_weights_figure,
    bertviz_document,
    check_attention_size,
    head_summary,
    head_summary_figure,
    iframe,
    offline_document,
    script_files,
    with_script_urls,
)
from ctxir.viz.embeddings import (  # noqa: F401 -- public API
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
