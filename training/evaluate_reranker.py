"""Evaluate a trained re-ranker (evaluation.json), and choose its passages and fused mode on held-out claims.

python -m training.evaluate_reranker --model outputs/ce --choose-fusion true        # writes fusion.json
python -m training.evaluate_reranker --model outputs/ce --depths 20,100              # writes evaluation.json
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path

if __package__ in (None, ""):  # `python training/evaluate_reranker.py` from the repo root
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ctxir import kinds
from ctxir.cli import flag
from ctxir.evaluation.suite import STAGES as SUITE_STAGES
from ctxir.files import machine_info, read_json, write_json
from ctxir.names import PASSAGES_FILE
from ctxir.publish.metrics_file import write_metrics
from ctxir.types import CtxirError, Hit
from training.common import DEFAULT_DATA_DIR, SQUAD_DEV_QUERIES, cli_main, data_folder, evaluation_row
from training.fusion_choice import (
    FUSION_K,
    FUSION_METHODS,
    FUSION_RULES,
    dev_ndcg,
    fusion_calibration,
    fusion_grid,
    squad_dev,
    squad_topics,
    stage_runs,
)
from training.shared_scores import model_stamp, score_candidates

EVALUATION_FILE = "evaluation.json"
FUSION_FILE = "fusion.json"
FUSION_DEV_PARTS = ("scifact", "squad", "squad-topics")  # --fusion-dev: dev_claims builds each
METRICS = ("nDCG@10", "MRR@10")
FUSION_FIRST_STAGES = ("dense", "hybrid")  # the fusion weight is chosen for each, beside BM25's
SQUAD_TOPICS_PER_ARTICLE = 2  # --fusion-dev squad-topics: paragraphs drawn per SQuAD article
# the out-of-domain suite (--suite); the classic collections are for evaluation only
COLLECTIONS = ("scifact", "msmarco", "demo", "med", "npl", "lisa")
COLLECTION_NAMES = {
    "scifact_test": ("scifact", "test"),
    "msmarco": ("msmarco", "sample"),
    "demo": ("ctxir-demo", "demo"),
    "med": ("medline", "test"),
    "npl": ("npl", "test"),
    "lisa": ("lisa", "test"),
}


@dataclass
class EvaluateRerankerArgs:
    model: str = flag(help="re-ranker folder: a cross-encoder or a CLS-LR ranker")
    kind: str = flag(
        "auto", "re-ranker kind (ctxir.rerank.registry); auto = cls-lr if cls_lr_config.json is there"
    )
    dev_from: str = flag("", "folder whose metrics.json names the held-out claims the fusion is chosen on")
    data_dir: str = flag(DEFAULT_DATA_DIR, "benchmark data root")
    choose_fusion: bool = flag(False, "choose the fused mode on held-out claims, write <model>/fusion.json")
    fusion_depth: int = flag(20, "BM25 candidates per claim when choosing the fusion")
    fusion_dev: str = flag(
        "scifact", f"dev parts the passages and fusion are chosen on, of {FUSION_DEV_PARTS}"
    )
    fusion_dev_queries: int = flag(SQUAD_DEV_QUERIES, "--fusion-dev squad: questions drawn")
    topic_words: int = flag(50, "--fusion-dev squad-topics: words of a query")
    fusion_rule: str = flag("mean", "how a weight is chosen over the dev parts: mean or worst-part")
    fusion_methods: str = flag("rrf", "stage fusions the choice tries: comma list of rrf, calibrated")
    fusion_min_gain: float = flag(0.0, "a dev gain below this gets the largest first-stage weight")
    fusion_max_loss: float = flag(0.005, "refuse a fused mode this far below its first stage on a dev part")
    choose_passages: bool = flag(
        False, "choose first tokens or best window (MaxP), write <model>/passages.json"
    )
    passage_words: int = flag(70, "MaxP window, words")
    passage_stride: int = flag(50, "MaxP: a new window every N words")
    read_tokens: int = flag(0, "--choose-passages: tokens per pair (0 = the model's max length)")
    depths: str = flag("20", "BM25 depths re-ranked on SciFact test ('' = only choose)")
    collections: str = flag("scifact,msmarco,demo", f"what to evaluate, a comma list of {COLLECTIONS}")
    other_first_stages: str = flag("bm25,hybrid", "first stages re-ranked at --other-depth on the others")
    suite: bool = flag(False, "the out-of-domain suite: every collection and first stage, top 20")
    other_depth: int = flag(20, "candidates re-ranked on the other collections")
    max_queries: int = flag(0, "first N test queries per collection (0 = all)")
    batch_size: int = 32
    device: str = "auto"
    torch_threads: int = flag(1, "CPU threads for torch (0 = torch's default)")
    rerank_backend: str = flag("torch", "cross-encoder backend: torch, onnx or onnx-int8")
    output: str = flag("", f"default <model>/{EVALUATION_FILE}")
    scores_dir: str = flag("", "keep each query's scores here (resumable, shareable; '' = keep nothing)")
    update_metrics: bool = flag(True, "also add the nDCG@10 rows to <model>/metrics.json")


def comma_list(text: str) -> list[str]:
    return [k.strip() for k in text.split(",") if k.strip()]


def check_args(args: EvaluateRerankerArgs) -> tuple[list[int], list[str]]:
    """(--depths, --collections), checked before any model loads."""
    if args.suite:
        args.collections, args.other_first_stages, args.depths = (
            ",".join(COLLECTIONS),
            ",".join(SUITE_STAGES),
            "20",
        )
    depths = sorted({int(d) for d in args.depths.split(",") if d.strip()})
    if any(d < 10 for d in depths):
        raise CtxirError(f"--depths {args.depths!r}: every depth must be ≥ 10 (nDCG@10 needs ten candidates)")
    from ctxir.rerank.pipeline import FIRST_STAGES

    for kind in comma_list(args.other_first_stages):
        if kind not in FIRST_STAGES:
            raise CtxirError(
                f"--other-first-stages names {kind!r}: use {', '.join(FIRST_STAGES)}, comma-separated"
            )
    for part in comma_list(args.fusion_dev):
        if part not in FUSION_DEV_PARTS:
            raise CtxirError(
                f"--fusion-dev names {part!r}: use a comma list of {', '.join(FUSION_DEV_PARTS)}"
            )
    for method in comma_list(args.fusion_methods):
        if method not in FUSION_METHODS:
            raise CtxirError(
                f"--fusion-methods names {method!r}: use a comma list of {', '.join(FUSION_METHODS)}"
            )
    if args.fusion_rule not in FUSION_RULES:
        raise CtxirError(
            f"--fusion-rule {args.fusion_rule!r} is not known: use one of {', '.join(FUSION_RULES)}"
        )
    collections = comma_list(args.collections)
    for c in collections:
        if c not in COLLECTIONS:
            raise CtxirError(f"--collections names {c!r}: use a comma list of {', '.join(COLLECTIONS)}")
    if not depths and not (args.choose_passages or args.choose_fusion):
        # '' is how the choosing recipes say "evaluate nothing"; alone it would run nothing and exit 0
        raise CtxirError(
            f"--depths {args.depths!r} evaluates nothing (it is for a run that only chooses, with "
            "--choose-passages or --choose-fusion): to evaluate other collections without SciFact's test figures, "
            f"leave scifact out of --collections (now {args.collections!r}) and --depths at its default"
        )
    return depths, collections


def seen_split(test_qrels: dict, train_qrels: dict) -> tuple[set[str], set[str]]:
    """(seen, unseen) test query ids: seen = cites ≥ 1 document that some training query also cites.

    >>> seen, unseen = seen_split({"t1": {"d1": 1}, "t2": {"d9": 1}, "t3": {"d2": 1, "d8": 1}},
    ...                           {"a": {"d1": 1}, "b": {"d2": 1}})
    >>> sorted(seen), sorted(unseen)
    (['t1', 't3'], ['t2'])
    """
    cited = {d for rel in train_qrels.values() for d, s in rel.items() if s > 0}
    seen = {q for q, rel in test_qrels.items() if any(s > 0 and d in cited for d, s in rel.items())}
    return seen, set(test_qrels) - seen


def _summary(qrels: dict, runs: dict[str, dict], queries: set[str] | None = None) -> dict:
    from ctxir.evaluation import evaluate_run, paired_test

    if queries is not None:
        qrels = {q: r for q, r in qrels.items() if q in queries}
        runs = {name: {q: r for q, r in run.items() if q in queries} for name, run in runs.items()}
    results = {name: evaluate_run(qrels, run) for name, run in runs.items()}
    out = {"queries": len(qrels)}
    for name, result in results.items():
        out[name] = {m: round(float(result.aggregate[m]), 4) for m in METRICS}
    for name in results:
        if name != "first_stage" and len(qrels) >= 2:
            test = paired_test(results["first_stage"].per_query, results[name].per_query)
            out[f"{name}_vs_first_stage"] = {
                k: (round(v, 4) if isinstance(v, float) else v) for k, v in test.items()
            }
    return out


def choose_fusion(
    reranker, folder: Path, args: EvaluateRerankerArgs, dev: tuple | None = None, scored: dict | None = None
) -> dict:
    """The fusion.json record: the first stage's fusion weight that does best on the dev queries, over BM25's
    candidates and (under "first_stages") dense's and hybrid's. ``dev``/``scored`` when at hand."""
    corpus, queries, qrels, first, chosen_on, parts = dev or dev_claims(folder, args)
    calibration = fusion_calibration(folder, comma_list(args.fusion_methods))
    if scored is None:
        scored = _score_missing(
            reranker, queries, first, corpus, f"{len(queries)} dev queries", args.scores_dir, args.model, {}
        )
    grid_args = (args.fusion_min_gain, parts, args.fusion_rule, calibration, args.fusion_max_loss)
    record = {
        "k": FUSION_K,
        **fusion_grid(qrels, first, scored, args.fusion_depth, *grid_args),
        "metric": "nDCG@10" + (f", mean of {', '.join(parts)}" if len(parts) > 1 else ""),
        "chosen_on": chosen_on,
    }
    record["first_stages"] = {}
    for kind, hits in _dev_candidates(parts, list(FUSION_FIRST_STAGES), args.fusion_depth).items():
        label = f"{len(queries)} dev queries, {kind} candidates"
        scored = _score_missing(reranker, queries, hits, corpus, label, args.scores_dir, args.model, scored)
        record["first_stages"][kind] = {
            **fusion_grid(qrels, hits, scored, args.fusion_depth, *grid_args),
            "chosen_on": chosen_on.replace("BM25 top", f"{kind} top"),
        }
    return record


def _dev_candidates(parts: dict, kinds: list[str], depth: int) -> dict[str, dict]:
    """{kind: {qid: top ``depth`` hits}} of the app's first stages, each dev part over its own corpus."""
    out: dict[str, dict] = {kind: {} for kind in kinds}
    for corpus, queries, _ in parts.values():
        for kind, hits in _stage_hits(corpus, queries, kinds, depth).items():
            out[kind].update(hits)
    return out


