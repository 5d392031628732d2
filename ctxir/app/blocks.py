"""``build_app``: the app's tabs composed into one ``gr.Blocks``, under a header that says what the app is for."""

from __future__ import annotations

from dataclasses import dataclass

import gradio as gr

from ctxir.app import (
    attention_tab,
    classify_tab,
    embeddings_tab,
    explain_tab,
    pairs_tab,
    report_tab,
    search_tab,
)
from ctxir.app.api import document_api
from ctxir.app.config import AppConfig, flag
from ctxir.app.first_view import FirstView
from ctxir.app.first_view import wire as wire_first_view
from ctxir.app.gradio_fixes import fill_missing_inputs, named, plain_errors_for_api, styled_blocks
from ctxir.app.models import prompts_named
from ctxir.app.outputs import Outputs
from ctxir.app.state import AppState
from ctxir.app.text import md_literal, plural
from ctxir.app.ui import CSS, PRIVATE, Ui
from ctxir.checks import check_choice
from ctxir.rerank.registry import RERANKERS

FIRST_VIEW_WHEN = ("start", "open", "off")
TITLE = "ctxir — contextual embeddings for search"
TABS = (
    ("Search", search_tab),
    ("Pair scoring", pairs_tab),
    ("Explain", explain_tab),
    ("Token embeddings", embeddings_tab),
    ("Attention", attention_tab),
    ("Failure report", report_tab),
    ("Classify", classify_tab),
)
INTRO = (
    "Search a corpus, re-rank the results and see **why** each document scored as it did, word by word; "
    "look inside the encoder (tokens, embeddings, attention). Everything runs on this machine, offline."
)


def status_line(state: AppState) -> str:
    """One line: the corpus, which models are loaded and the bi-encoder's prompts."""
    models = state.models
    return (
        f"Corpus **{md_literal(state.default_corpus)}** ({plural(state.default_size, 'document')}) · "
        f"bi-encoder **{md_literal(models.bi_encoder_name)}** ({prompts_named(models.bi_encoder)}) · "
        + " · ".join(
            f"{kind.label} {'✓' if name in models.rerankers else '✗ not loaded'}"
            for name, kind in RERANKERS.items()
        )
    )


def missing_models(state: AppState) -> str:
    """One line per re-ranker kind that is not loaded: why, and the flag that loads one."""
    models = state.models
    return "\n".join(
        f"- **{kind.label}**: {md_literal(models.why_not(name))} (start with `{flag(kind)} FOLDER`)"
        for name, kind in RERANKERS.items()
        if name not in models.rerankers
    )


@dataclass
class App:
    """What ``build_app`` made: the Blocks to launch, the state it serves."""

    demo: gr.Blocks
    state: AppState
    outputs: Outputs
    first_view: FirstView | None


def build_demo(
    state: AppState | None = None,
    config: AppConfig | None = None,
    outputs: Outputs | None = None,
    first_view: str = "open",
) -> gr.Blocks:
    """The app's Blocks (``build_app``'s ``demo``)."""
    return build_app(state, config, outputs, first_view).demo


def build_app(
    state: AppState | None = None,
    config: AppConfig | None = None,
    outputs: Outputs | None = None,
    first_view: str = "open",
) -> App:
    """The app, its models loaded here unless ``state`` holds them; ``first_view``: see ``FIRST_VIEW_WHEN``."""
    check_choice(first_view, "first_view", FIRST_VIEW_WHEN)
    state = state or AppState.load(config or AppConfig())
    ui = Ui(state, outputs or Outputs())

    def end_session(request: gr.Request):
        # The page was closed or reloaded (a reload is a new session): its uploads are released.
        state.uploads.release(getattr(request, "session_hash", None) or "")

    # uploads cached 10 minutes; analytics off: an offline tool does not phone home
    blocks = styled_blocks(CSS, title=TITLE, delete_cache=(300, 600), analytics_enabled=False)
    with blocks as demo:
        gr.Markdown(f"## {TITLE}\n{INTRO}", elem_classes=["ctxir-intro"])
        gr.Markdown(status_line(state), elem_classes=["ctxir-status"], elem_id="model-status")
        text = state.indexing.text()
        indexing = gr.Markdown(
            md_literal(text), visible=bool(text), elem_id="indexing-status", elem_classes=["ctxir-indexing"]
        )
        timer = gr.Timer(1.0, active=not state.indexing.done.is_set())
        missing = missing_models(state)
        if missing:
            with gr.Accordion("Why a model is not loaded, and how to load it", open=False):
                gr.Markdown(missing)
        # on a phone every tab name stays in sight (wrapped onto a second row), not hidden in a "⋯" menu
        with gr.Tabs(overflow_behavior="wrap"):
            for name, tab in TABS:
                with gr.Tab(name):
                    tab.build(ui)
        for component in demo.blocks.values():
            if isinstance(component, gr.Slider | gr.Radio | gr.CheckboxGroup):
                named(component)  # range / choice errors name the input
        demo.unload(end_session)
        first = None if first_view == "off" else wire_first_view(demo, state, ui.out, first_view == "start")

        def indexing_status():
            text, active = state.indexing.text(), not state.indexing.done.is_set()
            return gr.update(value=md_literal(text), visible=bool(text)), gr.Timer(active=active)

        # on page load too: a page opened after indexing ended must not show the line it was built with
        for event in (timer.tick, demo.load):
            event(indexing_status, None, [indexing, timer], show_progress="hidden", **PRIVATE)
    document_api(demo)  # docstrings (MCP tools) of every public endpoint
    plain_errors_for_api(fill_missing_inputs(demo))  # escaped for the page, plain text for API clients
    return App(demo, state, ui.out, first)
