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
from ctxir.publish.metrics_file import write_metrics
from ctxir.types import CtxirError
from training import fusion_choice
from training.common import DEFAULT_DATA_DIR, SQUAD_DEV_QUERIES, cli_main, data_folder, evaluation_row
from training.fusion_choice import FUSION_FILE, FUSION_K, FUSION_RULES
from training.shared_scores import model_stamp, score_candidates

EVALUATION_FILE = "evaluation.json"
FUSION_DEV_PARTS = ("scifact", "squad", "squad-topics")
# what --collections may name (the out-of-domain suite, --suite), each as metrics.json names it: (dataset, split)
COLLECTIONS = {
    "scifact": ("scifact", "test"),
    "msmarco": ("msmarco", "sample"),
    "demo": ("ctxir-demo", "demo"),
    "med": ("medline", "test"),
    "npl": ("npl", "test"),
    "lisa": ("lisa", "test"),
}


@dataclass
class EvaluateRerankerArgs:
    model: str = flag(help="re-ranker folder: a cross-encoder or a CLS-LR ranker")
    dev_from: str = flag("", "folder whose metrics.json names the held-out claims the fusion is chosen on")
    data_dir: str = flag(DEFAULT_DATA_DIR, "benchmark data root")
    choose_fusion: bool = flag(False, "choose the fused mode on held-out claims, write <model>/fusion.json")
    fusion_depth: int = flag(20, "BM25 candidates per claim when choosing the fusion")
    fusion_dev: str = flag("scifact", f"dev parts the passages and fusion are chosen on: {FUSION_DEV_PARTS}")
    fusion_dev_queries: int = flag(SQUAD_DEV_QUERIES, "--fusion-dev squad: questions drawn")
    topic_words: int = flag(50, "--fusion-dev squad-topics: words of a query")
    fusion_rule: str = flag("mean", "how a weight is chosen over the dev parts: mean or worst-part")
    fusion_min_gain: float = flag(0.0, "a dev gain below this gets the largest first-stage weight")
    fusion_max_loss: float = flag(0.005, "refuse a fused mode this far below its first stage on a dev part")
    choose_passages: bool = flag(False, "choose first tokens or best window (MaxP): <model>/passages.json")
    passage_words: int = flag(70, "MaxP window, words")
    passage_stride: int = flag(50, "MaxP: a new window every N words")
    depths: str = flag("20", "BM25 depths re-ranked on SciFact test ('' = only choose)")
    collections: str = flag("scifact,msmarco,demo", f"what to evaluate, a comma list of {tuple(COLLECTIONS)}")
    other_first_stages: str = flag("bm25,hybrid", "first stages re-ranked at --other-depth on the others")
    suite: bool = flag(False, "the out-of-domain suite: every collection and first stage, top 20")
    other_depth: int = flag(20, "candidates re-ranked on the other collections")
    batch_size: int = 32
    device: str = "auto"
    torch_threads: int = flag(1, "CPU threads for torch (0 = torch's default)")
    rerank_backend: str = flag("torch", "cross-encoder backend: torch, onnx or onnx-int8")
    output: str = flag("", f"default <model>/{EVALUATION_FILE}")
    scores_dir: str = flag("", "keep each query's scores here (resumable, shareable; '' = keep nothing)")
    update_metrics: bool = flag(True, "also add the nDCG@10 rows to <model>/metrics.json")


def check_args(args: EvaluateRerankerArgs) -> tuple[list[int], list[str]]:
    """(--depths, --collections), checked before any model loads."""
    from ctxir.rerank.pipeline import FIRST_STAGES

    if args.suite:
        args.collections, args.depths = ",".join(COLLECTIONS), "20"
        args.other_first_stages = ",".join(SUITE_STAGES)
    depths = sorted({int(d) for d in fusion_choice.comma_list(args.depths)})
    if any(d < 10 for d in depths):
        raise CtxirError(f"--depths {args.depths!r}: every depth must be ≥ 10 (nDCG@10 needs ten candidates)")
    for name, given, known in (
        ("--other-first-stages", args.other_first_stages, FIRST_STAGES),
        ("--fusion-dev", args.fusion_dev, FUSION_DEV_PARTS),
        ("--collections", args.collections, COLLECTIONS),
    ):
        for value in fusion_choice.comma_list(given):
            if value not in known:
                raise CtxirError(f"{name} names {value!r}: use a comma list of {', '.join(known)}")
    if args.fusion_rule not in FUSION_RULES:
        raise CtxirError(f"--fusion-rule {args.fusion_rule!r} is not known: use {', '.join(FUSION_RULES)}")
    if not depths and not (args.choose_passages or args.choose_fusion):
        raise CtxirError(
            f"--depths {args.depths!r} evaluates nothing (it is for a run that only chooses, with "
            "--choose-passages or --choose-fusion): to evaluate other collections without SciFact's test figures, "
            f"leave scifact out of --collections (now {args.collections!r}) and --depths at its default"
        )
    return depths, fusion_choice.comma_list(args.collections)


