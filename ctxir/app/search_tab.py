"""Search tab: /search, /explain_result and the panels /what_moved, /compare_pooling, /upload_corpus."""

from __future__ import annotations

import hashlib
import html
import re
from pathlib import Path
from typing import Any

import gradio as gr

from ctxir.app import explain_tab, links, what_moved
from ctxir.app.config import Progress
from ctxir.app.corpus_index import Owner
from ctxir.app.models import check_layer, chosen_prompts, prompts_said
from ctxir.app.search import search
from ctxir.app.search_form import SearchForm, explain_with, model_choices, reranker_choices_now, wire_load
from ctxir.app.state import AppState, ViewResult
from ctxir.app.text import cls_warnings, md_code, plural, rounded, snippet, uploaded
from ctxir.app.ui import PRIVATE, PROGRESS, Ui, column_widths, frame, guard, show, steps, warn
from ctxir.checks import check_int, check_text
from ctxir.rerank.registry import RERANKERS
from ctxir.types import CtxirError

TRACKED = gr.Progress(track_tqdm=True)  # the encoders' tqdm bars shown as the event's progress


def results_table(rows: list[dict], first_stage: str) -> list[dict]:
    """The results as shown: no column that is empty."""
    reranked = any(r["rerank_rank"] is not None for r in rows)
    fused = any(r.get("fused_score") is not None for r in rows)
    rerank = ["rerank_score", *(["rerank_rank"] if fused else []), "rank_change"] if reranked else []
    order = ["rank", "doc_id", *(["fused_score"] if fused else []), *rerank, f"{first_stage}_score"]
    order += [*([f"{first_stage}_rank"] if reranked else []), "title", "text"]
    return [{key: row[key] for key in order if key in row} for row in rows]


def result_cards(hits: list[dict], first_stage: str) -> str:
    """The results as cards, the phone's view of the table."""
    cards = []
    for row in results_table(hits, first_stage):
        scores = " · ".join(
            f"{html.escape(name)} {value}"
            for name, value in row.items()
            if name not in ("rank", "doc_id", "title", "text") and value is not None
        )
        cards.append(
            f'<button type="button" class="ctxir-card" data-doc="{html.escape(str(row["doc_id"]))}">'
            f'<span class="ctxir-card-head"><span class="ctxir-card-title">{row["rank"]}. '
            f"{html.escape(row.get('title') or '')}</span> "
            f'<span class="ctxir-card-id">{html.escape(str(row["doc_id"]))}</span></span>'
            f'<span class="ctxir-card-scores">{scores}</span>'
            f'<span class="ctxir-card-text">{html.escape(row.get("text") or "")}</span></button>'
        )
    return '<div class="ctxir-cards">' + "".join(cards) + "</div>" if cards else ""


def build(ui: Ui) -> None:
    """The Search tab (inside an open gr.Tab): search, explain a result, what moved, compare pooling, upload."""
    ui.tab_intro(
        "Search a corpus with a question. The **first stage** finds candidates (BM25 matches words, dense "
        "matches meaning, hybrid fuses both); a **re-ranker** re-scores the best of them. Click a result to "
        "see which words made it match."
    )
    form = SearchForm(ui)
    explain_model = results(ui, form)
    what_moved.panel(ui, form)
    pooling_panel(ui, form)
    uploads_panel(ui, form)
    # a re-ranker loaded by id is offered to the search and to "Explain with" below its results
    wire_load(
        ui, form.other, form.load, [(form.reranker, reranker_choices_now), (explain_model, model_choices)]
    )
    # the example queries belong to the startup corpus: hidden while another corpus is chosen
    state = ui.state
    form.corpus.change(
        lambda name: gr.update(visible=bool(state.examples) and name == state.default_corpus),
        [form.corpus],
        [form.examples],
        **PRIVATE,
    )


