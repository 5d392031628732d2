"""Explain tab (/explain) and the Explain action: why a (query, document) pair scored as it did, by token."""

from __future__ import annotations

import json
import re
from typing import Any

import gradio as gr
import numpy as np

from ctxir.app import figures
from ctxir.app.corpus_index import Owner
from ctxir.app.models import BI_ENCODER, AppModels, chosen_prompts, prompts_said
from ctxir.app.search_form import auto_info, explain_with, model_choices, prompt_boxes, wire_load
from ctxir.app.state import AppState, ViewResult
from ctxir.app.text import md_code, md_literal
from ctxir.app.ui import PRIVATE, Ui, downloads, exports, guard, plot, with_plotly_js, without_plotly_js
from ctxir.checks import check_choice, check_text
from ctxir.data.demo import demo_presets
from ctxir.encoders.bi_encoder import BiEncoder, model_prompts
from ctxir.evaluation.report_html import ATTRIBUTION_LEGEND
from ctxir.explain.pair import explain
from ctxir.rerank.registry import CROSS_ENCODER, RERANKERS
from ctxir.types import CtxirError, doc_text
from ctxir.viz import MatrixStyle, heatmap_figure


def explain_models() -> tuple[str, ...]:
    """What "Explain with" accepts: auto, the bi-encoder, every re-ranker kind of ``ctxir.rerank.registry``."""
    return ("auto", BI_ENCODER, *RERANKERS)


_SPECIAL = re.compile(r"^(\[[A-Z]+\]|<s>|</s>|<pad>|<unk>)$")


def compact(value: Any) -> Any:
    """Every float of a JSON value to 6 significant digits: the answer stays exact enough, and short."""
    return json.loads(json.dumps(value), parse_float=lambda text: float(f"{float(text):.6g}"))


def highlight(spans: list[tuple[str, float]], scale: float | None = None) -> list[tuple[str, float | None]]:
    """``words`` for ``gr.HighlightedText``: scores divided by ``scale`` (the largest), spaces between."""
    scale = scale or max((abs(v) for _, v in spans), default=0.0) or 1.0
    out: list[tuple[str, float | None]] = [(" ", None)] * (2 * len(spans) - 1) if spans else []
    out[::2] = [(word, round(float(np.clip(value / scale, -1, 1)), 3)) for word, value in spans]
    return out


def words(
    tokens: list[str], scores: list[float], start: int = 0, keep_special: bool = False
) -> list[tuple[str, float]]:
    """Word-pieces ``tokens[start:]`` joined into words (scores summed)."""
    out: list[tuple[str, float]] = []
    for token, value in zip(tokens[start:], scores[start:], strict=True):
        if _SPECIAL.match(token) and not keep_special:
            continue
        if token.startswith("##") and out and not _SPECIAL.match(out[-1][0]):
            out[-1] = (out[-1][0] + token[2:], out[-1][1] + float(value))
        else:
            out.append((token, float(value)))
    return out


def listing(items: list[tuple[str, float]]) -> str:
    return ", ".join(f"{w} ({v:+.3f})" for w, v in items) or "—"


def _rankers(models: AppModels, model: str, reranker: str | None = None) -> tuple[str | None, dict]:
    """(the kind or Hub id explained, {kind: re-ranker}) for ``model``: none for the bi-encoder."""
    if model == BI_ENCODER:
        return None, {}
    # the search's re-ranker when it is loaded (or an id, loaded on demand); else "auto" stays the first loaded kind
    chosen = reranker not in (None, "", "none")
    if model == "auto" and chosen and (reranker in models.rerankers or reranker not in RERANKERS):
        model = reranker
    if model == "auto":
        return next(iter(models.loaded), None), {kind: models.rerankers[kind] for kind in models.loaded[:1]}
    # AppModels.reranker raises with how to provide a kind that is not loaded; it loads an id as a cross-encoder
    return model, {model if model in RERANKERS else CROSS_ENCODER.name: models.reranker(model)}


