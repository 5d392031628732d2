"""Attention tab (/attention): bertviz's views drawn offline, one head's heatmap, where each head looks."""

from __future__ import annotations

from typing import Any

import gradio as gr
import numpy as np

from ctxir.app import figures, links
from ctxir.app.models import BI_ENCODER
from ctxir.app.state import AppState, ViewResult
from ctxir.app.ui import PROGRESS, Ui, exports, frame, guard, show, steps
from ctxir.checks import check_int, check_text
from ctxir.data.demo import demo_presets
from ctxir.types import CtxirError
from ctxir.viz import attention as viz


def parse_indices(value: Any, what: str) -> list[int]:
    """[0, 2], "0,2", "0-3" or "" (all) → sorted ints."""
    if isinstance(value, str):
        parts = [p.split("-", 1) if "-" in p[1:] else [p, p] for p in value.replace(" ", "").split(",") if p]
    else:
        parts = [[v, v] for v in ([value] if isinstance(value, int | float) else value or [])]
    try:
        return sorted({i for low, high in parts for i in range(int(low), int(high) + 1)})
    except (TypeError, ValueError):
        raise CtxirError(
            f"{what} {value!r} is not a list of numbers: write e.g. '0,2', '0-3' or [0, 2]; empty for all"
        ) from None


def attention(
    state: AppState,
    text: str,
    text_pair: str = "",
    view: str = "head",
    layers: Any = None,
    heads: Any = None,
    heatmap_layer: int = 0,
    heatmap_head: int = 0,
    model: str = BI_ENCODER,
) -> ViewResult:
    """bertviz head/model view (offline HTML), a heatmap of one layer/head, and a per-head summary."""
    cfg = state.config
    text = check_text(text, "text", cfg.max_text_chars)
    text_pair = check_text(text_pair, "second text", cfg.max_text_chars, required=False) or None
    internals = state.models.inspect_input(model, text, text_pair, max_tokens=cfg.max_attention_tokens)
    n_layers, n_heads = internals.attentions.shape[:2]
    layers_ = parse_indices(layers, "layers") or list(range(n_layers))
    heads_ = parse_indices(heads, "heads") or list(range(n_heads))
    heatmap_layer = check_int(heatmap_layer, "heatmap layer", 0, n_layers - 1)
    heatmap_head = check_int(heatmap_head, "heatmap head", 0, n_heads - 1)
    document = viz.bertviz_document(
        internals, view, layers_, heads_, decimals=cfg.decimals, max_tokens=cfg.max_attention_tokens
    )
    summary = viz.head_summary(internals, cfg.decimals)
    d = cfg.decimals
    weights = internals.attentions[heatmap_layer, heatmap_head].astype(np.float64)  # (tokens, tokens)
    data = {
        "tokens": internals.tokens,
        "token_ids": internals.token_ids,
        "token_type_ids": internals.token_type_ids,
        "sentence_b_start": internals.sentence_b_start,
        "view": view,
        "layers": layers_,
        "heads": heads_,
        "html_bytes": len(document.encode()),
        "heatmap": {"layer": heatmap_layer, "head": heatmap_head, "weights": np.round(weights, d).tolist()},
        "head_summary": summary,
    }
    text = (
        f"{len(internals.tokens)} tokens · {view} view of layers {layers_} and {len(heads_)} head(s) · "
        f"{len(document.encode()) / 2**20:.2f} MiB of HTML (weights rounded to {d} decimals), drawn in the "
        "frame below with no internet access."
    )
    return ViewResult(rows=summary, data=data, text=text, html=document)


HEAD_SUMMARY_COLUMNS = ["layer", "head", *viz.HEAD_STATS, "max_weight", "max_from", "max_to"]


def attention_pngs(out, data: dict) -> list[str]:
    """The heatmap and per-head summary PNGs, drawn from the answer's JSON (``data``)."""
    heat = data["heatmap"]
    weights = viz.attention_weights_figure(
        heat["weights"], data["tokens"], heat["layer"], heat["head"], data["sentence_b_start"]
    )
    heads = viz.head_summary_figure(data["head_summary"])
    return [out.png(weights, "attention-heatmap"), out.png(heads, "head-summary")]