def results(ui: Ui, form):
    """The results and their Explain action: /search and /explain_result; returns the "Explain with" radio."""
    state, out = ui.state, ui.out

    # numbers go to the logic as sent (no int()): it refuses 2.5 for k with a message instead of using 2
    @guard
    def do_search(
        query, corpus, first_stage, reranker, k, depth, mode, query_prompt, document_prompt, progress=PROGRESS
    ):
        if reranker not in ("none", *RERANKERS):  # a Hub id: loaded now, with progress, before the search
            state.models.reranker(reranker, progress=steps(progress))
        owner = ui.visitor()
        r = search(
            state, query, corpus, first_stage, reranker, k, depth, owner, mode, query_prompt, document_prompt
        )
        # API clients get every column; after_search redraws the page's without the empty and repeated ones
        return frame(r.rows), r.text, r.data

    def after_search(data):
        hits = (data or {}).get("hits") or []
        choices = [
            (f"{h['rank']}. {h['title'] or h['text'][:50]} ({h['doc_id']})", h["doc_id"]) for h in hits
        ]
        shown = results_table(hits, data["first_stage"]) if hits else []
        csv = out.csv(hits, "search-results") if hits else None  # the CSV keeps every column, like the JSON
        widths = column_widths(list(shown[0]) if shown else [], share=True)
        return (
            show(frame(shown, ["(no results)"]), column_widths=widths),
            show(csv),
            show(),
            gr.update(choices=choices, value=choices[0][1] if choices else None),
            result_cards(hits, data["first_stage"]),
            gr.update(choices=model_choices(ui.models)),  # with a cross-encoder the search loaded by id
        )

    @guard
    def do_explain_result(query, corpus, doc_id, model, reranker, query_prompt, document_prompt):
        owner = ui.visitor()
        r = explain_tab.explain_result(
            state, query, corpus, doc_id, model, owner, reranker, query_prompt, document_prompt
        )
        return explain_tab.panel_values(ui, r, "search-explanation")

    def pick_card(evt: gr.EventData):
        # card_click's data: the tapped card's document id (a tap between cards sends none)
        doc_id = getattr(evt, "doc_id", None)
        if not doc_id:
            raise gr.Error("tap a result's card to explain it", print_exception=False)
        return doc_id

    def pick_row(evt: gr.SelectData):
        # the table's second column is doc_id (row_value: the row as shown, whatever order the table is sorted in)
        return (evt.row_value or [None, None])[1]

    summary = ui.summary("search-summary")
    results = ui.table("search-results", "Results (click a row to explain it)", max_height=560)
    # tapping a card sends its document id to Python as the click event's data (see cards.click)
    card_click = (
        "element.addEventListener('click', (event) => { const card = event.target.closest('[data-doc]'); "
        "if (card) { trigger('click', {doc_id: card.dataset.doc}); } });"
    )
    cards = gr.HTML("", elem_id="search-cards", js_on_load=card_click)
    link = links.offer("search", "search-link")
    with gr.Row(visible=False) as explain_row:
        choice = gr.Dropdown(  # API: any doc id
            [],
            label="Explain a result",
            scale=3,
            min_width=220,
            allow_custom_value=True,
            elem_id="explain-result-choice",
        )
        explain_model = explain_with(ui.models, scale=2, min_width=220)
        with gr.Column(scale=1, min_width=140):
            explain_button = gr.Button("Explain", variant="primary", elem_id="explain-result-button")
            csv_button = gr.DownloadButton(
                "Download results (CSV)", visible=False, size="sm", elem_id="search-csv"
            )
    json = ui.numbers()
    explained = explain_tab.Panel("search-explain")

    after = (after_search, [json], [results, csv_button, explain_row, choice, cards, explain_model])
    # a link to a search runs it as the button does; Enter in the query box, privately
    for triggers, api in (([form.button.click, link.run.change], "search"), ([form.query.submit], None)):
        searched = ui.view_event(
            triggers,
            do_search,
            [*form.inputs, form.mode, *form.prompts],
            [results, summary, json],
            api,
            empty=[summary, cards],
            hide=[results, explain_row],
            after=after,
            after_queue=False,
        )
        link.shows(searched)
    # the search's re-ranker ("auto" explains a result with the model that ranked it) and prompts
    inputs = [form.query, form.corpus, choice, explain_model, form.reranker, *form.prompts]
    explained.shows(
        explain_button.click(do_explain_result, inputs, explained.outputs, api_name="explain_result")
    )
    for picked, pick in ((results.select, pick_row), (cards.click, pick_card)):
        explained.shows(
            picked(pick, None, [choice], api_visibility="private").success(
                do_explain_result, inputs, explained.outputs, api_visibility="private"
            )
        )
    return explain_model


