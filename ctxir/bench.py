"""``python -m ctxir.bench``: benchmark scripts (not timed tests) that print a table and write JSON.

Examples:
    python -m ctxir.bench search --num-docs 10000 --output results/bench/search-10000.json
    python -m ctxir.bench search --num-docs 1000000 --indexes exact,ctxir-ann,binary \\
        --output results/bench/search-1000000.json
    python -m ctxir.bench search --num-docs 2000 --real-docs 0 --output /tmp/search.json   # no model, seconds
    python -m ctxir.bench encode --output results/bench/encode.json      # ~1 h on 2 busy cores (nDCG: cached after)
    python -m ctxir.bench rerank --output results/bench/rerank.json
    python -m ctxir.bench train --output results/bench/train.json
    python -m ctxir.bench app --output results/bench/app.json            # starts python app.py, then stops it
    python -m ctxir.bench report --inputs results/bench/*.json --markdown docs/performance.md   # tables + PNGs

Every sub-command prints a Markdown table and writes one JSON record: the command as typed, the machine (cores, CPU,
SIMD flags, library versions), the load average before and after, the settings and the results (medians of repeated
passes). ``report`` renders records into docs/performance.md between its markers, with a PNG per kind in docs/ and
a copy of each JSON in docs/bench/.

``encode``: plain sentence-transformers (the 1.0 baseline) against ctxir's ``BiEncoder`` and the fast paths (the
transformer exported to ONNX and run by ONNX Runtime in float32, int8 with dynamic quantisation, int8 with static
quantisation calibrated on MS MARCO passages, a shorter max length): texts/s, tokens/s, speed-up by wall clock and
by CPU time, GFLOP/s as a share of the sgemm peak measured in the same run, and the SciFact test nDCG@10 of each;
``ship_decision`` applies the issue's rule (≥ 1.5× and ≤ 0.005 loss); a variant that met it and was wired as a flag
is listed in ``SHIPPED_AS`` (int8 dynamic: ``--backend onnx-int8``). sentence-transformers' own ``backend="onnx"``
needs optimum-onnx, whose only release (0.1.0) requires transformers < 4.58 (we pin 5.23), so the export is
``torch.onnx.export`` + onnxruntime's quantisers, and pooling stays ``ctxir.encoders.pool``; the ONNX variants run
``ctxir.onnx_backend``, the same code as ``BiEncoder(backend="onnx-int8")``.
``rerank``: ``CrossEncoderReranker.score_pairs`` latency for 10/20/50/100 BM25 candidates. ``app``: every endpoint
through ``gradio_client`` against ``python app.py`` in its own process. ``train``: cross-encoder optimiser steps
per second against batch size and max length.

``search`` measures, per index type: single-query latency (p50/p95 over ``--num-queries`` queries after
``--warmup`` queries, the median of ``--repeats`` passes), recall@10 against exact search, memory (index bytes,
and the process RSS delta while building) and build time. Index types:

* ``exact``: torch matmul + top-k over the float32 matrix (already normalised): the baseline of the ratios.
* ``exact-st``: sentence-transformers ``semantic_search``, as ``DenseRetriever(index="exact")`` calls it today (its
  ``cos_sim`` re-normalises every corpus chunk on every call, so it is slower than ``exact`` at scale).
* ``faiss-hnsw``: faiss ``IndexHNSWFlat`` (M=32, efSearch=128), for comparison: no ctxir retriever uses HNSW
  (``DenseRetriever(index="ann")`` is ``ctxir.ann.AnnIndex``, the faiss IVF index of ``ctxir-ann`` below).
* ``faiss-hnsw-sq8``: faiss ``HNSW32,SQ8`` (graph over 8-bit codes) + float re-scoring of ``--rescore × k``.
* ``ctxir-ann``: ``ctxir.ann.AnnIndex`` (faiss IVF + 8-bit codes, re-scored with float dots), built, saved and
  reopened (read back into memory, sha256-verified) before timing; ``ctxir-ann-norescore`` is the same file searched
  without re-scoring (the file alone, no float32 copy needed); ``ctxir-ann-mmap`` the same file memory-mapped
  (faiss OnDiskInvertedLists) with re-scoring.
* ``int8-flat``: faiss ``IndexScalarQuantizer`` (8-bit, exhaustive scan) + float re-scoring.
* ``binary``: sentence-transformers ``quantize_embeddings(..., "ubinary")`` in a faiss ``IndexBinaryFlat``
  (Hamming, exhaustive) + float re-scoring of the top ``--rescore × k``.

Data: real all-MiniLM-L6-v2 embeddings of SciFact + the MS MARCO sample (10,183 texts, read through ctxir's
embedding cache, so only the first run encodes) up to ``--real-docs``; beyond that, synthetic documents: a real
embedding chosen at random (the centre) plus Gaussian noise with the real embeddings' covariance, scaled to a
root-mean-square norm of ``--noise`` (1.0: a synthetic document is as far from its centre, median cosine 0.71, as
a real document is from its nearest real neighbour, 0.72), re-normalised. Queries: SciFact + MS MARCO query embeddings (never in the corpus); with
``--real-docs 0`` everything is synthetic (random centres, queries = perturbed centres) and no model is loaded.
"""

from __future__ import annotations

import dataclasses
import gc
import json
import os
import platform
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from ctxir.types import CtxirError

INDEX_TYPES = ("exact", "exact-st", "faiss-hnsw", "faiss-hnsw-sq8", "ctxir-ann", "ctxir-ann-norescore", "ctxir-ann-mmap",
               "int8-flat", "binary")
DEFAULT_INDEXES = ",".join(INDEX_TYPES)
REAL_SETS = ("scifact", "msmarco_sample")
# The flags that decide these kernels' speed, reported with every run (all flags are in /proc/cpuinfo).
SIMD_FLAGS = ("sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx_vnni",
              "avx512_bf16", "avx512_fp16", "avx512_vpopcntdq", "amx_tile")


@dataclass
class SearchArgs:
    num_docs: int = field(default=10_000, metadata={"help": "corpus size (real documents first, then synthetic)"})
    output: str = field(default="", metadata={"help": "JSON path (default: results/bench/search-<N>.json)"})
    indexes: str = field(default=DEFAULT_INDEXES, metadata={"help": f"comma-separated, of {', '.join(INDEX_TYPES)}"})
    num_queries: int = field(default=300, metadata={"help": "timed single queries per pass (≥ 200 for p95)"})
    warmup: int = field(default=20, metadata={"help": "untimed queries first"})
    repeats: int = field(default=3, metadata={"help": "timed passes; the reported p50/p95 are their medians"})
    scan_queries: int = field(default=0, metadata={
        "help": "exact, exact-st and int8-flat (full scans, up to ~1 s a query at 1M): time only the first N queries "
                "per pass (0 = --num-queries); their recall is then over those N"})
    k: int = field(default=10, metadata={"help": "hits per query (recall@k against exact)"})
    real_docs: int = field(default=-1, metadata={
        "help": "at most this many real embedded documents (-1 = all 10,183; 0 = synthetic only, no model)"})
    data_root: str = field(default="../shared/data", metadata={
        "help": "folder holding scifact/ and msmarco_sample/ (BEIR layout)"})
    noise: float = field(default=1.0, metadata={
        "help": "synthetic documents: root-mean-square norm of the noise added to a unit-length real embedding before "
                "re-normalising; 1.0 puts a synthetic document as far from its centre (median cosine 0.71) as a real "
                "one is from its nearest real neighbour (0.72)"})
    seed: int = 0
    threads: int = field(default=0, metadata={"help": "build threads (0 = all cores)"})
    search_threads: int = field(default=1, metadata={
        "help": "torch and faiss threads while single queries are timed; on a shared 2-core machine a second "
                "OpenMP thread waits on a busy core (measured: faiss binary search at 10k flipping 0.04 ↔ 24 ms)"})
    nlist: int = field(default=0, metadata={"help": "ctxir-ann: k-means cells (0 = ctxir.ann's choice: 4096 at 1M)"})
    nprobe: int = field(default=0, metadata={"help": "ctxir-ann: cells scanned per query (0 = ctxir.ann's choice)"})
    rescore: int = field(default=4, metadata={"help": "ctxir-ann/int8-flat/binary: re-score rescore × k candidates"})
    codes: str = field(default="sq8", metadata={"help": "ctxir-ann: stored codes (sq8, fp16, flat)"})
    faiss_m: int = 32
    faiss_ef_search: int = 128
    faiss_ef_construction: int = 40
    index_dir: str = field(default="", metadata={
        "help": "where ctxir-ann's file is written (default: a temporary folder, removed afterwards)"})
    cache_dir: str = field(default="", metadata={"help": "ctxir cache root for the real embeddings ($CTXIR_CACHE)"})
    query_encode: int = field(default=100, metadata={
        "help": "also time encoding this many real query texts one at a time on --search-threads threads (the "
                "other half of a query's cost, which ctxir.retrieval.AUTO_ANN_THRESHOLD weighs the scan against; "
                "0 = skip; needs --real-docs ≠ 0)"})
    progress: bool = field(default=True, metadata={"help": "progress bars for long steps"})


@dataclass
class ReportArgs:
    inputs: list[str] = field(metadata={"help": "JSON files written by search, encode, rerank, app and train"})
    plot: str = field(default="", metadata={"help": "PNG: search p50 latency and recall@10 against corpus size"})
    markdown: str = field(default="", metadata={
        "help": "write the tables into this page (e.g. docs/performance.md) between its report markers, leaving the "
                "rest of the page alone"})
    figures: str = field(default="docs", metadata={
        "help": "with --markdown: folder for performance-<kind>.png and bench/<input>.json copies"})


# ---------------------------------------------------------------- machine and data


def machine() -> dict:
    """Cores, CPU model and SIMD flags, memory, load and library versions: printed beside every number."""
    info: dict = {"cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
                  "platform": platform.platform(), "python": platform.python_version()}
    try:
        text = Path("/proc/cpuinfo").read_text()
        fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
        fields = {k.strip(): v.strip() for k, v in fields.items()}
        flags = set(fields.get("flags", "").split())
        info["cpu"] = fields.get("model name", platform.processor())
        info["simd_flags"] = [f for f in SIMD_FLAGS if f in flags]
    except OSError:
        info["cpu"] = platform.processor()
    try:
        pages = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        info["ram_gb"] = round(pages / 2**30, 1)
    except (ValueError, OSError, AttributeError):
        pass
    from importlib.metadata import PackageNotFoundError, version

    versions = {}
    for package in ("numpy", "torch", "faiss-cpu", "sentence-transformers"):
        try:
            versions[package] = version(package)
        except PackageNotFoundError:
            versions[package] = None
    info["versions"] = versions
    return info


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else []