def run(args: EvaluateRerankerArgs) -> dict:
    from ctxir.encoders.models import set_threads
    from ctxir.rerank.registry import stage_fusion_for

    set_threads(args.torch_threads)
    folder = Path(args.model)
    depths, collections = check_args(args)
    # 1. load the model
    reranker = fusion_choice.load_reranker(args.model, args.device, args.batch_size, args.rerank_backend)
    # 2. how long documents are read, then the fused mode: chosen on held-out training claims, or read from the folder
    dev = fusion_choice.dev_claims(folder, args) if args.choose_passages or args.choose_fusion else None
    scored = fusion_choice.choose_passages(reranker, args, dev) if args.choose_passages else None
    stamp = model_stamp(folder, reranker) if args.scores_dir else None  # the passages chosen
    if args.choose_fusion:
        fusion_choice.choose_fusion(reranker, args, dev, scored, stamp)
    fusion_record = read_json(folder / FUSION_FILE) or {"method": "rrf", "k": FUSION_K, "weights": [1.0, 1.0]}
    if not depths:
        return {"fusion": fusion_record}
    # 3. test figures, chosen from nothing, added to what earlier runs recorded
    start = time.perf_counter()
    output = Path(args.output or folder / EVALUATION_FILE)
    result = record_head(reranker, folder, fusion_record, output)
    fusion = stage_fusion_for(str(folder))  # as the app reads it
    for name in COLLECTIONS:
        if name in collections:
            key = "scifact_test" if name == "scifact" else name
            result[key] = evaluate_collection(reranker, fusion, name, depths, args, stamp)
            write_json(output, result)  # each collection kept as it finishes: a later failure loses no scores
    result["seconds"] = round(time.perf_counter() - start, 1)
    write_json(output, result)
    # 4. the model card's rows
    if args.update_metrics and (folder / "metrics.json").is_file():
        metrics = read_json(folder / "metrics.json")
        metrics["evaluations"] = merge_evaluation_rows(metrics["evaluations"], evaluation_rows(result))
        write_metrics(folder, metrics)
    print(f"-> {output}")
    return result


def evaluate_collection(
    reranker, fusion, name: str, depths: list[int], args: EvaluateRerankerArgs, stamp
) -> dict:
    """{"<first stage>@<depth>": figures} of one collection's test queries (SciFact's split seen/unseen)."""
    from ctxir.data import load_beir, load_qrels, load_queries
    from ctxir.data.demo import ASSETS, demo_corpus

    if name == "demo":
        corpus, queries = demo_corpus(), load_queries(ASSETS / "demo_queries.jsonl")
        qrels = load_qrels(ASSETS / "demo_qrels.tsv")
    else:
        corpus, queries, qrels = load_beir(data_folder(args.data_dir, name), "test")
    queries = {q: t for q, t in queries.items() if q in qrels}
    sci = name == "scifact"
    others = [k for k in fusion_choice.comma_list(args.other_first_stages) if not (sci and k == kinds.BM25)]
    hits = fusion_choice.first_stage_hits([(corpus, queries)], others, args.other_depth)
    out, parts = {}, {"all": None}
    if sci:
        # seen: a claim citing an abstract that some training claim also cites
        train_qrels = load_beir(data_folder(args.data_dir, name), "train")[2]
        cited = {d for rel in train_qrels.values() for d, s in rel.items() if s > 0}
        seen = {q for q, rel in qrels.items() if any(s > 0 and d in cited for d, s in rel.items())}
        out = {"seen_queries": len(seen), "unseen_queries": len(qrels) - len(seen)}
        parts.update(seen=seen, unseen=set(qrels) - seen)
        hits = {**fusion_choice.first_stage_hits([(corpus, queries)], [kinds.BM25], max(depths)), **hits}
    scored = {}
    for kind, first in hits.items():
        cuts = depths if sci and kind == kinds.BM25 else [args.other_depth]
        label = f"SciFact test, {'BM25' if kind == kinds.BM25 else kind}" if sci else f"{name} {kind}"
        label += f" top {max(cuts)}"
        scored = score_candidates(reranker, queries, first, corpus, label, args.scores_dir, stamp, scored)
        for depth in cuts:
            runs = fusion_choice.stage_runs(first, scored, depth, fusion.for_first_stage(kind))
            summaries = {part: _summary(qrels, runs, ids) for part, ids in parts.items()}
            out[f"{kind}@{depth}"] = summaries if sci else summaries["all"]
    return out


