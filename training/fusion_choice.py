"""The dev queries a re-ranker's settings are chosen on, and the grid that chooses its fused mode (read by
``ctxir.rerank.stage_fusion.StageFusion``); used by ``training.evaluate_reranker`` and ``training.calibrate``."""

from __future__ import annotations

from pathlib import Path

from ctxir.files import read_json
from ctxir.types import CtxirError, Hit
from training.common import data_folder, take, untrained_questions

FUSION_K = 60
# the first stage's weight against the re-ranker's 1; at 8 : 1 the re-ranker only breaks the first stage's near-ties
FIRST_STAGE_WEIGHTS = (0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 4.0, 8.0)
FUSION_RULES = ("mean", "worst-part")


def heldout_claims(source: Path, data_dir: str) -> tuple[dict, dict, dict, dict]:
    """(corpus, queries, qrels) of the held-out SciFact training claims ``source``'s metrics.json names, and it."""
    from ctxir.data import load_beir

    metrics = read_json(source / "metrics.json")
    dev = list((metrics.get("extra") or {}).get("heldout_query_ids") or [])
    if not dev:
        raise CtxirError(
            f"{str(source / 'metrics.json')!r} names no held-out training claims (extra.heldout_query_ids): "
            "train with --dev-queries N so the choice is made on claims the model did not train on, or pass "
            "--dev-from the folder of the model whose held-out claims this one also never trained on (a CLS-LR "
            "ranker: its cross-encoder's)"
        )
    corpus, queries, qrels = load_beir(data_folder(data_dir, "scifact"), "train")
    return corpus, {q: queries[q] for q in dev}, {q: qrels[q] for q in dev}, metrics


def stage_runs(first: dict[str, list[Hit]], scored: dict, depth: int, fusion) -> dict[str, dict]:
    """{"first_stage", "alone", "fused": run} over each query's top ``depth`` of ``first``, each scored in its own
    order (``evaluate_run``'s listed ties): the first stage's tied hits as the app shows them."""
    from ctxir.types import run_from_hits

    runs = {"first_stage": {}, "alone": {}, "fused": {}}
    for q, hits in first.items():
        top = hits[:depth]
        alone = sorted((Hit(h.doc_id, scored[q][h.doc_id]) for h in top), key=lambda h: (-h.score, h.doc_id))
        runs["first_stage"][q], runs["alone"][q], runs["fused"][q] = top, alone, fusion.fuse(top, alone)
    return {name: run_from_hits(hits) for name, hits in runs.items()}


def dev_ndcg(qrels: dict, run: dict, parts: dict | None = None) -> float:
    """nDCG@10 of ``run``: the mean over the dev ``parts`` ({name: (corpus, queries, qrels)}) of each part's own
    mean, so a part with more queries does not outvote the others; all queries pooled without parts.

    >>> qrels = {"a1": {"d": 1}, "a2": {"d": 1}, "b1": {"e": 1}}
    >>> run = {"a1": {"d": 1.0}, "a2": {"d": 1.0}, "b1": {"x": 1.0}}
    >>> round(dev_ndcg(qrels, run), 4), dev_ndcg(qrels, run, {"a": (None, {"a1": "", "a2": ""}, None),
    ...                                                      "b": (None, {"b1": ""}, None)})
    (0.6667, 0.5)
    """
    from ctxir.evaluation import evaluate_run

    groups = [list(part[1]) for part in parts.values()] if parts else [list(qrels)]
    return sum(
        float(evaluate_run({q: qrels[q] for q in ids}, {q: run.get(q, {}) for q in ids}).aggregate["nDCG@10"])
        for ids in groups
    ) / len(groups)