def rss_mb() -> float:
    """Resident set size of this process (Linux /proc; 0 elsewhere)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def normalise(x: np.ndarray) -> np.ndarray:
    x /= np.linalg.norm(x, axis=1, keepdims=True).clip(min=1e-12)
    return x


def real_embeddings(args: SearchArgs) -> tuple[np.ndarray, np.ndarray, str]:
    """(documents, queries, where from): MiniLM embeddings of the real sets, through ctxir's embedding cache."""
    from ctxir.data import load_corpus, load_queries
    from ctxir.encoders import BiEncoder, EmbeddingCache, cache_root

    root = Path(args.data_root)
    missing = [name for name in REAL_SETS if not (root / name / "corpus.jsonl").is_file()]
    if missing:
        raise CtxirError(f"--data-root {args.data_root!r} has no {', '.join(missing)} (corpus.jsonl): point it at "
                         "the shared data folder, or pass --real-docs 0 for synthetic data only")
    encoder = BiEncoder(cache=EmbeddingCache(cache_root(args.cache_dir) / "embeddings") if args.cache_dir else True)
    docs, queries = [], []
    for name in REAL_SETS:
        if args.real_docs < 0 or sum(len(d) for d in docs) < args.real_docs:
            docs.append(encoder.encode_corpus(load_corpus(root / name / "corpus.jsonl"), args.progress)[1])
        queries.append(encoder.encode_cached(list(load_queries(root / name / "queries.jsonl").values()),
                                             args.progress))
    where = f"all-MiniLM-L6-v2 (packaged) embeddings of {' + '.join(REAL_SETS)} from {root}"
    return np.concatenate(docs), np.concatenate(queries), where


def synthetic(centres: np.ndarray, count: int, noise: float, rng: np.random.Generator,
              chunk: int = 100_000) -> np.ndarray:
    """``count`` unit vectors: a random centre + noise with the centres' covariance (rms norm ``noise``)."""
    mean = centres.mean(0)
    _, singular, vt = np.linalg.svd(centres - mean, full_matrices=False)
    scale = singular / np.sqrt(len(centres))  # per-direction standard deviation
    scale *= noise / np.sqrt((scale**2).sum())  # E|u|^2 = noise^2
    out = np.empty((count, centres.shape[1]), dtype=np.float32)
    for begin in range(0, count, chunk):
        n = min(chunk, count - begin)
        noise_block = (rng.standard_normal((n, len(scale)), dtype=np.float32) * scale.astype(np.float32)) @ \
            vt.astype(np.float32)
        out[begin:begin + n] = normalise(centres[rng.integers(0, len(centres), n)] + noise_block)
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
        about = {"real_docs": 0, "source": f"synthetic only: {len(centres):,} random unit centres", "queries":
                 f"{wanted} synthetic (a random centre + the same noise), not in the corpus"}
    else:
        real, real_queries, where = real_embeddings(args)
        limit = len(real) if args.real_docs < 0 else min(args.real_docs, len(real))
        n_real = min(limit, args.num_docs)
        docs = np.empty((args.num_docs, real.shape[1]), dtype=np.float32)
        docs[:n_real] = real[:n_real]
        if args.num_docs > n_real:
            docs[n_real:] = synthetic(real[:limit], args.num_docs - n_real, args.noise, rng)
        if len(real_queries) < wanted:
            raise CtxirError(f"--num-queries + --warmup = {wanted} but only {len(real_queries)} real queries exist")
        queries = real_queries[rng.permutation(len(real_queries))[:wanted]]
        about = {"real_docs": n_real, "source": where, "queries":
                 f"{wanted} real SciFact/MS MARCO query embeddings, drawn at random (seed {args.seed}); "
                 "no query is in the corpus"}
    about |= {"num_docs": args.num_docs, "synthetic_docs": args.num_docs - about["real_docs"], "dim": docs.shape[1],
              "noise": args.noise, "construction": "synthetic = normalise(c + u): c a real (or random) unit "
              "embedding chosen uniformly, u ~ N(0, Σ) with Σ the centres' covariance scaled so E|u|² = noise²"}
    return docs, queries, about


def neighbourhood(docs: np.ndarray, queries: np.ndarray, rng: np.random.Generator, sample: int = 500) -> dict:
    """How crowded the data is (medians): query→top-1/top-10 cosine, and a document's nearest other document."""
    scores = queries[:sample] @ docs.T
    top = -np.sort(-np.partition(-scores, 10, axis=1)[:, :11], axis=1)
    rows = rng.choice(len(docs), min(sample, len(docs)), replace=False)
    near = docs[rows] @ docs.T
    near[np.arange(len(rows)), rows] = -np.inf
    return {"query_top1_cos": round(float(np.median(top[:, 0])), 4),
            "query_top10_cos": round(float(np.median(top[:, 9])), 4),
            "query_gap_10_11": round(float(np.median(top[:, 9] - top[:, 10])), 5),
            "doc_nearest_cos": round(float(np.median(near.max(1))), 4)}


def exact_top_k(docs: np.ndarray, queries: np.ndarray, k: int, chunk: int = 200_000) -> np.ndarray:
    """Ground truth: (queries, k) row numbers by exact dot product, best first."""
    best_s = np.full((len(queries), 0), -np.inf, dtype=np.float32)
    best_i = np.zeros((len(queries), 0), dtype=np.int64)
    for begin in range(0, len(docs), chunk):
        scores = queries @ docs[begin:begin + chunk].T
        top = np.argpartition(-scores, min(k, scores.shape[1] - 1), axis=1)[:, :k]
        best_s = np.concatenate([best_s, np.take_along_axis(scores, top, 1)], 1)
        best_i = np.concatenate([best_i, top + begin], 1)
        keep = np.argsort(-best_s, axis=1, kind="stable")[:, :k]
        best_s, best_i = np.take_along_axis(best_s, keep, 1), np.take_along_axis(best_i, keep, 1)
    return best_i


def recall_at_k(found: list[np.ndarray], truth: np.ndarray, k: int) -> float:
    return float(np.mean([len(set(f[:k].tolist()) & set(t[:k].tolist())) / k
                          for f, t in zip(found, truth, strict=True)]))


# ---------------------------------------------------------------- the index types


@dataclass
class Built:
    search: Callable[[np.ndarray, int], np.ndarray]  # (1, dim) query → row numbers, best first
    memory_bytes: int
    build_s: float
    notes: str = ""
    extra: dict = field(default_factory=dict)


def _rescorer(docs: np.ndarray, candidates: Callable[[np.ndarray, int], np.ndarray]):
    def search(query: np.ndarray, k: int) -> np.ndarray:
        rows = candidates(query, k)
        rows = rows[rows >= 0]
        return rows[np.argsort(-(docs[rows] @ query[0]), kind="stable")[:k]]
    return search


def build_exact(docs: np.ndarray, args: SearchArgs) -> Built:
    import torch

    corpus = torch.from_numpy(docs)

    def search(query: np.ndarray, k: int) -> np.ndarray:
        return torch.topk(corpus @ torch.from_numpy(query[0]), k).indices.numpy()
    return Built(search, docs.nbytes, 0.0, "float32 matrix in memory, torch matmul + topk")


def build_exact_st(docs: np.ndarray, args: SearchArgs) -> Built:
    import torch
    from sentence_transformers.util import semantic_search

    corpus = torch.from_numpy(docs)

    def search(query: np.ndarray, k: int) -> np.ndarray:
        row = semantic_search(torch.from_numpy(query), corpus, top_k=k, corpus_chunk_size=50_000)[0]
        return np.array([r["corpus_id"] for r in row])
    return Built(search, docs.nbytes, 0.0, "sentence-transformers semantic_search, corpus_chunk_size=50,000 "
                                           "(DenseRetriever exact today)")