def compare_pooling(
    state: AppState,
    query: str,
    corpus: str | None = None,
    layer: int = -1,
    k: int = 10,
    progress: Progress | None = None,
    owner: Owner = None,
    query_prompt: str | None = None,
    document_prompt: str | None = None,
) -> ViewResult:
    """The same query through mean- and CLS-pooled embeddings of one layer: two rankings side by side."""
    query = check_text(query, "query", state.config.max_query_chars)
    layer = check_layer(layer, state.models.num_layers)
    k = check_int(k, "k", 1, state.config.max_k)
    index = state.index(corpus, owner)
    if len(index.corpus) > state.config.max_compare_docs:
        raise CtxirError(
            f"compare pooling re-encodes the whole corpus per pooling and layer; {index.name!r} has "
            f"{len(index.corpus):,} documents, above this app's limit of "
            f"{state.config.max_compare_docs:,}: use a smaller corpus"
        )
    prompts = chosen_prompts(index.prompts, query_prompt, document_prompt, state.config.max_query_chars)
    step = progress or (lambda *_: None)
    rankings = {}
    for i, pooling in enumerate(("mean", "cls")):
        step(
            0.1 + 0.4 * i,
            f"{pooling} pooling at layer {layer}: encoding the corpus (cached after the first time)",
        )
        rankings[pooling] = index.pooled(pooling, layer, prompts).query(query, k)
    step(1.0, "done")
    rows = []
    for rank in range(k):
        row: dict[str, Any] = {"rank": rank + 1}
        for pooling, hits in rankings.items():
            hit = hits[rank] if rank < len(hits) else None
            row[f"{pooling}_doc_id"] = hit and hit.doc_id
            row[f"{pooling}_title"] = hit and index.corpus[hit.doc_id].get("title", "")
            row[f"{pooling}_score"] = hit and rounded(hit.score)
        rows.append(row)
    overlap = len({h.doc_id for h in rankings["mean"]} & {h.doc_id for h in rankings["cls"]})
    warnings = cls_warnings("cls", layer, "the CLS ranking is in no particular order (every document ties)")
    scores = {
        p: [{"doc_id": h.doc_id, "score": rounded(h.score)} for h in hits] for p, hits in rankings.items()
    }
    data = {
        "query": query,
        "corpus": index.name,
        "layer": layer,
        "k": k,
        "overlap": overlap,
        "prompts": prompts,
    }
    data |= {"rankings": scores, "warnings": warnings}
    text = (
        f"Layer {layer}{' (embeddings)' if layer == 0 else ''}: mean and CLS pooling share {overlap} of their "
        f"top {k}.{pooling_note(state.models.bi_encoder, state.models.bi_encoder_name)}"
    )
    text = "\n\n".join([*(f"⚠️ {w}" for w in warnings), text, *filter(None, [prompts_said(prompts)])])
    return ViewResult(rows=rows, data=data, text=text)


def pooling_note(model, name: str) -> str:
    """What the loaded bi-encoder itself pools with (its Pooling module's mode)."""
    native = next((m.pooling_mode for m in model if isinstance(getattr(m, "pooling_mode", None), str)), None)
    if native is None:
        return ""
    return f" {name} pools with {native} pooling" + (
        ": CLS is its own pooling." if native == "cls" else ", so its CLS vector was never tuned for search."
    )


def pooling_table(rows: list[dict]) -> list[dict]:
    """Compare pooling as three narrow columns: rank, the mean-pooled hit, the CLS-pooled hit (title · score)."""

    def cell(row, pooling):
        if not isinstance(row[f"{pooling}_doc_id"], str):  # no hit at this rank (None, or NaN from the table)
            return ""
        return f"{row[f'{pooling}_title'] or row[f'{pooling}_doc_id']} · {row[f'{pooling}_score']:.3f}"

    return [{"rank": r["rank"], "mean pooling": cell(r, "mean"), "CLS pooling": cell(r, "cls")} for r in rows]


def pooling_panel(ui: Ui, form: SearchForm) -> None:
    n_layers = ui.models.num_layers
    with gr.Accordion(
        "Compare pooling: the same query through mean- and CLS-pooled embeddings of any layer", open=False
    ):
        with gr.Row():
            layer = gr.Slider(
                0, n_layers, value=n_layers, step=1, label="layer (0 = embeddings, last = model output)"
            )
            k = gr.Number(10, step=1, label=f"k (1–{ui.config.max_k})")
        button = gr.Button("Compare pooling", elem_id="pool-button")
        summary = ui.summary("pool-summary")
        rankings = ui.table("pool-table", "rankings", show_label=False)
        json = ui.numbers()
    state = ui.state

    @guard
    def do_compare_pooling(query, corpus, layer, k, query_prompt, document_prompt, progress=TRACKED):
        owner = ui.visitor()
        r = compare_pooling(
            state, query, corpus, layer, k, steps(progress), owner, query_prompt, document_prompt
        )
        warn(r)
        return frame(r.rows), r.text, r.data  # the API's table: one column per field (see after_pooling)

    def after_pooling(rankings):
        # the page shows the two rankings as three narrow columns (shares of the box: both fit a phone too)
        return show(frame(pooling_table(rankings.to_dict("records"))), column_widths=["18%", "41%", "41%"])

    ui.view_event(
        button.click,
        do_compare_pooling,
        [form.query, form.corpus, layer, k, *form.prompts],
        [rankings, summary, json],
        "compare_pooling",
        empty=[summary],
        after=(after_pooling, [rankings], [rankings]),
        after_queue=False,
    )


