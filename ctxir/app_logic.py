"""What the Gradio app does, as plain functions over an ``AppState`` — one import for tests, scripts and notebooks.

The code lives in ``ctxir.app`` (one module per tab, see its docstring); this module re-exports each view's logic
and the state it runs on, so ``from ctxir import app_logic as logic; logic.search(state, "otters")`` keeps working.
Every function checks its input and raises ``CtxirError`` with a message that names the problem and the fix; each
returns a ``ViewResult``: a table, figures and the JSON-able numbers behind them.
"""

from __future__ import annotations

from ctxir.app.attention_tab import attention, parse_indices
from ctxir.app.embeddings_tab import layer_similarity, model_info, sentence_similarity, token_embeddings
from ctxir.app.explain_tab import EXPLAIN_MODELS, explain_pair, explain_result, highlight, words
from ctxir.app.pairs_tab import input_formation, score_pairs
from ctxir.app.report_tab import failure_report
from ctxir.app.search_tab import compare_pooling, search, upload_corpus, what_moved
from ctxir.app.state import (
    ASSETS,
    DEMO_CORPUS_NAME,
    FIRST_STAGES,
    INSPECT_MODELS,
    POOLINGS,
    RERANKERS,
    AppConfig,
    AppModels,
    AppState,
    CorpusIndex,
    Indexing,
    Inspectable,
    Owner,
    Progress,
    ViewResult,
    check_layer,
    demo_corpus,
    demo_presets,
    demo_queries,
    inspect_input,
)
from ctxir.app.text import cls_warnings, display_text, md_code, md_literal, rounded, snippet, split_lines
from ctxir.checks import check_choice, check_int, check_text

__all__ = [
    "ASSETS", "DEMO_CORPUS_NAME", "EXPLAIN_MODELS", "FIRST_STAGES", "INSPECT_MODELS", "POOLINGS", "RERANKERS",
    "AppConfig", "AppModels", "AppState", "CorpusIndex", "Indexing", "Inspectable", "Owner", "Progress", "ViewResult",
    "attention", "check_choice", "check_int", "check_layer", "check_text", "cls_warnings", "compare_pooling",
    "demo_corpus", "demo_presets", "demo_queries", "display_text", "explain_pair", "explain_result",
    "failure_report", "highlight",
    "input_formation", "inspect_input", "layer_similarity", "md_code", "md_literal", "model_info", "parse_indices",
    "rounded", "score_pairs", "search", "sentence_similarity", "snippet", "split_lines", "token_embeddings",
    "upload_corpus", "what_moved", "words",
]
