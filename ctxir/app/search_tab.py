"""Search tab: the query form, its results (/search, /explain_result) and its three panels, in page order."""

from __future__ import annotations

import html

import gradio as gr

from ctxir.app import explain_tab, links, pooling, uploads, what_moved
from ctxir.app.search import search
from ctxir.app.search_form import explain_with, model_choices, reranker_choices_now, search_form, wire_load
from ctxir.app.ui import PRIVATE, Ui, column_widths, frame, guard, numbers, show, steps, tab_intro, view_event
from ctxir.rerank.registry import RERANKERS


def results_table(rows: list[dict], first_stage: str) -> list[dict]:
    """The results as shown: no column that is empty."""
    reranked = any(r["rerank_rank"] is not None for r in rows)
    fused = any(r.get("fused_score") is not None for r in rows)
    drop = ({"rerank_rank"} if not fused else set()) | (
        {"rerank_score", "rank_change", f"{first_stage}_rank"} if not reranked else set()
    )
    order = [
        "rank",
        "doc_id",
        *(["fused_score"] if fused else []),
        *(["rerank_score", "rerank_rank", "rank_change"] if reranked else []),
        f"{first_stage}_score",
        f"{first_stage}_rank",
        "title",
        "text",
    ]
    return [{key: row[key] for key in order if key in row and key not in drop} for row in rows]


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


# tapping a card sends its document id to Python as the click event's data (see cards.click)
CARD_CLICK = (
    "element.addEventListener('click', (event) => { const card = event.target.closest('[data-doc]'); "
    "if (card) { trigger('click', {doc_id: card.dataset.doc}); } });"
)


# build() lays out and wires each part in page order, which the API's endpoints and Gradio's ids follow


def build(ui: Ui) -> None:
    """The Search tab (inside an open gr.Tab): search, explain a result, what moved, compare pooling, upload."""
    tab_intro(
        "Search a corpus with a question. The **first stage** finds candidates (BM25 matches words, dense "
        "matches meaning, hybrid fuses both); a **re-ranker** re-scores the best of them. Click a result to "
        "see which words made it match."
    )
    form = search_form(ui)
    explain_model = results(ui, form)
    for part in (what_moved, pooling, uploads):
        part.panel(ui, form)
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
        query,
        corpus,
        first_stage,
        reranker,
        k,
        depth,
        mode,
        query_prompt,
        document_prompt,
        request: gr.Request,
        progress=gr.Progress(),  # noqa: B008 (gradio's pattern)
    ):
        if reranker not in ("none", *RERANKERS):  # a Hub id: loaded now, with progress, before the search
            state.models.reranker(reranker, progress=steps(progress))
        owner = ui.visitor(request)
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
    def do_explain_result(
        query, corpus, doc_id, model, reranker, query_prompt, document_prompt, request: gr.Request
    ):
        owner = ui.visitor(request)
        r = explain_tab.explain_result(
            state, query, corpus, doc_id, model, owner, reranker, query_prompt, document_prompt
        )
        return explain_tab.panel_values(ui, r, "search-explanation")

    def pick_card(evt: gr.EventData):
        # CARD_CLICK's data: the tapped card's document id (a tap between cards sends none: nothing to explain)
        doc_id = getattr(evt, "doc_id", None)
        if not doc_id:
            raise gr.Error("tap a result's card to explain it", print_exception=False)
        return doc_id

    def pick_row(evt: gr.SelectData):
        # the table's second column is doc_id (row_value: the row as shown, whatever order the table is sorted in)
        return (evt.row_value or [None, None])[1]

    summary = gr.Markdown(elem_id="search-summary")
    table = gr.Dataframe(
        label="Results (click a row to explain it)",
        wrap=True,
        elem_id="search-results",
        elem_classes=["ctxir-table"],
        visible=False,
        max_height=560,
    )
    # a phone shows the results as cards instead of the table (ui.CSS)
    cards = gr.HTML("", elem_id="search-cards", js_on_load=CARD_CLICK)
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
    json = numbers()
    explained = explain_tab.panel("search-explain")

    after = (after_search, [json], [table, csv_button, explain_row, choice, cards, explain_model])
    # a link to a search runs it as the button does; Enter in the query box, privately
    for triggers, api in (([form.button.click, link.run.change], "search"), ([form.query.submit], None)):
        searched = view_event(
            triggers,
            do_search,
            [*form.inputs, form.mode, form.query_prompt, form.document_prompt],
            [table, summary, json],
            api,
            empty=[summary, cards],
            hide=[table, explain_row],
            after=after,
            after_queue=False,
        )
        link.shows(searched)
    # the search's re-ranker ("auto" explains a result with the model that ranked it) and prompts
    inputs = [
        form.query,
        form.corpus,
        choice,
        explain_model,
        form.reranker,
        form.query_prompt,
        form.document_prompt,
    ]
    explained.shows(
        explain_button.click(do_explain_result, inputs, explained.outputs, api_name="explain_result")
    )
    for picked, pick in ((table.select, pick_row), (cards.click, pick_card)):
        explained.shows(
            picked(pick, None, [choice], api_visibility="private").success(
                do_explain_result, inputs, explained.outputs, api_visibility="private"
            )
        )
    return explain_model
