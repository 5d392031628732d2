"""Token embeddings tab (/model_info, /token_embeddings): tokens, and token vectors at two layers in 2-D."""

from __future__ import annotations

from collections.abc import Sequence

import gradio as gr
import numpy as np

from ctxir.app import figures, similarity
from ctxir.app.config import Progress
from ctxir.app.models import BI_ENCODER, check_layer
from ctxir.app.state import AppState, ViewResult
from ctxir.app.text import md_code, split_lines
from ctxir.app.ui import PROGRESS, Ui, exports, frame, guard, show, steps
from ctxir.checks import check_choice, check_text
from ctxir.data.demo import demo_presets
from ctxir.encoders.internals import word_positions
from ctxir.types import CtxirError
from ctxir.viz import embeddings as viz


def model_info(state: AppState, model: str = BI_ENCODER, text: str = "") -> ViewResult:
    """Tokenizer and architecture facts, and the tokens of ``text`` (ids, token types, special or not)."""
    item = state.models.inspectable(model)
    tok, body, config = item.tokenizer, item.model, item.model.config
    special = {
        name: {"token": str(token), "id": tok.convert_tokens_to_ids(token)}
        for name, token in tok.special_tokens_map.items()
        if isinstance(token, str)
    }
    info = {
        "model": item.name,
        "model_type": config.model_type,
        "tokenizer": type(tok).__name__,
        "vocab_size": int(tok.vocab_size),
        "special_tokens": special,
        "max_position_embeddings": int(getattr(config, "max_position_embeddings", 0) or 0),
        "layers": int(config.num_hidden_layers),
        "hidden_size": int(config.hidden_size),
        "ffn_size": int(getattr(config, "intermediate_size", 0) or 0),
        "attention_heads": int(config.num_attention_heads),
        "parameters": int(sum(p.numel() for p in body.parameters())),
        "attention_implementation": getattr(config, "_attn_implementation", None),
    }
    rows = []
    if text and text.strip():
        text = check_text(text, "text", state.config.max_text_chars)
        enc = tok(text)
        types = enc.get("token_type_ids") or [0] * len(enc["input_ids"])
        special_ids = set(tok.all_special_ids)
        rows = [
            {"position": i, "token": tok.convert_ids_to_tokens(token_id), "token_id": int(token_id)}
            | {"token_type": int(types[i]), "special": token_id in special_ids}
            for i, token_id in enumerate(enc["input_ids"])
        ]
        info["text"], info["tokens"] = text, rows
    md = (
        f"**{item.name}** · {info['model_type']} · {info['layers']} layers · hidden {info['hidden_size']} · "
        f"FFN {info['ffn_size']} · {info['attention_heads']} heads · {info['parameters']:,} parameters · "
        f"vocabulary {info['vocab_size']:,} ({info['tokenizer']}) · up to {info['max_position_embeddings']} "
        "positions · special tokens " + ", ".join(f"`{v['token']}`={v['id']}" for v in special.values())
    )
    return ViewResult(rows=rows, data=info, text=md)


