"""Compare pooling (/compare_pooling, a Search tab panel): one query, mean- and CLS-pooled, side by side."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import gradio as gr
import pandas as pd

from ctxir.app.config import Progress
from ctxir.app.corpus_index import Owner
from ctxir.app.models import check_layer, chosen_prompts, prompts_said
from ctxir.app.state import AppState, ViewResult
from ctxir.app.text import cls_warnings, rounded
from ctxir.app.ui import Ui, frame, guard, numbers, show, steps, view_event, warn
from ctxir.checks import check_int, check_text
from ctxir.types import CtxirError

if TYPE_CHECKING:
    from ctxir.app.search_form import SearchForm


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
            row[f"{pooling}_doc_id"] = hit.doc_id if hit else None
            row[f"{pooling}_title"] = index.corpus[hit.doc_id].get("title", "") if hit else None
            row[f"{pooling}_score"] = rounded(hit.score) if hit else None
        rows.append(row)
    overlap = len({h.doc_id for h in rankings["mean"]} & {h.doc_id for h in rankings["cls"]})
    data = {
        "query": query,
        "corpus": index.name,
        "layer": layer,
        "k": k,
        "overlap": overlap,
        "prompts": prompts,
        "rankings": {
            p: [{"doc_id": h.doc_id, "score": rounded(h.score)} for h in hits] for p, hits in rankings.items()
        },
    }
    text = (
        f"Layer {layer}{' (embeddings)' if layer == 0 else ''}: mean and CLS pooling share {overlap} of their "
        f"top {k}.{pooling_note(state.models.bi_encoder, state.models.bi_encoder_name)}"
    )
    warnings = cls_warnings("cls", layer, "the CLS ranking is in no particular order (every document ties)")
    data["warnings"] = warnings
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
        if row[f"{pooling}_doc_id"] is None:
            return ""
        return f"{row[f'{pooling}_title'] or row[f'{pooling}_doc_id']} · {row[f'{pooling}_score']:.3f}"

    return [{"rank": r["rank"], "mean pooling": cell(r, "mean"), "CLS pooling": cell(r, "cls")} for r in rows]


def panel(ui: Ui, form: SearchForm) -> None:
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
        summary = gr.Markdown(elem_id="pool-summary")
        table = gr.Dataframe(wrap=True, elem_classes=["ctxir-table"], visible=False, elem_id="pool-table")
        json = numbers()
    state = ui.state

    @guard
    def do_compare_pooling(
        query,
        corpus,
        layer,
        k,
        query_prompt,
        document_prompt,
        request: gr.Request,
        progress=gr.Progress(track_tqdm=True),  # noqa: B008 (gradio's pattern)
    ):
        owner = ui.visitor(request)
        r = compare_pooling(
            state, query, corpus, layer, k, steps(progress), owner, query_prompt, document_prompt
        )
        warn(r)
        return frame(r.rows), r.text, r.data  # the API's table: one column per field (see after_pooling)

    def after_pooling(table):
        # the page shows the two rankings as three narrow columns, so the CLS side fits beside the mean side
        rows = [
            {key: (None if pd.isna(value) else value) for key, value in row.items()}
            for row in table.to_dict("records")
        ]
        # shares of the box, not pixels: both sides fit a phone's width too, each wrapping its titles
        return show(frame(pooling_table(rows)), column_widths=["18%", "41%", "41%"])

    view_event(
        button.click,
        do_compare_pooling,
        [form.query, form.corpus, layer, k, form.query_prompt, form.document_prompt],
        [table, summary, json],
        "compare_pooling",
        empty=[summary],
        after=(after_pooling, [table], [table]),
        after_queue=False,
    )