def dev_claims(folder: Path, args: EvaluateRerankerArgs) -> tuple[dict, dict, dict, dict, str, dict]:
    """(corpus, queries, qrels, BM25 hits at --fusion-depth, description, parts) of the --fusion-dev queries; ``parts``
    {name: (corpus, queries, qrels)} keeps each apart (SQuAD's ids are prefixed)."""
    from ctxir.data import load_beir
    from ctxir.retrieval import BM25Retriever

    source = Path(args.dev_from) if args.dev_from else folder
    metrics = read_json(source / "metrics.json") or {}
    dev = list((metrics.get("extra") or {}).get("heldout_query_ids") or [])
    if not dev:
        raise CtxirError(
            f"{str(source / 'metrics.json')!r} names no held-out training claims (extra."
            "heldout_query_ids): train with --dev-queries N so the fusion can be chosen on claims the "
            "model did not train on, or pass --dev-from the folder of the model whose held-out claims "
            "this one also never trained on (a CLS-LR ranker: its cross-encoder's)"
        )
    corpus, queries, qrels = load_beir(data_folder(args.data_dir, "scifact"), "train")
    queries, qrels = {q: queries[q] for q in dev}, {q: qrels[q] for q in dev}
    dev_split = (metrics.get("config") or {}).get("dev_split", "random")
    parts = {"scifact": (corpus, queries, qrels)}
    described = [f"{len(dev)} held-out SciFact training claims (dev split {dev_split!r})"]
    named = comma_list(args.fusion_dev)
    if "squad" in named:
        parts["squad"] = squad_dev(metrics.get("config") or {}, args.data_dir, args.fusion_dev_queries)
        described.append(f"{len(parts['squad'][1])} SQuAD questions the model did not train on")
    if "squad-topics" in named:
        parts["squad-topics"] = squad_topics(
            metrics.get("config") or {}, args.data_dir, SQUAD_TOPICS_PER_ARTICLE, args.topic_words
        )
        described.append(
            f"{len(parts['squad-topics'][1])} SQuAD paragraphs' first {args.topic_words} words as topics, their "
            "articles' other paragraphs relevant"
        )
    merged = [{k: v for part in parts.values() for k, v in part[i].items()} for i in range(3)]
    first = {
        q: h
        for part in parts.values()
        for q, h in BM25Retriever(part[0]).search(part[1], args.fusion_depth).items()
    }
    return (*merged, first, f"{' + '.join(described)}, BM25 top {args.fusion_depth}", parts)


