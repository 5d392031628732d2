"""``ctxir evaluate``: score a retrieval pipeline (or an STS scorer) on a benchmark; fusion is tuned on training queries."""

from __future__ import annotations

import itertools
import platform
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

from tqdm.auto import tqdm

from ctxir.checks import check_choice
from ctxir.cli import cli_main, flag
from ctxir.data.beir import load_beir
from ctxir.data.sentence_pairs import load_pairs, load_sts
from ctxir.encoders.bi_encoder import BiEncoder, EmbeddingCache, cache_root
from ctxir.encoders.models import set_threads
from ctxir.evaluation import compare
from ctxir.evaluation.metrics import evaluate_run, format_table, paired_retrieval, sts_correlation
from ctxir.evaluation.report import report_for_pipeline, report_paths
from ctxir.files import cpu_count, write_json
from ctxir.rerank.pipeline import Pipeline, StageFusion, build_first_stages, mode_fusion
from ctxir.rerank.rankers import RERANK_BACKENDS, CrossEncoderReranker
from ctxir.rerank.registry import RERANK_MODES, RERANKER_CHOICES, RERANKERS, load_reranker, reranker_choices
from ctxir.retrieval.fusion import fuse, scored_only
from ctxir.retrieval.registry import (
    DEFAULT_FIRST_STAGE,
    FIRST_STAGE_CHOICES,
    HybridSettings,
    first_stage_choices,
    fusing_first_stages,
    get_first_stage,
)
from ctxir.retrieval.retrievers import HybridRetriever
from ctxir.types import CtxirError, Hit, Qrels, Queries, run_from_hits

RRF_KS = (1, 2, 5, 10, 20, 40, 60, 100)
WEIGHTS = (0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 4.0)  # each retriever's weight but the last, which stays 1


def tune_fusion_rankings(
    per_retriever: Sequence[dict[str, list[Hit]]],
    qrels: Qrels,
    metric: str = "nDCG@10",
    rrf_ks: Sequence[float] = RRF_KS,
    weights: Sequence[float] = WEIGHTS,
) -> dict:
    """Grid search of fusion, rrf k and each weight but the last (1) over ``per_retriever``: the best, and the "grid"."""
    k_value = int(metric.split("@")[1]) if "@" in metric else 10
    qids = list(per_retriever[0])
    weight_sets = [[*ws, 1.0] for ws in itertools.product(weights, repeat=len(per_retriever) - 1)]
    grid = []
    for fusion, k, ws in itertools.chain(
        (("rrf", k, ws) for k, ws in itertools.product(rrf_ks, weight_sets)),
        (("weighted", None, ws) for ws in weight_sets),
    ):
        fused = {q: fuse([r[q] for r in per_retriever], fusion, k, ws) for q in qids}
        score = evaluate_run(qrels, run_from_hits(fused), k_values=(k_value,)).aggregate[metric]
        grid.append({"fusion": fusion, "k": k, "weights": ws, metric: score})
    # Ties go to the earlier (simpler, smaller-k) setting: max() keeps the first maximum.
    best = max(grid, key=lambda row: row[metric])
    return {**best, "metric": metric, "grid": grid}


def tune_stage_fusion(
    first: dict[str, list[Hit]], reranked: dict[str, list[Hit]], qrels: Qrels, metric: str = "nDCG@10"
) -> dict:
    """Choose how to fuse a re-ranker (``reranked``: {qid: hits}) with its ``first`` stage; weight 0 = re-ranker alone."""
    first = {q: scored_only(first[q], reranked[q]) for q in reranked}
    # Tie-break toward plain re-ranking: weight 0 comes first in the grid.
    return tune_fusion_rankings([first, reranked], qrels, metric, weights=(0.0, *WEIGHTS))


def tune_hybrid(hybrid: HybridRetriever, queries: Queries, qrels: Qrels, metric: str = "nDCG@10") -> dict:
    """Tune ``hybrid`` in place on ``queries``/``qrels`` (a training split) and return the choice."""
    per_retriever = [r.search(queries, hybrid.depth) for r in hybrid.retrievers]
    best = tune_fusion_rankings(per_retriever, qrels, metric)
    hybrid.fusion, hybrid.weights = best["fusion"], best["weights"]
    hybrid.k = best["k"] if best["k"] is not None else hybrid.k
    return best


