"""Similarity views of the Token embeddings tab: /layer_similarity and /sentence_similarity."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import gradio as gr
import numpy as np

from ctxir.app import figures
from ctxir.app.models import BI_ENCODER, POOLINGS, check_layer
from ctxir.app.state import AppState, ViewResult
from ctxir.app.text import cls_warnings, display_text, md_literal, split_lines
from ctxir.app.ui import Ui, exports, guard, show, warn
from ctxir.checks import check_choice, check_text
from ctxir.types import CtxirError


def layer_similarity(
    state: AppState, sentences: str | Sequence[str], word: str = "bank", model: str = BI_ENCODER
) -> ViewResult:
    """Per-layer cosine of one word across sentences, and of the whole sentences (mean of their tokens)."""
    from ctxir.encoders.internals import word_vectors
    from ctxir.viz import curves_figure, layer_cosines

    cfg = state.config
    items = split_lines(sentences, "sentences", cfg.max_sentences, cfg.max_text_chars, min_items=2)
    word = check_text(word, "word", 50)
    internals = [state.models.inspect_input(model, s, max_tokens=cfg.max_inspect_tokens) for s in items]
    word_vecs = []
    for i, item in enumerate(internals, 1):
        try:
            word_vecs.append(word_vectors(item, word))  # (layers+1, hidden)
        except CtxirError:
            raise CtxirError(
                f"word {word!r} is not in sentence {i} ({items[i - 1][:60]!r}): every sentence must "
                "contain the word to follow"
            ) from None
    sentence_vecs = [item.hidden_states.mean(axis=1) for item in internals]
    word_curves, sentence_curves = {}, {}
    for i, j in itertools.combinations(range(len(items)), 2):
        key = f"{i + 1} vs {j + 1}"
        word_curves[key] = np.round(layer_cosines(word_vecs[i], word_vecs[j]), cfg.decimals).tolist()
        sentence_curves[key] = np.round(
            layer_cosines(sentence_vecs[i], sentence_vecs[j]), cfg.decimals
        ).tolist()
    figures = {
        "word": curves_figure(word_curves, f"cosine of {word!r} between sentences, per layer"),
        "sentence": curves_figure(sentence_curves, "cosine of whole sentences (mean of tokens), per layer"),
    }
    data = {
        "word": word,
        "sentences": items,
        "layers": list(range(internals[0].hidden_states.shape[0])),
        "word_cosine": word_curves,
        "sentence_cosine": sentence_curves,
    }
    legend = "; ".join(f"{i + 1} = {md_literal(repr(s[:50]))}" for i, s in enumerate(items))
    rows = [{"pair": k, **{f"layer_{li}": v for li, v in enumerate(vals)}} for k, vals in word_curves.items()]
    text = f"Sentences: {legend}. Layer 0 is the embedding layer."
    return ViewResult(rows=rows, figures=figures, data=data, text=text)


def sentence_similarity(
    state: AppState, sentences: str | Sequence[str], layer: int = -1, pooling: str = "mean"
) -> ViewResult:
    """Cosine similarity heatmap of sentence embeddings (bi-encoder, chosen pooling and layer)."""
    from ctxir.encoders.bi_encoder import BiEncoder
    from ctxir.viz import MatrixStyle, cosine_matrix, heatmap_figure

    cfg = state.config
    items = split_lines(sentences, "sentences", cfg.max_sentences, cfg.max_text_chars, min_items=2)
    check_choice(pooling, "pooling", POOLINGS)
    layer = check_layer(layer, state.models.num_layers)
    encoder = BiEncoder(state.models.bi_encoder, pooling=pooling, layer=layer, cache=None)
    sim = cosine_matrix(encoder.encode(items))  # (sentences, sentences)
    labels = [f"{i + 1}. {s if len(s) <= 45 else s[:44].rstrip() + '…'}" for i, s in enumerate(items)]
    numbers = [str(i + 1) for i in range(len(items))]
    title = f"sentence cosine similarity ({pooling} pooling, layer {layer})"
    fig = heatmap_figure(sim, labels, numbers, title, MatrixStyle(vmin=-0.2, vmax=1.0))
    cosines = np.round(sim, cfg.decimals).tolist()
    warnings = cls_warnings(pooling, layer, "the heatmap shows nothing about the sentences")
    data = {
        "sentences": items,
        "layer": layer,
        "pooling": pooling,
        "similarity": cosines,
        "warnings": warnings,
    }
    rows = [
        {"sentence": s, **dict(zip(numbers, row, strict=True))}
        for s, row in zip(labels, cosines, strict=True)
    ]
    text = "\n\n".join(f"⚠️ {w}" for w in warnings)
    return ViewResult(rows=rows, figures={"similarity": fig}, data=data, text=text)


# the sentence-similarity heatmap's colour scale (the PNG's viridis) and what its caption says of it
SIMILARITY_SCALE = "Viridis"
SIMILARITY_LEGEND = "brighter (yellow) = more alike, darker (purple) = less; the colour bar gives the cosine"


def layers_tab(ui: Ui, model, presets: dict) -> None:
    """/layer_similarity: one word in several sentences, compared layer by layer."""
    state, out = ui.state, ui.out

    @guard
    def do_layer_similarity(model, sentences, word):
        ui.visitor()
        r = layer_similarity(state, sentences, word, model)
        stems = {"word": "word-by-layer", "sentence": "sentence-by-layer"}
        return *[out.png(r.figures[key], stem) for key, stem in stems.items()], r.text, r.data

    def after_layers(data, *pngs):
        word = figures.curves(data["word_cosine"], f"cosine of '{data['word']}' between sentences, per layer")
        sentence = figures.curves(
            data["sentence_cosine"], "cosine of whole sentences (mean of tokens), per layer"
        )
        rows = [
            {"pair": pair, "layer": layer, "word_cosine": w, "sentence_cosine": s}
            for pair, curve in data["word_cosine"].items()
            for layer, (w, s) in enumerate(zip(curve, data["sentence_cosine"][pair], strict=True))
        ]
        files = exports(out, "layer-similarity", data=data, rows=rows, plots=[word, sentence], files=pngs)
        return show(word), show(sentence), show(files)

    ui.tab_intro(
        "One word in several sentences, compared layer by layer: the same spelling starts alike and "
        "drifts apart where the contexts differ."
    )
    contexts = "\n".join(presets["bank_contexts"])
    sentences = gr.Textbox(label="Sentences containing the word (one per line)", lines=4, value=contexts)
    word = gr.Textbox(label="Word", value=presets["word"])
    button = gr.Button("Compare layer by layer", variant="primary", elem_id="layer-sim-button")
    summary = ui.summary("layer-sim-summary")
    with gr.Row():
        word_plot = ui.plot("The word's cosine between sentences, per layer", min_width=300)
        sentence_plot = ui.plot("Whole sentences' cosine, per layer", min_width=300)
    pngs = [ui.returned("word_png"), ui.returned("sentence_png")]
    files = ui.downloads("PNG, interactive HTML, CSV, JSON")
    json = ui.numbers()
    inputs, outputs = [model, sentences, word], [*pngs, summary, json]
    after = (after_layers, [json, *pngs], [word_plot, sentence_plot, files])
    compared = ui.view_event(
        button.click, do_layer_similarity, inputs, outputs, "layer_similarity", empty=[summary], after=after
    )
    ui.offer_loaded_models(compared, model)


def similarity_tab(ui: Ui, presets: dict) -> None:
    """/sentence_similarity: how alike whole sentences are at one layer and pooling, as a heatmap."""
    state, out, n_layers = ui.state, ui.out, ui.models.num_layers

    @guard
    def do_sentence_similarity(sentences, layer, pooling):
        ui.visitor()
        r = sentence_similarity(state, sentences, layer, pooling)
        warn(r)
        return out.png(r.figures["similarity"], "sentence-similarity"), r.data

    def after_similarity(data, png):
        labels = [f"{i + 1}. {s}" for i, s in enumerate(data["sentences"])]
        numbers = [str(i + 1) for i in range(len(labels))]
        title = f"cosine similarity of sentence embeddings ({data['pooling']} pooling, layer {data['layer']})"
        style = figures.HeatmapStyle(
            "cosine", "sentence", "with sentence", -0.2, 1.0, decimals=2, colorscale=SIMILARITY_SCALE
        )
        heat = figures.heatmap(data["similarity"], numbers, numbers, title, style, hover_labels=labels)
        rows = [
            {"sentence": s, **dict(zip(numbers, row, strict=True))}
            for s, row in zip(data["sentences"], data["similarity"], strict=True)
        ]
        summary = "\n\n".join(f"⚠️ {display_text(w)}" for w in data.get("warnings") or []) or (
            f"{len(data['sentences'])} sentences, numbered by their line above · {data['pooling']} pooling · layer "
            f"{data['layer']}: {SIMILARITY_LEGEND}. Hover a cell for the pair."
        )
        files = exports(out, "sentence-similarity", data=data, rows=rows, plots=[heat], files=[png])
        return summary, show(heat), show(files)

    ui.tab_intro("How alike whole sentences are, as the chosen layer and pooling embed them.")
    sentences = gr.Textbox(
        label="Sentences (one per line)", lines=6, value="\n".join(presets["similarity_sentences"])
    )
    with gr.Row():
        layer = gr.Slider(0, n_layers, value=n_layers, step=1, label="layer")
        pooling = gr.Radio(list(POOLINGS), value="mean", label="pooling")
    button = gr.Button("Sentence similarity", variant="primary", elem_id="sentence-sim-button")
    summary = ui.summary("sentence-sim-summary")
    plot = gr.Plot(label="Sentence cosine similarity (hover a cell)", visible=False)
    png = ui.returned("heatmap_png")
    files = ui.downloads("PNG, interactive HTML, CSV, JSON")
    json = ui.numbers()
    ui.view_event(
        button.click,
        do_sentence_similarity,
        [sentences, layer, pooling],
        [png, json],
        "sentence_similarity",
        empty=[summary],
        after=(after_similarity, [json, png], [summary, plot, files]),
    )