def choose_passages(reranker, args: EvaluateRerankerArgs, dev: tuple) -> tuple[dict, dict]:
    """(passages.json record, the chosen way's dev scores): first tokens or the best window (MaxP), whichever
    re-ranks the dev queries better alone."""
    from ctxir.encoders.lengths import set_max_length
    from ctxir.rerank import Passages

    corpus, queries, qrels, first, chosen_on, parts = dev
    windows = Passages(args.passage_words, args.passage_stride, args.read_tokens)
    own = reranker.model.max_seq_length  # as loaded: the folder's read_tokens already applied, else its own
    scores, scored = {}, {}
    for name, passages in (("first", None), ("max", windows)):
        reranker.passages = passages
        set_max_length(reranker.model, (passages.read_tokens or own) if passages else own)
        scored[name] = score_candidates(
            reranker, queries, first, corpus, f"{len(queries)} dev queries, passages {name}"
        )
        run = {q: dict(scored[name][q]) for q in queries}
        scores[name] = round(dev_ndcg(qrels, run, parts), 4)
    method = "max" if scores["max"] > scores["first"] else "first"  # a tie keeps the cheaper way
    reranker.passages = windows if method == "max" else None
    set_max_length(reranker.model, (windows.read_tokens or own) if method == "max" else own)
    return (
        {
            "method": method,
            "words": args.passage_words,
            "stride": args.passage_stride,
            **({"read_tokens": args.read_tokens} if args.read_tokens and method == "max" else {}),
            "metric": "nDCG@10 alone",
            "dev": scores,
            "chosen_on": chosen_on,
        },
        scored[method],
    )