def explain_pair(
    state: AppState,
    query: str,
    document: str,
    model: str = "auto",
    title: str = "",
    reranker: str | None = None,
    query_prompt: str | None = None,
    document_prompt: str | None = None,
) -> ViewResult:
    """Explain one (query, document) pair: the bi-encoder's cosine split over query×document tokens."""
    cfg = state.config
    query = check_text(query, "query", cfg.max_query_chars)
    document = check_text(document, "document", cfg.max_text_chars)
    for name, value in (("model", model), ("re-ranker", reranker or "none")):
        if value not in (*explain_models(), "none") and not state.models.loadable(value):
            check_choice(value, name, (*explain_models(), "a cross-encoder's Hub id (org/name)"))
    explained, rankers = _rankers(state.models, model, reranker)
    st = state.models.bi_encoder
    prompts = chosen_prompts(model_prompts(st), query_prompt, document_prompt, cfg.max_query_chars)
    encoder = BiEncoder(st, cache=False, query_prompt=prompts["query"], document_prompt=prompts["document"])
    steps = {"n_steps": cfg.explain_steps, "max_steps": cfg.explain_max_steps}
    raw = explain(query, document, bi_encoder=encoder, rerankers=rankers, title=title, **steps)
    bi, reranker = raw["bi_encoder"], raw.get("cross_encoder")
    if reranker is not None and explained not in RERANKERS:
        reranker["model_kind"] = f"{explained} (cross-encoder)"  # loaded by id: named as the visitor typed it
    view = ViewResult(data=compact({**raw, "model": model, "reranker": explained, "prompts": prompts}))
    lines = [_bi_encoder_view(bi, view), *filter(None, [prompts_said(prompts)])]
    if reranker is not None:
        lines += _reranker_view(reranker, view)
    elif model == "auto":
        lines.append("No re-ranker is loaded, so only the bi-encoder is explained.")
    lines.append("Red raised the score, violet lowered it; the strongest word of each view is full colour.")
    view.text = "\n\n".join(lines)
    return view


def _bi_encoder_view(bi: dict, view: ViewResult) -> str:
    """The bi-encoder's cosine into ``view``: token highlights and, under mean pooling, token pairs' terms."""
    q_tokens, d_tokens = bi["query_tokens"], bi["document_tokens"]
    q_words = words(q_tokens, bi["query_contributions"], keep_special=True)
    d_words = words(d_tokens, bi["document_contributions"], keep_special=True)
    scale = max((abs(v) for _, v in [*q_words, *d_words]), default=0.0)  # one scale: both sum to the cosine
    view.highlights.update(query=highlight(q_words, scale), document=highlight(d_words, scale))
    if bi["pair_contributions"] is None:
        return (
            f"**Bi-encoder cosine {bi['cosine']:.4f}**, attributed to tokens by integrated gradients "
            f"({md_literal(bi.get('note', ''))}; completeness error {bi['completeness_error'] or 0:.2%})."
        )
    pairs = np.asarray(bi["pair_contributions"])  # (query tokens, document tokens)
    title = (
        f"bi-encoder: query × document token terms (they add up to the cosine {bi['cosine']:.3f}; "
        f"{ATTRIBUTION_LEGEND})"
    )
    style = figures.HeatmapStyle(
        "contribution", "query token", "document token", diverging=True, decimals=4, show_values=False
    )
    view.plots["pairs"] = figures.heatmap(pairs, q_tokens, d_tokens, title, style)
    bound = float(np.max(np.abs(pairs))) or 1.0
    cmap, axes = figures.attribution_cmap(), {"xlabel": "document token", "ylabel": "query token"}
    png_style = MatrixStyle(-bound, bound, cmap, annotate=False, **axes)
    view.figures["pairs"] = heatmap_figure(pairs, q_tokens, d_tokens, title, png_style)
    return (
        f"**Bi-encoder cosine {bi['cosine']:.4f}**, split exactly over the {len(q_tokens)} × "
        f"{len(d_tokens)} query × document token pairs (mean pooling: the terms add up to the cosine)."
    )