PAIRED_KS = (1, 5, 10, 20, 50)  # --task paired: the k of Recall@k
# Printed; the JSON file keeps every metric and per-query value.
SHOWN_METRICS = ("nDCG@10", "MRR@10", "MAP@100", "Recall@10", "Recall@100", "P@10", "spearman", "pearson")


@dataclass
class EvaluateArgs:
    data: str = flag(help="BEIR folder, an STS-B .csv file, or a pairs file for --task paired")
    split: str = flag("test", "qrels split (BEIR) or STS-B split when --data is a folder")
    retriever: str = flag(
        DEFAULT_FIRST_STAGE, "first stage (default: the suite's best alone)", choices=FIRST_STAGE_CHOICES
    )
    model: str = flag("sentence-transformers/all-MiniLM-L6-v2", "bi-encoder id or folder")
    pooling: Literal["model", "mean", "cls", "max"] = flag(
        "model", "'model' keeps the bi-encoder's own pooling"
    )
    layer: int = flag(-1, "hidden layer to pool (0 = embeddings, -1 = last)")
    query_prompt: str | None = flag(
        None, "text --model puts before each query and STS sentence (default its own; '' for none)"
    )
    document_prompt: str | None = flag(None, "text --model puts before each document (default its own)")
    index: Literal["auto", "exact", "ann"] = flag(
        "auto", "dense index: exact, ann (IVF, cached), or auto = ann from AUTO_ANN_THRESHOLD documents up"
    )
    backend: Literal["torch", "onnx-int8"] = flag(
        "torch", "bi-encoder backend: torch, or onnx-int8 (ONNX Runtime on the CPU, int8, last layer only)"
    )
    extra_models: str = flag("", "hybrid only: more bi-encoders fused beside --model (comma-separated)")
    rerank: str = flag("none", "second stage: none, or a re-ranker kind", choices=RERANKER_CHOICES)
    reranker_model: str = flag("", "the --rerank model: an id or folder (default: the one shipped)")
    rerank_backend: Literal["torch", "onnx", "onnx-int8"] = flag(
        "torch", "how a cross-encoder scores: torch, onnx (float32, the same scores) or onnx-int8"
    )
    rerank_mode: Literal["fused", "alone"] = flag(
        "fused", "fused = the re-ranker fused with the first stage; alone = the re-ranker's order only"
    )
    tune_on: str = flag("", "tune the hybrid's and the re-ranker's fusion on this qrels split (e.g. train)")
    task: Literal["auto", "retrieval", "sts", "paired"] = flag(
        "auto", "auto = from --data; paired = find each query's target in a pairs file (Recall@k, MRR)"
    )
    top_k: int = flag(100, "first-stage depth (and the re-ranked candidates)")
    max_queries: int = flag(0, "evaluate only the first N queries (0 = all)")
    device: str = flag("auto", "auto, cpu, cuda, mps")
    batch_size: int = 32
    torch_threads: int = flag(0, "CPU threads for torch (0 = torch's default)")
    output: str = flag("", "JSON path (default: results/<data>-<config>.json)")
    cache_dir: str = flag("", "ctxir cache folder (default $CTXIR_CACHE, else ~/.cache/ctxir)")
    report: str = flag("", "retrieval: also write a report of the worst queries to this .html (and .json)")
    report_queries: int = flag(10, "--report: how many of the worst queries")


def _encoder(args: EvaluateArgs, model: str = ""):
    return BiEncoder(
        model or args.model,
        pooling=None if args.pooling == "model" else args.pooling,
        layer=args.layer,
        device=args.device,
        cache=EmbeddingCache(cache_root(args.cache_dir) / "embeddings") if args.cache_dir else True,
        batch_size=args.batch_size,
        backend=args.backend,
        onnx_dir=cache_root(args.cache_dir) / "onnx",
        # the flags are --model's: each of --extra-models keeps its own prompts
        query_prompt=None if model else args.query_prompt,
        document_prompt=None if model else args.document_prompt,
    )


