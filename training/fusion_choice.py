"""How a re-ranker's fused mode is chosen on dev queries (``training.evaluate_reranker``; read by
``ctxir.rerank.stage_fusion.StageFusion``): the grid of first-stage weights, the rules that pick one, SQuAD's dev parts."""

from __future__ import annotations

from pathlib import Path

from ctxir.types import CtxirError, Hit
from training.common import take, untrained_questions

FUSION_K = 60
# the first stage's weight against the re-ranker's 1 (0 would be the re-ranker alone); up to 8 : 1, where the re-ranker
# only breaks the first stage's near-ties: what a weak re-ranker (CLS-LR on an untrained [CLS]) should get
FIRST_STAGE_WEIGHTS = (0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 4.0, 8.0)
# "calibrated" (ctxir.rerank.stage_fusion): the first stage's min–max score at this weight beside the re-ranker's
# probability at 1; a probability sits in [0, 1], so 3 : 1 already lets only a near-certain re-ranker overturn the top
CALIBRATED_WEIGHTS = (0.1, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0)
FUSION_METHODS = ("rrf", "calibrated")
FUSION_RULES = ("mean", "worst-part")


def cut(first: list[Hit], scored: dict[str, float], depth: int) -> tuple[list[Hit], list[Hit]]:
    """BM25's top ``depth`` and the re-ranker's order of exactly those (scores computed once at a larger depth).

    >>> first = [Hit("a", 9.0), Hit("b", 8.0), Hit("c", 7.0)]
    >>> cut(first, {"a": 0.1, "b": 0.9, "c": 5.0}, 2)
    ([Hit(doc_id='a', score=9.0), Hit(doc_id='b', score=8.0)], [Hit(doc_id='b', score=0.9), Hit(doc_id='a', score=0.1)])
    """
    top = first[:depth]
    return top, sorted((Hit(h.doc_id, scored[h.doc_id]) for h in top), key=lambda h: (-h.score, h.doc_id))


def stage_runs(first: dict[str, list[Hit]], scored: dict, depth: int, fusion) -> dict[str, dict]:
    """{"first_stage", "alone", "fused": run}, each scored in its own order (``evaluate_run``'s listed ties): the
    first stage's tied hits (the hybrid's rank fusion ties often) as the app shows them."""
    from ctxir.types import run_from_hits

    firsts, alone, fused = {}, {}, {}
    for q in first:
        firsts[q], alone[q] = cut(first[q], scored[q], depth)
        fused[q] = fusion.fuse(firsts[q], alone[q])
    return {
        "first_stage": run_from_hits(firsts),
        "alone": run_from_hits(alone),
        "fused": run_from_hits(fused),
    }


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


def fusion_calibration(folder: Path, methods: list[str]) -> tuple[float, float] | None:
    """(scale, bias) of ``folder``'s calibration.json when --fusion-methods names "calibrated", else None (the
    names themselves are checked by ``check_args``)."""
    from ctxir.rerank.calibration import CALIBRATION_FILE, calibration_for

    if "calibrated" not in methods:
        return None
    calibration = calibration_for(str(folder))
    if calibration is None:
        raise CtxirError(
            f"--fusion-methods calibrated needs {str(folder / CALIBRATION_FILE)!r}: fit it first with `python -m "
            f"training.calibrate --model {str(folder)!r}`, or choose among --fusion-methods rrf only"
        )
    return calibration.scale, calibration.bias


def fusion_grid(
    qrels: dict,
    first: dict[str, list[Hit]],
    scored: dict,
    depth: int,
    min_gain: float = 0.0,
    parts: dict | None = None,
    rule: str = "mean",
    calibration: tuple[float, float] | None = None,
    max_loss: float = -1.0,
) -> dict:
    """{"method", "weights", "dev": the chosen row, "grid": every row} over RRF at FIRST_STAGE_WEIGHTS and
    ``TIE_BREAK_WEIGHT`` (and "calibrated" given ``calibration``), picked by ``rule`` (mean or worst-part), then
    ``min_gain`` (else RRF's largest weight) and ``max_loss`` (else the next larger weight that holds)."""
    from ctxir.rerank.pipeline import StageFusion
    from ctxir.rerank.stage_fusion import TIE_BREAK_WEIGHT

    def row_for(method: str, weight: float) -> dict:
        fusion = StageFusion(method, (weight, 1.0), FUSION_K, calibration=calibration)
        runs = stage_runs(first, scored, depth, fusion)
        row = {
            "method": method,
            "weights": [weight, 1.0],
            **{k: round(dev_ndcg(qrels, run, parts), 4) for k, run in runs.items()},
        }
        if parts and len(parts) > 1:
            row["parts"] = {
                name: {k: round(dev_ndcg(qrels, run, {name: part}), 4) for k, run in runs.items()}
                for name, part in parts.items()
            }
        return row

    # the tie-break row after the finite weights: an equal gain goes to the re-ranker's larger say
    settings = [("rrf", weight) for weight in (*FIRST_STAGE_WEIGHTS, TIE_BREAK_WEIGHT)]
    if calibration is not None:
        settings += [("calibrated", weight) for weight in CALIBRATED_WEIGHTS]
    grid = [row_for(method, weight) for method, weight in settings]

    def worst_gain(row: dict) -> float:
        """The smallest gain over the first stage of any dev part (the whole dev without parts)."""
        return min(p["fused"] - p["first_stage"] for p in row.get("parts", {"all": row}).values())

    def gain(row: dict) -> float:
        return worst_gain(row) if rule == "worst-part" else row["fused"] - row["first_stage"]

    # ties go to the smaller first-stage weight: the re-ranker's say, when it costs nothing on the dev claims
    best = max(grid, key=lambda row: round(gain(row), 4))
    held = {}
    if min_gain:
        applied = gain(best) < min_gain
        # FIRST_STAGE_WEIGHTS ascend: RRF's last row is the first stage's largest say
        best = grid[len(FIRST_STAGE_WEIGHTS) - 1] if applied else best
        held = {"min_gain": {"value": min_gain, "applied": applied}}
    if max_loss >= 0:

        def holds(row: dict) -> bool:
            """Every part within ``max_loss`` of its first stage."""
            return round(worst_gain(row), 4) >= -max_loss

        applied = not holds(best)
        if applied:
            # towards the first stage: RRF's larger weights (any of them, after a calibrated pick), smallest first
            floor = best["weights"][0] if best["method"] == "rrf" else -1.0
            rrf_rows = grid[: len(FIRST_STAGE_WEIGHTS) + 1]
            best = next((r for r in rrf_rows if r["weights"][0] > floor and holds(r)), None)
            if best is None:  # even breaking ties loses: the RRF row that loses least
                best = max(rrf_rows, key=lambda r: round(worst_gain(r), 4))
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
    qrels = {
        f"topic:{d}": {f"topic:{o}": 1 for o in articles[article] if o not in drawn}
        for d, article in drawn.items()
    }
    # without the article's title, which every paragraph of an article shares (it would decide alone)
    corpus = {
        f"topic:{d}": {"title": "", "text": doc["text"]} for d, doc in squad.corpus.items() if d not in drawn
    }
    return corpus, queries, qrels