def token_embeddings(
    state: AppState,
    sentences: str | Sequence[str],
    layer_a: int = 0,
    layer_b: int = -1,
    methods: Sequence[str] = ("pca", "tsne"),
    word: str = "",
    model: str = BI_ENCODER,
    progress: Progress | None = None,
) -> ViewResult:
    """2-D projections of every (non-special) token's vector at two layers, and consecutive-layer cosines."""
    cfg = state.config
    items = split_lines(sentences, "sentences", cfg.max_sentences, cfg.max_text_chars)
    n_layers = int(state.models.inspectable(model).model.config.num_hidden_layers)
    layers = sorted({check_layer(layer_a, n_layers, "layer A"), check_layer(layer_b, n_layers, "layer B")})
    methods = [check_choice(m, "projection", viz.PROJECTIONS) for m in (methods or ["pca"])]
    step = progress or (lambda *_: None)
    step(0.1, "forward passes")
    internals = [
        state.models.inspect_input(model, s, max_tokens=state.config.max_inspect_tokens) for s in items
    ]
    # each non-special token's vector at each layer, and its row; ``highlight``: the token is part of ``word``
    vectors, token_rows = {layer: [] for layer in layers}, []
    for g, item in enumerate(internals):
        try:
            marked = set(word_positions(item.tokens, word)) if word.strip() else set()
        except CtxirError:
            marked = set()
        for pos, token in enumerate(item.tokens):
            if token in ("[CLS]", "[SEP]", "<s>", "</s>", "[PAD]"):
                continue
            for layer in layers:
                vectors[layer].append(item.hidden_states[layer, pos])  # (hidden,)
            row = {"sentence": g + 1, "position": pos, "token": token, "token_id": item.token_ids[pos]}
            token_rows.append(row | {"highlight": pos in marked})
    if word.strip() and not any(t["highlight"] for t in token_rows):
        raise CtxirError(
            f"word {word.strip()!r} is in none of the sentences: pick a word that appears, or leave it empty"
        )
    d, points = cfg.decimals, {m: {} for m in methods}  # {method: {layer: (tokens, 2) rounded}}
    for i, method in enumerate(methods):
        step(0.3 + 0.5 * i / len(methods), f"{method} projection")
        for layer in layers:
            points[method][str(layer)] = np.round(viz.project(np.stack(vectors[layer]), method), d).tolist()
    step(1.0, "done")
    data = {
        "sentences": items,
        "word": word.strip(),
        "layers": layers,
        "methods": methods,
        "tokens": token_rows,
        "points": points,
        "consecutive_layer_cosine": [
            {"sentence": i + 1, "tokens": item.tokens, "cosine": np.round(x, d).tolist()}
            for i, item in enumerate(internals)
            for x in [viz.consecutive_layer_similarity(item.hidden_states)]  # (layers, tokens)
        ],
    }
    projection, drift = _twin_args(data)
    style = viz.MatrixStyle(vmax=1.0, xlabel="layer transition", ylabel="token")
    heat = viz.heatmap_figure(*drift, "cosine between consecutive layers, sentence 1", style)
    return ViewResult(
        rows=token_rows,
        figures={"projection": viz.projection_figure(*projection), "consecutive_layers": heat},
        data=data,
        text=f"{len(token_rows)} tokens from {len(items)} sentence(s); layers {layers[0]} and {layers[-1]}"
        + (f"; {md_code(word.strip())} circled in black" if word.strip() else ""),
    )


def _twin_args(data: dict) -> tuple[tuple, tuple]:
    """The answer as both twins draw it: (the projection's arguments, sentence 1's layer-change heatmap's)."""
    tokens, first = data["tokens"], data["consecutive_layer_cosine"][0]
    points = {
        (m, int(k)): np.asarray(xy) for m, by_layer in data["points"].items() for k, xy in by_layer.items()
    }
    names = [f"{i + 1}: {s}" for i, s in enumerate(data["sentences"])]
    labels, groups = [t["token"] for t in tokens], [t["sentence"] - 1 for t in tokens]
    cosine = np.asarray(first["cosine"]).T  # (tokens, layer transitions)
    transitions = [f"{i}→{i + 1}" for i in range(cosine.shape[1])]
    projection = (points, labels, groups, names, [t["highlight"] for t in tokens])
    return projection, (cosine, first["tokens"], transitions)


def build(ui: Ui) -> None:
    """The Token embeddings tab (inside an open gr.Tab): four sub-tabs, one event each."""
    presets = demo_presets()
    ui.tab_intro(
        "Look inside the bi-encoder (or the cross-encoder): how it splits text into tokens, where each "
        "token's vector sits at any layer, how one word's meaning shifts with its context, and how alike "
        "whole sentences are."
    )
    model = ui.model_dropdown(elem_id="embeddings-model")
    with gr.Tabs(overflow_behavior="wrap"):
        with gr.Tab("Tokens"):
            tokens_tab(ui, model, presets)
        with gr.Tab("Projection"):
            projection_tab(ui, model, presets)
        with gr.Tab("Across layers"):
            similarity.layers_tab(ui, model, presets)
        with gr.Tab("Sentence similarity"):
            similarity.similarity_tab(ui, presets)