def prompts_used(item) -> dict:
    """``{model: {"query": prompt, "document": prompt}}`` of a bi-encoder or a first stage's bi-encoders."""
    encoders = [getattr(part, "encoder", part) for part in getattr(item, "retrievers", [item])]
    return {
        e.name: {"query": e.query_prompt, "document": e.document_prompt}
        for e in encoders
        if isinstance(e, BiEncoder)
    }


def run_pairs(args: EvaluateArgs, task: str) -> dict:
    """``--task sts`` (the scores' correlation with STS-B's) or ``paired`` (each query's target found: Recall@k, MRR)."""
    if task == "paired":
        pairs = load_pairs(args.data)
    else:
        pairs = load_sts(args.data, None if Path(args.data).is_file() else args.split)
    if task == "sts" and args.rerank != "none":
        kind, reranker = RERANKERS[args.rerank], _reranker(args)
        predicted = [
            float(kind.pair_scores(reranker, a, [b])[0]) for a, b, _ in tqdm(pairs, desc="scoring pairs")
        ]
        system, prompts = f"{args.rerank} {args.reranker_model}", {}
    else:
        encoder = _encoder(args)
        backend = "" if args.backend == "torch" else f", {args.backend}"
        system = f"{args.model} ({encoder.pooling} pooling, layer {encoder.layer}{backend})"
        prompts = prompts_used(encoder)
        if task == "sts":
            # both sentences alike: the query prompt (a symmetric task, as e5's and bge's cards advise)
            left = encoder.encode([a for a, _, _ in pairs], show_progress_bar=True, role="query")
            right = encoder.encode([b for _, b, _ in pairs], show_progress_bar=True, role="query")
            predicted = (left * right).sum(1)  # vectors are normalised: dot = cosine
    if task == "paired":
        metrics = paired_retrieval(encoder, *zip(*pairs, strict=True), PAIRED_KS)
    else:
        metrics = sts_correlation(list(predicted), [score for _, _, score in pairs])
    return {
        "task": task,
        "system": system,
        "metrics": {system: metrics},
        "num_pairs": len(pairs),
        "prompts": prompts,
    }


def build_pipeline(args: EvaluateArgs, corpus):
    stage = get_first_stage(args.retriever)
    encoders = []
    if stage.uses_bi_encoder:
        extra = [m.strip() for m in args.extra_models.split(",") if m.strip()] if stage.fuses else []
        encoders = [_encoder(args, model) for model in ["", *extra]]
    # BM25's index is kept beside the embeddings (large corpora only, see ctxir.retrieval.retrievers.BM25_CACHE_MIN_DOCS)
    bm25_cache = cache_root(args.cache_dir) / "bm25" if args.cache_dir else None
    first = build_first_stages(
        corpus,
        [args.retriever],
        encoders,
        bm25_options={"cache": bm25_cache},
        # each part's top 100 at least, as the app's hybrid: re-ranking the top 20 sees the same hybrid
        hybrid=HybridSettings(depth=max(args.top_k, HybridSettings.depth)),
        index=args.index,
        show_progress=True,
    )[args.retriever]
    reranker = _reranker(args)
    return Pipeline(
        first, reranker, depth=args.top_k, fusion=mode_fusion(reranker, args.rerank_mode, args.retriever)
    )


def _reranker(args: EvaluateArgs):
    """The --rerank model, a cross-encoder set to score with --rerank-backend."""
    reranker = load_reranker(args.rerank, args.reranker_model, args.device, args.batch_size)
    if isinstance(reranker, CrossEncoderReranker):
        reranker.backend = args.rerank_backend
        reranker.onnx_dir = cache_root(args.cache_dir) / "onnx" if args.cache_dir else None
        reranker.onnx_scorer()  # exported (once) before the first query: every query scores the same way
    return reranker


