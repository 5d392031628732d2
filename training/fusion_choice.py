"""The dev queries a re-ranker's settings are chosen on, and the choice of its passages and fused mode (read by
``ctxir.rerank.stage_fusion.StageFusion``); used by ``training.evaluate_reranker`` and ``training.calibrate``."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ctxir import kinds
from ctxir.files import read_json, write_json
from ctxir.names import PASSAGES_FILE
from ctxir.types import CtxirError, Hit
from training.common import data_folder, take, untrained_questions
from training.shared_scores import score_candidates

FUSION_K = 60
# the first stage's weight against the re-ranker's 1; at 8 : 1 the re-ranker only breaks the first stage's near-ties
FIRST_STAGE_WEIGHTS = (0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 4.0, 8.0)
FUSION_RULES = ("mean", "worst-part")
FUSION_FILE = "fusion.json"


@dataclass
class DevClaims:
    """The --fusion-dev queries merged, BM25's top --fusion-depth of each, and ``parts`` kept apart."""

    corpus: dict
    queries: dict[str, str]
    qrels: dict
    bm25: dict[str, list[Hit]]
    chosen_on: str
    parts: dict[str, tuple[dict, dict, dict]]  # {name: (corpus, queries, qrels)}, SQuAD's ids prefixed


def comma_list(text: str) -> list[str]:
    return [k.strip() for k in text.split(",") if k.strip()]


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


def load_reranker(model: str, device: str, batch_size: int, backend: str = "torch"):
    """The CLS-LR ranker or cross-encoder (uncached, reading long documents as passages.json says) in ``model``."""
    from ctxir.encoders.models import load_cross_encoder
    from ctxir.names import CLS_LR_CONFIG
    from ctxir.rerank import CrossEncoderReranker
    from ctxir.rerank.registry import RERANKERS, passages_for

    if (Path(model) / CLS_LR_CONFIG).is_file():
        return RERANKERS[kinds.CLS_LR].load(model, device, batch_size)
    cross_encoder = load_cross_encoder.__wrapped__(model, device)
    reranker = CrossEncoderReranker(
        cross_encoder, batch_size=batch_size, passages=passages_for(model), backend=backend
    )
    reranker.onnx_scorer()  # exported (once) before the first query: every query scores alike
    return reranker


def stage_runs(first: dict[str, list[Hit]], scored: dict, depth: int, fusion) -> dict[str, dict]:
    """{"first_stage", "alone", "fused": run} over each query's top ``depth`` of ``first``."""
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
    qrels: dict, first: dict, scored: dict, depth: int, min_gain=0.0, parts=None, rule="mean", max_loss=-1.0
) -> dict:
    """The RRF weight chosen by ``rule``, ``min_gain`` and ``max_loss``, with every weight's dev row."""
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
    """(corpus, queries, qrels) of ``n`` SQuAD questions the run did not train on, ids ``squad:``."""
    from ctxir.data.general import load_squad

    squad = load_squad(Path(data_dir) / "general" / "squad-v1.1" / "dev-v1.1.json")
    dev = take(untrained_questions(squad, "squad", config), n, int(config.get("seed", 42)))
    return (
        {f"squad:{d}": doc for d, doc in squad.corpus.items()},
        {f"squad:{q}": squad.queries[q] for q in dev},
        {f"squad:{q}": {f"squad:{d}": s for d, s in squad.qrels[q].items()} for q in dev},
    )


def squad_topics(config: dict, data_dir: str, per_article: int, topic_words: int) -> tuple[dict, dict, dict]:
    """(corpus, queries, qrels) of SQuAD paragraphs' first words asking for their article's others."""
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


def dev_claims(folder: Path, args) -> DevClaims:
    """The held-out SciFact claims --dev-from's (else --model's) metrics.json names, + --fusion-dev's."""
    corpus, queries, qrels, metrics = heldout_claims(Path(args.dev_from or folder), args.data_dir)
    config = metrics.get("config") or {}
    parts = {"scifact": (corpus, queries, qrels)}
    split = config.get("dev_split", "random")
    described = [f"{len(queries)} held-out SciFact training claims (dev split {split!r})"]
    if "squad" in comma_list(args.fusion_dev):
        parts["squad"] = squad_dev(config, args.data_dir, args.fusion_dev_queries)
        described.append(f"{len(parts['squad'][1])} SQuAD questions the model did not train on")
    if "squad-topics" in comma_list(args.fusion_dev):
        parts["squad-topics"] = squad_topics(
            config, args.data_dir, per_article=2, topic_words=args.topic_words
        )
        described.append(
            f"{len(parts['squad-topics'][1])} SQuAD paragraphs' first {args.topic_words} words as topics, their "
            "articles' other paragraphs relevant"
        )
    merged = [{k: v for part in parts.values() for k, v in part[i].items()} for i in range(3)]
    bm25 = first_stage_hits(parts.values(), [kinds.BM25], args.fusion_depth)[kinds.BM25]
    return DevClaims(*merged, bm25, f"{' + '.join(described)}, BM25 top {args.fusion_depth}", parts)


