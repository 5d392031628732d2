"""Pair scoring tab (/score_pairs): one query against a few documents, scored by every loaded model."""

from __future__ import annotations

from collections.abc import Sequence

import gradio as gr
import numpy as np

from ctxir.app import explain_tab, figures, links
from ctxir.app.config import Progress, short_name
from ctxir.app.models import BI_ENCODER, AppModels, chosen_prompts, prompts_said
from ctxir.app.search_form import explain_with, model_choices, prompt_boxes
from ctxir.app.state import AppState, ViewResult
from ctxir.app.text import md_code, rounded, snippet, split_lines
from ctxir.app.ui import PROGRESS, Ui, exports, frame, guard, shares, show, steps
from ctxir.checks import check_int, check_text
from ctxir.data.demo import demo_presets
from ctxir.encoders.bi_encoder import model_prompts
from ctxir.encoders.lengths import max_length_for, position_limit
from ctxir.kinds import CROSS_ENCODER
from ctxir.rerank.registry import RERANKERS
from ctxir.types import CtxirError
from ctxir.viz import scores_figure


def input_formation(
    tokenizer, query: str, document: str, max_length: int | None = None, positions: int | None = None
) -> dict:
    """How a cross-encoder reads a pair: ``[CLS] query [SEP] document [SEP]``, cut as it cuts it."""
    max_length = max_length_for(max_length, tokenizer.model_max_length, positions)
    enc = tokenizer(query, document, truncation="longest_first", max_length=max_length)
    ids = list(enc["input_ids"])
    tokens = tokenizer.convert_ids_to_tokens(ids)
    types = list(enc.get("token_type_ids") or [0] * len(ids))
    return {
        "text": " ".join(tokens),
        "tokens": tokens,
        "token_ids": ids,
        "token_type_ids": types,
        "num_tokens": len(ids),
        "truncated": len(tokenizer(query, document)["input_ids"]) > len(ids),
    }


def score_columns(loaded: dict[str, str] | None = None) -> dict[str, tuple[str, str]]:
    """{field: (rank field, legend)} of each kind's pair score, the cosine and each ``loaded`` model ({name: role})."""
    columns = {k.pair_column: (k.rank_column, f"{k.label} {k.pair_value}") for k in RERANKERS.values()}
    columns["bi_encoder_cosine"] = ("cosine_rank", "bi-encoder cosine")
    for name, role in (loaded or {}).items():
        columns[f"{name} {'score' if role == CROSS_ENCODER else 'cosine'}"] = (f"{name} rank", name)
    return columns


def chart_columns(rows: Sequence[dict], loaded: dict[str, str] | None = None) -> dict[str, list]:
    """{legend: values} the charts draw: a re-ranker's calibrated probability where it has one."""
    probabilities = {
        k.pair_column: f"{k.key}_probability" for k in RERANKERS.values() if k.pair_value == "score"
    }
    out = {}
    for key, (_, legend) in score_columns(loaded).items():
        field = probabilities.get(key)
        if field and any(row.get(field) is not None for row in rows):
            out[legend.replace(" score", " probability")] = [row.get(field) for row in rows]
        else:
            out[legend] = [row.get(key) for row in rows]
    return out


def model_names(value: str | Sequence[str] | None, limit: int) -> list[str]:
    """The ``models`` input: Hub ids (or folders) separated by commas or lines, or a list; at most ``limit``."""
    if value is None:
        return []
    parts = value.replace("\n", ",").split(",") if isinstance(value, str) else [str(v) for v in value]
    names = list(dict.fromkeys(part.strip() for part in parts if part and part.strip()))
    if len(names) > limit:
        raise CtxirError(
            f"models lists {len(names)} models ({', '.join(map(repr, names))}) but this app keeps at most {limit} "
            "loaded on demand at once: compare fewer at a time"
        )
    return names


