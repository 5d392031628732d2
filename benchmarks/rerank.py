"""``python -m benchmarks.rerank``: ``CrossEncoderReranker.score_pairs`` latency for 10/20/50/100 BM25 candidates,
beside the compute bound at the sgemm rate measured in the same run.

    python -m benchmarks.rerank --output results/bench/rerank.json
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from benchmarks.common import (
    beir_texts,
    cell,
    figure,
    finish,
    load_average,
    main_for,
    markdown_table,
    median_of,
    numbers,
    resolve_model_path,
    save_figure,
    set_torch_threads,
    sgemm_gflops,
    summary_ms,
)
from ctxir import BM25Retriever, CrossEncoderReranker, CtxirError, load_beir
from ctxir.cli import flag
from ctxir.encoders.models import load_cross_encoder
from ctxir.rerank.registry import passages_for
from ctxir.types import doc_text


@dataclass
class RerankArgs:
    output: str = flag("", "JSON path (default: results/bench/rerank.json)")
    model: str = flag("", "cross-encoder folder or id ('' = packaged MiniLM body + fresh 1-label head)")
    candidates: str = flag("10,20,50,100", "re-ranked candidates per query")
    collection: str = flag("scifact", "scifact (train queries, from --data-root) or demo (the app's corpus)")
    num_queries: int = flag(20, "queries timed (latency only)")
    warmup: int = 2
    repeats: int = flag(3, "passes over the queries; p50/p95 are their medians")
    batch_size: int = flag(32, "pairs per forward pass (CrossEncoderReranker's default)")
    backend: str = flag("torch", "how the re-ranker scores: torch, onnx or onnx-int8 (as app.py's)")
    threads: int = flag(0, "torch threads (0 = all cores)")
    compare_st: bool = flag(False, "also time a plain sentence-transformers CrossEncoder of the same shape")
    data_root: str = "../shared/data"
    seed: int = 0
    progress: bool = True


def time_candidates(reranker, queries: dict, candidates: dict, sizes: list, args, plain=None) -> dict:
    """Per n: score_pairs(query, first n ``candidates``) p50/p95 per pass and tokens per input (``plain``: ST's too)."""
    tokenizer = reranker.model.tokenizer
    passages = getattr(reranker, "passages", None)  # a window-reading model scores every window of a text
    results: dict = {str(n): {"passes": [], "tokens": [], "windows": [], "st_passes": []} for n in sizes}
    for repeat in range(args.repeats):
        times: dict[int, list[float]] = {n: [] for n in sizes}
        st_times: dict[int, list[float]] = {n: [] for n in sizes}
        for position, q in enumerate(candidates):
            for n in sizes:
                texts = candidates[q][:n]
                start = time.perf_counter()
                reranker.score_pairs(queries[q], texts)
                took = time.perf_counter() - start
                if plain is not None:
                    start = time.perf_counter()
                    plain.predict(
                        [(queries[q], t) for t in texts], batch_size=args.batch_size, show_progress_bar=False
                    )
                    if position >= args.warmup:
                        st_times[n].append(time.perf_counter() - start)
                if position >= args.warmup:
                    times[n].append(took)
                    if repeat == 0:
                        read = [w for t in texts for w in passages.split("", t)] if passages else texts
                        results[str(n)]["windows"].append(len(read) / len(texts))
                        length = reranker.model.max_seq_length
                        ids = tokenizer([queries[q]] * len(read), read, truncation=True, max_length=length)
                        results[str(n)]["tokens"].append(float(np.mean([len(i) for i in ids["input_ids"]])))
        for n in sizes:
            results[str(n)]["passes"].append(summary_ms(times[n]))
            if plain is not None:
                results[str(n)]["st_passes"].append(summary_ms(st_times[n]))
        if args.progress:
            print(
                f"pass {repeat + 1}/{args.repeats}: "
                + ", ".join(f"{n}: {results[str(n)]['passes'][-1]['p50_ms']:.0f} ms" for n in sizes),
                flush=True,
            )
    return results


def add_compute_bound(results: dict, reranker, threads: int) -> tuple[dict, int]:
    """(sgemm peak, non-embedding parameters); a pair's bound: 2 · parameters · tokens + attention at that peak."""
    peak = sgemm_gflops(threads)
    body = reranker.model[0].auto_model
    config = body.config
    weights = sum(
        p.numel() for name, p in body.named_parameters() if not name.startswith(("embeddings.", "pooler."))
    )
    for n, row in results.items():
        row |= {
            "candidates": int(n),
            "p50_ms": median_of(row["passes"], "p50_ms"),
            "p95_ms": median_of(row["passes"], "p95_ms"),
            "mean_pair_tokens": round(float(np.mean(row.pop("tokens"))), 1),
            "windows_per_document": round(float(np.mean(row.pop("windows"))), 2),
        }
        row["ms_per_pair"] = round(row["p50_ms"] / int(n), 2)
        if row["st_passes"]:
            row["st_p50_ms"] = median_of(row["st_passes"], "p50_ms")
            row["st_p95_ms"] = median_of(row["st_passes"], "p95_ms")
        tokens = row["mean_pair_tokens"]  # per model input: a window's, for a window-reading model
        flops = row["windows_per_document"] * (  # per (query, document) pair
            2 * weights * tokens + 4 * config.num_hidden_layers * tokens**2 * config.hidden_size
        )
        row["gflop_per_pair"] = round(flops / 1e9, 3)
        row["bound_ms_per_pair"] = round(flops / (peak["gflops"] * 1e9) * 1000, 2)
        row["share_of_sgemm_peak"] = round(row["bound_ms_per_pair"] / row["ms_per_pair"], 3)
    return peak, weights


def collection_texts(args: RerankArgs) -> tuple[dict, dict]:
    """(corpus, queries) the candidates come from: SciFact's train split, or the app's demo corpus."""
    if args.collection == "demo":
        from ctxir.data.beir import load_corpus, load_queries
        from ctxir.data.demo import ASSETS

        return load_corpus(ASSETS / "demo_corpus.jsonl"), load_queries(ASSETS / "demo_queries.jsonl")
    if args.collection != "scifact":
        raise CtxirError(f"--collection {args.collection!r} is not known: use scifact or demo")
    corpus, queries, _ = load_beir(beir_texts(Path(args.data_root), "scifact"), "train")
    return corpus, queries


def run_rerank(args: RerankArgs, argv: list[str] | None = None) -> dict:
    sizes = numbers(args.candidates, "--candidates")
    if args.num_queries < 1 or args.repeats < 1 or args.warmup < 0:
        raise CtxirError("--num-queries and --repeats must be ≥ 1, --warmup ≥ 0")
    load_before, started = load_average(), time.perf_counter()
    threads = set_torch_threads(args.threads)
    path = resolve_model_path(args.model)
    reranker = CrossEncoderReranker(
        load_cross_encoder(path, "cpu", num_labels=1),
        batch_size=args.batch_size,
        passages=passages_for(path),
        backend=args.backend,
    )
    plain = None
    if args.compare_st:
        from sentence_transformers import CrossEncoder

        plain = CrossEncoder(resolve_model_path(""), num_labels=1, max_length=512, device="cpu")
    corpus, queries = collection_texts(args)
    rng = np.random.default_rng(args.seed)
    qids = [list(queries)[i] for i in rng.permutation(len(queries))[: args.num_queries + args.warmup]]
    hits = BM25Retriever(corpus).search({q: queries[q] for q in qids}, max(sizes))
    candidates = {q: [doc_text(corpus[h.doc_id]) for h in hits[q]] for q in qids}
    results = time_candidates(reranker, queries, candidates, sizes, args, plain)
    peak, weights = add_compute_bound(results, reranker, threads)
    data = {
        "sgemm": peak,
        "non_embedding_parameters": weights,
        "model": path if args.model else f"{path} (all-MiniLM-L6-v2 body, fresh 1-label head: cost only)",
        "max_length": reranker.model.max_seq_length,
        "backend": reranker.backend,
        "compared": None if plain is None else "sentence_transformers.CrossEncoder(max_length=512).predict",
        "passages": (
            {"method": "max", "words": reranker.passages.words, "stride": reranker.passages.stride}
            if reranker.passages
            else {"method": "first"}
        ),
        "candidates": f"BM25 top-n {args.collection} documents for {args.num_queries} random {args.collection} queries "
        f"(seed {args.seed}), after {args.warmup} warm-up queries",
    }
    timing = (
        f"CrossEncoderReranker.score_pairs(query, n texts), batch size {args.batch_size}, {threads} threads; "
        f"p50/p95 over the queries per pass, median of {args.repeats} passes"
    )
    return finish(
        "rerank", format_rerank, args, argv, load_before, started, results, data=data, timing=timing
    )


def format_rerank(record: dict) -> str:
    rows = list(record["results"].values())
    st = any("st_p50_ms" in r for r in rows)
    return markdown_table(
        f"candidates | p50 ms | p95 ms{' | ST CrossEncoder p50 ms | p95 ms' if st else ''} | ms / pair | "
        "windows / document | tokens / input | compute bound ms / pair | share of sgemm peak",
        [
            [
                str(r["candidates"]),
                cell(r["p50_ms"], "{:.1f}"),
                cell(r["p95_ms"], "{:.1f}"),
                *([cell(r.get("st_p50_ms"), "{:.1f}"), cell(r.get("st_p95_ms"), "{:.1f}")] if st else []),
                cell(r["ms_per_pair"], "{:.2f}"),
                cell(r.get("windows_per_document", 1.0), "{:.2f}"),
                cell(r["mean_pair_tokens"], "{:.0f}"),
                cell(r.get("bound_ms_per_pair"), "{:.2f}"),
                cell(r.get("share_of_sgemm_peak"), "{:.0%}"),
            ]
            for r in rows
        ],
    )


def plot_rerank(records: list[dict], path: str) -> None:
    plt, fig, ax = figure(4.8, 3.2, 1)
    rows = list(records[-1]["results"].values())
    ax.plot([r["candidates"] for r in rows], [r["p50_ms"] for r in rows], "o-", label="p50")
    ax.plot([r["candidates"] for r in rows], [r["p95_ms"] for r in rows], "s--", label="p95")
    ax.set(xlabel="candidates re-ranked", ylabel="ms per query")
    ax.legend(fontsize=8)
    save_figure(plt, fig, path)


def main(argv: list[str] | None = None) -> int:
    return main_for("rerank", RerankArgs, run_rerank, argv)


if __name__ == "__main__":
    sys.exit(main())
