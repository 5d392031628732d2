"""What moved (/what_moved, a Search tab panel): the documents a re-ranker moved most, and why."""

from __future__ import annotations

from typing import TYPE_CHECKING

import gradio as gr

from ctxir.app import explain_tab, figures
from ctxir.app.corpus_index import Owner
from ctxir.app.models import prompts_said
from ctxir.app.search import search
from ctxir.app.state import AppState, ViewResult
from ctxir.app.text import md_code
from ctxir.app.ui import Ui, column_widths, exports, frame, guard, show
from ctxir.checks import check_int
from ctxir.explain.rerankers import explainer_for
from ctxir.rerank.registry import (
    CROSS_ENCODER,
    DEFAULT_RERANK_MODE,
    DEFAULT_RERANKER,
    RERANKERS,
    reranker_choices,
)
from ctxir.rerank.stage_fusion import orders_ties_only
from ctxir.retrieval.registry import DEFAULT_FIRST_STAGE
from ctxir.types import CtxirError, doc_text

if TYPE_CHECKING:
    from ctxir.app.search_form import SearchForm

# the what-moved table (what_moved's rows) before its two word columns, drove_it and against_it
MOVED_COLUMNS = ["move", "doc_id", "title", "first_rank", "rank", "rerank_rank", "words"]


def what_moved(
    state: AppState,
    query: str,
    corpus: str | None = None,
    first_stage: str = DEFAULT_FIRST_STAGE,
    reranker: str = DEFAULT_RERANKER,
    k: int = 10,
    depth: int | None = None,
    n: int = 3,
    owner: Owner = None,
    mode: str = DEFAULT_RERANK_MODE,
    query_prompt: str | None = None,
    document_prompt: str | None = None,
) -> ViewResult:
    """The re-ranked documents whose rank changed most, each explained by the re-ranker's integrated gradients."""
    cfg, models = state.config, state.models
    if reranker not in reranker_choices() and not models.loadable(reranker):
        models.reranker(reranker)  # refused, saying what a re-ranker may be
    if reranker == "none":  # nothing to compare
        offered = " or ".join(map(repr, models.loaded))
        raise CtxirError(
            "'what moved' compares the first stage's ranking with a re-ranker's: choose re-ranker "
            + (offered or "... — none is loaded in this app (the line at the top of the page says why)")
        )
    n = check_int(n, "documents to explain", 1, cfg.max_movers)
    k = check_int(k, "k", 1, cfg.max_k)
    depth = check_int(cfg.rerank_depth if depth is None else depth, "re-rank depth", 1, cfg.max_rerank_depth)
    depth = max(k, depth)
    # a row for every candidate the re-ranker re-scored, not only the k a search shows: one can move up from below
    prompts = (query_prompt, document_prompt)
    ranked = search(
        state, query, corpus, first_stage, reranker, depth, depth, owner, mode, *prompts, every_candidate=True
    )
    query, index, first_rank = ranked.data["query"], state.index(corpus, owner), f"{first_stage}_rank"
    # the rows whose rank changed, the biggest move first (ties: the better final rank first)
    movers = sorted(
        (r for r in ranked.rows if r["rank_change"]), key=lambda r: (-abs(r["rank_change"]), r["rank"])
    )
    # a name outside the registry is a cross-encoder loaded by its Hub id (AppModels.reranker loads no other kind)
    ranker = models.reranker(reranker)
    explain_one = explainer_for(RERANKERS.get(reranker, RERANKERS[CROSS_ENCODER.name]))
    rows, details, steps = [], [], {"n_steps": cfg.explain_steps, "max_steps": cfg.explain_max_steps}
    for row in movers[:n]:
        doc = index.corpus[row["doc_id"]]
        e = explain_one(ranker, query, doc_text(doc), attention=False, title=doc.get("title") or "", **steps)
        words = explain_tab.words(e["tokens"], e["attributions"], e["sentence_b_start"] or 0)
        words = [(w, round(v, 6)) for w, v in words]
        ups = sorted((w for w in words if w[1] > 0), key=lambda w: -w[1])[:5]
        downs = sorted((w for w in words if w[1] < 0), key=lambda w: w[1])[:5]
        change = row["rank_change"]
        drove, against = (ups, downs) if change > 0 else (downs, ups)
        rows.append(
            {
                "move": f"{'↑' if change > 0 else '↓'}{abs(change)}",
                "doc_id": row["doc_id"],
                "title": row["title"],
                "first_rank": row[first_rank],
                "rank": row["rank"],
                "rerank_rank": row["rerank_rank"],
                "drove_it": explain_tab.listing(drove),
                "against_it": explain_tab.listing(against),
            }
        )
        details.append(
            {
                "doc_id": row["doc_id"],
                "rank_change": change,
                "first_stage_rank": row[first_rank],
                "rank": row["rank"],
                "rerank_rank": row["rerank_rank"],
                "rerank_score": row["rerank_score"],
                "pushed_up_by": [{"word": w, "attribution": v} for w, v in ups],
                "pulled_down_by": [{"word": w, "attribution": v} for w, v in downs],
                "explanation": explain_tab.compact(e),
            }
        )
    fused = ranked.data["mode"] == "fused"
    fusion = ranked.data["fusion"]
    ties_only = fused and orders_ties_only(fusion["method"], fusion["weights"])
    text = _summary(query, first_stage, reranker, depth, len(movers), len(rows), fused, ties_only)
    text = "\n\n".join(filter(None, [text, prompts_said(ranked.data["prompts"])]))
    lines = [
        {
            "title": r["title"] or r["doc_id"],
            "doc_id": r["doc_id"],
            "first": r[first_rank],
            "rerank": r["rank"],
        }
        for r in ranked.rows
    ]
    shown = f"{reranker} (fused)" if fused else reranker
    slope = figures.rank_moves(lines, {r["doc_id"] for r in rows}, first_stage=first_stage, reranker=shown)
    data = {
        "query": query,
        "corpus": index.name,
        "first_stage": first_stage,
        "reranker": reranker,
        "mode": ranked.data["mode"],
        "fusion": fusion,
        "prompts": ranked.data["prompts"],
        "candidates": depth,
        "moved": len(movers),
        "movers": details,
    }
    return ViewResult(rows=rows, data=data, text=text, plots={"moves": slope})