def _summary(qrels: dict, runs: dict[str, dict], queries: set[str] | None = None) -> dict:
    """The number of ``queries``, each run's nDCG@10 and MRR@10, and the re-ranked runs' paired tests."""
    from ctxir.evaluation import evaluate_run, paired_test

    qrels = {q: r for q, r in qrels.items() if queries is None or q in queries}
    out, per_query = {"queries": len(qrels)}, {}
    for name, run in runs.items():
        result = evaluate_run(qrels, run, k_values=(10,), metrics=("ndcg", "mrr"))
        out[name] = {m: round(float(result.aggregate[m]), 4) for m in ("nDCG@10", "MRR@10")}
        per_query[name] = result.per_query
    for name in ("alone", "fused") if len(qrels) >= 2 else ():
        test = paired_test(per_query["first_stage"], per_query[name])
        out[f"{name}_vs_first_stage"] = {
            k: round(v, 4) if isinstance(v, float) else v for k, v in test.items()
        }
    return out


def record_head(reranker, folder: Path, fusion_record: dict, output: Path) -> dict:
    """The evaluation record before its figures, added to what earlier runs of ``output`` recorded."""
    fusion = {k: fusion_record.get(k) for k in ("method", "k", "weights", "chosen_on")}
    if fusion_record.get("first_stages"):
        fusion["first_stages"] = {
            name: {"weights": c["weights"]} for name, c in fusion_record["first_stages"].items()
        }
    head = {
        "model": str(folder),
        "fusion": fusion,
        "machine": machine_info(),
        "command": "python -m training.evaluate_reranker " + " ".join(sys.argv[1:]),
    }
    if hasattr(reranker, "passages"):  # a cross-encoder: how it read documents longer than its max length
        p = reranker.passages
        head["passages"] = (
            {"method": "max", "words": p.words, "stride": p.stride} if p else {"method": "first"}
        )
    earlier = read_json(output)
    commands = earlier.get("commands") or ([earlier["command"]] if earlier.get("command") else [])
    return {**earlier, **head, "commands": [*commands, head["command"]]}


def figures(result: dict):
    """(collection, "<first stage>@<depth>", claims part, figures) of every comparison in an evaluation.json."""
    for name in COLLECTIONS:
        for first_stage, value in (result.get("scifact_test" if name == "scifact" else name) or {}).items():
            if isinstance(value, dict):  # not seen_queries, unseen_queries
                for part, s in value.items() if name == "scifact" else [("all", value)]:
                    yield name, first_stage, part, s


def evaluation_rows(result: dict) -> list[dict]:
    """metrics.json rows (before = the first stage alone) of every figure of an evaluation.json."""
    from ctxir.rerank.stage_fusion import TIE_BREAK_WEIGHT

    fusion, rows = result.get("fusion") or {}, []
    for name, first_stage, part, s in figures(result):
        stage, _, depth = first_stage.partition("@")
        chosen = (fusion.get("first_stages") or {}).get(stage) or {}
        weights, changed = chosen.get("weights") or fusion.get("weights"), s.get("fused_vs_first_stage") or {}
        if not weights:
            fused = "fused with the first stage (RRF)"
        elif weights[0] < TIE_BREAK_WEIGHT * weights[1]:
            fused = f"default: fused with the first stage (RRF {weights[0]:g} : {weights[1]:g})"
        else:
            fused = f"RRF {weights[0]:g} : {weights[1]:g}"
            if {"wins", "losses"} <= changed.keys():
                fused += f"; {changed['wins'] + changed['losses']} of {s['queries']} queries changed"
            fused = f"default: {stage}'s order kept, only its ties re-ordered ({fused})"
        where = "" if part == "all" else f", {part}-abstract claims ({s['queries']})"
        for mode, label in (("alone", "re-ranker alone"), ("fused", fused)):
            config = f"{first_stage.replace('@', ' top ')}{where}, {label}"
            before, after = s["first_stage"]["nDCG@10"], s[mode]["nDCG@10"]
            row = evaluation_row(*COLLECTIONS[name], "reranking", "nDCG@10", before, after, config=config)
            row.update(queries=s.get("queries"), first_stage=stage, depth=int(depth) if depth else None)
            if part != "all":
                cites = "a training claim cites" if part == "seen" else "no training claim cites"
                row["subset"] = f"the {s['queries']} test claims whose abstracts {cites}"
            if (name, first_stage, part, mode) == ("scifact", "bm25@20", "all", "fused"):
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

    return [r for r in rows if key(r) not in {key(n) for n in new}] + list(new)


def main(argv: list[str] | None = None) -> int:
    return cli_main(EvaluateRerankerArgs, run, argv)


if __name__ == "__main__":
    sys.exit(main())
