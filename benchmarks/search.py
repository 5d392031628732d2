"""``python -m benchmarks.search``: single-query latency, recall@10 against exact search, memory and build time per
index type, over real MiniLM embeddings topped up to ``--num-docs`` with synthetic ones (a real embedding plus
noise of the real ones' covariance; ``--real-docs 0``: all synthetic, no model)."""

from __future__ import annotations

import gc
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from benchmarks.common import (
    cell,
    figure,
    finish,
    load_average,
    machine,
    main_for,
    markdown_table,
    normalise,
    rss_mb,
    save_figure,
)
from benchmarks.indexes import FULL_SCANS, INDEX_TYPES, Built, IndexSettings, build
from ctxir import CtxirError
from ctxir.cli import flag
from ctxir.data import load_corpus, load_queries
from ctxir.encoders import BiEncoder, EmbeddingCache, cache_root

DEFAULT_INDEXES = ",".join(INDEX_TYPES)
REAL_SETS = ("scifact", "msmarco_sample")


@dataclass
class SearchArgs(IndexSettings):
    num_docs: int = flag(10_000, "corpus size (real documents first, then synthetic)")
    output: str = flag("", "JSON path (default: results/bench/search-<N>.json)")
    indexes: str = flag(DEFAULT_INDEXES, f"comma-separated, of {', '.join(INDEX_TYPES)}")
    num_queries: int = flag(300, "timed single queries per pass (≥ 200 for p95)")
    warmup: int = flag(20, "untimed queries first")
    repeats: int = flag(3, "timed passes; the reported p50/p95 are their medians")
    scan_queries: int = flag(0, "full scans (exact, exact-st, int8-flat): time the first N queries (0: all)")
    k: int = flag(10, "hits per query (recall@k against exact)")
    real_docs: int = flag(-1, "at most this many real documents (-1 = all 10,183; 0 = synthetic, no model)")
    data_root: str = flag("../shared/data", "folder holding scifact/ and msmarco_sample/ (BEIR layout)")
    noise: float = flag(1.0, "synthetic documents: rms norm of the noise added to a real embedding")
    search_threads: int = flag(1, "torch and faiss threads while single queries are timed")
    index_dir: str = flag("", "where ctxir-ann's file is written (default: a temporary folder)")
    cache_dir: str = flag("", "ctxir cache root for the real embeddings ($CTXIR_CACHE)")
    query_encode: int = flag(100, "also time encoding this many real queries one at a time (0 = skip)")


def real_embeddings(args: SearchArgs) -> tuple[np.ndarray, np.ndarray, str]:
    """(documents, queries, where from): MiniLM embeddings of the real sets, through ctxir's embedding cache."""
    root = Path(args.data_root)
    missing = [name for name in REAL_SETS if not (root / name / "corpus.jsonl").is_file()]
    if missing:
        raise CtxirError(
            f"--data-root {args.data_root!r} has no {', '.join(missing)} (corpus.jsonl): point it at "
            "the shared data folder, or pass --real-docs 0 for synthetic data only"
        )
    encoder = BiEncoder(
        cache=EmbeddingCache(cache_root(args.cache_dir) / "embeddings") if args.cache_dir else True
    )
    docs, queries = [], []
    for name in REAL_SETS:
        if args.real_docs < 0 or sum(len(d) for d in docs) < args.real_docs:
            docs.append(encoder.encode_corpus(load_corpus(root / name / "corpus.jsonl"), args.progress)[1])
        queries.append(
            encoder.encode_cached(list(load_queries(root / name / "queries.jsonl").values()), args.progress)
        )
    where = f"all-MiniLM-L6-v2 (packaged) embeddings of {' + '.join(REAL_SETS)} from {root}"
    return np.concatenate(docs), np.concatenate(queries), where


def synthetic(centres: np.ndarray, count: int, noise: float, rng, chunk: int = 100_000) -> np.ndarray:
    """``count`` unit vectors: a random centre + noise with the centres' covariance (rms norm ``noise``)."""
    _, singular, vt = np.linalg.svd(centres - centres.mean(0), full_matrices=False)
    scale = singular / np.sqrt(len(centres))  # (dim,) standard deviation along each principal direction
    scale, vt = (scale * noise / np.sqrt((scale**2).sum())).astype(np.float32), vt.astype(np.float32)
    out = np.empty((count, centres.shape[1]), dtype=np.float32)
    for begin in range(0, count, chunk):
        n = min(chunk, count - begin)
        noise_block = (rng.standard_normal((n, len(scale)), dtype=np.float32) * scale) @ vt
        out[begin : begin + n] = normalise(centres[rng.integers(0, len(centres), n)] + noise_block)
    return out