def upload_corpus(
    state: AppState, path: str | Path | None, progress: Progress | None = None, owner: Owner = None
) -> ViewResult:
    """Index a user's corpus file (.txt/.jsonl/.csv/.tsv) for ``owner``."""
    from ctxir.data.user_corpus import USER_CORPUS_SUFFIXES, load_user_corpus

    if not path:
        raise CtxirError(f"no file was uploaded: choose a corpus file ({', '.join(USER_CORPUS_SUFFIXES)})")
    path = uploaded(path, state.config.max_upload_mb, "accepts corpus files", "upload a smaller sample")
    raw = path.read_bytes()
    nul = raw.find(b"\x00")
    if nul >= 0:
        line = raw.count(b"\n", 0, nul) + 1
        raise CtxirError(
            f"{path.name} contains a NUL byte (line {line}, byte offset {nul}): "
            "it is a binary file or UTF-16 text, not a UTF-8 text corpus. Save it as UTF-8 text "
            "(.txt/.jsonl/.csv/.tsv) and upload it again"
        )
    corpus = load_user_corpus(path)
    for doc_id, doc in corpus.items():
        if any("\x00" in str(doc.get(key, "")) for key in ("title", "text")) or "\x00" in str(doc_id):
            raise CtxirError(
                f"{path.name}: document {str(doc_id).replace(chr(0), '')!r} contains a NUL character "
                "(\\u0000 in JSON): remove it and upload the file again"
            )
    if len(corpus) > state.config.max_upload_docs:
        raise CtxirError(
            f"{path.name} has {len(corpus):,} documents; this app indexes at most "
            f"{state.config.max_upload_docs:,} uploaded documents on its CPU: upload a sample, or start "
            "the app on the full corpus with --corpus PATH"
        )
    digest = hashlib.sha256(raw).hexdigest()[:8]
    stem = re.sub(r"[^\w.-]+", "_", path.stem)[:40].strip("._") or "upload"
    name = f"{stem}-{digest}"
    state.uploads.check_room(owner, name)  # refuse before minutes of encoding, not after
    # cache=None: an upload's vectors live in memory with its index and go with it, never in the user cache
    index = state.new_index(name, corpus, f"upload {path.name}", progress, None)
    dropped = state.uploads.add(index, owner)
    rows = [
        {"doc_id": doc_id, "title": doc.get("title", ""), "text": snippet(doc.get("text", ""))}
        for doc_id, doc in list(corpus.items())[:10]
    ]
    data = {"corpus": name, "documents": len(corpus), "file": path.name, "sample": rows, "dropped": dropped}
    text = (
        f"Indexed **{plural(len(corpus), 'document')}** from {md_code(path.name)} as corpus {md_code(name)} "
        "(visible only to you, for this session)."
    )
    if dropped:
        text += (
            f" Your older upload(s) {', '.join(md_code(n) for n in dropped)} were removed: each visitor keeps "
            f"at most {state.config.max_corpora}."
        )
    return ViewResult(rows=rows, data=data, text=text)


def uploads_panel(ui: Ui, form: SearchForm) -> None:
    cfg = ui.config
    with gr.Accordion("Upload your own corpus (.txt, .jsonl, .csv, .tsv)", open=False):
        gr.Markdown(
            '.txt = one document per line · .jsonl = `{"id", "title", "text"}` per line · '
            ".csv/.tsv = a header row with a `text` column (optional `id`, `title`). "
            f"At most {cfg.max_upload_docs:,} documents and {cfg.max_upload_mb:g} MB; only you see it, "
            "for this session."
        )
        file = gr.File(
            label="Corpus file", file_types=[".txt", ".jsonl", ".csv", ".tsv"], elem_id="upload-file"
        )
        button = gr.Button("Index this corpus", elem_id="upload-button")
        summary = ui.summary("upload-summary")
        sample = ui.table("upload-table", "First documents", "fit")
        json = ui.numbers()
    state = ui.state

    @guard
    def do_upload(file, progress=TRACKED):
        owner = ui.visitor()
        if not owner:
            raise CtxirError(
                "this request has no Gradio session, and an upload is kept per session: upload from "
                "the web page or with gradio_client (each Client is one session)"
            )
        r = upload_corpus(state, file, progress=steps(progress), owner=owner)
        return r.text, frame(r.rows), r.data

    def refresh_corpora(data):
        # A separate, private step: API users of /upload_corpus get the corpus name in the JSON, not a UI update.
        return gr.update(
            choices=state.corpus_names_for(ui.visitor()),
            value=(data or {}).get("corpus", state.default_corpus),
        ), show()

    ui.view_event(
        button.click,
        do_upload,
        [file],
        [summary, sample, json],
        "upload_corpus",
        empty=[summary],
        hide=[sample],
        after=(refresh_corpora, [json], [form.corpus, sample]),
    )
