"""/search's logic: a query through a first stage and an optional re-ranker, each stage's score and rank."""

from __future__ import annotations

import time

from ctxir.app.corpus_index import Owner
from ctxir.app.models import chosen_prompts, prompts_said
from ctxir.app.state import AppState, ViewResult
from ctxir.app.text import md_code, plural, rounded, snippet
from ctxir.checks import check_choice, check_int, check_text
from ctxir.rerank.registry import DEFAULT_RERANK_MODE, RERANK_MODES, RERANKERS, search_rerankers
from ctxir.retrieval.registry import DEFAULT_FIRST_STAGE, get_first_stage
from ctxir.types import CtxirError


# the /search inputs one to one, in the endpoint's order (clients call it positionally), plus state and owner
def search(
    state: AppState,
    query: str,
    corpus: str | None = None,
    first_stage: str = DEFAULT_FIRST_STAGE,
    reranker: str = "none",
    k: int = 10,
    depth: int | None = None,
    owner: Owner = None,
    mode: str = DEFAULT_RERANK_MODE,
    query_prompt: str | None = None,
    document_prompt: str | None = None,
    *,
    every_candidate: bool = False,
) -> ViewResult:
    """First stage (+ optional re-ranker) over a corpus ``owner`` may see; each stage's score."""
    from ctxir.rerank.pipeline import Pipeline, mode_fusion

    cfg = state.config
    query = check_text(query, "query", cfg.max_query_chars)
    k = check_int(k, "k", 1, cfg.max_rerank_depth if every_candidate else cfg.max_k)
    depth = check_int(cfg.rerank_depth if depth is None else depth, "re-rank depth", 1, cfg.max_rerank_depth)
    check_choice(mode, "re-rank mode", RERANK_MODES)
    index = state.index(corpus, owner)
    prompts = None  # the prompts the first stage's bi-encoder puts before the query and the documents
    if get_first_stage(first_stage).uses_bi_encoder:
        prompts = chosen_prompts(index.prompts, query_prompt, document_prompt, cfg.max_query_chars)
        if prompts["document"] != index.prompts["document"] and len(index.corpus) > cfg.max_compare_docs:
            raise CtxirError(
                f"document prompt {document_prompt!r} would encode all {len(index.corpus):,} documents of corpus "
                f"{index.name!r} again, above this app's limit of {cfg.max_compare_docs:,}: leave it as "
                f"the bi-encoder's own ({index.prompts['document']!r}), or search a smaller corpus"
            )
    if reranker in RERANKERS and RERANKERS[reranker].scores != "relevance":
        raise CtxirError(
            f"the {reranker} re-ranker scores how alike two texts are ({RERANKERS[reranker].label}), not whether a "
            "document answers a query: compare texts with it in Pair scoring, and re-rank a search with one of "
            f"{', '.join(map(repr, search_rerankers(RERANKERS)))}"
        )
    ranker = state.models.reranker(reranker)
    if mode == "alone" and getattr(ranker, "fused_only", None):
        raise CtxirError(
            f"the {reranker} re-ranker is offered fused with the first stage only: {ranker.fused_only}. "
            "Use re-rank mode 'fused' (the default), or another re-ranker to rank alone"
        )
    depth = max(depth, k)  # the re-ranker re-scores at least the k shown
    fusion = mode_fusion(ranker, mode, first_stage)
    pipeline = Pipeline(index.retriever(first_stage, prompts), ranker, depth=depth, fusion=fusion)
    started = time.perf_counter()
    result = pipeline.search(query, k)
    timings = {name: round(ms, 2) for name, ms in result.timings_ms.items()}
    timings["total"] = round((time.perf_counter() - started) * 1000, 2)
    # scores and ranks first: what each stage did stays in view beside the (wide) text column
    rows = [
        {
            "rank": hit.rank,
            "doc_id": hit.doc_id,
            f"{first_stage}_score": rounded(hit.first_stage_score),
            f"{first_stage}_rank": hit.first_stage_rank,
            "rerank_score": rounded(hit.rerank_score),
            "rerank_rank": hit.rerank_rank,
            "fused_score": rounded(hit.score) if fusion is not None else None,
            "rank_change": hit.rank_change if hit.rerank_rank is not None else None,
            "title": index.corpus[hit.doc_id].get("title", ""),
            "text": snippet(index.corpus[hit.doc_id].get("text", "")),
        }
        for hit in result.hits
    ]
    used = reranker != "none"
    data = {"query": query, "corpus": index.name, "first_stage": first_stage, "reranker": reranker, "k": k}
    data |= {"depth": depth if used else None, "mode": mode if used else None, "prompts": prompts}
    data |= {"fusion": fusion.record() if fusion is not None else None, "timings_ms": timings, "hits": rows}
    lines = [
        f"**{plural(len(rows), 'result')}** from {md_code(index.name)} ({plural(len(index.corpus), 'document')}) · "
        + " · ".join(f"{name}: {ms:.1f} ms" for name, ms in timings.items())
    ]
    if used:
        moved = sum(1 for r in rows if r["rank_change"])
        how = (
            f"; the order fuses it with the {first_stage} ranking ({fusion.describe()}; "
            f"{fusion.chosen_on or 'settings given'})"
            if fusion is not None
            else "; the order is the re-ranker's alone"
        )
        lines.append(
            f"The {reranker} re-scored the first stage's top {depth}{how}. {moved} of the shown "
            "results changed rank (`rank_change` > 0 = moved up)."
        )
    text = "\n\n".join([*lines, *filter(None, [prompts_said(prompts)])])
    return ViewResult(rows=rows, data=data, text=text)