def evaluate_scifact(reranker, fusion, depths: list[int], args: EvaluateRerankerArgs) -> dict:
    from ctxir.data import load_beir
    from ctxir.retrieval import BM25Retriever

    folder = data_folder(args.data_dir, "scifact")
    corpus, queries, qrels = load_beir(folder, "test")
    _, _, train_qrels = load_beir(folder, "train")
    if args.max_queries:
        queries = dict(list(queries.items())[: args.max_queries])
        qrels = {q: qrels[q] for q in queries if q in qrels}
    first = BM25Retriever(corpus).search(queries, max(depths))
    label = f"SciFact test, BM25 top {max(depths)}"
    scored = _score_missing(reranker, queries, first, corpus, label, args.scores_dir, args.model, {})
    seen, unseen = seen_split(qrels, train_qrels)
    out, parts = (
        {"seen_queries": len(seen), "unseen_queries": len(unseen)},
        {"all": None, "seen": seen, "unseen": unseen},
    )
    for depth in depths:
        runs = stage_runs(first, scored, depth, fusion.for_first_stage(kinds.BM25))
        out[f"bm25@{depth}"] = {part: _summary(qrels, runs, ids) for part, ids in parts.items()}
    for kind, hits in _stage_hits(
        corpus, queries, [k for k in comma_list(args.other_first_stages) if k != kinds.BM25], args.other_depth
    ).items():
        label = f"SciFact test, {kind} top {args.other_depth}"
        scored = _score_missing(reranker, queries, hits, corpus, label, args.scores_dir, args.model, scored)
        runs = stage_runs(hits, scored, args.other_depth, fusion.for_first_stage(kind))
        out[f"{kind}@{args.other_depth}"] = {part: _summary(qrels, runs, ids) for part, ids in parts.items()}
    return out