def score_pairs(
    state: AppState,
    query: str,
    documents: str | Sequence[str],
    models: str | Sequence[str] = "",
    query_prompt: str | None = None,
    document_prompt: str | None = None,
    progress: Progress | None = None,
) -> ViewResult:
    """Every re-ranker kind's pair score (None where not loaded) and the bi-encoder cosine of each."""
    cfg = state.config
    query = check_text(query, "query", cfg.max_query_chars)
    docs = split_lines(documents, "documents", cfg.max_documents, cfg.max_text_chars)
    own = model_prompts(state.models.bi_encoder)
    given = chosen_prompts(own, query_prompt, document_prompt, cfg.max_query_chars)
    changed = {role: prompt for role, prompt in given.items() if prompt != own[role]}
    extra = {
        name: state.models.on_demand(name, None, progress, "models")
        for name in model_names(models, cfg.max_extra_models)
    }
    models = state.models
    prompts = {models.bi_encoder_name: given}  # {bi-encoder: the prompts it encoded with}
    # {pair-score field: a score per document}: each re-ranker kind's (None: not loaded), then the cosine
    values = {
        kind.pair_column: np.asarray(kind.pair_scores(models.rerankers[name], query, docs)).tolist()
        if name in models.rerankers
        else None
        for name, kind in RERANKERS.items()
    }
    values["bi_encoder_cosine"] = _cosines(models.bi_encoder, query, docs, given)
    for name, (role, model) in extra.items():
        if role == CROSS_ENCODER:
            values[f"{name} score"] = np.asarray(model.score_pairs(query, docs), dtype=float).tolist()
        else:
            prompts[name] = {**model_prompts(model), **changed}
            values[f"{name} cosine"] = _cosines(model, query, docs, prompts[name])
    loaded = {name: role for name, (role, _) in extra.items()}  # loaded by name: {name: role}
    probabilities, reading = _probabilities(models, values)
    rows = [
        {"doc": i + 1, "document": snippet(doc, 120)}
        | {key: rounded(scores[i]) if scores else None for key, scores in values.items()}
        | {key: rounded(p[i]) if p else None for key, p in probabilities.items()}
        for i, doc in enumerate(docs)
    ]
    _add_ranks(rows, values, loaded)
    # how the pairs are read: by a re-ranker's body, else the bi-encoder's
    inspect = models.inspect
    reader = next((inspect[k] for k in models.loaded if k in inspect), inspect[BI_ENCODER])
    positions = position_limit(reader.model.config)
    formations = [input_formation(reader.tokenizer, query, doc, positions=positions) for doc in docs]
    unavailable = {name: models.why_not(name) for name in RERANKERS if name not in models.rerankers}
    data = {
        "query": query,
        "documents": docs,
        "scores": rows,
        "input_formation": formations,
        "unavailable": unavailable,
        "models": loaded,
        "prompts": prompts,
    }
    first = formations[0]
    text = (
        f"Input formation ({reader.name} tokenizer), document 1: {md_code(first['text'])} — "
        f"{first['num_tokens']} tokens; token type 0 = query segment, 1 = document segment."
    )
    notes = [*reading, *(f"{name} not loaded: {why}" for name, why in unavailable.items())]
    said = [prompts_said(p, md_code(n) if n in extra else "The bi-encoder") for n, p in prompts.items()]
    return ViewResult(
        rows=rows,
        data=data,
        text="\n\n".join([text, *filter(None, ["\n".join(f"- {note}" for note in notes), *said])]),
        extra_rows=[
            {"position": i, "token": t, "token_id": tid, "token_type": tt}
            for i, (t, tid, tt) in enumerate(
                zip(*(first[f] for f in ("tokens", "token_ids", "token_type_ids")), strict=True)
            )
        ],
    )


def _cosines(model, query: str, docs: list[str], prompts: dict) -> list[float]:
    """A bi-encoder's cosine of the query and each document, each text after its prompt."""
    q = model.encode([query], prompt=prompts["query"], normalize_embeddings=True)  # (1, dim)
    d = model.encode(docs, prompt=prompts["document"], normalize_embeddings=True)  # (docs, dim)
    return (d @ q[0]).tolist()