def _reranker_view(reranker: dict, view: ViewResult) -> list[str]:
    """A re-ranker's score split over its tokens into ``view`` (bars, a highlight); its lines of text."""
    kind = reranker["model_kind"]
    tokens, values, split = reranker["tokens"], reranker["attributions"], reranker["sentence_b_start"]
    title = (
        f"{kind}: each token's share of score − baseline ({reranker['score'] - reranker['baseline_score']:+.3f}"
        f"; {ATTRIBUTION_LEGEND})"
    )
    view.plots["reranker"] = figures.token_bars(tokens, values, title, split=split)
    view.figures["reranker"] = figures.token_bars_png(tokens, values, title, split=split)
    view.highlights["reranker"] = highlight(words(tokens, values, keep_special=True))
    error = reranker["completeness_error"]
    lines = [
        f"**{kind} score {reranker['score']:.4f}** ({md_literal(reranker['score_kind'])}); with every word "
        f"replaced by [{reranker['baseline'].upper()}] it scores {reranker['baseline_score']:.4f}. Integrated "
        f"gradients ({reranker['n_steps']} steps) split the difference over the tokens; completeness error "
        + ("n/a (no difference to split)" if error is None else f"{error:.2%}")
        + ("" if reranker["converged"] else " — above the 1 % target even at the step cap")
        + "."
    ]
    match = reranker.get("term_match")
    if match:
        top = sorted(
            (t for t in match["tokens"] if t["contribution"]), key=lambda t: -abs(t["contribution"])
        )[:5]
        lines.append(
            f"Of that score, its head's term-match term gives {match['score']:+.4f}: "
            + (", ".join(f"{md_code(t['token'])} {t['contribution']:+.3f}" for t in top) or "nothing")
            + " (each query token's matches in the document, weighted by its learned importance). It reads the "
            "token ids, so it stays in the baseline score and the bars above split the rest."
        )
    window = reranker.get("window")
    if window:
        lines.append(
            f"The {kind} reads a long document by its best window ({window['words']} words every "
            f"{window['stride']}): window {window['index']} of {window['of']} scored highest, so its "
            "score is the document's, and the tokens above are that window's."
        )
    return lines


def explain_result(
    state: AppState,
    query: str,
    corpus: str | None,
    doc_id: str,
    model: str = "auto",
    owner: Owner = None,
    reranker: str | None = None,
    query_prompt: str | None = None,
    document_prompt: str | None = None,
) -> ViewResult:
    """``explain_pair`` for a document of a corpus ``owner`` may see, read as the models read it."""
    index = state.index(corpus, owner)
    doc_id = check_text(doc_id, "document id", 500, hint="pick a search result to explain")
    if doc_id not in index.corpus:
        raise CtxirError(f"document {doc_id!r} is not in corpus {index.name!r}: pick a search result")
    doc = index.corpus[doc_id]
    result = explain_pair(
        state, query, doc_text(doc), model, doc.get("title") or "", reranker, query_prompt, document_prompt
    )
    result.data.update(doc_id=doc_id, corpus=index.name)
    return result