def _score_missing(
    reranker,
    queries: dict[str, str],
    hits: dict[str, list[Hit]],
    corpus: dict,
    label: str,
    scores_dir: str,
    model: str,
    scored: dict,
) -> dict:
    """``scored`` with every candidate of ``hits`` it lacks scored too (kept in ``scores_dir`` when given)."""
    missing = {q: [h for h in hits[q] if h.doc_id not in scored.get(q, {})] for q in queries}
    stamp = model_stamp(model, reranker) if scores_dir else None
    more = score_candidates(reranker, queries, missing, corpus, label, scores_dir, stamp)
    return {q: {**scored.get(q, {}), **more[q]} for q in queries}


def _stage_hits(corpus: dict, queries: dict[str, str], names: list[str], depth: int) -> dict[str, dict]:
    """{name: {qid: top ``depth`` hits}} of the app's first stages, built as the app builds them."""
    from ctxir.encoders import BiEncoder
    from ctxir.rerank.pipeline import build_first_stages
    from ctxir.retrieval.registry import get_first_stage

    if not names:
        return {}
    encoders = [BiEncoder()] if any(get_first_stage(n).uses_bi_encoder for n in names) else []
    stages = build_first_stages(corpus, names, encoders, show_progress=True)
    return {name: stages[name].search(queries, depth) for name in names}


def evaluate_other(reranker, fusion, name: str, args: EvaluateRerankerArgs) -> dict:
    from ctxir.data import load_beir, load_qrels, load_queries

    if name != "demo":
        corpus, queries, qrels = load_beir(data_folder(args.data_dir, name), "test")
    else:
        from ctxir.data.demo import ASSETS, demo_corpus

        corpus, queries, qrels = (
            demo_corpus(),
            load_queries(ASSETS / "demo_queries.jsonl"),
            load_qrels(ASSETS / "demo_qrels.tsv"),
        )
    queries = {q: t for q, t in queries.items() if q in qrels}
    if args.max_queries:
        queries = dict(list(queries.items())[: args.max_queries])
    out, scored = {}, {}
    for kind, first in _stage_hits(
        corpus, queries, comma_list(args.other_first_stages), args.other_depth
    ).items():
        label = f"{name} {kind} top {args.other_depth}"
        scored = _score_missing(reranker, queries, first, corpus, label, args.scores_dir, args.model, scored)
        out[f"{kind}@{args.other_depth}"] = _summary(
            qrels, stage_runs(first, scored, args.other_depth, fusion.for_first_stage(kind))
        )
    return out


def load_kind(args: EvaluateRerankerArgs):
    """The re-ranker in --model, loaded by its registry kind (--kind, or guessed from the folder's files)."""
    from ctxir.names import CLS_LR_CONFIG
    from ctxir.rerank.registry import RERANKERS

    kind = args.kind
    if kind == "auto":
        kind = kinds.CLS_LR if (Path(args.model) / CLS_LR_CONFIG).is_file() else kinds.CROSS_ENCODER
    if kind not in RERANKERS:
        raise CtxirError(
            f"--kind {args.kind!r} is not a re-ranker kind: use auto or one of {', '.join(RERANKERS)}"
        )
    # uncached: a folder trained again in this process must not come back stale
    if kind == kinds.CROSS_ENCODER:
        from ctxir.encoders.models import load_cross_encoder
        from ctxir.rerank import CrossEncoderReranker
        from ctxir.rerank.registry import passages_for

        reranker = CrossEncoderReranker(
            load_cross_encoder.__wrapped__(args.model, args.device),
            batch_size=args.batch_size,
            passages=passages_for(args.model),
            backend=args.rerank_backend,
        )
        reranker.onnx_scorer()  # exported (once) before the first query: every query scores alike
        return reranker
    return RERANKERS[kind].load(args.model, args.device, args.batch_size)


