"""Search tab: a query through a first stage (BM25, dense, hybrid) and an optional re-ranker over the public corpus
or the visitor's own upload; mean vs CLS pooling on the same query; uploading a corpus.
"""

from __future__ import annotations

import hashlib
import html
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gradio as gr
import pandas as pd

from ctxir.app import explain_tab, figures
from ctxir.app.config import Progress
from ctxir.app.corpus_index import CorpusIndex
from ctxir.app.models import AppModels
from ctxir.app.state import AppState, ViewResult
from ctxir.app.text import cls_warnings, md_code, plural, rounded, snippet
from ctxir.app.ui import Ui, exports, frame, gpu, guard, shares, show, tab_intro, warn
from ctxir.app.upload_store import Owner
from ctxir.checks import check_choice, check_int, check_text
from ctxir.rerank.pipeline import FIRST_STAGES
from ctxir.rerank.registry import DEFAULT_RERANK_MODE, RERANK_MODES, RERANKERS, reranker_choices
from ctxir.types import CtxirError, doc_text


# search and what_moved take the /search and /what_moved inputs one to one, in the endpoints' order (the API's
# contract, which tests and old clients call positionally), plus the state and the owner: more than 8 parameters
# on purpose; a dataclass would only repackage the same endpoint inputs.
def search(
    state: AppState,
    query: str,
    corpus: str | None = None,
    first_stage: str = "dense",
    reranker: str = "none",
    k: int = 10,
    depth: int | None = None,
    owner: Owner = None,
    mode: str = DEFAULT_RERANK_MODE,
    *,
    every_candidate: bool = False,
) -> ViewResult:
    """First stage (+ optional re-ranker) over a corpus ``owner`` may see; each stage's score, rank and the rank
    change. ``k`` is at most ``max_k`` (``every_candidate``: up to ``max_rerank_depth``, for "what moved", which
    ranks every candidate the re-ranker re-scored). ``mode`` "fused" (default): the final order fuses the re-ranker with the first stage (the re-ranker's
    fusion.json, else RRF k=60 with equal weights; ``fused_score``), so a weak re-ranker cannot push results far
    below the first stage; "alone": the re-ranker's order."""
    from ctxir.rerank.pipeline import Pipeline, mode_fusion

    query = check_text(query, "query", state.config.max_query_chars)
    cfg = state.config
    k = check_int(k, "k", 1, cfg.max_rerank_depth if every_candidate else cfg.max_k)
    depth = check_int(
        depth if depth is not None else cfg.rerank_depth, "re-rank depth", 1, cfg.max_rerank_depth
    )
    check_choice(mode, "re-rank mode", RERANK_MODES)
    index = state.index(corpus, owner)
    ranker = state.models.reranker(reranker)
    if mode == "alone" and getattr(ranker, "fused_only", None):
        raise CtxirError(
            f"the {reranker} re-ranker is offered fused with the first stage only: {ranker.fused_only}. "
            "Use re-rank mode 'fused' (the default), or another re-ranker to rank alone"
        )
    fusion = mode_fusion(ranker, mode, first_stage)
    pipeline = Pipeline(index.retriever(first_stage), ranker, depth=max(depth, k), fusion=fusion)
    started = time.perf_counter()
    result = pipeline.search(query, k)
    total = (time.perf_counter() - started) * 1000
    rows = []
    for hit in result.hits:
        doc = index.corpus[hit.doc_id]
        # Scores and ranks first: what each stage did stays in view beside the (wide) text column.
        rows.append(
            {
                "rank": hit.rank,
                "doc_id": hit.doc_id,
                f"{first_stage}_score": rounded(hit.first_stage_score),
                f"{first_stage}_rank": hit.first_stage_rank,
                "rerank_score": rounded(hit.rerank_score),
                "rerank_rank": hit.rerank_rank,
                "fused_score": rounded(hit.score) if fusion is not None else None,
                "rank_change": hit.rank_change if hit.rerank_rank is not None else None,
                "title": doc.get("title", ""),
                "text": snippet(doc.get("text", "")),
            }
        )
    timings = {name: round(ms, 2) for name, ms in result.timings_ms.items()}
    timings["total"] = round(total, 2)
    lines = [
        f"**{plural(len(rows), 'result')}** from {md_code(index.name)} ({plural(len(index.corpus), 'document')}) · "
        + " · ".join(f"{name}: {ms:.1f} ms" for name, ms in timings.items())
    ]
    if reranker != "none":
        moved = sum(1 for r in rows if r["rank_change"])
        how = (
            f"; the order fuses it with the {first_stage} ranking ({fusion.describe()}; "
            f"{fusion.chosen_on or 'settings given'})"
            if fusion is not None
            else "; the order is the re-ranker's alone"
        )
        lines.append(
            f"The {reranker} re-scored the first stage's top {max(depth, k)}{how}. {moved} of the shown "
            "results changed rank (`rank_change` > 0 = moved up)."
        )
    data = {
        "query": query,
        "corpus": index.name,
        "first_stage": first_stage,
        "reranker": reranker,
        "k": k,
        "depth": max(depth, k) if reranker != "none" else None,
        "mode": mode if reranker != "none" else None,
        "fusion": fusion.record() if fusion is not None else None,
        "timings_ms": timings,
        "hits": rows,
    }
    return ViewResult(rows=rows, data=data, text="\n\n".join(lines))