def first_stage_hits(parts, names: list[str], depth: int) -> dict[str, dict]:
    """{name: {qid: top ``depth`` hits}} of the app's first stages over each part's own corpus."""
    from ctxir.encoders import BiEncoder
    from ctxir.rerank.pipeline import build_first_stages
    from ctxir.retrieval.registry import get_first_stage

    encoders = [BiEncoder()] if any(get_first_stage(n).uses_bi_encoder for n in names) else []
    out: dict[str, dict] = {name: {} for name in names}
    for corpus, queries, *_ in parts if names else ():
        stages = build_first_stages(corpus, names, encoders, show_progress=True)
        for name in names:
            out[name].update(stages[name].search(queries, depth))
    return out


def choose_passages(reranker, args, dev: DevClaims) -> dict:
    """passages.json: first tokens or MaxP, whichever re-ranks the dev queries better; → its scores."""
    from ctxir.rerank import Passages

    if not hasattr(reranker, "passages"):
        raise CtxirError(
            f"--choose-passages applies to cross-encoders; {args.model!r} is a {type(reranker).__name__}: drop the flag"
        )
    ways = {"first": None, "max": Passages(args.passage_words, args.passage_stride)}
    scored, ndcg = {}, {}
    for name in ways:
        reranker.passages = ways[name]
        label = f"{len(dev.queries)} dev queries, passages {name}"
        scored[name] = score_candidates(reranker, dev.queries, dev.bm25, dev.corpus, label)
        ndcg[name] = round(dev_ndcg(dev.qrels, scored[name], dev.parts), 4)
    method = "max" if ndcg["max"] > ndcg["first"] else "first"  # a tie keeps the cheaper way
    reranker.passages = ways[method]
    record = {
        "method": method,
        "words": args.passage_words,
        "stride": args.passage_stride,
        "metric": "nDCG@10 alone",
        "dev": ndcg,
        "chosen_on": dev.chosen_on,
        "measured_with": str(
            Path(args.model)
        ),  # a later stage copying the file does not pass it off as its own
    }
    write_json(Path(args.model) / PASSAGES_FILE, record)
    print(f"passages: {method} (dev nDCG@10 alone: {ndcg}) -> {Path(args.model) / PASSAGES_FILE}", flush=True)
    return scored[method]


def choose_fusion(reranker, args, dev: DevClaims, scored: dict | None, stamp) -> None:
    """fusion.json: the fusion weight doing best on the dev queries over each first stage's candidates."""
    rules = (args.fusion_min_gain, dev.parts, args.fusion_rule, args.fusion_max_loss)
    store = (args.scores_dir, stamp)  # score_candidates' store_root, stamp
    chosen = {}
    stages = {
        kinds.BM25: dev.bm25,
        **first_stage_hits(dev.parts.values(), ["dense", "hybrid"], args.fusion_depth),
    }
    for kind, hits in stages.items():
        bm25 = kind == kinds.BM25
        label = f"{len(dev.queries)} dev queries" + ("" if bm25 else f", {kind} candidates")
        scored = score_candidates(reranker, dev.queries, hits, dev.corpus, label, *store, scored)
        chosen[kind] = fusion_grid(dev.qrels, hits, scored, args.fusion_depth, *rules)
        chosen[kind]["chosen_on"] = (
            dev.chosen_on if bm25 else dev.chosen_on.replace("BM25 top", f"{kind} top")
        )
        row = chosen[kind]["dev"]
        print(
            f"fusion over {kind}: {row['method']}, weights {row['weights']} (dev nDCG@10: {kind} "
            f"{row['first_stage']}, alone {row['alone']}, fused {row['fused']})",
            flush=True,
        )
    metric = "nDCG@10" + (f", mean of {', '.join(dev.parts)}" if len(dev.parts) > 1 else "")
    record = {"k": FUSION_K, **chosen.pop(kinds.BM25), "metric": metric, "first_stages": chosen}
    write_json(Path(args.model) / FUSION_FILE, record)
    print(f"-> {Path(args.model) / FUSION_FILE}", flush=True)