def run(args: EvaluateRerankerArgs) -> dict:
    from ctxir.encoders.models import set_threads
    from ctxir.rerank.registry import stage_fusion_for

    if args.torch_threads:
        set_threads(args.torch_threads)
    folder = Path(args.model)
    depths, collections = check_args(args)
    # 1. load the model
    reranker = load_kind(args)
    # 2. how long documents are read, then the fused mode: chosen on held-out training claims, or read from the folder
    choose_settings(reranker, folder, args)
    fusion_record = read_json(folder / FUSION_FILE) or {"method": "rrf", "k": FUSION_K, "weights": [1.0, 1.0]}
    fusion = stage_fusion_for(str(folder))  # as the app reads it
    if not depths:
        return {"fusion": fusion_record}
    # 3. test figures, chosen from nothing, added to what earlier runs recorded
    start = time.perf_counter()
    output = Path(args.output or folder / EVALUATION_FILE)
    result = record_head(reranker, folder, fusion_record, output)
    for name in COLLECTIONS:
        if name in collections:
            result["scifact_test" if name == "scifact" else name] = (
                evaluate_scifact(reranker, fusion, depths, args)
                if name == "scifact"
                else evaluate_other(reranker, fusion, name, args)
            )
            write_json(output, result)  # each collection kept as it finishes: a later failure loses no scores
    result["seconds"] = round(time.perf_counter() - start, 1)
    write_json(output, result)
    # 4. the model card's rows
    if args.update_metrics and (folder / "metrics.json").is_file():
        metrics = read_json(folder / "metrics.json")
        metrics["evaluations"] = merge_evaluation_rows(metrics["evaluations"], evaluation_rows(result))
        write_metrics(folder, metrics)
    print(report(result))
    print(f"-> {output}")
    return result


def choose_settings(reranker, folder: Path, args: EvaluateRerankerArgs) -> None:
    """--choose-passages, then --choose-fusion (with the passages chosen), each written into the model folder."""
    dev = dev_claims(folder, args) if args.choose_passages or args.choose_fusion else None
    scored = None
    if args.choose_passages:
        if not hasattr(reranker, "passages"):
            raise CtxirError(
                f"--choose-passages applies to cross-encoders; {args.model!r} is a "
                f"{type(reranker).__name__}: drop the flag"
            )
        passages_record, scored = choose_passages(reranker, args, dev)
        # its dev figures are this model's; a later stage that copies the file must not pass them off as its own
        passages_record["measured_with"] = str(folder)
        write_json(folder / PASSAGES_FILE, passages_record)
        print(
            f"passages: {passages_record['method']} (dev nDCG@10 alone: first {passages_record['dev']['first']}, "
            f"max {passages_record['dev']['max']}) -> {folder / PASSAGES_FILE}",
            flush=True,
        )
    if args.choose_fusion:
        fusion_record = choose_fusion(reranker, folder, args, dev, scored)
        write_json(folder / FUSION_FILE, fusion_record)
        for name, chosen in {kinds.BM25: fusion_record, **fusion_record.get("first_stages", {})}.items():
            print(
                f"fusion over {name}: {chosen['method']}, weights {chosen['weights']} (dev nDCG@10: {name} "
                f"{chosen['dev']['first_stage']}, alone {chosen['dev']['alone']}, fused {chosen['dev']['fused']})",
                flush=True,
            )
        print(f"-> {folder / FUSION_FILE}", flush=True)


def record_head(reranker, folder: Path, fusion_record: dict, output: Path) -> dict:
    """The evaluation record before its figures, added to what earlier runs of ``output`` recorded."""
    fusion = {k: fusion_record.get(k) for k in ("method", "k", "weights", "chosen_on")}
    if fusion_record.get("first_stages"):
        fusion["first_stages"] = {
            name: {"weights": chosen["weights"]} for name, chosen in fusion_record["first_stages"].items()
        }
    head = {
        "model": str(folder),
        "fusion": fusion,
        "machine": machine_info(),
        "command": "python -m training.evaluate_reranker " + " ".join(sys.argv[1:]),
    }
    if hasattr(reranker, "passages"):  # a cross-encoder: how it read documents longer than its max length
        passages = reranker.passages
        head["passages"] = (
            {"method": "max", "words": passages.words, "stride": passages.stride}
            if passages
            else {"method": "first"}
        )
    earlier = (read_json(output) or {}) if output.is_file() else {}
    commands = earlier.get("commands") or ([earlier["command"]] if earlier.get("command") else [])
    return {**earlier, **head, "commands": [*commands, head["command"]]}