def build(ui: Ui) -> None:
    """The Attention tab (inside an open gr.Tab); event /attention, from its button or a link."""
    state, cfg, out = ui.state, ui.config, ui.out
    presets = demo_presets()
    n_layers, n_heads = ui.models.num_layers, ui.models.num_heads

    @guard
    def do_attention(
        model,
        text,
        text_pair,
        view,
        layers,
        heads,
        heatmap_layer,
        heatmap_head,
        png_figures,
        progress=PROGRESS,
    ):
        ui.visitor()
        # a model typed by Hub id loads here (bounded cache, one load at a time), its load in the progress bar
        state.models.inspectable(model, progress=steps(progress))
        progress(0.1, desc="forward pass and bertviz view")
        r = attention(state, text, text_pair, view, layers, heads, heatmap_layer, heatmap_head, model)
        # PNGs only on request (each costs more than the view; gradio_client downloads every file)
        pngs = attention_pngs(out, r.data) if png_figures else [None, None]
        # the page's view links jQuery and d3 from this app (cached); the download stays the standalone page
        sources = viz.script_files()
        shown = viz.with_script_urls(r.html, lambda name: out.url(out.shared(name, lambda: sources[name])))
        page = out.html(r.html, f"attention-{view}-view")
        return r.text, viz.iframe(shown, "700px"), page, *pngs, frame(r.rows), r.data

    def after_attention(data, html_file, *pngs):
        heat, tokens = data["heatmap"], data["tokens"]
        height = min(900, max(420, 200 + 16 * len(tokens)))
        weights = figures.heatmap(
            heat["weights"],
            tokens,
            tokens,
            f"attention of layer {heat['layer']}, head {heat['head']}: each row (a token) spreads "
            "1.0 over the columns it looks at",
            figures.HeatmapStyle("weight", "token", "looks at", zmin=0.0, decimals=2, height=height),
        )
        heads = figures.head_grids(data["head_summary"])
        # the answer's PNGs, else drawn here from its JSON: the page still offers them, outside the API call's time
        pngs = pngs if all(pngs) else attention_pngs(out, data)
        plots, files = [weights, heads], [html_file, *pngs]
        paths = exports(out, "attention", data=data, rows=data["head_summary"], plots=plots, files=files)
        return show(weights), show(heads), show(paths)

    ui.tab_intro(
        "Where each token looks. bertviz draws every head's attention (hover a token to follow its lines); "
        "below, one head's weights as a heatmap and a summary of what each head attends to. Drawn offline, "
        f"inputs up to {cfg.max_attention_tokens} tokens: choose fewer layers or heads for long inputs."
    )
    att_model = ui.model_dropdown()
    att_text = gr.Textbox(
        label="Text (sentence A)", value=presets["bank_contexts"][0], elem_id="attention-text"
    )
    att_pair = gr.Textbox(
        label="Second text (sentence B, optional: a query–document pair)", value=presets["bank_contexts"][1]
    )
    with gr.Row():
        att_view = gr.Radio(["head", "model"], value="head", label="bertviz view", min_width=160)
        att_layers = gr.CheckboxGroup(
            list(range(n_layers)), label="Layers (none = all)", min_width=200, elem_id="attention-layers"
        )
        att_heads = gr.CheckboxGroup(list(range(n_heads)), label="Heads (none = all)", min_width=260)
    with gr.Row():
        heat_layer = gr.Slider(0, n_layers - 1, value=0, step=1, label="heatmap layer", min_width=160)
        heat_head = gr.Slider(0, n_heads - 1, value=0, step=1, label="heatmap head", min_width=160)
    att_png = ui.png_wanted()
    att_button = gr.Button("Show attention", variant="primary", elem_id="attention-button")
    att_summary = ui.summary("attention-summary")
    att_html = gr.HTML(elem_id="attention-view", label="bertviz_view", show_label=False)
    att_heat = ui.plot("One head's attention (hover a cell)", "attention-heatmap")
    att_heads_plot = ui.plot("Per-head summary: layers × heads (hover a cell)", "head-summary")
    # bertviz HTML and two PNGs (None unless asked for), as the API returns them
    att_returned = [ui.returned(n) for n in ("bertviz_html", "heatmap_png", "head_summary_png")]
    att_files = ui.downloads("bertviz HTML (offline), PNG, interactive HTML, CSV, JSON")
    link = links.offer("attention", "attention-link")
    with gr.Accordion("Per-head summary as a table", open=False):
        att_table = ui.table(value=frame([], HEAD_SUMMARY_COLUMNS), label="head_summary", show_label=False)
    att_json = ui.numbers()

    inputs = [att_model, att_text, att_pair, att_view, att_layers, att_heads, heat_layer, heat_head, att_png]
    outputs = [att_summary, att_html, *att_returned, att_table, att_json]
    after = (after_attention, [att_json, *att_returned], [att_heat, att_heads_plot, att_files])
    events = [att_button.click, link.run.change]  # a link runs it as the button does
    shown = ui.view_event(
        events, do_attention, inputs, outputs, "attention", empty=[att_summary], after=after
    )
    ui.offer_loaded_models(shown, att_model)
    link.shows(shown)