def _probabilities(models: AppModels, values: dict) -> tuple[dict[str, list[float] | None], list[str]]:
    """({probability field: calibrated probabilities or None}, how to read each: its fit and base rate)."""
    probabilities, notes = {}, []
    for kind in (k for k in RERANKERS.values() if k.pair_value == "score"):
        scores = values[kind.pair_column]
        calibration = getattr(models.rerankers.get(kind.name), "calibration", None)
        fitted = calibration.probabilities(scores).tolist() if calibration and scores else None
        probabilities[f"{kind.key}_probability"] = fitted
        if fitted is not None:
            rate, on = calibration.base_rate, calibration.fitted_on or "dev pairs"
            if rate is not None:
                on += f", {rate:.1%} of them relevant: read it against that rate, not against 50 %"
            notes.append(
                f"{short_name(kind)} P(rel): its raw score calibrated on {on}; the raw score is in the JSON."
            )
    return probabilities, notes


def _add_ranks(rows: list[dict], values: dict[str, list[float] | None], loaded: dict | None = None) -> None:
    """Each row's rank (from 1) by each score column, in place (None where it has no score)."""
    for key, (rank_key, _) in score_columns(loaded).items():
        scores = values.get(key)
        order = np.argsort(-np.asarray(scores, dtype=float), kind="stable") if scores else []
        ranks = {int(i): rank for rank, i in enumerate(order, 1)}
        for i, row in enumerate(rows):
            row[rank_key] = ranks.get(i)


def shown_names() -> dict[str, str]:
    """Field name → the page's short column name (the API keeps field names)."""
    names = {"bi_encoder_cosine": "cosine", "cosine_rank": "cos rank"}
    for kind in RERANKERS.values():
        names |= {kind.pair_column: kind.label, kind.rank_column: f"{short_name(kind)} rank"}
        if kind.pair_value == "score":
            names[f"{kind.key}_probability"] = f"{short_name(kind)} P(rel)"
    return names


def _chart(data: dict) -> tuple[list[str], dict[str, list]]:
    """(documents, {legend: values}) of the answer's chart, as both twins draw it."""
    return data["documents"], chart_columns(data["scores"], data.get("models"))


def after_scoring(out, data, png, models: AppModels):
    """The page's chart, downloads (the answer's PNG, else drawn here) and Explain choices (a private step)."""
    docs, columns = _chart(data)
    chart = figures.score_bars(docs, columns)
    # the page still offers the PNG: drawn here, outside the API call's round trip, when the call had none
    png = png or out.png(scores_figure(docs, columns), "pair-scores")
    files = exports(out, "pair-scores", data=data, rows=data["scores"], plots=[chart], files=[png])
    choices = [(f"{i}. {d[:60]}", i) for i, d in enumerate(docs, 1)]
    shown = shown_names()
    table = frame([{shown.get(k, k): v for k, v in row.items()} for row in data["scores"]], drop_empty=True)
    # shares of the box (ui.CSS): the document wraps in 520 px, a score or rank column is as wide as its header
    widths = shares(
        [{"doc": 56, "document": 520}.get(c, max(90, round(8.5 * len(c)) + 30)) for c in table.columns]
    )
    explain, pick = gr.update(choices=model_choices(models)), gr.update(choices=choices, value=1)
    return show(table, column_widths=widths), show(chart), show(files), show(), pick, explain