def build_faiss_hnsw(docs: np.ndarray, args: SearchArgs) -> Built:
    import faiss

    start = time.perf_counter()
    index = faiss.IndexHNSWFlat(docs.shape[1], args.faiss_m, faiss.METRIC_INNER_PRODUCT)
    index.hnsw.efConstruction = args.faiss_ef_construction
    index.hnsw.efSearch = args.faiss_ef_search
    chunk = max(10_000, len(docs) // 100)
    for begin in _progress(range(0, len(docs), chunk), len(docs), chunk, "faiss HNSW", args.progress):
        index.add(docs[begin:begin + chunk])
    seconds = time.perf_counter() - start
    hnsw = index.hnsw
    graph = hnsw.neighbors.size() * 4 + hnsw.levels.size() * 4 + hnsw.offsets.size() * 8
    return Built(lambda q, k: index.search(q, k)[1][0], docs.nbytes + graph, seconds,
                 f"faiss IndexHNSWFlat M={args.faiss_m} efConstruction={args.faiss_ef_construction} "
                 f"efSearch={args.faiss_ef_search}, float32 vectors + graph in memory")


def build_faiss_hnsw_sq8(docs: np.ndarray, args: SearchArgs) -> Built:
    import faiss

    start = time.perf_counter()
    index = faiss.index_factory(docs.shape[1], f"HNSW{args.faiss_m},SQ8", faiss.METRIC_INNER_PRODUCT)
    index.hnsw.efConstruction = args.faiss_ef_construction
    index.hnsw.efSearch = args.faiss_ef_search
    index.train(docs[np.sort(np.random.default_rng(args.seed).choice(len(docs), min(len(docs), 100_000),
                                                                      replace=False))])
    chunk = max(10_000, len(docs) // 100)
    for begin in _progress(range(0, len(docs), chunk), len(docs), chunk, "faiss HNSW SQ8", args.progress):
        index.add(docs[begin:begin + chunk])
    seconds = time.perf_counter() - start
    hnsw = index.hnsw
    graph = hnsw.neighbors.size() * 4 + hnsw.levels.size() * 4 + hnsw.offsets.size() * 8
    search = _rescorer(docs, lambda q, k: index.search(q, k * max(1, args.rescore))[1][0])
    codes = faiss.downcast_index(index.storage).code_size
    return Built(search, index.ntotal * codes + graph, seconds,
                 f"faiss HNSW{args.faiss_m},SQ8 efConstruction={args.faiss_ef_construction} "
                 f"efSearch={args.faiss_ef_search} + float re-scoring of {args.rescore}×k")


def build_ctxir_ann(docs: np.ndarray, args: SearchArgs, folder: Path, rescore: bool = True,
                    previous: dict | None = None, mmap: bool = False) -> Built:
    """Build + save + reopen; the other ctxir-ann rows reopen the first one's file."""
    from ctxir.ann import AnnIndex, AnnParams, meta_path

    previous = previous or {}
    params = AnnParams(nlist=args.nlist, nprobe=args.nprobe, codes=args.codes,
                       rescore=args.rescore if rescore else 0).resolved(len(docs))
    path = folder / f"ann-{len(docs)}-{args.codes}.faiss"
    meta = meta_path(path)
    if meta.is_file() and AnnIndex.open(path, docs, params)[0] is not None:  # the other ctxir-ann row's file
        add_s, save_s = previous.get("train_add_s", 0.0), previous.get("save_s", 0.0)
    else:
        start = time.perf_counter()
        built = AnnIndex.build(docs, params, threads=args.threads, show_progress=args.progress)
        add_s = time.perf_counter() - start
        built.save(path)
        save_s = time.perf_counter() - start - add_s
        del built
    gc.collect()
    start = time.perf_counter()
    index, why = AnnIndex.open(path, docs, params, mmap=mmap)
    reopen_s = time.perf_counter() - start
    if index is None:
        raise CtxirError(f"the ctxir-ann index just saved could not be reopened: {why}")

    def search(query: np.ndarray, k: int) -> np.ndarray:
        return index.search(query, k)[0][0]
    extra = {"train_add_s": round(add_s, 2), "save_s": round(save_s, 2), "reopen_s": round(reopen_s, 3),
             "file_bytes": path.stat().st_size, "params": dataclasses.asdict(params)}
    notes = (f"faiss IVF{params.nlist},{args.codes} nprobe={params.nprobe} (k-means on {params.train_size:,}), "
             f"saved and reopened {'memory-mapped' if mmap else 'into memory'} (sha256-verified); " +
             (f"top {args.rescore}×k re-scored with float dots (needs the float32 embeddings)" if rescore
              else "no re-scoring: the file alone"))
    return Built(search, path.stat().st_size, add_s + save_s, notes, extra)


def build_int8_flat(docs: np.ndarray, args: SearchArgs) -> Built:
    import faiss

    start = time.perf_counter()
    index = faiss.IndexScalarQuantizer(docs.shape[1], faiss.ScalarQuantizer.QT_8bit, faiss.METRIC_INNER_PRODUCT)
    index.train(docs[:: max(1, len(docs) // 100_000)])
    index.add(docs)
    seconds = time.perf_counter() - start
    search = _rescorer(docs, lambda q, k: index.search(q, k * max(1, args.rescore))[1][0])
    return Built(search, index.ntotal * index.code_size, seconds,
                 f"faiss IndexScalarQuantizer QT_8bit (exhaustive int8 scan) + float re-scoring of {args.rescore}×k")


def build_binary(docs: np.ndarray, args: SearchArgs) -> Built:
    import faiss
    from sentence_transformers.util.quantization import quantize_embeddings

    start = time.perf_counter()
    codes = quantize_embeddings(docs, precision="ubinary")
    index = faiss.IndexBinaryFlat(docs.shape[1])
    index.add(codes)
    seconds = time.perf_counter() - start

    def candidates(query: np.ndarray, k: int) -> np.ndarray:
        return index.search(quantize_embeddings(query, precision="ubinary"), k * max(1, args.rescore))[1][0]
    return Built(_rescorer(docs, candidates), codes.nbytes, seconds,
                 f"quantize_embeddings ubinary + faiss IndexBinaryFlat (Hamming, exhaustive) + float re-scoring of "
                 f"{args.rescore}×k")


def _progress(steps, total: int, chunk: int, what: str, show: bool):
    from tqdm.auto import tqdm

    with tqdm(total=total, unit="vec", desc=what, disable=not show, mininterval=1.0) as bar:
        for step in steps:
            yield step
            bar.update(min(chunk, total - step))


# ---------------------------------------------------------------- timing


def time_queries(search: Callable[[np.ndarray, int], np.ndarray], queries: np.ndarray, args: SearchArgs,
                 limit: int = 0) -> tuple[list[dict], list[np.ndarray]]:
    """Per pass: p50/p95 of single-query wall time (ms); the rows found in the first pass (first ``limit``)."""
    for q in queries[: args.warmup]:
        search(q[None], args.k)
    timed, passes, found = queries[args.warmup:], [], []
    timed = timed[:limit] if limit else timed
    for repeat in range(args.repeats):
        times = np.empty(len(timed))
        for i, q in enumerate(timed):
            start = time.perf_counter()
            rows = search(q[None], args.k)
            times[i] = time.perf_counter() - start
            if repeat == 0:
                found.append(np.asarray(rows))
        passes.append({"p50_ms": float(np.percentile(times, 50) * 1000),
                       "p95_ms": float(np.percentile(times, 95) * 1000)})
    return passes, found


def time_query_encoding(args: SearchArgs) -> dict:
    """p50/p95 of encoding one real query text at a time with the packaged MiniLM (no cache), on the search threads:
    the part of every query's time that no index saves."""
    from ctxir.data import load_queries
    from ctxir.encoders import BiEncoder

    texts = [t for name in REAL_SETS for t in load_queries(Path(args.data_root) / name / "queries.jsonl").values()]
    texts = [texts[i] for i in np.random.default_rng(args.seed).permutation(len(texts))[:args.query_encode + 10]]
    encoder = BiEncoder(cache=None, device="cpu")
    set_threads(args.search_threads)
    times = []
    for i, text in enumerate(texts):
        start = time.perf_counter()
        encoder.encode([text], show_progress_bar=False)
        if i >= 10:  # the first calls allocate
            times.append((time.perf_counter() - start) * 1000)
    return {"p50_ms": round(float(np.median(times)), 3), "p95_ms": round(float(np.percentile(times, 95)), 3),
            "n": len(times), "threads": args.search_threads}


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


def command_line(argv: list[str] | None) -> str:
    """The command as typed (``argv`` includes the sub-command)."""
    return " ".join(["python -m ctxir.bench", *(sys.argv[1:] if argv is None else argv)])


def run_search(args: SearchArgs, argv: list[str] | None = None) -> dict:
    import tempfile

    names = _check(args)
    load_before = load_average()
    docs, queries, about = dataset(args)
    truth = exact_top_k(docs, queries[args.warmup:], args.k)
    about["stats"] = neighbourhood(docs, queries[args.warmup:], np.random.default_rng(args.seed)) \
        if len(docs) > 11 else {}
    results, start_all, cores = {}, time.perf_counter(), machine()["cores"]
    with tempfile.TemporaryDirectory(prefix="ctxir-bench-") as tmp:
        folder = Path(args.index_dir or tmp)
        folder.mkdir(parents=True, exist_ok=True)
        for name in names:
            gc.collect()
            set_threads(args.threads or cores)
            rss_before = rss_mb()
            if args.progress:
                print(f"[{name}] building over {len(docs):,} × {docs.shape[1]} …", flush=True)
            if name == "exact":
                built = build_exact(docs, args)
            elif name == "exact-st":
                built = build_exact_st(docs, args)
            elif name == "faiss-hnsw":
                built = build_faiss_hnsw(docs, args)
            elif name == "faiss-hnsw-sq8":
                built = build_faiss_hnsw_sq8(docs, args)
            elif name.startswith("ctxir-ann"):
                other = next((results[n] for n in results if n.startswith("ctxir-ann")), {})
                built = build_ctxir_ann(docs, args, folder, rescore=name != "ctxir-ann-norescore", previous=other,
                                        mmap=name == "ctxir-ann-mmap")
            elif name == "int8-flat":
                built = build_int8_flat(docs, args)
            else:
                built = build_binary(docs, args)
            rss_delta = rss_mb() - rss_before
            set_threads(args.search_threads)
            limit = args.scan_queries if name in ("exact", "exact-st", "int8-flat") else 0
            passes, found = time_queries(built.search, queries, args, limit)
            results[name] = {
                "p50_ms": round(float(np.median([p["p50_ms"] for p in passes])), 4),
                "p95_ms": round(float(np.median([p["p95_ms"] for p in passes])), 4),
                "recall_at_10": round(recall_at_k(found, truth[:len(found)], min(10, args.k)), 4),
                "timed_queries": len(found),
                "memory_mb": round(built.memory_bytes / 2**20, 1),
                "rss_delta_mb": round(rss_delta, 1),
                "build_s": round(built.build_s, 2),
                "passes": passes, "notes": built.notes, **built.extra}
            row = results[name]
            if args.progress:
                print(f"[{name}] p50 {row['p50_ms']:.3f} ms, p95 {row['p95_ms']:.3f} ms, recall@10 "
                      f"{row['recall_at_10']:.4f}, {row['memory_mb']:,.1f} MB, build {row['build_s']:.1f} s",
                      flush=True)
            del built
    base = results["exact"]["p50_ms"]
    for row in results.values():
        row["speedup_vs_exact"] = round(base / row["p50_ms"], 1) if row["p50_ms"] else None
    if args.query_encode and args.real_docs != 0:
        about["query_encode"] = time_query_encoding(args)
    record = {"command": command_line(argv), "date": datetime.now(UTC).isoformat(timespec="seconds"),
              "machine": machine(), "load_average_before": load_before, "load_average_after": load_average(),
              "wall_s": round(time.perf_counter() - start_all, 1), "data": about,
              "timing": f"single queries, one at a time ({args.search_threads} torch/faiss thread(s)), after "
                        f"{args.warmup} warm-up queries; p50/p95 over "
                        f"{args.num_queries} queries per pass (full scans: {args.scan_queries or args.num_queries})"
                        f", median of {args.repeats} passes",
              "settings": dataclasses.asdict(args), "index_types": names, "results": results}
    print(format_table(record))
    if "query_encode" in about:
        q = about["query_encode"]
        print(f"encoding one query: p50 {q['p50_ms']:.2f} ms, p95 {q['p95_ms']:.2f} ms ({q['n']} queries, "
              f"{q['threads']} thread(s))")
    out = Path(args.output or f"results/bench/search-{args.num_docs}.json")
    from ctxir.files import write_json

    write_json(out, record, indent=1)
    print(f"wrote {out}")
    return record


# ---------------------------------------------------------------- shared by encode, rerank, app and train


def finish(kind: str, args, argv: list[str] | None, load_before: list[float], started: float, results: dict,
           **extra) -> dict:
    """The record every sub-command writes: what ran, where, under what load, with which settings."""
    from ctxir.files import write_json

    record = {"kind": kind, "command": command_line(argv), "date": datetime.now(UTC).isoformat(timespec="seconds"),
              "machine": machine(), "load_average_before": load_before, "load_average_after": load_average(),
              "wall_s": round(time.perf_counter() - started, 1), **extra, "settings": dataclasses.asdict(args),
              "results": results}
    print(FORMATTERS[kind](record))
    out = Path(args.output or f"results/bench/{kind}.json")
    write_json(out, record, indent=1)
    print(f"wrote {out}")
    return record


def summary_ms(values: list[float]) -> dict:
    return {"p50_ms": round(float(np.percentile(values, 50)) * 1000, 2),
            "p95_ms": round(float(np.percentile(values, 95)) * 1000, 2), "n": len(values)}


def median_of(passes: list[dict], key: str) -> float:
    return round(float(np.median([p[key] for p in passes])), 2)


def numbers(text: str, what: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError as err:
        raise CtxirError(f"{what} {text!r}: give whole numbers separated by commas") from err
    if not values or min(values) < 1:
        raise CtxirError(f"{what} {text!r}: give whole numbers ≥ 1 separated by commas")
    return values


def resolve_model_path(name: str) -> str:
    """A folder for ``name`` ('' = the packaged all-MiniLM-L6-v2, offline)."""
    from ctxir.models import DEFAULT_BI_ENCODER, resolve_model

    return resolve_model(name or DEFAULT_BI_ENCODER)


def beir_texts(root: Path, name: str) -> Path:
    folder = root / name
    if not (folder / "corpus.jsonl").is_file():
        raise CtxirError(f"--data-root {str(root)!r} has no {name}/corpus.jsonl: point it at the shared data folder")
    return folder


def set_torch_threads(n: int) -> int:
    import torch

    n = n or machine()["cores"]
    torch.set_num_threads(n)
    return n


# ---------------------------------------------------------------- encode: throughput, fast paths, their nDCG cost

ENCODE_VARIANTS = ("st", "ctxir", "onnx", "onnx-int8-dynamic", "onnx-int8-static", "max-length-short")
SHIP_SPEEDUP, SHIP_LOSS = 1.5, 0.005
# The fast paths that met the rule and were then wired as a flag: variant → (the flag, where it is). The report
# shows the flag beside a decision that meets the rule; a measurement that does not meet it still says so.
SHIPPED_AS = {"onnx-int8-dynamic": ("--backend onnx-int8", '`BiEncoder(backend="onnx-int8")` in the library, '
                                    "`python -m ctxir.evaluate --backend onnx-int8`, `python app.py --backend "
                                    "onnx-int8` (or `CTXIR_BACKEND=onnx-int8`); default `torch`")}


@dataclass
class EncodeArgs:
    output: str = field(default="", metadata={"help": "JSON path (default: results/bench/encode.json)"})
    variants: str = field(default=",".join(ENCODE_VARIANTS), metadata={
        "help": f"comma-separated, of {', '.join(ENCODE_VARIANTS)} (st, the baseline, is always measured)"})
    model: str = field(default="", metadata={"help": "bi-encoder folder or id ('' = packaged all-MiniLM-L6-v2)"})
    data_root: str = field(default="../shared/data", metadata={
        "help": "holds scifact/ (timed texts, nDCG@10) and the calibration set (BEIR layout)"})
    num_texts: int = field(default=256, metadata={"help": "timed texts: the first N SciFact abstracts"})
    batch_size: int = 32
    repeats: int = field(default=5, metadata={
        "help": "timed passes per variant, interleaved (pass 1 of every variant, then pass 2, …): medians reported"})
    threads: int = field(default=0, metadata={"help": "torch and ONNX Runtime intra-op threads (0 = all cores)"})
    short_length: int = field(default=128, metadata={"help": "max-length-short: the shorter max_seq_length"})
    ndcg: bool = field(default=True, metadata={"help": "SciFact test nDCG@10 of every variant (encodes the corpus)"})
    ndcg_docs: int = field(default=0, metadata={
        "help": "0 = all SciFact documents; N = the judged test documents + random others up to N (stated)"})
    calibration_set: str = field(default="msmarco_sample", metadata={
        "help": "onnx-int8-static: folder under --data-root whose passages calibrate activations (never SciFact)"})
    calibration_texts: int = field(default=256, metadata={"help": "passages fed to the static calibration"})
    onnx_dir: str = field(default="", metadata={
        "help": "where exported/quantised ONNX files go and are reused (default: results/bench/onnx)"})
    cache_dir: str = field(default="", metadata={"help": "ctxir cache root for corpus embeddings ($CTXIR_CACHE)"})
    seed: int = 0
    progress: bool = True


def sgemm_gflops(threads: int, size: int = 1024, repeats: int = 7) -> dict:
    """float32 matmul peak as torch reaches it on this machine with ``threads`` threads (median of ``repeats``)."""
    import torch

    torch.set_num_threads(threads)
    a, b = torch.randn(size, size), torch.randn(size, size)
    torch.mm(a, b)
    rates = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(4):
            torch.mm(a, b)
        rates.append(4 * 2 * size**3 / (time.perf_counter() - start) / 1e9)
    return {"gflops": round(float(np.median(rates)), 1), "best_gflops": round(max(rates), 1), "size": size,
            "threads": threads}


def encoder_flops(config, lengths: list[int]) -> float:
    """Multiply-adds × 2 of a BERT encoder over texts of these token lengths (no padding counted).

    Per layer and text of L tokens: Q, K, V, output projections 4·2·L·h², feed-forward 2·2·L·h·i, attention scores
    and context 2·2·L²·h; embeddings and layer norms are left out (< 1 %).
    """
    h, i, layers = config.hidden_size, config.intermediate_size, config.num_hidden_layers
    return float(sum(layers * (8 * n * h * h + 4 * n * h * i + 4 * n * n * h) for n in lengths))


def _encode_variants(args: EncodeArgs, names: list[str], path: str, threads: int, calibration: list[str]) -> dict:
    """name → (encode(texts) → unit vectors, max_length, what it is, the BiEncoder behind it or None)."""
    from sentence_transformers import SentenceTransformer

    from ctxir.encoders import BiEncoder, weights_fingerprint
    from ctxir.onnx_backend import OnnxEncoder, export_onnx, quantise

    base = SentenceTransformer(path, device="cpu")
    max_length = int(base.max_seq_length)
    pooling = BiEncoder(base, cache=None).pooling
    variants: dict = {"st": (lambda t: base.encode(t, batch_size=args.batch_size, convert_to_numpy=True,
                                                    normalize_embeddings=True, show_progress_bar=False),
                             max_length, "SentenceTransformer(model).encode(texts, batch_size, "
                                         "normalize_embeddings=True): plain sentence-transformers, PyTorch", None)}
    if "ctxir" in names:
        ctxir = BiEncoder(SentenceTransformer(path, device="cpu"), cache=None, batch_size=args.batch_size)
        variants["ctxir"] = (ctxir.encode, max_length, "ctxir BiEncoder(model).encode: the path DenseRetriever and "
                                                       "the app use (cache off)", ctxir)
    if "max-length-short" in names:
        short = SentenceTransformer(path, device="cpu")
        short.max_seq_length = min(args.short_length, max_length)
        encoder = BiEncoder(short, cache=None, batch_size=args.batch_size)
        variants["max-length-short"] = (encoder.encode, short.max_seq_length,
                                        f"ctxir BiEncoder with max_seq_length {short.max_seq_length} "
                                        f"(model default {max_length}): longer texts are cut", encoder)
    onnx_names = [n for n in names if n.startswith("onnx")]
    if onnx_names:
        folder = Path(args.onnx_dir or "results/bench/onnx") / weights_fingerprint(base)
        fp32 = export_onnx(base, folder, args.progress)

        def make(file: Path) -> Callable[[list[str]], np.ndarray]:
            return OnnxEncoder(file, base, pooling, threads, args.batch_size).encode
        if "onnx" in names:
            variants["onnx"] = (make(fp32), max_length, "the same transformer exported with torch.onnx.export "
                                "(dynamo), float32, ONNX Runtime CPU (all graph optimisations)", None)
        if "onnx-int8-dynamic" in names:
            variants["onnx-int8-dynamic"] = (make(quantise(fp32, "dynamic")), max_length, "onnxruntime "
                                             "quantize_dynamic: MatMul weights int8 per channel (reduce_range), "
                                             "activations quantised per batch at run time", None)
        if "onnx-int8-static" in names:
            reader = OnnxEncoder(fp32, base, pooling, threads, args.batch_size)
            batches = [reader.features(calibration[i:i + args.batch_size])
                       for i in range(0, len(calibration), args.batch_size)]
            variants["onnx-int8-static"] = (make(quantise(fp32, "static", batches)), max_length,
                                            f"onnxruntime quantize_static (QDQ): MatMul weights int8 per channel "
                                            f"(reduce_range), activations uint8 with MinMax ranges calibrated on "
                                            f"{len(calibration)} {args.calibration_set} passages (not SciFact)", None)
    return {n: variants[n] for n in names}


def cached(encode: Callable[[list[str]], np.ndarray], cache, key: dict) -> Callable[[list[str]], np.ndarray]:
    """``encode`` through an EmbeddingCache keyed by ``key`` + the texts (a variant's corpus is encoded once)."""
    from ctxir.encoders import EmbeddingCache

    def encode_cached(texts: list[str]) -> np.ndarray:
        cache_key = EmbeddingCache.key(key, texts)
        hit = cache.get(cache_key)
        if hit is not None and hit.shape[0] == len(texts):
            return hit
        vectors = np.asarray(encode(texts), dtype=np.float32)
        cache.put(cache_key, vectors)
        return vectors
    return encode_cached


def scifact_ndcg(encode: Callable[[list[str]], np.ndarray], encode_corpus: Callable[[list[str]], np.ndarray],
                 corpus: dict, queries: dict, qrels: dict, progress: bool) -> dict:
    """nDCG@10 and Recall@100 of exact dense search with these vectors (the corpus through a cache)."""
    from ctxir.evaluation import evaluate_run
    from ctxir.types import doc_text

    ids = list(corpus)
    if progress:
        print(f"  {len(ids):,} SciFact documents (from the cache, or encoded now) …", flush=True)
    start = time.perf_counter()
    docs = np.asarray(encode_corpus([doc_text(corpus[i]) for i in ids]), dtype=np.float32)
    corpus_s = time.perf_counter() - start
    qids = list(queries)
    scores = np.asarray(encode([queries[q] for q in qids]), dtype=np.float32) @ docs.T
    top = np.argsort(-scores, axis=1)[:, :100]
    run = {q: {ids[j]: float(scores[r, j]) for j in top[r]} for r, q in enumerate(qids)}
    metrics = evaluate_run(qrels, run).aggregate
    return {"ndcg_at_10": round(float(metrics["nDCG@10"]), 4),
            "recall_at_100": round(float(metrics.get("Recall@100", metrics.get("R@100", float("nan")))), 4),
            "corpus_s": round(corpus_s, 1)}


def add_speedups(row: dict, st: dict) -> dict:
    """texts/s ÷ st's (wall clock), and st's CPU seconds ÷ the row's (all threads of this process): on a shared CPU
    the wall clock also measures the waiting, the CPU time does not."""
    row["speedup_vs_st"] = round(row["texts_per_s"] / st["texts_per_s"], 2)
    row["cpu_speedup_vs_st"] = round(st["cpu_s"] / row["cpu_s"], 2) if row.get("cpu_s") else None
    return row


def ship_decision(row: dict) -> tuple[bool, str]:
    """The issue's rule: a fast path ships as a flag only if ≥ 1.5× plain sentence-transformers with ≤ 0.005 nDCG@10
    loss on SciFact; otherwise the reasons. The speed-up is the smaller of the wall-clock and the CPU-time ratios.

    >>> ship_decision({"speedup_vs_st": 1.8, "ndcg_loss_vs_st": 0.001})
    (True, 'meets the ship rule: 1.8× ≥ 1.5× and nDCG@10 loss 0.0010 ≤ 0.005')
    """
    speedup = min(x for x in (row["speedup_vs_st"], row.get("cpu_speedup_vs_st")) if x is not None)
    loss = row.get("ndcg_loss_vs_st")
    reasons = [] if speedup >= SHIP_SPEEDUP else [f"{speedup}× < {SHIP_SPEEDUP}×"]
    if loss is None:
        reasons.append("nDCG@10 cost not measured")
    elif loss > SHIP_LOSS:
        reasons.append(f"nDCG@10 loss {loss:.4f} > {SHIP_LOSS}")
    if reasons:
        return False, "does not ship: " + "; ".join(reasons)
    return True, f"meets the ship rule: {speedup}× ≥ {SHIP_SPEEDUP}× and nDCG@10 loss {loss:.4f} ≤ {SHIP_LOSS}"


def shown_decision(name: str, row: dict) -> str:
    """The decision as the report prints it: ``ship_decision``'s, with the flag when the variant was wired as one.

    >>> shown_decision("onnx-int8-dynamic", {"ships": True, "decision": "meets the ship rule: 2.2× ≥ 1.5×"})
    'meets the ship rule: 2.2× ≥ 1.5× → shipped as `--backend onnx-int8`'
    """
    decision = row.get("decision", "baseline" if name == "st" else "ctxir's default path")
    if row.get("ships") and name in SHIPPED_AS:
        return f"{decision} → shipped as `{SHIPPED_AS[name][0]}`"
    return decision


def run_encode(args: EncodeArgs, argv: list[str] | None = None) -> dict:
    import torch

    from ctxir.data import load_beir, load_corpus
    from ctxir.encoders import EmbeddingCache, cache_root, weights_fingerprint
    from ctxir.types import doc_text

    # 1. check the arguments, read the texts
    names = [n.strip() for n in args.variants.split(",") if n.strip()]
    unknown = [n for n in names if n not in ENCODE_VARIANTS]
    if unknown or args.num_texts < 1 or args.repeats < 1 or args.batch_size < 1:
        raise CtxirError(f"--variants {args.variants!r} (use {', '.join(ENCODE_VARIANTS)}), --num-texts, --repeats and "
                         "--batch-size ≥ 1")
    names = ["st", *[n for n in names if n != "st"]]
    load_before, started = load_average(), time.perf_counter()
    threads = set_torch_threads(args.threads)
    root = Path(args.data_root)
    corpus, queries, qrels = load_beir(beir_texts(root, "scifact"), "test")
    texts = [doc_text(d) for d in list(corpus.values())[: args.num_texts]]
    calibration = []
    if "onnx-int8-static" in names:
        passages = load_corpus(beir_texts(root, args.calibration_set) / "corpus.jsonl")
        calibration = [doc_text(d) for d in list(passages.values())[: args.calibration_texts]]
    path = resolve_model_path(args.model)

    # 2. build every variant (export and quantise the ONNX ones, reused from --onnx-dir)
    variants = _encode_variants(args, names, path, threads, calibration)
    from sentence_transformers import SentenceTransformer

    reference = SentenceTransformer(path, device="cpu")
    tokenizer, config = reference.tokenizer, reference[0].auto_model.config
    raw_lengths = [len(ids) for ids in tokenizer(texts, truncation=False)["input_ids"]]

    # 3. sgemm peak, then the timed passes, interleaved so that load changes hit every variant alike
    peak_before = sgemm_gflops(threads)
    vectors = {}
    for encode, *_ in variants.values():
        encode(texts)  # warm-up: one untimed pass (first calls allocate, and ONNX Runtime plans per shape)
    passes: dict[str, list[dict]] = {n: [] for n in variants}
    for repeat in range(args.repeats):
        for name, (encode, *_) in variants.items():
            torch.set_num_threads(threads)
            wall, cpu = time.perf_counter(), time.process_time()
            out = encode(texts)
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            if repeat == 0:
                vectors[name] = np.asarray(out, dtype=np.float32)
            passes[name].append({"wall_s": wall, "cpu_s": cpu})
        if args.progress:
            print(f"pass {repeat + 1}/{args.repeats}: " + ", ".join(
                f"{n} {p[-1]['wall_s']:.2f} s" for n, p in passes.items()), flush=True)
    peak_after = sgemm_gflops(threads)
    peak = round((peak_before["gflops"] + peak_after["gflops"]) / 2, 1)

    # 4. throughput, share of the sgemm peak, agreement with the baseline's vectors
    results: dict = {}
    for name, (_, max_length, about, _) in variants.items():
        lengths = [min(n, max_length) for n in raw_lengths]
        wall = float(np.median([p["wall_s"] for p in passes[name]]))
        flops = encoder_flops(config, lengths)
        cosine = (vectors[name] * vectors["st"]).sum(1)
        results[name] = {"texts_per_s": round(len(texts) / wall, 1), "tokens_per_s": round(sum(lengths) / wall),
                         "wall_s": round(wall, 3), "cpu_s": round(float(np.median([p["cpu_s"] for p in passes[name]])),
                                                                  3),
                         "gflops": round(flops / wall / 1e9, 1), "share_of_sgemm_peak": round(flops / wall / 1e9 /
                                                                                               peak, 3),
                         "max_length": max_length, "mean_tokens": round(float(np.mean(lengths)), 1),
                         "min_cosine_vs_st": round(float(cosine.min()), 5),
                         "mean_cosine_vs_st": round(float(cosine.mean()), 6),
                         "passes_s": [round(p["wall_s"], 3) for p in passes[name]], "about": about}
    for row in results.values():
        add_speedups(row, results["st"])

    # 5. the nDCG@10 cost on SciFact test, corpus embeddings through the cache; st = ctxir when their vectors agree
    about_ndcg = "not measured (--ndcg false)"
    if args.ndcg:
        rng = np.random.default_rng(args.seed)
        ids = list(corpus)
        if args.ndcg_docs and args.ndcg_docs < len(ids):
            judged = sorted({d for q in qrels.values() for d in q if d in corpus})
            others = [i for i in ids if i not in set(judged)]
            keep = set(judged) | set(rng.choice(others, max(0, args.ndcg_docs - len(judged)), replace=False))
            corpus = {i: corpus[i] for i in ids if i in keep}
            about_ndcg = (f"SciFact test ({len(queries)} queries) over a {len(corpus):,}-document subset: the "
                          f"{len(judged)} judged documents + random others (seed {args.seed})")
        else:
            about_ndcg = f"SciFact test: {len(queries)} queries over all {len(corpus):,} documents, exact search"
        cache = EmbeddingCache(cache_root(args.cache_dir) / "bench-encode")
        fingerprint = weights_fingerprint(reference)
        for name, (encode, max_length, _, bi_encoder) in variants.items():
            if name == "st" and "ctxir" in variants and results["ctxir"]["min_cosine_vs_st"] > 0.99999:
                continue  # identical vectors: filled from ctxir's below
            if args.progress:
                print(f"[{name}] nDCG@10 …", flush=True)
            if bi_encoder is not None:  # ctxir's own cache, shared with DenseRetriever, the app and `search`
                bi_encoder.cache = EmbeddingCache(cache_root(args.cache_dir) / "embeddings")
                encode_corpus = bi_encoder.encode_cached
            else:
                key = {"variant": name, "weights": fingerprint, "max_length": max_length, "format": 1}
                encode_corpus = cached(encode, cache, key)
            results[name] |= scifact_ndcg(encode, encode_corpus, corpus, queries, qrels, args.progress)
        if "ndcg_at_10" not in results["st"]:
            results["st"] |= {k: v for k, v in results["ctxir"].items() if k in ("ndcg_at_10", "recall_at_100")}
            results["st"]["ndcg_note"] = "same vectors as ctxir (min cosine > 0.99999 on the timed texts)"
        for row in results.values():
            row["ndcg_loss_vs_st"] = round(results["st"]["ndcg_at_10"] - row["ndcg_at_10"], 4)

    # 6. the ship rule, applied to every fast path
    for name, row in results.items():
        if name not in ("st", "ctxir"):
            row["ships"], row["decision"] = ship_decision(row)
    return finish("encode", args, argv, load_before, started, results, sgemm={
        "before": peak_before, "after": peak_after, "gflops": peak}, data={
        "timed_texts": f"the first {len(texts)} SciFact abstracts (title + text), batch size {args.batch_size}, "
                       f"{threads} threads",
        "ndcg": about_ndcg, "model": path,
        "flops": "2 × multiply-adds of the encoder layers over the real (unpadded, truncated) tokens"},
        timing=f"wall time of encode(all timed texts) per pass, {args.repeats} passes interleaved across variants "
               f"after one untimed pass each; medians reported; speedup = texts/s ÷ st's")


# ---------------------------------------------------------------- rerank: cross-encoder latency vs candidates


@dataclass
class RerankArgs:
    output: str = field(default="", metadata={"help": "JSON path (default: results/bench/rerank.json)"})
    model: str = field(default="", metadata={
        "help": "cross-encoder folder or id; '' = the packaged all-MiniLM-L6-v2 body with a fresh 1-label head "
                "(the size and cost of cross-encoder/ms-marco-MiniLM-L6-v2; its scores are meaningless)"})
    candidates: str = field(default="10,20,50,100", metadata={"help": "re-ranked candidates per query"})
    num_queries: int = field(default=20, metadata={"help": "SciFact train queries timed (latency only)"})
    warmup: int = 2
    repeats: int = field(default=3, metadata={"help": "passes over the queries; p50/p95 are their medians"})
    batch_size: int = field(default=32, metadata={"help": "pairs per forward pass (CrossEncoderReranker's default)"})
    threads: int = field(default=0, metadata={"help": "torch threads (0 = all cores)"})
    data_root: str = "../shared/data"
    seed: int = 0
    progress: bool = True


def run_rerank(args: RerankArgs, argv: list[str] | None = None) -> dict:
    from ctxir.data import load_beir
    from ctxir.models import load_cross_encoder
    from ctxir.rerank import CrossEncoderReranker
    from ctxir.retrieval import BM25Retriever
    from ctxir.types import doc_text

    # 1. arguments, model, candidates (BM25's top documents for each query: real texts of real lengths)
    sizes = numbers(args.candidates, "--candidates")
    if args.num_queries < 1 or args.repeats < 1 or args.warmup < 0:
        raise CtxirError("--num-queries and --repeats must be ≥ 1, --warmup ≥ 0")
    load_before, started = load_average(), time.perf_counter()
    threads = set_torch_threads(args.threads)
    path = resolve_model_path(args.model)
    reranker = CrossEncoderReranker(load_cross_encoder(path, "cpu", num_labels=1), batch_size=args.batch_size)
    corpus, queries, _ = load_beir(beir_texts(Path(args.data_root), "scifact"), "train")
    rng = np.random.default_rng(args.seed)
    qids = [list(queries)[i] for i in rng.permutation(len(queries))[: args.num_queries + args.warmup]]
    hits = BM25Retriever(corpus).search({q: queries[q] for q in qids}, max(sizes))
    tokenizer = reranker.model.tokenizer
    # 2. time score_pairs(query, n candidates) for every n, the sizes interleaved per query
    results: dict = {}
    for n in sizes:
        results[str(n)] = {"passes": [], "tokens": []}
    for repeat in range(args.repeats):
        times: dict[int, list[float]] = {n: [] for n in sizes}
        for position, q in enumerate(qids):
            for n in sizes:
                texts = [doc_text(corpus[h.doc_id]) for h in hits[q][:n]]
                start = time.perf_counter()
                reranker.score_pairs(queries[q], texts)
                if position >= args.warmup:
                    times[n].append(time.perf_counter() - start)
                    if repeat == 0:
                        results[str(n)]["tokens"].append(float(np.mean([len(ids) for ids in tokenizer(
                            [queries[q]] * len(texts), texts, truncation=True,
                            max_length=reranker.model.max_seq_length)["input_ids"]])))
        for n in sizes:
            results[str(n)]["passes"].append(summary_ms(times[n]))
        if args.progress:
            print(f"pass {repeat + 1}/{args.repeats}: " + ", ".join(
                f"{n}: {results[str(n)]['passes'][-1]['p50_ms']:.0f} ms" for n in sizes), flush=True)
    # 3. the compute bound: ≈ 2 · (non-embedding parameters) · tokens + the attention products per pair, at the
    # sgemm rate torch reaches here with the same threads
    peak = sgemm_gflops(threads)
    body = reranker.model[0].auto_model
    config = body.config
    weights = sum(p.numel() for name, p in body.named_parameters()
                  if not name.startswith(("embeddings.", "pooler.")))
    for n in sizes:
        row = results[str(n)]
        row |= {"candidates": n, "p50_ms": median_of(row["passes"], "p50_ms"),
                "p95_ms": median_of(row["passes"], "p95_ms"),
                "mean_pair_tokens": round(float(np.mean(row.pop("tokens"))), 1)}
        row["ms_per_pair"] = round(row["p50_ms"] / n, 2)
        tokens = row["mean_pair_tokens"]
        flops = 2 * weights * tokens + 4 * config.num_hidden_layers * tokens**2 * config.hidden_size  # per pair
        row["gflop_per_pair"] = round(flops / 1e9, 3)
        row["bound_ms_per_pair"] = round(flops / (peak["gflops"] * 1e9) * 1000, 2)
        row["share_of_sgemm_peak"] = round(row["bound_ms_per_pair"] / row["ms_per_pair"], 3)
    return finish("rerank", args, argv, load_before, started, results, data={
        "sgemm": peak, "non_embedding_parameters": weights,
        "model": path if args.model else f"{path} (all-MiniLM-L6-v2 body, fresh 1-label head: the architecture and "
                                         "cost of cross-encoder/ms-marco-MiniLM-L6-v2, meaningless scores)",
        "max_length": reranker.model.max_seq_length,
        "candidates": f"BM25 top-n SciFact abstracts for {args.num_queries} random SciFact train queries "
                      f"(seed {args.seed}), after {args.warmup} warm-up queries"},
        timing=f"CrossEncoderReranker.score_pairs(query, n texts), batch size {args.batch_size}, {threads} threads; "
               f"p50/p95 over the queries per pass, median of {args.repeats} passes")


# ---------------------------------------------------------------- app: end-to-end latency through gradio_client

APP_QUERIES = ("otters playing on the river bank", "bats hunting insects at night", "opening a savings account",
               "where do otters live", "interest rates at the central bank")


@dataclass
class AppBenchArgs:
    output: str = field(default="", metadata={"help": "JSON path (default: results/bench/app.json)"})
    url: str = field(default="", metadata={
        "help": "an app already running; '' = start `python app.py` in its own process (loopback, free port) and "
                "stop it afterwards"})
    corpus: str = field(default="demo", metadata={"help": "corpus name the search endpoints use"})
    cross_encoder: str = field(default="", metadata={
        "help": "started app: CTXIR_CROSS_ENCODER ('' = the packaged MiniLM body with a fresh head, as rerank)"})
    repeats: int = field(default=10, metadata={"help": "timed calls per endpoint"})
    warmup: int = field(default=1, metadata={"help": "untimed calls per endpoint first"})
    endpoints: str = field(default="", metadata={"help": "comma-separated labels to run ('' = all)"})
    torch_threads: int = field(default=0, metadata={"help": "started app: CTXIR_TORCH_THREADS"})
    start_timeout_s: float = 600.0


def app_calls(corpus: str) -> dict[str, tuple[str, Callable[[int], tuple]]]:
    """label → (api_name, call number → arguments): the app's endpoints with a typical input each."""
    pair_docs = "Otters dig dens in the river bank.\nThe bank raised its savings rate.\nBats hunt moths at night."
    sentences = "The otter swam to the river bank.\nShe paid the money into the bank.\nBats sleep in caves by day."

    def search(first: str, rerank: str) -> Callable[[int], tuple]:
        return lambda i: (APP_QUERIES[i % len(APP_QUERIES)], corpus, first, rerank, 10, 20)
    return {
        "search bm25": ("/search", search("bm25", "none")),
        "search dense": ("/search", search("dense", "none")),
        "search hybrid": ("/search", search("hybrid", "none")),
        "search hybrid + cross-encoder top 20": ("/search", search("hybrid", "cross-encoder")),
        "score_pairs (3 documents)": ("/score_pairs", lambda i: (APP_QUERIES[i % len(APP_QUERIES)], pair_docs)),
        "sentence_similarity (3 sentences)": ("/sentence_similarity", lambda i: (sentences, 6, "mean")),
        "model_info": ("/model_info", lambda i: ("bi-encoder", APP_QUERIES[i % len(APP_QUERIES)])),
        "attention (2 layers, 2 heads)": ("/attention", lambda i: (
            "bi-encoder", APP_QUERIES[i % len(APP_QUERIES)], "Bats use echoes to find moths.", "model", [0, 5], [],
            1, 2)),
        "explain (bi-encoder + cross-encoder)": ("/explain", lambda i: (
            APP_QUERIES[i % len(APP_QUERIES)], "Otters dig dens in the river bank.", "auto")),
    }


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_app(env: dict, timeout_s: float = 600.0) -> tuple:
    """(process, url, seconds until the page answered HTTP 200) for ``python app.py`` on a free loopback port."""
    import subprocess
    import urllib.request

    port = free_port()
    root = Path(__file__).resolve().parents[1]
    started = time.perf_counter()
    process = subprocess.Popen([sys.executable, str(root / "app.py"), "--host", "127.0.0.1", "--port", str(port)],
                               cwd=root, env={**os.environ, "HF_HUB_OFFLINE": "1", **env},
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/"
    try:
        while time.perf_counter() - started < timeout_s:
            if process.poll() is not None:
                raise CtxirError(f"app.py exited with code {process.returncode} while starting")
            try:
                with urllib.request.urlopen(url, timeout=2) as response:
                    if response.status == 200:
                        return process, url, time.perf_counter() - started
            except OSError:
                time.sleep(0.2)
        raise CtxirError(f"app.py did not answer within {timeout_s} s")
    except BaseException:
        stop_app(process)
        raise


def stop_app(process) -> None:
    process.terminate()
    try:
        process.wait(timeout=30)
    except Exception:
        process.kill()
        process.wait()


def run_app(args: AppBenchArgs, argv: list[str] | None = None) -> dict:
    from gradio_client import Client

    # 1. arguments; start the app in its own process unless --url names one
    calls = app_calls(args.corpus)
    chosen = [c.strip() for c in args.endpoints.split(",") if c.strip()] or list(calls)
    unknown = [c for c in chosen if c not in calls]
    if unknown or args.repeats < 1 or args.warmup < 0:
        raise CtxirError(f"--endpoints {unknown}: use labels of {list(calls)}; --repeats ≥ 1, --warmup ≥ 0")
    load_before, started = load_average(), time.perf_counter()
    process, start_s, url = None, None, args.url
    if not url:
        env = {"CTXIR_CROSS_ENCODER": args.cross_encoder or resolve_model_path(""), "CTXIR_CLS_LR": "none",
               "CTXIR_TORCH_THREADS": str(args.torch_threads)}
        print("starting python app.py …", flush=True)
        process, url, start_s = start_app(env, args.start_timeout_s)
    results: dict = {}
    try:
        client = Client(url, verbose=False)
        # 2. every endpoint: warm-up, then timed calls one at a time (a failure is recorded, not fatal)
        for label in chosen:
            api_name, make = calls[label]
            times, error = [], None
            try:
                for i in range(args.warmup + args.repeats):
                    start = time.perf_counter()
                    client.predict(*make(i), api_name=api_name)
                    if i >= args.warmup:
                        times.append(time.perf_counter() - start)
            except Exception as err:
                error = f"{type(err).__name__}: {str(err)[:200]}"
            results[label] = {"api_name": api_name, **(summary_ms(times) if times else {"n": 0})}
            if error:
                results[label]["error"] = error
            print(f"{label}: {results[label]}", flush=True)
    finally:
        if process is not None:
            stop_app(process)
    return finish("app", args, argv, load_before, started, results, data={
        "app": f"python app.py started by this command (cold start to first page: {start_s:.1f} s), cross-encoder: "
               f"{'the packaged MiniLM body with a fresh head' if not args.cross_encoder else args.cross_encoder}"
        if start_s is not None else f"an app already running at {url}",
        "corpus": args.corpus, "cold_start_s": round(start_s, 1) if start_s is not None else None},
        timing=f"wall time of gradio_client.Client.predict per call (HTTP + queue + the callback), one call at a "
               f"time, {args.warmup} warm-up call(s) then {args.repeats} timed, queries rotating")


# ---------------------------------------------------------------- train: cross-encoder training throughput


@dataclass
class TrainArgs:
    output: str = field(default="", metadata={"help": "JSON path (default: results/bench/train.json)"})
    model: str = field(default="", metadata={"help": "body to train ('' = the packaged all-MiniLM-L6-v2 + a fresh "
                                                     "1-label head, as training/train_cross_encoder.py starts)"})
    batch_sizes: str = "8,16,32"
    max_lengths: str = "128,256"
    steps: int = field(default=4, metadata={"help": "timed optimiser steps per setting"})
    warmup_steps: int = field(default=1, metadata={"help": "untimed steps first"})
    learning_rate: float = 2e-5
    threads: int = field(default=0, metadata={"help": "torch threads (0 = all cores)"})
    data_root: str = "../shared/data"
    seed: int = 0
    progress: bool = True


def train_pairs(root: Path, count: int, seed: int) -> list[tuple[str, str, float]]:
    """(query, document, label): SciFact train queries with a judged document (1) or a random one (0)."""
    from ctxir.data import load_beir
    from ctxir.types import doc_text

    corpus, queries, qrels = load_beir(beir_texts(root, "scifact"), "train")
    rng = np.random.default_rng(seed)
    ids, qids, pairs = list(corpus), list(qrels), []
    while len(pairs) < count:
        q = qids[rng.integers(len(qids))]
        positive = [d for d, grade in qrels[q].items() if grade > 0 and d in corpus]
        if positive and len(pairs) % 2 == 0:
            pairs.append((queries[q], doc_text(corpus[positive[0]]), 1.0))
        else:
            pairs.append((queries[q], doc_text(corpus[ids[rng.integers(len(ids))]]), 0.0))
    return pairs


def run_train(args: TrainArgs, argv: list[str] | None = None) -> dict:
    import torch

    from ctxir.models import load_cross_encoder

    # 1. arguments, model, pairs
    batch_sizes, lengths = numbers(args.batch_sizes, "--batch-sizes"), numbers(args.max_lengths, "--max-lengths")
    if args.steps < 1 or args.warmup_steps < 0:
        raise CtxirError("--steps must be ≥ 1, --warmup-steps ≥ 0")
    load_before, started = load_average(), time.perf_counter()
    threads = set_torch_threads(args.threads)
    torch.manual_seed(args.seed)
    path = resolve_model_path(args.model)
    cross = load_cross_encoder(path, "cpu", num_labels=1)
    model, tokenizer = cross.model, cross.tokenizer
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.learning_rate)
    loss_fn = torch.nn.BCEWithLogitsLoss()
    pairs = train_pairs(Path(args.data_root), max(batch_sizes) * (args.steps + args.warmup_steps), args.seed)
    # 2. per (max length, batch size): tokenise, forward, loss, backward, AdamW step; steps timed one by one
    results: dict = {}
    for max_length in lengths:
        for batch_size in batch_sizes:
            times, tokens, cursor = [], [], 0
            for step in range(args.warmup_steps + args.steps):
                batch = pairs[cursor:cursor + batch_size]
                cursor += batch_size
                start = time.perf_counter()
                features = tokenizer([p[0] for p in batch], [p[1] for p in batch], padding=True, truncation=True,
                                     max_length=max_length, return_tensors="pt")
                logits = model(**features).logits.view(-1)
                loss = loss_fn(logits, torch.tensor([p[2] for p in batch]))
                loss.backward()
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
                if step >= args.warmup_steps:
                    times.append(time.perf_counter() - start)
                    tokens.append(int(features["attention_mask"].sum()))
            step_s = float(np.median(times))
            label = f"max_length {max_length}, batch {batch_size}"
            results[label] = {"max_length": max_length, "batch_size": batch_size, "step_s": round(step_s, 4),
                              "pairs_per_s": round(batch_size / step_s, 1),
                              "tokens_per_s": round(float(np.median(tokens)) / step_s),
                              "steps_s": [round(t, 4) for t in times]}
            if args.progress:
                print(f"{label}: {results[label]['pairs_per_s']} pairs/s", flush=True)
    return finish("train", args, argv, load_before, started, results, data={
        "model": path if args.model else f"{path} + a fresh 1-label head", "pairs": "SciFact train queries with a "
        f"judged abstract (label 1) or a random one (label 0), alternating (seed {args.seed})"},
        timing=f"one optimiser step = tokenise + forward + BCE-with-logits loss + backward + AdamW (lr "
               f"{args.learning_rate}), what CrossEncoderTrainer runs per step without its data loader and logging; "
               f"{args.warmup_steps} warm-up step(s), median of {args.steps} timed steps; {threads} threads")


# ---------------------------------------------------------------- tables and plots


COLUMNS = (("p50_ms", "p50 ms", "{:.3f}"), ("p95_ms", "p95 ms", "{:.3f}"), ("recall_at_10", "recall@10", "{:.4f}"),
           ("memory_mb", "index MB", "{:,.1f}"), ("rss_delta_mb", "RSS Δ MB", "{:,.0f}"),
           ("build_s", "build s", "{:.1f}"), ("speedup_vs_exact", "× exact", "{}"))


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|---|" + "---:|" * (len(header) - 1)]
    return "\n".join([*lines, *("| " + " | ".join(row) + " |" for row in rows)])


def cell(value, fmt: str) -> str:
    return "–" if value is None else fmt.format(value)


def format_table(record: dict) -> str:
    """A Markdown table of one `search` record (the rows docs/performance.md shows)."""
    return markdown_table(["index", *(title for _, title, _ in COLUMNS)],
                          [[name, *(cell(row.get(key), fmt) for key, _, fmt in COLUMNS)]
                           for name, row in record["results"].items()])


def format_encode(record: dict) -> str:
    results = record["results"]
    for name, row in results.items():  # records written before the CPU-time ratio existed get it from cpu_s
        add_speedups(row, results["st"])
        if name not in ("st", "ctxir"):
            row["ships"], row["decision"] = ship_decision(row)
    return markdown_table(
        ["variant", "texts/s", "tokens/s", "× st (wall)", "× st (CPU s)", "GFLOP/s", "of sgemm peak", "max len",
         "nDCG@10", "loss vs st", "decision"],
        [[name, cell(r["texts_per_s"], "{:.1f}"), cell(r["tokens_per_s"], "{:,}"), cell(r["speedup_vs_st"], "{:.2f}"),
          cell(r.get("cpu_speedup_vs_st"), "{:.2f}"),
          cell(r["gflops"], "{:.1f}"), cell(r["share_of_sgemm_peak"], "{:.0%}"), str(r["max_length"]),
          cell(r.get("ndcg_at_10"), "{:.4f}"), cell(r.get("ndcg_loss_vs_st"), "{:+.4f}"), shown_decision(name, r)]
         for name, r in results.items()])


def format_rerank(record: dict) -> str:
    return markdown_table(["candidates", "p50 ms", "p95 ms", "ms / pair", "tokens / pair", "compute bound ms / pair",
                           "share of sgemm peak"],
                          [[str(r["candidates"]), cell(r["p50_ms"], "{:.1f}"), cell(r["p95_ms"], "{:.1f}"),
                            cell(r["ms_per_pair"], "{:.2f}"), cell(r["mean_pair_tokens"], "{:.0f}"),
                            cell(r.get("bound_ms_per_pair"), "{:.2f}"), cell(r.get("share_of_sgemm_peak"), "{:.0%}")]
                           for r in record["results"].values()])


def format_app(record: dict) -> str:
    return markdown_table(["endpoint", "api", "p50 ms", "p95 ms", "calls", "error"],
                          [[label, f"`{r['api_name']}`", cell(r.get("p50_ms"), "{:.0f}"),
                            cell(r.get("p95_ms"), "{:.0f}"), str(r["n"]), r.get("error", "")]
                           for label, r in record["results"].items()])


def format_train(record: dict) -> str:
    return markdown_table(["max length", "batch", "pairs/s", "tokens/s", "step s"],
                          [[str(r["max_length"]), str(r["batch_size"]), cell(r["pairs_per_s"], "{:.1f}"),
                            cell(r["tokens_per_s"], "{:,}"), cell(r["step_s"], "{:.2f}")]
                           for r in record["results"].values()])


FORMATTERS = {"search": format_table, "encode": format_encode, "rerank": format_rerank, "app": format_app,
              "train": format_train}
TITLES = {"encode": "Encoding throughput and fast paths", "search": "Search latency and memory vs corpus size",
          "rerank": "Re-ranking latency vs candidates", "app": "End-to-end app latency (gradio_client)",
          "train": "Cross-encoder training throughput"}
REPORT_BEGIN, REPORT_END = "<!-- ctxir.bench report: begin -->", "<!-- ctxir.bench report: end -->"


def kind_of(record: dict) -> str:
    return record.get("kind", "search")


def describe(record: dict, json_link: str = "") -> str:
    """The command, the machine and the load of one record, as the lines above its table."""
    m = record["machine"]
    flags = ", ".join(m.get("simd_flags", [])) or "unknown"
    link = f" ([JSON]({json_link}))" if json_link else ""
    lines = [f"`{record['command']}`{link}  ",
             f"{record['date']}: {m['cores']} cores ({m.get('cpu')}; {flags}), {m.get('ram_gb', '?')} GB; load "
             f"average {record['load_average_before']} → {record['load_average_after']}; {record['wall_s']} s.  "]
    if record.get("timing"):
        lines.append(f"Timing: {record['timing']}.  ")
    data = record.get("data", {})
    for key, value in data.items():
        if isinstance(value, str) and key not in ("construction", "source", "queries"):
            label = {"ndcg": "nDCG@10", "flops": "FLOPs", "app": "App"}.get(key, key.replace("_", " ").capitalize())
            lines.append(f"{label}: {value}.  ")
    if kind_of(record) == "search":
        lines.append(f"Data: {data['source']}; {data['synthetic_docs']:,} synthetic ({data['construction']}); "
                     f"queries: {data['queries']}.  ")
    if kind_of(record) == "encode":
        s = record["sgemm"]
        lines.append(f"sgemm peak (torch.mm {s['before']['size']}², {s['before']['threads']} threads, median of 7): "
                     f"{s['before']['gflops']} GFLOP/s before, {s['after']['gflops']} after; shares use "
                     f"{s['gflops']}.  ")
    return "\n".join(lines)


def read_records(paths: list[str]) -> list[dict]:
    records = []
    for path in paths:
        try:
            record = json.loads(Path(path).read_text())
        except (OSError, ValueError) as err:
            raise CtxirError(f"{path!r} is not a readable bench JSON file ({err})") from err
        if not isinstance(record, dict) or "results" not in record or kind_of(record) not in FORMATTERS:
            raise CtxirError(f"{path!r} was not written by `python -m ctxir.bench`")
        record["_path"] = path
        records.append(record)
    return records


def render(records: list[dict], figures: Path | None, docs: Path | None) -> str:
    """The Markdown of every record, grouped by kind; PNGs (and JSON copies) written under ``figures``."""
    import shutil

    parts = []
    for kind in ("encode", "search", "rerank", "app", "train"):
        group = [r for r in records if kind_of(r) == kind]
        if kind == "search":
            group.sort(key=lambda r: r["data"]["num_docs"])
        if not group:
            continue
        parts.append(f"## {TITLES[kind]}\n")
        if figures is not None:
            png = figures / f"performance-{kind}.png"
            PLOTS[kind](group, str(png))
            parts.append(f"![{TITLES[kind]}]({os.path.relpath(png, docs) if docs else png})\n")
        for record in group:
            link = ""
            if figures is not None:
                copy = figures / "bench" / Path(record["_path"]).name
                copy.parent.mkdir(parents=True, exist_ok=True)
                if Path(record["_path"]).resolve() != copy.resolve():
                    shutil.copyfile(record["_path"], copy)
                link = os.path.relpath(copy, docs) if docs else str(copy)
            if kind == "search":
                d = record["data"]
                parts.append(f"### {d['num_docs']:,} documents ({d['real_docs']:,} real)\n")
            parts.append(describe(record, link) + "\n")
            parts.append(FORMATTERS[kind](record) + "\n")
            if kind == "encode":
                parts.append(f"The rule: a fast path ships as a flag only if it is ≥ {SHIP_SPEEDUP}× plain "
                             f"sentence-transformers (the smaller of the wall-clock and CPU-time ratios) with ≤ "
                             f"{SHIP_LOSS} SciFact nDCG@10 loss.\n")
                decisions = [f"- **{n}**: {shown_decision(n, r)} ({r['about']})"
                             for n, r in record["results"].items() if "decision" in r]
                decisions += [f"- `{SHIPPED_AS[n][0]}` is {SHIPPED_AS[n][1]}." for n, r in record["results"].items()
                              if r.get("ships") and n in SHIPPED_AS]
                parts.append("\n".join(decisions) + "\n")
    return "\n".join(parts)


def write_section(markdown: Path, body: str) -> None:
    """Put ``body`` between the report markers of ``markdown``, leaving the rest of the page as it is."""
    section = f"{REPORT_BEGIN}\n<!-- written by `python -m ctxir.bench report`; edit the commands, not the numbers -->" \
              f"\n\n{body}\n{REPORT_END}"
    text = markdown.read_text(encoding="utf-8") if markdown.is_file() else "# Performance\n\n"
    if REPORT_BEGIN in text and REPORT_END in text:
        head, rest = text.split(REPORT_BEGIN, 1)
        text = head + section + rest.split(REPORT_END, 1)[1]
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    from ctxir.files import write_atomic

    write_atomic(markdown, text)


def run_report(args: ReportArgs) -> None:
    records = read_records(args.inputs)
    docs = Path(args.markdown).parent if args.markdown else None
    figures = Path(args.figures) if args.markdown else None
    body = render(records, figures, docs)
    print(body)
    if args.plot:
        plot([r for r in records if kind_of(r) == "search"], args.plot)
        print(f"\nwrote {args.plot}")
    if args.markdown:
        write_section(Path(args.markdown), body)
        print(f"\nwrote {args.markdown} and its figures in {figures}")


def _figure(width: float = 9, height: float = 3.4, columns: int = 2):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, columns, figsize=(width, height))
    return plt, fig, axes


def _save(plt, fig, path: str) -> None:
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def plot(records: list[dict], path: str) -> None:
    """search: p50 latency and recall@10 against corpus size, one line per index type."""
    plt, fig, (left, right) = _figure()
    records = sorted(records, key=lambda r: r["data"]["num_docs"])
    names = [n for n in INDEX_TYPES if any(n in r["results"] for r in records)]
    for name in names:
        sizes = [r["data"]["num_docs"] for r in records if name in r["results"]]
        left.plot(sizes, [r["results"][name]["p50_ms"] for r in records if name in r["results"]], "o-", label=name)
        right.plot(sizes, [r["results"][name]["recall_at_10"] for r in records if name in r["results"]], "o-",
                   label=name)
    left.set(xscale="log", yscale="log", xlabel="documents", ylabel="p50 ms (one query)")
    right.set(xscale="log", xlabel="documents", ylabel="recall@10 vs exact")
    right.axhline(0.95, color="grey", lw=0.8, ls="--")
    left.axhline(5, color="grey", lw=0.8, ls="--")
    left.legend(fontsize=7)
    _save(plt, fig, path)


def plot_encode(records: list[dict], path: str) -> None:
    """encode: speed-up over sentence-transformers and nDCG@10 loss per variant (the last record)."""
    plt, fig, (left, right) = _figure()
    results = records[-1]["results"]
    names = list(results)
    left.barh(names, [results[n]["speedup_vs_st"] for n in names], color="tab:blue")
    left.axvline(SHIP_SPEEDUP, color="grey", lw=0.8, ls="--")
    left.set(xlabel="texts/s ÷ plain sentence-transformers")
    left.invert_yaxis()
    right.barh(names, [results[n].get("ndcg_loss_vs_st") or 0 for n in names], color="tab:orange")
    right.axvline(SHIP_LOSS, color="grey", lw=0.8, ls="--")
    right.set(xlabel="SciFact nDCG@10 loss vs st")
    right.invert_yaxis()
    _save(plt, fig, path)


def plot_rerank(records: list[dict], path: str) -> None:
    plt, fig, ax = _figure(4.8, 3.2, 1)
    rows = list(records[-1]["results"].values())
    ax.plot([r["candidates"] for r in rows], [r["p50_ms"] for r in rows], "o-", label="p50")
    ax.plot([r["candidates"] for r in rows], [r["p95_ms"] for r in rows], "s--", label="p95")
    ax.set(xlabel="candidates re-ranked", ylabel="ms per query")
    ax.legend(fontsize=8)
    _save(plt, fig, path)


def plot_app(records: list[dict], path: str) -> None:
    plt, fig, ax = _figure(7, 3.4, 1)
    rows = {k: v for k, v in records[-1]["results"].items() if v.get("p50_ms") is not None}
    ax.barh(list(rows), [r["p50_ms"] for r in rows.values()], color="tab:green")
    ax.set(xlabel="p50 ms per call (gradio_client)", xscale="log")
    ax.invert_yaxis()
    ax.tick_params(axis="y", labelsize=7)
    _save(plt, fig, path)


def plot_train(records: list[dict], path: str) -> None:
    plt, fig, ax = _figure(4.8, 3.2, 1)
    rows = list(records[-1]["results"].values())
    for length in sorted({r["max_length"] for r in rows}):
        sub = [r for r in rows if r["max_length"] == length]
        ax.plot([r["batch_size"] for r in sub], [r["pairs_per_s"] for r in sub], "o-", label=f"max length {length}")
    ax.set(xlabel="batch size", ylabel="training pairs/s", xscale="log", xticks=sorted({r["batch_size"] for r in rows}))
    ax.get_xaxis().set_major_formatter(__import__("matplotlib").ticker.ScalarFormatter())
    ax.legend(fontsize=8)
    _save(plt, fig, path)


PLOTS = {"search": plot, "encode": plot_encode, "rerank": plot_rerank, "app": plot_app, "train": plot_train}


def main(argv: list[str] | None = None) -> int:
    from ctxir.cli import subcommand_main

    def bind(run):
        return lambda a: run(a, argv)
    return subcommand_main({"search": (SearchArgs, bind(run_search)), "encode": (EncodeArgs, bind(run_encode)),
                            "rerank": (RerankArgs, bind(run_rerank)), "app": (AppBenchArgs, bind(run_app)),
                            "train": (TrainArgs, bind(run_train)), "report": (ReportArgs, run_report)},
                           "python -m ctxir.bench", argv)


if __name__ == "__main__":
    sys.exit(main())