def _summary(
    query: str,
    first_stage: str,
    reranker: str,
    candidates: int,
    moved: int,
    explained: int,
    fused: bool,
    ties_only: bool,
) -> str:
    """The Markdown above the plot: what was re-ranked, how many candidates moved, and how to read the table.
    ``ties_only``: the fused mode keeps the first stage's order and the re-ranker orders only its ties."""
    text = (
        f"The {reranker} re-scored the {first_stage} top {candidates} for {md_code(query)}"
        + (f", fused with the {first_stage} ranking" if fused else "")
        + (
            f" (this fused mode keeps the {first_stage} order and lets the re-ranker order only its ties: on dev "
            "queries every larger say for the re-ranker lost somewhere)"
            if ties_only
            else ""
        )
        + f": {moved} of them changed rank"
        + (" (`rank` is the fused rank, `rerank_rank` the re-ranker's own). " if fused else ". ")
    )
    if explained:
        return text + (
            f"The {explained} that moved most, with the document words whose attribution raised (↑) or "
            "lowered (↓) their re-ranker score most: **drove it** is the direction they moved."
        )
    if ties_only:
        return text + (
            "Nothing moved: no tie among them changed order. Mode 'alone' ranks by the re-ranker's own scores "
            "(`rerank_rank`)."
        )
    return text + "Nothing moved: the re-ranker kept the first stage's order."


def panel(ui: Ui, form: SearchForm) -> None:
    """The What moved accordion below the results, and /what_moved."""
    state, out, cfg = ui.state, ui.out, ui.config

    @guard
    def do_what_moved(query, corpus, first_stage, reranker, k, depth, n, mode, query_prompt, document_prompt):
        searched = (query, corpus, first_stage, reranker, k, depth, n)
        r = what_moved(state, *searched, ui.visitor(), mode, query_prompt, document_prompt)
        files = exports(out, "what-moved", data=r.data, rows=r.rows, plots=[r.plots["moves"]])
        return r.text, r.plots["moves"], frame(r.rows), files, r.data

    def after_moved():
        # the two word columns share the room the others leave and wrap there, instead of running off the edge
        widths = column_widths(MOVED_COLUMNS, wide="words")
        words = f"{max(260, int(widths[-1][:-2]) // 2)}px"
        return show(), show(column_widths=[*widths[:-1], words, words]), show()

    with gr.Accordion(
        "What moved: the documents a re-ranker moved most, and the words that drove it", open=False
    ):
        with gr.Row():
            label = "documents to explain (one integrated-gradients run each)"
            n = gr.Slider(1, cfg.max_movers, value=min(3, cfg.max_movers), step=1, label=label, scale=3)
            button = gr.Button("What moved?", elem_id="what-moved-button", scale=1)
        summary = ui.summary("what-moved-summary")
        moves = ui.plot("Rank before and after re-ranking (hover a line)")
        movers = ui.table("what-moved-table", "movers", "fit", show_label=False)
        files = ui.downloads("CSV, JSON, interactive HTML")
        json = ui.numbers()
    inputs, outputs = [*form.inputs, n, form.mode, *form.prompts], [summary, moves, movers, files, json]
    shown = dict(empty=[summary], after=(after_moved, None, [moves, movers, files]), after_queue=False)
    ui.view_event(button.click, do_what_moved, inputs, outputs, "what_moved", **shown)
