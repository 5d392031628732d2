"""``build_demo``: the app's tabs composed into one ``gr.Blocks``."""

from __future__ import annotations

import gradio as gr

from ctxir.app import attention_tab, embeddings_tab, explain_tab, pairs_tab, search_tab
from ctxir.app.state import AppConfig, AppState
from ctxir.app.ui import Outputs, Ui, named

TITLE = "ctxir — contextual embeddings for search"


def status_lines(state: AppState) -> list[str]:
    models, cfg = state.models, state.config
    status = [f"Bi-encoder **{models.bi_encoder_name}** · corpus **{state.default_corpus}** "
              f"({len(state.index(None).corpus):,} documents)"]
    status.append(f"Cross-encoder: **{cfg.cross_encoder}**" if models.cross_encoder is not None
                  else f"⚠️ Cross-encoder re-ranker not loaded — {models.cross_encoder_error}")
    status.append(f"CLS-LR ranker: **{cfg.cls_lr or 'in-memory'}**" if models.cls_lr is not None
                  else f"CLS-LR re-ranker not loaded — {models.cls_lr_error} (start with `--cls-lr FOLDER`)")
    return status


def build_demo(state: AppState | None = None, config: AppConfig | None = None,
               outputs: Outputs | None = None) -> gr.Blocks:
    """The app. ``state`` holds already loaded models and corpora; without it they are loaded here, before
    returning, so no request pays for loading. ``outputs`` is the folder for returned files (default: a new
    bounded one)."""
    state = state or AppState.load(config or AppConfig())
    ui = Ui(state, outputs or Outputs())

    def end_session(request: gr.Request):
        # The page was closed or reloaded (a reload is a new session): its uploads are released.
        state.release(getattr(request, "session_hash", None) or "")

    # Gradio's cache now holds only uploaded files (returned files are served from `out`): kept 10 minutes.
    with gr.Blocks(title=TITLE, delete_cache=(300, 600)) as demo:
        gr.Markdown(f"# {TITLE}\n" + "  \n".join(status_lines(state)))
        for name, tab in (("Search", search_tab), ("Pair scoring", pairs_tab), ("Explain", explain_tab),
                          ("Token embeddings", embeddings_tab), ("Attention", attention_tab)):
            with gr.Tab(name):
                tab.build(ui)
        for component in demo.blocks.values():
            if isinstance(component, gr.Slider | gr.Radio | gr.CheckboxGroup):
                named(component)  # range / choice errors name the input
        demo.unload(end_session)
    demo.ctxir_state = state  # tests and scripts reach the loaded models through the demo
    demo.ctxir_outputs = ui.out
    return demo