def build(ui: Ui) -> None:
    """The Pair scoring tab (inside an open gr.Tab): /score_pairs, from its button or a link, and Explain."""
    state, out = ui.state, ui.out
    presets = demo_presets()

    @guard
    def do_score_pairs(
        query, documents, models, png_figures, query_prompt, document_prompt, progress=PROGRESS
    ):
        ui.visitor()
        r = score_pairs(state, query, documents, models, query_prompt, document_prompt, steps(progress))
        # the PNG only on request (it costs as much as the scoring); after_scoring draws it for the page
        png = out.png(scores_figure(*_chart(r.data)), "pair-scores") if png_figures else None
        # the API's table keeps a column per model, loaded or not; after_scoring's leaves the empty ones out
        return frame(r.rows), png, r.text, frame(r.extra_rows), r.data

    @guard
    def do_explain_pair(query, documents, number, model, query_prompt, document_prompt):
        """The Explain panel's values for document ``number`` (1-based) of the typed ``documents``."""
        ui.visitor()
        docs = split_lines(documents, "documents", ui.config.max_documents, ui.config.max_text_chars)
        document = docs[check_int(number, "document number", 1, len(docs)) - 1]
        r = explain_tab.explain_pair(state, query, document, model, "", None, query_prompt, document_prompt)
        return explain_tab.panel_values(ui, r, "pair-explanation")

    def pick_row(evt: gr.SelectData):
        return (evt.row_value or [None])[0]  # the table's first column is the document number

    ui.tab_intro(
        "Score one query against a few documents with every loaded model side by side: the cross-encoder "
        "and CLS-LR re-rankers read query and document together, the bi-encoder compares their separate "
        "embeddings; *Also compare* adds any cross-encoder or bi-encoder by its Hub id. Click a row to see "
        "which words drove its scores."
    )
    pair_query = gr.Textbox(label="Query", value=presets["pair_query"])
    pair_docs = gr.Textbox(
        label="Documents (one per line)", lines=5, value="\n".join(presets["pair_documents"])
    )
    pair_models = gr.Textbox(
        label="Also compare (optional): Hub ids of cross-encoders or bi-encoders, comma-separated",
        value="",
        placeholder="e.g. cross-encoder/ms-marco-MiniLM-L6-v2, sentence-transformers/all-mpnet-base-v2"
        + (", or a model folder" if ui.config.allow_model_paths else ""),
        info=f"each loads on first use (downloaded when the Hub can be reached, else from this machine's cache) and "
        f"shows as its own column; at most {ui.config.max_extra_models} such models stay loaded "
        f"({ui.config.max_extra_mb:,.0f} MiB), the least recently used goes first",
        elem_id="pair-models",
    )
    # after the inputs older clients send by position; the prompts come after it (default when not sent)
    pair_png_wanted = ui.png_wanted()
    pair_prompts = prompt_boxes(
        ui, "pair", "; left as the bi-encoder's own, a bi-encoder compared by id keeps its own prompts"
    )
    pair_button = gr.Button("Score pairs", variant="primary", elem_id="score-pairs-button")
    pair_table = ui.table("pair-table", "Scores and ranks per model (click a row to explain it)", "wide")
    pair_plot = ui.plot("Scores per document (hover a bar)")
    pair_png = ui.returned("chart_png")  # None unless asked for; among the downloads
    with gr.Row(visible=False) as explain_row:
        pair_choice = gr.Dropdown([], label="Explain a document's scores", scale=3, min_width=220)
        explain_model = explain_with(ui.models, scale=2, min_width=220)
        explain_button = gr.Button(
            "Explain", scale=1, min_width=120, variant="primary", elem_id="explain-pair-button"
        )
    pair_files = ui.downloads("PNG, interactive HTML, CSV, JSON")
    link = links.offer("score_pairs", "pair-link")
    pair_formation = ui.summary("pair-summary", "pair_formation")
    with gr.Accordion("Tokens of document 1 as the cross-encoder reads them (ids, token types)", open=False):
        headers = frame([], ["position", "token", "token_id", "token_type"])
        pair_tokens = ui.table(label="pair_tokens", value=headers, show_label=False)
    pair_json = ui.numbers()
    explained = explain_tab.Panel("pair-explain")

    inputs = [pair_query, pair_docs, pair_models, pair_png_wanted, *pair_prompts]
    outputs = [pair_table, pair_png, pair_formation, pair_tokens, pair_json]
    drawn = [pair_table, pair_plot, pair_files, explain_row, pair_choice, explain_model]
    after = (lambda data, png: after_scoring(out, data, png, ui.models), [pair_json, pair_png], drawn)
    options = {"empty": [pair_formation], "hide": drawn[:4], "after": after}  # hidden until drawn
    events = [pair_button.click, link.run.change]  # a link runs it as the button does
    scored = ui.view_event(events, do_score_pairs, inputs, outputs, "score_pairs", **options)
    link.shows(scored)
    explain_inputs = [pair_query, pair_docs, pair_choice, explain_model, *pair_prompts]
    picked = pair_table.select(pick_row, None, [pair_choice], api_visibility="private")
    for event in (explain_button.click, picked.success):  # the button, or a click on a row
        explained.shows(event(do_explain_pair, explain_inputs, explained.outputs, api_visibility="private"))