def fusion_grid(
    qrels: dict,
    first: dict[str, list[Hit]],
    scored: dict,
    depth: int,
    min_gain: float = 0.0,
    parts: dict | None = None,
    rule: str = "mean",
    max_loss: float = -1.0,
) -> dict:
    """{"method", "weights", "dev": the chosen row, "grid": every row} over RRF at FIRST_STAGE_WEIGHTS and
    ``TIE_BREAK_WEIGHT``, picked by ``rule`` (mean or worst-part), then
    ``min_gain`` (else RRF's largest weight) and ``max_loss`` (else the next larger weight that holds)."""
    from ctxir.rerank.pipeline import StageFusion
    from ctxir.rerank.stage_fusion import TIE_BREAK_WEIGHT

    def row_for(weight: float) -> dict:
        runs = stage_runs(first, scored, depth, StageFusion("rrf", (weight, 1.0), FUSION_K))
        row = {"method": "rrf", "weights": [weight, 1.0]}
        row.update({k: round(dev_ndcg(qrels, run, parts), 4) for k, run in runs.items()})
        if parts and len(parts) > 1:
            row["parts"] = {
                name: {k: round(dev_ndcg(qrels, run, {name: part}), 4) for k, run in runs.items()}
                for name, part in parts.items()
            }
        return row

    # the tie-break row after the finite weights: an equal gain goes to the re-ranker's larger say
    grid = [row_for(weight) for weight in (*FIRST_STAGE_WEIGHTS, TIE_BREAK_WEIGHT)]

    def worst_gain(row: dict) -> float:
        return min(p["fused"] - p["first_stage"] for p in row.get("parts", {"all": row}).values())

    def gain(row: dict) -> float:
        return worst_gain(row) if rule == "worst-part" else row["fused"] - row["first_stage"]

    def holds(row: dict) -> bool:
        return round(worst_gain(row), 4) >= -max_loss

    # ties go to the smaller first-stage weight: the re-ranker's say, when it costs nothing on the dev claims
    best = max(grid, key=lambda row: round(gain(row), 4))
    held = {}
    if min_gain:
        applied = gain(best) < min_gain
        best = grid[-2] if applied else best  # RRF's largest finite weight: the first stage's largest say
        held["min_gain"] = {"value": min_gain, "applied": applied}
    if max_loss >= 0:
        applied = not holds(best)
        # towards the first stage: the larger weights, smallest first
        if applied:
            holding = [r for r in grid if r["weights"][0] > best["weights"][0] and holds(r)]
            # else (even breaking ties loses) the row that loses least
            best = holding[0] if holding else max(grid, key=lambda r: round(worst_gain(r), 4))
        held["max_loss"] = {"value": max_loss, "applied": applied}
    return {
        "method": best["method"],
        "weights": best["weights"],
        "dev": best,
        "grid": grid,
        "rule": rule,
        **held,
    }


def squad_dev(config: dict, data_dir: str, n: int) -> tuple[dict, dict, dict]:
    """(corpus, queries, qrels), ids prefixed ``squad:``: ``n`` SQuAD questions drawn (seeded) from those the run
    (``config``: its metrics.json's) did not train on, over every paragraph."""
    from ctxir.data.general import load_squad

    squad = load_squad(Path(data_dir) / "general" / "squad-v1.1" / "dev-v1.1.json")
    dev = take(untrained_questions(squad, "squad", config), n, int(config.get("seed", 42)))
    return (
        {f"squad:{d}": doc for d, doc in squad.corpus.items()},
        {f"squad:{q}": squad.queries[q] for q in dev},
        {f"squad:{q}": {f"squad:{d}": s for d, s in squad.qrels[q].items()} for q in dev},
    )


def squad_topics(config: dict, data_dir: str, per_article: int, topic_words: int) -> tuple[dict, dict, dict]:
    """(corpus, queries, qrels), ids prefixed ``topic:``: ``per_article`` paragraphs drawn (seeded) from each SQuAD
    article, each one's first ``topic_words`` words a query for the article's other paragraphs (the drawn ones leave
    the corpus): a task none of the re-rankers trains on, where a first stage can be the stronger."""
    from ctxir.data.general import load_squad

    squad = load_squad(Path(data_dir) / "general" / "squad-v1.1" / "dev-v1.1.json")
    articles: dict[str, list[str]] = {}
    for doc_id in sorted(squad.corpus):
        articles.setdefault(squad.groups.get(doc_id, doc_id), []).append(doc_id)
    seed = int(config.get("seed", 42))
    drawn = {
        d: article
        for article, docs in sorted(articles.items())
        if len(docs) > per_article
        for d in take(docs, per_article, seed)
    }
    queries = {f"topic:{d}": " ".join(squad.corpus[d]["text"].split()[:topic_words]) for d in sorted(drawn)}
    qrels = {f"topic:{d}": {f"topic:{o}": 1 for o in articles[a] if o not in drawn} for d, a in drawn.items()}
    # without the article's title, which every paragraph of an article shares (it would decide alone)
    corpus = {
        f"topic:{d}": {"title": "", "text": doc["text"]} for d, doc in squad.corpus.items() if d not in drawn
    }
    return corpus, queries, qrels