def dataset(args: SearchArgs) -> tuple[np.ndarray, np.ndarray, dict]:
    """(documents (num_docs, 384), queries (num_queries + warmup, 384), a description for the JSON)."""
    rng = np.random.default_rng(args.seed)
    wanted = args.num_queries + args.warmup
    if args.real_docs == 0:
        # About 100 documents per centre, as the 1M set has around each of its 10,183 real centres.
        centres = normalise(rng.standard_normal((max(10, args.num_docs // 100), 384), dtype=np.float32))
        docs = synthetic(centres, args.num_docs, args.noise, rng)
        queries = synthetic(centres, wanted, args.noise, rng)
        about = {
            "real_docs": 0,
            "source": f"synthetic only: {len(centres):,} random unit centres",
            "queries": f"{wanted} synthetic (a random centre + the same noise), not in the corpus",
        }
    else:
        real, real_queries, where = real_embeddings(args)
        limit = len(real) if args.real_docs < 0 else min(args.real_docs, len(real))
        n_real = min(limit, args.num_docs)
        docs = np.empty((args.num_docs, real.shape[1]), dtype=np.float32)
        docs[:n_real] = real[:n_real]
        if args.num_docs > n_real:
            docs[n_real:] = synthetic(real[:limit], args.num_docs - n_real, args.noise, rng)
        if len(real_queries) < wanted:
            raise CtxirError(
                f"--num-queries + --warmup = {wanted} but only {len(real_queries)} real queries exist"
            )
        queries = real_queries[rng.permutation(len(real_queries))[:wanted]]
        about = {
            "real_docs": n_real,
            "source": where,
            "queries": f"{wanted} real SciFact/MS MARCO query embeddings, drawn at random (seed {args.seed}); "
            "no query is in the corpus",
        }
    about |= {
        "num_docs": args.num_docs,
        "synthetic_docs": args.num_docs - about["real_docs"],
        "dim": docs.shape[1],
        "noise": args.noise,
        "construction": "synthetic = normalise(c + u): c a real (or random) unit "
        "embedding chosen uniformly, u ~ N(0, Σ) with Σ the centres' covariance scaled so E|u|² = noise²",
    }
    return docs, queries, about


def neighbourhood(docs: np.ndarray, queries: np.ndarray, rng: np.random.Generator, sample: int = 500) -> dict:
    """How crowded the data is (medians): query→top-1/top-10 cosine, and a document's nearest other document."""
    scores = queries[:sample] @ docs.T
    top = -np.sort(-np.partition(-scores, 10, axis=1)[:, :11], axis=1)
    rows = rng.choice(len(docs), min(sample, len(docs)), replace=False)
    near = docs[rows] @ docs.T
    near[np.arange(len(rows)), rows] = -np.inf
    return {
        "query_top1_cos": round(float(np.median(top[:, 0])), 4),
        "query_top10_cos": round(float(np.median(top[:, 9])), 4),
        "query_gap_10_11": round(float(np.median(top[:, 9] - top[:, 10])), 5),
        "doc_nearest_cos": round(float(np.median(near.max(1))), 4),
    }


def exact_top_k(docs: np.ndarray, queries: np.ndarray, k: int, chunk: int = 200_000) -> np.ndarray:
    """Ground truth: (queries, k) row numbers by exact dot product, best first."""
    best_s = np.full((len(queries), 0), -np.inf, dtype=np.float32)
    best_i = np.zeros((len(queries), 0), dtype=np.int64)
    for begin in range(0, len(docs), chunk):
        scores = queries @ docs[begin : begin + chunk].T
        top = np.argpartition(-scores, min(k, scores.shape[1] - 1), axis=1)[:, :k]
        best_s = np.concatenate([best_s, np.take_along_axis(scores, top, 1)], 1)
        best_i = np.concatenate([best_i, top + begin], 1)
        keep = np.argsort(-best_s, axis=1, kind="stable")[:, :k]
        best_s, best_i = np.take_along_axis(best_s, keep, 1), np.take_along_axis(best_i, keep, 1)
    return best_i


def time_queries(search: Callable, queries: np.ndarray, args: SearchArgs, limit: int = 0) -> tuple:
    """Per pass: p50/p95 of single-query wall time (ms); the rows found in the first pass (first ``limit``)."""
    for q in queries[: args.warmup]:
        search(q[None], args.k)
    timed, passes, found = queries[args.warmup :], [], []
    timed = timed[:limit] if limit else timed
    for repeat in range(args.repeats):
        times = np.empty(len(timed))
        for i, q in enumerate(timed):
            start = time.perf_counter()
            rows = search(q[None], args.k)
            times[i] = time.perf_counter() - start
            if repeat == 0:
                found.append(np.asarray(rows))
        p50, p95 = np.percentile(times, [50, 95]) * 1000
        passes.append({"p50_ms": float(p50), "p95_ms": float(p95)})
    return passes, found


def time_query_encoding(args: SearchArgs) -> dict:
    """p50/p95 of encoding one real query at a time with the packaged MiniLM (no cache): what no index saves."""
    root = Path(args.data_root)
    texts = [t for name in REAL_SETS for t in load_queries(root / name / "queries.jsonl").values()]
    order = np.random.default_rng(args.seed).permutation(len(texts))[: args.query_encode + 10]
    texts = [texts[i] for i in order]
    encoder = BiEncoder(cache=None, device="cpu")
    set_threads(args.search_threads)
    times = []
    for i, text in enumerate(texts):
        start = time.perf_counter()
        encoder.encode([text], show_progress_bar=False)
        if i >= 10:  # the first calls allocate
            times.append((time.perf_counter() - start) * 1000)
    return {
        "p50_ms": round(float(np.median(times)), 3),
        "p95_ms": round(float(np.percentile(times, 95)), 3),
        "n": len(times),
        "threads": args.search_threads,
    }


def set_threads(n: int) -> None:
    """torch's and faiss's thread counts (n ≥ 1)."""
    import faiss
    import torch

    torch.set_num_threads(n)
    faiss.omp_set_num_threads(n)


def _check(args: SearchArgs) -> list[str]:
    names = [n.strip() for n in args.indexes.split(",") if n.strip()]
    unknown = [n for n in names if n not in INDEX_TYPES]
    if unknown or not names:
        raise CtxirError(f"--indexes {args.indexes!r}: use some of {', '.join(INDEX_TYPES)}")
    if args.num_docs < args.k or args.num_docs < 1:
        raise CtxirError(f"--num-docs must be ≥ --k ({args.k}), got {args.num_docs}")
    if args.num_queries < 1 or args.repeats < 1 or args.warmup < 0 or args.search_threads < 1:
        raise CtxirError("--num-queries, --repeats and --search-threads must be ≥ 1, --warmup ≥ 0")
    if "exact" not in names:
        names.insert(0, "exact")  # the baseline every ratio and recall is measured against
    return names


def measure(built: Built, name: str, queries, truth, args: SearchArgs, rss_delta: float) -> dict:
    """One index's row: latency over single queries on ``--search-threads``, recall against ``truth``, memory."""
    set_threads(args.search_threads)
    passes, found = time_queries(built.search, queries, args, args.scan_queries if name in FULL_SCANS else 0)
    k = min(10, args.k)
    recall = np.mean(
        [len(set(f[:k].tolist()) & set(t[:k].tolist())) / k for f, t in zip(found, truth, strict=False)]
    )
    row = {
        "p50_ms": round(float(np.median([p["p50_ms"] for p in passes])), 4),
        "p95_ms": round(float(np.median([p["p95_ms"] for p in passes])), 4),
        "recall_at_10": round(float(recall), 4),
        "timed_queries": len(found),
        "memory_mb": round(built.memory_bytes / 2**20, 1),
        "rss_delta_mb": round(rss_delta, 1),
        "build_s": round(built.build_s, 2),
        "passes": passes,
        "notes": built.notes,
        **built.extra,
    }
    if args.progress:
        print(
            f"[{name}] p50 {row['p50_ms']:.3f} ms, p95 {row['p95_ms']:.3f} ms, recall@10 "
            f"{row['recall_at_10']:.4f}, {row['memory_mb']:,.1f} MB, build {row['build_s']:.1f} s",
            flush=True,
        )
    return row


def measure_all(names: list[str], docs: np.ndarray, queries, truth, args: SearchArgs) -> dict:
    """Every index in turn: built on all cores (``--threads``), then timed; ctxir-ann's file in ``--index-dir``."""
    results, cores = {}, machine()["cores"]
    with tempfile.TemporaryDirectory(prefix="ctxir-bench-") as tmp:
        folder = Path(args.index_dir or tmp)
        folder.mkdir(parents=True, exist_ok=True)
        for name in names:
            gc.collect()
            set_threads(args.threads or cores)
            rss_before = rss_mb()
            if args.progress:
                print(f"[{name}] building over {len(docs):,} × {docs.shape[1]} …", flush=True)
            built = build(name, docs, args, folder, results)
            results[name] = measure(built, name, queries, truth, args, rss_mb() - rss_before)
            del built
    base = results["exact"]["p50_ms"]
    for row in results.values():
        row["speedup_vs_exact"] = round(base / row["p50_ms"], 1) if row["p50_ms"] else None
    return results


def printed(record: dict) -> str:
    """The table and the query-encoding time."""
    q = record["data"].get("query_encode")
    if q is None:
        return format_table(record)
    return format_table(record) + (
        f"\nencoding one query: p50 {q['p50_ms']:.2f} ms, p95 {q['p95_ms']:.2f} ms ({q['n']} queries, "
        f"{q['threads']} thread(s))"
    )


def run_search(args: SearchArgs, argv: list[str] | None = None) -> dict:
    names = _check(args)
    load_before, started = load_average(), time.perf_counter()
    docs, queries, about = dataset(args)
    truth = exact_top_k(docs, queries[args.warmup :], args.k)
    rng = np.random.default_rng(args.seed)
    about["stats"] = neighbourhood(docs, queries[args.warmup :], rng) if len(docs) > 11 else {}
    results = measure_all(names, docs, queries, truth, args)
    if args.query_encode and args.real_docs != 0:
        about["query_encode"] = time_query_encoding(args)
    timing = (
        f"single queries, one at a time ({args.search_threads} torch/faiss thread(s)), after {args.warmup} "
        f"warm-up queries; p50/p95 over {args.num_queries} queries per pass (full scans: "
        f"{args.scan_queries or args.num_queries}), median of {args.repeats} passes"
    )
    output = args.output or f"results/bench/search-{args.num_docs}.json"
    extra = {"data": about, "timing": timing, "index_types": names}
    return finish("search", printed, args, argv, load_before, started, results, output=output, **extra)


COLUMNS = (
    ("p50_ms", "p50 ms", "{:.3f}"),
    ("p95_ms", "p95 ms", "{:.3f}"),
    ("recall_at_10", "recall@10", "{:.4f}"),
    ("memory_mb", "index MB", "{:,.1f}"),
    ("rss_delta_mb", "RSS Δ MB", "{:,.0f}"),
    ("build_s", "build s", "{:.1f}"),
    ("speedup_vs_exact", "× exact", "{}"),
)


def format_table(record: dict) -> str:
    """A Markdown table of one `search` record (the rows docs/results.md shows)."""
    rows = [
        [name, *(cell(row.get(key), fmt) for key, _, fmt in COLUMNS)]
        for name, row in record["results"].items()
    ]
    return markdown_table(["index", *(title for _, title, _ in COLUMNS)], rows)


def plot(records: list[dict], path: str) -> None:
    """search: p50 latency and recall@10 against corpus size, one line per index type."""
    plt, fig, (left, right) = figure()
    records = sorted(records, key=lambda r: r["data"]["num_docs"])
    names = [n for n in INDEX_TYPES if any(n in r["results"] for r in records)]
    for name in names:
        rows = [(r["data"]["num_docs"], r["results"][name]) for r in records if name in r["results"]]
        left.plot([n for n, _ in rows], [row["p50_ms"] for _, row in rows], "o-", label=name)
        right.plot([n for n, _ in rows], [row["recall_at_10"] for _, row in rows], "o-", label=name)
    left.set(xscale="log", yscale="log", xlabel="documents", ylabel="p50 ms (one query)")
    right.set(xscale="log", xlabel="documents", ylabel="recall@10 vs exact")
    right.axhline(0.95, color="grey", lw=0.8, ls="--")
    left.axhline(5, color="grey", lw=0.8, ls="--")
    left.legend(fontsize=7)
    save_figure(plt, fig, path)


def main(argv: list[str] | None = None) -> int:
    return main_for("search", SearchArgs, run_search, argv)


if __name__ == "__main__":
    sys.exit(main())