def run_retrieval(args: EvaluateArgs) -> dict:
    corpus, queries, qrels = load_beir(args.data, args.split)
    if args.max_queries > 0:
        queries = dict(list(queries.items())[: args.max_queries])
        qrels = {q: qrels[q] for q in queries}
    pipeline = build_pipeline(args, corpus)
    tuned = _tune(args, pipeline) if args.tune_on else {}
    start = time.perf_counter()
    runs = pipeline.run(queries)
    seconds = time.perf_counter() - start
    names = {
        "first_stage": args.retriever,
        "rerank": f"{args.retriever} + {args.rerank}",
        "fused": f"{args.retriever} + {args.rerank} (fused)",
    }
    named_runs = {names[stage]: run for stage, run in runs.items()}
    results = {name: evaluate_run(qrels, run) for name, run in named_runs.items()}
    # the run this command stands for: the --rerank-mode's (fused, else the re-ranker alone), else the first stage
    stage = "rerank" if "rerank" in runs else "first_stage"
    stage = "fused" if args.rerank_mode == "fused" and "fused" in runs else stage
    if pipeline.fusion is not None:
        print(f"fused mode: {pipeline.fusion.describe()}; {pipeline.fusion.chosen_on or 'settings given'}")
    if args.report:
        report_for_pipeline(
            args.report,
            pipeline,
            runs[stage],
            names[stage],
            corpus,
            queries,
            qrels,
            config=asdict(args),
            worst=args.report_queries,
            compare=named_runs,
        )
    return {
        "task": "retrieval",
        "metrics": {k: v.aggregate for k, v in results.items()},
        "per_query": {k: v.per_query for k, v in results.items()},
        "num_queries": len(queries),
        "num_docs": len(corpus),
        "search_seconds": round(seconds, 2),
        "tuned_fusion": _without_grid(tuned.get("hybrid")),
        "tuned_stage_fusion": _without_grid(tuned.get("stages")),
        "tuning_queries": tuned.get("queries"),
        "first_stage_config": pipeline.first_stage.config,
        "prompts": prompts_used(pipeline.first_stage),
        "rerank_mode": args.rerank_mode if pipeline.reranker is not None else None,
        "system": names[stage],
        "stage_fusion": pipeline.fusion.record() if pipeline.fusion is not None else None,
        # the top-k runs, so `ctxir report` can drill into them later without re-running
        "runs": named_runs,
    }


def _tune(args: EvaluateArgs, pipeline) -> dict:
    """Choose the hybrid's fusion, then the re-ranker/first-stage fusion, on --tune-on queries (in place)."""
    hybrid = isinstance(pipeline.first_stage, HybridRetriever)
    if not hybrid and pipeline.reranker is None:
        fusing = " or ".join(fusing_first_stages())
        raise CtxirError(
            f"--tune-on needs something to tune: use --retriever {fusing} and/or a --rerank model"
        )
    if args.tune_on == args.split:
        raise CtxirError(
            f"--tune-on {args.tune_on!r} is the split being evaluated: tune on another split "
            "(e.g. train) so the reported numbers are not fitted to the test queries"
        )
    _, queries, qrels = load_beir(args.data, args.tune_on)
    tuned: dict = {"queries": {"split": args.tune_on, "count": len(queries)}}
    where = f"{len(queries)} {args.tune_on!r} queries"
    if hybrid:
        best = tuned["hybrid"] = tune_hybrid(pipeline.first_stage, queries, qrels)
        k = f" k={best['k']:g}" if best["fusion"] == "rrf" else ""
        print(
            f"hybrid fusion tuned on {where}: {best['fusion']}{k} weights={best['weights']} "
            f"({best['metric']} {best[best['metric']]:.4f})"
        )
    if pipeline.reranker is not None:
        runs_first = pipeline.first_stage.search(queries, pipeline.depth)
        reranked = {q: pipeline.reranker.rerank(queries[q], runs_first[q], pipeline.corpus) for q in queries}
        best = tuned["stages"] = tune_stage_fusion(runs_first, reranked, qrels)
        pipeline.fusion = StageFusion.from_tuning({**best, "chosen_on": f"tuned on {where} (--tune-on)"})
        plain = max(row[best["metric"]] for row in best["grid"] if row["weights"][0] == 0)
        print(
            f"re-ranker/first-stage fusion tuned on {where}: {best['fusion']} weights={best['weights']} "
            f"({best['metric']} {best[best['metric']]:.4f}; re-ranker alone {plain:.4f})"
        )
    return tuned


def _without_grid(best: dict | None) -> dict | None:
    return best and {k: v for k, v in best.items() if k != "grid"}