def tokens_tab(ui: Ui, model, presets: dict) -> None:
    """/model_info: the tokenizer and architecture, and the tokens of one text."""
    state = ui.state

    @guard
    def do_model_info(model, text, progress=PROGRESS):
        ui.visitor()
        state.models.inspectable(model, progress=steps(progress))  # a model typed by name loads first
        r = model_info(state, model, text)
        return r.text, frame(r.rows), r.data

    text = gr.Textbox(label="Text to tokenize", value=presets["bank_contexts"][1])
    button = gr.Button("Inspect", variant="primary", elem_id="info-button")
    summary = ui.summary("info-summary")
    table = gr.Dataframe(label="Tokens", elem_classes=["ctxir-table"], visible=False)
    json = ui.numbers()
    options = {"empty": [summary], "after": (show, None, [table]), "after_queue": False}
    info = ui.view_event(
        button.click, do_model_info, [model, text], [summary, table, json], "model_info", **options
    )
    ui.offer_loaded_models(info, model)


def projection_tab(ui: Ui, model, presets: dict) -> None:
    """/token_embeddings: every token of the sentences as a point, at two layers."""
    state, out, n_layers = ui.state, ui.out, ui.models.num_layers

    @guard
    def do_token_embeddings(model, sentences, word, layer_a, layer_b, methods, progress=PROGRESS):
        ui.visitor()
        state.models.inspectable(model, progress=steps(progress))  # a model typed by name loads first
        r = token_embeddings(
            state, sentences, layer_a, layer_b, methods, word or "", model, progress=steps(progress)
        )
        stems = {"projection": "token-projection", "consecutive_layers": "consecutive-layers"}
        return *[out.png(r.figures[key], stem) for key, stem in stems.items()], r.text, r.data

    def after_projection(data, *pngs):
        projected, drifted = _twin_args(data)
        projection = figures.projection(*projected)
        drift = figures.heatmap(
            *drifted,
            "how much each token of sentence 1 changes from one layer to the next (cosine; low = changed)",
            figures.HeatmapStyle(value_name="cosine", row_name="token", col_name="layers", zmax=1.0),
        )
        files = exports(
            out, "token-embeddings", data=data, rows=data["tokens"], plots=[projection, drift], files=pngs
        )
        return show(projection), show(drift), show(files)

    ui.tab_intro(
        "Every token of the sentences as a point: tokens whose vectors are alike land close. Compare "
        "two layers: at layer 0 'bank' is one point per spelling, deeper it splits by meaning."
    )
    sentences = gr.Textbox(
        label="Sentences (one per line)", lines=4, value="\n".join(presets["bank_contexts"])
    )
    with gr.Row():
        word = gr.Textbox(label="Highlight word", value=presets["word"], min_width=140)
        layer_a = gr.Slider(0, n_layers, value=0, step=1, label="layer A", min_width=140)
        layer_b = gr.Slider(0, n_layers, value=n_layers, step=1, label="layer B", min_width=140)
        methods = gr.CheckboxGroup(
            list(viz.PROJECTIONS), value=list(viz.PROJECTIONS), label="Projections", min_width=140
        )
    button = gr.Button("Project tokens", variant="primary", elem_id="project-button")
    summary = ui.summary("project-summary")
    plot = gr.Plot(label="Token vectors in 2-D (hover a point)", visible=False, elem_id="projection-plot")
    drift_plot = gr.Plot(label="Consecutive-layer cosine of sentence 1", visible=False)
    pngs = [ui.returned("projection_png"), ui.returned("drift_png")]
    files = ui.downloads("PNG, interactive HTML, CSV, JSON")
    json = ui.numbers()
    inputs, outputs = [model, sentences, word, layer_a, layer_b, methods], [*pngs, summary, json]
    after = (after_projection, [json, *pngs], [plot, drift_plot, files])
    projected = ui.view_event(
        button.click, do_token_embeddings, inputs, outputs, "token_embeddings", empty=[summary], after=after
    )
    ui.offer_loaded_models(projected, model)