def compare_pooling(
    state: AppState,
    query: str,
    corpus: str | None = None,
    layer: int = -1,
    k: int = 10,
    progress: Progress | None = None,
    owner: Owner = None,
) -> ViewResult:
    """The same query through mean- and CLS-pooled embeddings of one layer: two rankings side by side."""
    query = check_text(query, "query", state.config.max_query_chars)
    n_layers = state.models.num_layers
    layer = check_int(layer, "layer", -1, n_layers)
    layer = n_layers if layer == -1 else layer
    k = check_int(k, "k", 1, state.config.max_k)
    index = state.index(corpus, owner)
    if len(index.corpus) > state.config.max_compare_docs:
        raise CtxirError(
            f"compare pooling re-encodes the whole corpus per pooling and layer; {index.name!r} has "
            f"{len(index.corpus):,} documents, above this app's limit of "
            f"{state.config.max_compare_docs:,}: use a smaller corpus"
        )
    step = progress or (lambda *_: None)
    rankings = {}
    for i, pooling in enumerate(("mean", "cls")):
        step(
            0.1 + 0.4 * i,
            f"{pooling} pooling at layer {layer}: encoding the corpus (cached after the first time)",
        )
        rankings[pooling] = index.pooled(pooling, layer).query(query, k)
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
    mean_ids = {h.doc_id for h in rankings["mean"]}
    cls_ids = {h.doc_id for h in rankings["cls"]}
    overlap = len(mean_ids & cls_ids)
    data = {
        "query": query,
        "corpus": index.name,
        "layer": layer,
        "k": k,
        "overlap": overlap,
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
    text = "\n\n".join([*(f"⚠️ {w}" for w in warnings), text])
    return ViewResult(rows=rows, data=data, text=text)


def pooling_note(model, name: str) -> str:
    """What the loaded bi-encoder itself pools with (its Pooling module's mode), for compare pooling's caption: a
    fact about this model, not a claim about one particular model; "" when the model names no pooling."""
    native = next((m.pooling_mode for m in model if isinstance(getattr(m, "pooling_mode", None), str)), None)
    if native is None:
        return ""
    return f" {name} pools with {native} pooling" + (
        ": CLS is its own pooling." if native == "cls" else ", so its CLS vector was never tuned for search."
    )


def upload_corpus(
    state: AppState, path: str | Path | None, progress: Progress | None = None, owner: Owner = None
) -> ViewResult:
    """Index a user's corpus file (.txt/.jsonl/.csv/.tsv) for ``owner`` (only they can choose it, by the returned
    name). Its embeddings stay in memory, never in the persistent cache."""
    from ctxir.data.loaders import USER_CORPUS_SUFFIXES, load_user_corpus

    if not path:
        raise CtxirError(f"no file was uploaded: choose a corpus file ({', '.join(USER_CORPUS_SUFFIXES)})")
    path = Path(path)
    if not path.is_file():
        raise CtxirError(f"uploaded file {str(path)!r} was not found on the server: upload it again")
    size_mb = path.stat().st_size / 2**20
    if size_mb > state.config.max_upload_mb:
        raise CtxirError(
            f"{path.name} is {size_mb:.1f} MB; this app accepts corpus files up to "
            f"{state.config.max_upload_mb:g} MB: upload a smaller sample"
        )
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
    index = CorpusIndex(
        name,
        corpus,
        state.models.bi_encoder,
        f"upload {path.name}",
        progress,
        None,
        state.models.bi_encoder_name,
    )
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


# ---------------------------------------------------------------- shown in the page


def results_table(rows: list[dict], first_stage: str) -> list[dict]:
    """The results as shown: no column that is empty (re-ranker columns without a re-ranker, the fused score when
    the re-ranker ranks alone) or repeats ``rank`` (the first stage's rank without a re-ranker, the re-ranker's rank
    when it ranks alone)."""
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


def what_moved(
    state: AppState,
    query: str,
    corpus: str | None = None,
    first_stage: str = "dense",
    reranker: str = "cross-encoder",
    k: int = 10,
    depth: int | None = None,
    n: int = 3,
    owner: Owner = None,
    mode: str = DEFAULT_RERANK_MODE,
) -> ViewResult:
    """The re-ranked documents whose rank changed most (among every candidate the re-ranker re-scored: the first
    stage's top max(k, depth)), each with the document words whose integrated-gradients attribution pushed its
    re-ranker score up most and pulled it down most. ``mode`` as in ``search``: a move is from the first stage's
    rank to the final one (fused with the first stage, or the re-ranker's alone)."""
    cfg = state.config
    check_choice(reranker, "re-ranker", reranker_choices())
    if reranker == "none":
        offered = state.models.loaded
        raise CtxirError(
            "'what moved' compares the first stage's ranking with a re-ranker's: choose re-ranker "
            + (
                " or ".join(map(repr, offered))
                if offered
                else "... — none is loaded in this app (the line at the top of the page says why)"
            )
        )
    n = check_int(n, "documents to explain", 1, cfg.max_movers)
    k = check_int(k, "k", 1, cfg.max_k)
    depth = check_int(
        depth if depth is not None else cfg.rerank_depth, "re-rank depth", 1, cfg.max_rerank_depth
    )
    candidates = max(k, depth)
    ranked = search(
        state,
        query,
        corpus,
        first_stage,
        reranker,
        candidates,
        candidates,
        owner=owner,
        mode=mode,
        every_candidate=True,
    )
    query = ranked.data["query"]
    index = state.index(corpus, owner)
    first_rank = f"{first_stage}_rank"
    movers = sorted(
        (r for r in ranked.rows if r["rank_change"]), key=lambda r: (-abs(r["rank_change"]), r["rank"])
    )
    rows, details = explain_moves(state, reranker, query, index.corpus, movers[:n], first_rank)
    moved = len(movers)
    fused = ranked.data["mode"] == "fused"
    text = (
        f"The {reranker} re-scored the {first_stage} top {candidates} for {md_code(query)}"
        + (f", fused with the {first_stage} ranking" if fused else "")
        + f": {moved} of them changed rank"
        + (" (`rank` is the fused rank, `rerank_rank` the re-ranker's own). " if fused else ". ")
    )
    if rows:
        text += (
            f"The {len(rows)} that moved most, with the document words whose attribution raised (↑) or "
            "lowered (↓) their re-ranker score most: **drove it** is the direction they moved."
        )
    else:
        text += "Nothing moved: the re-ranker kept the first stage's order."
    slope = figures.rank_moves(
        [
            {
                "title": r["title"] or r["doc_id"],
                "doc_id": r["doc_id"],
                "first": r[first_rank],
                "rerank": r["rank"],
            }
            for r in ranked.rows
        ],
        highlight={r["doc_id"] for r in rows},
        first_stage=first_stage,
        reranker=f"{reranker} (fused)" if fused else reranker,
    )
    data = {
        "query": query,
        "corpus": index.name,
        "first_stage": first_stage,
        "reranker": reranker,
        "mode": ranked.data["mode"],
        "fusion": ranked.data["fusion"],
        "candidates": candidates,
        "moved": moved,
        "movers": details,
    }
    return ViewResult(rows=rows, data=data, text=text, plots={"moves": slope})


def explain_moves(
    state: AppState, reranker: str, query: str, corpus, movers: list[dict], first_rank: str
) -> tuple[list[dict], list[dict]]:
    """Each mover explained by the re-ranker (integrated gradients): (the table's rows, the JSON's details), with
    the five document words that pushed its score up most and the five that pulled it down most."""
    cfg = state.config
    ranker, explain_one = state.models.reranker(reranker), RERANKERS[reranker].explain
    rows, details = [], []
    for row in movers:
        doc = corpus[row["doc_id"]]
        e = explain_one(
            ranker,
            query,
            doc_text(doc),
            n_steps=cfg.explain_steps,
            max_steps=cfg.explain_max_steps,
            attention=False,
            title=doc.get("title") or "",
        )
        doc_words = explain_tab.words(e["tokens"], e["attributions"], e["sentence_b_start"] or 0)
        ups = sorted((w for w in doc_words if w[1] > 0), key=lambda w: -w[1])[:5]
        downs = sorted((w for w in doc_words if w[1] < 0), key=lambda w: w[1])[:5]
        change = row["rank_change"]
        rows.append(
            {
                "move": f"{'↑' if change > 0 else '↓'}{abs(change)}",
                "doc_id": row["doc_id"],
                "title": row["title"],
                "first_rank": row[first_rank],
                "rank": row["rank"],
                "rerank_rank": row["rerank_rank"],
                "drove_it": explain_tab.listing(ups if change > 0 else downs),
                "against_it": explain_tab.listing(downs if change > 0 else ups),
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
                "pushed_up_by": [{"word": w, "attribution": round(v, 6)} for w, v in ups],
                "pulled_down_by": [{"word": w, "attribution": round(v, 6)} for w, v in downs],
                "explanation": explain_tab.compact(e),
            }
        )
    return rows, details


WIDTHS = {"rank": 60, "move": 70, "doc_id": 120, "title": 170}
# the what-moved table (what_moved's rows) before its two word columns, drove_it and against_it
MOVED_COLUMNS = [
    "move",
    "doc_id",
    "title",
    "first_rank",
    "rank",
    "rerank_rank",
    "words",
]  # px; a score or rank column fits its header, the text the rest


def reranker_info(models: AppModels) -> str:
    """The re-ranker choice's note: the kinds this app could not load (not offered), or '' when all are."""
    missing = [kind.label for name, kind in RERANKERS.items() if name not in models.rerankers]
    return f"not loaded: {', '.join(missing)} (the top of the page says why)" if missing else ""


def header_width(name: str) -> int:
    return max(80, round(8.5 * len(name)) + 30)


def column_widths(
    columns: list[str], total: int = 1180, wide: str = "text", share: bool = False
) -> list[str]:
    """Pixel widths that fit a laptop's page (about 1,200 px) with the ``wide`` column wrapping in what is left; a
    phone scrolls the table sideways inside its box, the page itself stays on screen. A score or rank column is as
    wide as its header in the table's bold monospace font (about 8.5 px a character, plus padding and sort icon).
    ``share``: the same proportions as percentages of the box, so the table fills a wider screen too."""
    fixed = {c: WIDTHS.get(c, header_width(c)) for c in columns if c != wide}
    text = max(340, total - sum(fixed.values()))
    pixels = [fixed.get(c, text) for c in columns]
    return shares(pixels) if share else [f"{w}px" for w in pixels]


def result_cards(hits: list[dict], first_stage: str) -> str:
    """The results as cards, the phone's view of the table (``ui.CSS`` shows one or the other by screen width):
    rank, title and id, the scores on one line, the text wrapped below. Every text from the corpus is escaped (an
    upload's titles and text are a visitor's); tapping a card explains it, like clicking a table row."""
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


def pooling_table(rows: list[dict]) -> list[dict]:
    """Compare pooling as three narrow columns: rank, the mean-pooled hit, the CLS-pooled hit (title · score)."""

    def cell(row, pooling):
        if row[f"{pooling}_doc_id"] is None:
            return ""
        return f"{row[f'{pooling}_title'] or row[f'{pooling}_doc_id']} · {row[f'{pooling}_score']:.3f}"

    return [{"rank": r["rank"], "mean pooling": cell(r, "mean"), "CLS pooling": cell(r, "cls")} for r in rows]


# ---------------------------------------------------------------- UI


# The tab is built in named steps: each ``*_panel`` lays out one part of the page (inside the open gr.Tab) and
# returns its components; each ``wire_*`` binds one feature's events. build() calls them in page order, so the
# components and the events keep the order they always had (the API's endpoints and Gradio's ids follow it).


@dataclass
class SearchForm:
    """The query and the choices every search feature reads."""

    query: Any
    corpus: Any
    first_stage: Any
    reranker: Any
    mode: Any
    k: Any
    depth: Any
    button: Any
    examples: Any  # the column of example queries, shown for the startup corpus only

    @property
    def inputs(self) -> list:
        # /search's inputs: mode goes last, after these, so that old API clients may leave it out
        return [self.query, self.corpus, self.first_stage, self.reranker, self.k, self.depth]


@dataclass
class ResultsPanel:
    summary: Any
    table: Any
    cards: Any  # a phone's view of the table
    explain_row: Any
    choice: Any  # the result to explain
    explain_model: Any
    explain_button: Any
    csv_button: Any
    json: Any
    explained: explain_tab.Panel


@dataclass
class MovedPanel:
    n: Any
    button: Any
    summary: Any
    plot: Any
    table: Any
    files: Any
    json: Any


@dataclass
class PoolingPanel:
    layer: Any
    k: Any
    button: Any
    summary: Any
    table: Any
    json: Any


@dataclass
class UploadPanel:
    file: Any
    button: Any
    summary: Any
    table: Any
    json: Any


def build(ui: Ui) -> None:
    """The Search tab (inside an open gr.Tab): search, explain a result, what moved, compare pooling, upload;
    events /search, /explain_result, /what_moved, /compare_pooling, /upload_corpus."""
    tab_intro(
        "Search a corpus with a question. The **first stage** finds candidates (BM25 matches words, dense "
        "matches meaning, hybrid fuses both); a **re-ranker** re-scores the best of them. Click a result to "
        "see which words made it match."
    )
    form = search_form(ui)
    results = results_panel(ui)
    moved = moved_panel(ui)
    pooling = pooling_panel(ui)
    upload = upload_panel(ui)
    wire_search(ui, form, results)
    wire_explain(ui, form, results)
    wire_what_moved(ui, form, moved)
    wire_pooling(ui, form, pooling)
    wire_upload(ui, form, upload)
    # the example queries belong to the startup corpus: hidden while another corpus is chosen
    state = ui.state
    form.corpus.change(
        lambda name: gr.update(visible=bool(state.examples) and name == state.default_corpus),
        [form.corpus],
        [form.examples],
        queue=False,
        api_visibility="private",
    )


def search_form(ui: Ui) -> SearchForm:
    state, cfg = ui.state, ui.config
    with gr.Row(equal_height=True):
        query = gr.Textbox(
            label="Query",
            value=state.examples[0] if state.examples else "",
            scale=4,
            min_width=240,
            placeholder="type a question, e.g. how do bats find insects at night",
            elem_id="search-query",
        )
        corpus = gr.Dropdown(
            state.public_names,
            value=state.default_corpus,
            label="Corpus",
            allow_custom_value=True,
            scale=1,
            min_width=160,
        )
    with gr.Row():
        first_stage = gr.Radio(list(FIRST_STAGES), value="dense", label="First stage", min_width=200)
        # only the re-rankers loaded in this app are offered; the info line names the others and the top of the
        # page says why they are missing
        reranker = explain_tab.refuse_unloaded(
            gr.Radio(
                ["none", *ui.models.loaded],
                value="none",
                label="Re-ranker",
                min_width=200,
                elem_id="search-reranker",
                info=reranker_info(ui.models),
            ),
            ui.models,
        )
        mode = gr.Radio(
            [("fused with the first stage", "fused"), ("re-ranker only", "alone")],
            value=DEFAULT_RERANK_MODE,
            label="Re-rank mode",
            min_width=200,
            elem_id="search-rerank-mode",
            info="fused: a weak re-ranker cannot push results far below the first stage",
        )
        # numbers, not sliders (a slider's box quietly clamps a typed 80 to its maximum), and unbounded here: the
        # view checks the range with the limit in the label and says what is wrong, to the page and API alike
        k = gr.Number(
            10, step=1, label=f"k (1–{cfg.max_k})", info="results shown", min_width=140, elem_id="search-k"
        )
        depth = gr.Number(
            cfg.rerank_depth,
            step=1,
            label=f"depth (1–{cfg.max_rerank_depth})",
            info="candidates re-ranked",
            min_width=140,
            elem_id="search-depth",
        )
    button = gr.Button("Search", variant="primary", elem_id="search-button")
    with gr.Column(visible=bool(state.examples)) as examples:
        if state.examples:
            # a choice that fills the query box, not gr.Examples, which cuts each query at 60 characters
            # ("… from washing aw...") however wide the page is
            example_pick = gr.Radio(
                list(state.examples),
                value=None,
                elem_id="search-examples",
                label=f"Example queries for {state.default_corpus} (click one to use it)",
            )

            def pick_example(evt: gr.SelectData):
                return evt.value

            example_pick.select(pick_example, None, [query], queue=False, api_visibility="private")
    return SearchForm(query, corpus, first_stage, reranker, mode, k, depth, button, examples)


def results_panel(ui: Ui) -> ResultsPanel:
    summary = gr.Markdown(elem_id="search-summary")
    table = gr.Dataframe(
        label="Results (click a row to explain it)",
        wrap=True,
        elem_id="search-results",
        elem_classes=["ctxir-table"],
        visible=False,
        max_height=560,
    )
    # a phone shows the results as cards instead of the table (ui.CSS): every title and text in view, no sideways
    # scrolling; a desktop shows the table
    cards = gr.HTML("", elem_id="search-cards", js_on_load=CARD_CLICK)
    with gr.Row(visible=False) as explain_row:
        choice = gr.Dropdown(
            [],
            label="Explain a result",
            scale=3,
            min_width=220,
            allow_custom_value=True,
            elem_id="explain-result-choice",
        )  # API: any doc id
        explain_model = explain_tab.refuse_unloaded(
            gr.Radio(
                explain_tab.model_choices(ui.models),
                value="auto",
                label="Explain with",
                scale=2,
                min_width=220,
            ),
            ui.models,
        )
        with gr.Column(scale=1, min_width=140):
            explain_button = gr.Button("Explain", variant="primary", elem_id="explain-result-button")
            csv_button = gr.DownloadButton(
                "Download results (CSV)", visible=False, size="sm", elem_id="search-csv"
            )
    with gr.Accordion("Numbers (JSON)", open=False):
        json = gr.JSON()
    explained = explain_tab.panel("search-explain")
    return ResultsPanel(
        summary, table, cards, explain_row, choice, explain_model, explain_button, csv_button, json, explained
    )


def moved_panel(ui: Ui) -> MovedPanel:
    cfg = ui.config
    with gr.Accordion(
        "What moved: the documents a re-ranker moved most, and the words that drove it", open=False
    ):
        with gr.Row():
            n = gr.Slider(
                1,
                cfg.max_movers,
                value=min(3, cfg.max_movers),
                step=1,
                label="documents to explain (one integrated-gradients run each)",
                scale=3,
            )
            button = gr.Button("What moved?", elem_id="what-moved-button", scale=1)
        summary = gr.Markdown(elem_id="what-moved-summary")
        plot = gr.Plot(label="Rank before and after re-ranking (hover a line)", visible=False)
        table = gr.Dataframe(wrap=True, elem_classes=["ctxir-table"], visible=False)
        files = gr.File(label="Download: CSV, JSON, interactive HTML", file_count="multiple", visible=False)
        with gr.Accordion("Numbers (JSON)", open=False):
            json = gr.JSON()
    return MovedPanel(n, button, summary, plot, table, files, json)


def pooling_panel(ui: Ui) -> PoolingPanel:
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
        with gr.Accordion("Numbers (JSON)", open=False):
            json = gr.JSON()
    return PoolingPanel(layer, k, button, summary, table, json)


def upload_panel(ui: Ui) -> UploadPanel:
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
        summary = gr.Markdown(elem_id="upload-summary")
        table = gr.Dataframe(label="First documents", wrap=True, elem_classes=["ctxir-table"], visible=False)
        with gr.Accordion("Numbers (JSON)", open=False):
            json = gr.JSON()
    return UploadPanel(file, button, summary, table, json)


# Numbers go to the logic as sent (no int()): it refuses 2.5 for k with a message instead of using 2.


def wire_search(ui: Ui, form: SearchForm, results: ResultsPanel) -> None:
    """/search from the button (and, privately, from Enter in the query box), the page redrawn after it."""
    state, out = ui.state, ui.out

    @guard
    @gpu
    def do_search(query, corpus, first_stage, reranker, k, depth, mode, request: gr.Request):
        r = search(
            state, query, corpus, first_stage, reranker, k, depth, owner=ui.visitor(request), mode=mode
        )
        # API clients get every column, always the same ones (their data contract); the page's table is redrawn
        # by after_search without the empty and repeated ones
        return frame(r.rows), r.text, r.data

    def after_search(data):
        hits = (data or {}).get("hits") or []
        choices = [
            (f"{h['rank']}. {h['title'] or h['text'][:50]} ({h['doc_id']})", h["doc_id"]) for h in hits
        ]
        shown = results_table(hits, data["first_stage"]) if hits else []
        csv = out.csv(hits, "search-results") if hits else None  # the CSV keeps every column, like the JSON
        return (
            show(
                frame(shown, ["(no results)"]),
                column_widths=column_widths(list(shown[0]) if shown else [], share=True),
            ),
            show(csv),
            show(),
            gr.update(choices=choices, value=choices[0][1] if choices else None),
            result_cards(hits, data["first_stage"]),
        )

    def before():
        # a new request clears the last answer first: no stale "10 results" above an error
        return "", gr.update(visible=False), gr.update(visible=False), ""

    outputs = [results.table, results.summary, results.json]
    for trigger, api in (
        (form.button.click, {"api_name": "search"}),
        (form.query.submit, {"api_visibility": "private"}),
    ):
        trigger(
            before,
            None,
            [results.summary, results.table, results.explain_row, results.cards],
            queue=False,
            api_visibility="private",
        ).then(do_search, [*form.inputs, form.mode], outputs, **api).success(
            after_search,
            [results.json],
            [results.table, results.csv_button, results.explain_row, results.choice, results.cards],
            queue=False,
            api_visibility="private",
        )


def wire_explain(ui: Ui, form: SearchForm, results: ResultsPanel) -> None:
    """/explain_result from the button; privately, from a click on a table row or a tap on a card."""
    state = ui.state

    @guard
    @gpu
    def do_explain_result(query, corpus, doc_id, model, request: gr.Request):
        r = explain_tab.explain_result(state, query, corpus, doc_id, model, owner=ui.visitor(request))
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

    explained = results.explained
    inputs = [form.query, form.corpus, results.choice, results.explain_model]
    explained.shows(
        results.explain_button.click(do_explain_result, inputs, explained.outputs, api_name="explain_result")
    )
    explained.shows(
        results.table.select(pick_row, None, [results.choice], api_visibility="private").success(
            do_explain_result, inputs, explained.outputs, api_visibility="private"
        )
    )
    explained.shows(
        results.cards.click(pick_card, None, [results.choice], api_visibility="private").success(
            do_explain_result, inputs, explained.outputs, api_visibility="private"
        )
    )


def wire_what_moved(ui: Ui, form: SearchForm, moved: MovedPanel) -> None:
    state, out = ui.state, ui.out

    # Gradio passes each input as its own argument: the parameters are the event's inputs, in their order.
    @guard
    @gpu
    def do_what_moved(query, corpus, first_stage, reranker, k, depth, n, mode, request: gr.Request):
        r = what_moved(
            state, query, corpus, first_stage, reranker, k, depth, n, owner=ui.visitor(request), mode=mode
        )
        files = exports(out, "what-moved", data=r.data, rows=r.rows, plots=[r.plots["moves"]])
        return r.text, r.plots["moves"], frame(r.rows), files, r.data

    def after_moved():
        # the two word columns share the room the others leave and wrap there, instead of running off the edge
        widths = column_widths(MOVED_COLUMNS, wide="words")
        words = f"{max(260, int(widths[-1][:-2]) // 2)}px"
        return show(), show(column_widths=[*widths[:-1], words, words]), show()

    moved.button.click(lambda: "", None, [moved.summary], queue=False, api_visibility="private").then(
        do_what_moved,
        [*form.inputs, moved.n, form.mode],
        [moved.summary, moved.plot, moved.table, moved.files, moved.json],
        api_name="what_moved",
    ).success(
        after_moved, None, [moved.plot, moved.table, moved.files], queue=False, api_visibility="private"
    )


def wire_pooling(ui: Ui, form: SearchForm, pooling: PoolingPanel) -> None:
    state = ui.state

    @guard
    @gpu
    def do_compare_pooling(
        query,
        corpus,
        layer,
        k,
        request: gr.Request,
        progress=gr.Progress(track_tqdm=True),  # noqa: B008 (gradio's pattern)
    ):
        r = compare_pooling(
            state,
            query,
            corpus,
            layer,
            k,
            progress=lambda f, d: progress(f, desc=d),
            owner=ui.visitor(request),
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

    pooling.button.click(lambda: "", None, [pooling.summary], queue=False, api_visibility="private").then(
        do_compare_pooling,
        [form.query, form.corpus, pooling.layer, pooling.k],
        [pooling.table, pooling.summary, pooling.json],
        api_name="compare_pooling",
    ).success(after_pooling, [pooling.table], [pooling.table], queue=False, api_visibility="private")


def wire_upload(ui: Ui, form: SearchForm, upload: UploadPanel) -> None:
    state = ui.state

    @guard
    @gpu
    def do_upload(file, request: gr.Request, progress=gr.Progress(track_tqdm=True)):  # noqa: B008 (gradio's pattern)
        owner = ui.visitor(request)
        if not owner:
            raise CtxirError(
                "this request has no Gradio session, and an upload is kept per session: upload from "
                "the web page or with gradio_client (each Client is one session)"
            )
        r = upload_corpus(state, file, progress=lambda f, d: progress(f, desc=d), owner=owner)
        return r.text, frame(r.rows), r.data

    def refresh_corpora(data, request: gr.Request):
        # A separate, private step: API users of /upload_corpus get the corpus name in the JSON, not a UI update.
        return gr.update(
            choices=state.corpus_names_for(ui.visitor(request)),
            value=(data or {}).get("corpus", state.default_corpus),
        ), show()

    # a new upload first clears the last one's message: a failure never sits beside an old "Indexed …"
    upload.button.click(
        lambda: ("", gr.update(visible=False)),
        None,
        [upload.summary, upload.table],
        queue=False,
        api_visibility="private",
    ).then(
        do_upload, [upload.file], [upload.summary, upload.table, upload.json], api_name="upload_corpus"
    ).success(refresh_corpora, [upload.json], [form.corpus, upload.table], api_visibility="private")