def run(args: EvaluateArgs) -> dict:
    path = Path(args.data)
    if not path.exists():
        raise CtxirError(
            f"--data {args.data!r} does not exist: pass a BEIR folder (e.g. ../shared/data/scifact) "
            "or an STS-B csv file"
        )
    if args.top_k < 1:
        raise CtxirError(f"--top-k must be ≥ 1, got {args.top_k!r}")
    check_choice(args.retriever, "--retriever", first_stage_choices())
    if args.extra_models and not get_first_stage(args.retriever).fuses:
        fusing = " or ".join(fusing_first_stages())
        raise CtxirError(f"--extra-models {args.extra_models!r} needs --retriever {fusing}")

    check_choice(args.rerank, "--rerank", reranker_choices())
    check_choice(args.rerank_mode, "--rerank-mode", RERANK_MODES)
    if args.rerank != "none":
        kind = RERANKERS[args.rerank]
        # recorded in the results: which model "the shipped default" was
        args.reranker_model = args.reranker_model or kind.default_model()
        ok, why = kind.available(args.reranker_model)
        if not ok:  # before any data or model is loaded, and with no network
            raise CtxirError(
                f"--rerank {args.rerank}: {why}. To provide one, {kind.how_to_get} and pass `--rerank {args.rerank} "
                "--reranker-model FOLDER`, or a Hub id that is in the local cache"
            )
    set_threads(args.torch_threads)
    check_choice(args.rerank_backend, "--rerank-backend", RERANK_BACKENDS)
    sts = (path.is_file() and path.suffix == ".csv") or (path / "sts-test.csv").is_file()
    task = args.task if args.task != "auto" else ("sts" if sts else "retrieval")
    if args.report:  # checked before any model is loaded
        if task != "retrieval":
            raise CtxirError(
                f"--report {args.report!r} needs a retrieval benchmark (a BEIR folder), not {task!r}"
            )
        if args.report_queries < 1:
            raise CtxirError(f"--report-queries must be ≥ 1, got {args.report_queries!r}")
        data = report_paths(args.report)[1]
        if data.resolve() == Path(args.output or default_output(args)).resolve():
            raise CtxirError(
                f"--report {args.report!r} writes its data to {str(data)!r}, the --output file: give "
                "the report another name"
            )
    result = run_retrieval(args) if task == "retrieval" else run_pairs(args, task)
    result["config"] = asdict(args)
    result["environment"] = {
        "python": platform.python_version(),
        "machine": platform.machine(),
        "processor": platform.processor(),
        "cpus": cpu_count(),
    }
    first = next(iter(result["metrics"].values()))
    shown = [m for m in SHOWN_METRICS if m in first] or list(first)
    print(format_table(result["metrics"], shown))
    for model, prompts in result.get("prompts", {}).items():
        print(f"prompts of {model}: query {prompts['query']!r}, document {prompts['document']!r}")
    out = write_json(args.output or default_output(args), result, indent=1)
    print(f"wrote {out}")
    return result


def default_output(args: EvaluateArgs) -> str:
    data = Path(args.data).stem if Path(args.data).is_file() else Path(args.data).resolve().name
    stage = get_first_stage(args.retriever)
    parts = [data, args.split, args.retriever]
    if stage.uses_bi_encoder:
        parts += [Path(args.model).name, args.pooling, f"L{args.layer}"]
        parts += [args.backend] if args.backend != "torch" else []
    if stage.fuses:
        parts += [f"+{Path(m.strip()).name}" for m in args.extra_models.split(",") if m.strip()]
        parts += [f"tuned-{args.tune_on}"] if args.tune_on else ["rrf", "k60", "wequal"]
    if args.rerank != "none":
        parts += [args.rerank, Path(args.reranker_model).name, f"top{args.top_k}", args.rerank_mode]
        parts += [f"tuned-{args.tune_on}"] if args.tune_on and not stage.fuses else []
    return str(Path("results") / ("-".join(parts) + ".json"))


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--compare" in argv:  # finished runs compared on their per-query values
        return cli_main(compare.CompareArgs, compare.run, argv)
    return cli_main(EvaluateArgs, run, argv)