def evaluation_rows(result: dict) -> list[dict]:
    """metrics.json evaluation rows (before = the first stage alone) for every figure of an evaluation.json; each
    says what it covers, and SciFact test's fused BM25 top 20 is the card's ``headline``."""
    from ctxir.rerank.stage_fusion import TIE_BREAK_WEIGHT

    fusion = result.get("fusion") or {}
    rows = []
    for key, (dataset, split) in COLLECTION_NAMES.items():
        for first_stage, value in (result.get(key) or {}).items():
            if not isinstance(value, dict):
                continue
            stage, _, depth = first_stage.partition("@")
            weights = ((fusion.get("first_stages") or {}).get(stage) or {}).get("weights") or fusion.get(
                "weights"
            )
            ties_only = bool(weights) and weights[0] >= TIE_BREAK_WEIGHT * weights[1]
            for part, s in value.items() if key == "scifact_test" else [("all", value)]:
                for mode in ("alone", "fused"):
                    label = "re-ranker alone"
                    if mode == "fused" and ties_only:
                        changed = s.get("fused_vs_first_stage") or {}
                        label = f"default: {stage}'s order kept, only its ties re-ordered (RRF {weights[0]:g} : {weights[1]:g}"
                        if {"wins", "losses"} <= changed.keys():
                            label += (
                                f"; {changed['wins'] + changed['losses']} of {s['queries']} queries changed"
                            )
                        label += ")"
                    elif mode == "fused" and weights:
                        label = f"default: fused with the first stage (RRF {weights[0]:g} : {weights[1]:g})"
                    elif mode == "fused":
                        label = "fused with the first stage (RRF)"
                    where = "" if part == "all" else f", {part}-abstract claims ({s['queries']})"
                    row = evaluation_row(
                        dataset,
                        split,
                        "reranking",
                        "nDCG@10",
                        s["first_stage"]["nDCG@10"],
                        s[mode]["nDCG@10"],
                        config=f"{first_stage.replace('@', ' top ')}{where}, {label}",
                    )
                    row.update(
                        queries=s.get("queries"), first_stage=stage, depth=int(depth) if depth else None
                    )
                    if part != "all":
                        row["subset"] = f"the {s['queries']} test claims whose abstracts " + (
                            "a training claim cites" if part == "seen" else "no training claim cites"
                        )
                    if (key, first_stage, part, mode) == ("scifact_test", "bm25@20", "all", "fused"):
                        row["headline"] = True
                    rows.append(row)
    return rows


def merge_evaluation_rows(rows: list[dict], new: list[dict]) -> list[dict]:
    """``rows`` with each of ``new`` in place of the row it measures again (same dataset, split and config).

    >>> old = [{"dataset": "lisa", "split": "test", "config": "bm25 top 20, re-ranker alone", "after": 0.40}]
    >>> new = [{"dataset": "npl", "split": "test", "config": "bm25 top 20, re-ranker alone", "after": 0.42}]
    >>> [(r["dataset"], r["after"]) for r in merge_evaluation_rows(old, new)]
    [('lisa', 0.4), ('npl', 0.42)]
    >>> [(r["dataset"], r["after"]) for r in merge_evaluation_rows(old, [{**old[0], "after": 0.41}])]
    [('lisa', 0.41)]
    """

    def key(row: dict) -> tuple:
        return row.get("dataset"), row.get("split"), row.get("config")

    measured = {key(r) for r in new}
    return [r for r in rows if key(r) not in measured] + list(new)


def report(result: dict) -> str:
    """A plain-text table of every nDCG@10 in an evaluation.json."""
    lines = [
        f"{'collection / first stage / split':46} {'first':>7} {'alone':>7} {'fused':>7}  wins/losses alone, fused"
    ]

    def row(label: str, s: dict) -> None:
        a, f = s.get("alone_vs_first_stage", {}), s.get("fused_vs_first_stage", {})
        lines.append(
            f"{label:46} {s['first_stage']['nDCG@10']:7.4f} {s['alone']['nDCG@10']:7.4f} "
            f"{s['fused']['nDCG@10']:7.4f}  {a.get('wins')}/{a.get('losses')} "
            f"(p {a.get('t_pvalue', float('nan')):.3g}), {f.get('wins')}/{f.get('losses')} "
            f"(p {f.get('t_pvalue', float('nan')):.3g})"
        )

    for key, value in (result.get("scifact_test") or {}).items():
        if isinstance(value, dict):
            for split, s in value.items():
                row(f"scifact test {key} {split} ({s['queries']} q)", s)
    for name in COLLECTIONS[1:]:
        for key, s in (result.get(name) or {}).items():
            row(f"{name} {key} ({s['queries']} q)", s)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    return cli_main(EvaluateRerankerArgs, run, argv)


if __name__ == "__main__":
    sys.exit(main())