class Panel:
    """An explanation display, hidden until one arrives; ``outputs`` in the order ``panel_values`` fills them."""

    def __init__(self, prefix: str):
        self.summary = gr.Markdown(elem_id=f"{prefix}-summary", label="summary", show_label=False)
        # show_legend: Gradio's colour bar under each text, violet (-1, lowered the score) to red (+1, raised it)
        shown = dict(show_legend=True, show_inline_category=False, combine_adjacent=False, visible=False)
        self.query, self.document, self.reranker = (
            gr.HighlightedText(label=label, elem_id=elem_id, **shown)
            for label, elem_id in (
                ("Query · bi-encoder (red raised the cosine, violet lowered it)", None),
                ("Document · bi-encoder (same colour scale as the query)", f"{prefix}-document"),
                ("Query and document · re-ranker (red raised its score, violet lowered it)", None),
            )
        )
        self.pairs = plot("Cosine split over token pairs (hover a cell)", f"{prefix}-heatmap")
        self.bars = plot("Re-ranker attribution per token (hover a bar)")
        self.files = downloads("PNG, interactive HTML, JSON")
        with gr.Accordion("Numbers of the explanation (JSON)", open=False, visible=False) as self.numbers:
            self.json = gr.JSON(label="numbers", show_label=False)
        parts = (self.query, self.document, self.reranker, self.pairs, self.bars, self.files)
        self.outputs = [self.summary, *parts, self.json]

    def shows(self, event) -> None:
        """After ``event`` (which filled the panel) succeeds, show the parts this explanation has (privately)."""

        def visible(data, files):
            bi = (data or {}).get("bi_encoder") or {}
            pairs, reranker = bi.get("pair_contributions") is not None, "cross_encoder" in (data or {})
            shown = [gr.update(visible=v) for v in (bool(bi), bool(bi), reranker, pairs, reranker)]
            # the page's downloads also list the plotly.js the interactive page loads (API answers leave it out)
            files = with_plotly_js(files or [])
            return [*shown, gr.update(visible=True, value=files), gr.update(visible=True)]

        event.success(visible, [self.json, self.files], [*self.outputs[1:-1], self.numbers], **PRIVATE)


def panel_values(ui: Ui, r: ViewResult, stem: str = "explanation") -> tuple:
    """``r`` as the values of a ``Panel``'s outputs; its exports written to the bounded output folder."""
    pngs = [ui.out.png(fig, f"{stem}-{name}") for name, fig in r.figures.items()]
    # without the 4.6 MB plotly.js (gradio_client downloads every file listed); ``Panel.shows`` adds it for the page
    files = without_plotly_js(exports(ui.out, stem, data=r.data, plots=list(r.plots.values()), files=pngs))
    texts = [r.highlights.get(k) for k in ("query", "document", "reranker")]
    return r.text, *texts, r.plots.get("pairs"), r.plots.get("reranker"), files, r.data


def build(ui: Ui) -> None:
    """The Explain tab (inside an open gr.Tab): any query and document; event /explain."""
    state = ui.state
    presets = demo_presets()

    @guard
    def do_explain(query, document, model, query_prompt, document_prompt):
        ui.visitor()
        r = explain_pair(state, query, document, model, "", None, query_prompt, document_prompt)
        return panel_values(ui, r)

    ui.tab_intro(
        "Why did a model give this document this score for this query? Each word is coloured by how much it "
        "raised or lowered the score: the bi-encoder's cosine split exactly over query × document tokens, and "
        "the re-ranker's score split by integrated gradients."
    )
    query = gr.Textbox(label="Query", value=presets["pair_query"])
    document = gr.Textbox(label="Document", lines=3, value=presets["pair_documents"][0])
    with gr.Row(equal_height=True):
        model = explain_with(ui.models, info=auto_info(ui.models), scale=2, min_width=220)
        other = gr.Textbox(
            label="Or explain with another re-ranker: a cross-encoder's Hub id"
            + (" or folder" if ui.config.allow_model_paths else ""),
            placeholder="e.g. cross-encoder/ms-marco-MiniLM-L6-v2",
            info="loaded on demand and offered as a choice (the cache the Search tab's re-rankers share)",
            scale=2,
            min_width=220,
            elem_id="explain-other-model",
        )
        load = gr.Button("Load re-ranker", scale=1, min_width=140, elem_id="explain-load-model")
    wire_load(ui, other, load, [(model, model_choices)])
    prompts = prompt_boxes(ui, "explain")
    button = gr.Button("Explain", variant="primary", elem_id="explain-button")
    shown = Panel("explain")
    inputs = [query, document, model, *prompts]
    shown.shows(button.click(do_explain, inputs, shown.outputs, api_name="explain"))
