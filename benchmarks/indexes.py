"""The index types ``python -m benchmarks.search`` measures: each builds over the float32 matrix and returns a
``Built`` (single-query search, memory, build time, what it is)."""

from __future__ import annotations

import dataclasses
import gc
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ctxir import CtxirError
from ctxir.cli import flag

INDEX_TYPES = (
    "exact", "exact-st", "faiss-hnsw", "faiss-hnsw-sq8", "ctxir-ann", "ctxir-ann-norescore",
    "ctxir-ann-mmap", "int8-flat", "binary"
)  # fmt: skip
FULL_SCANS = ("exact", "exact-st", "int8-flat")  # up to ~1 s a query at 1M: --scan-queries limits them


@dataclass
class IndexSettings:
    seed: int = 0
    threads: int = flag(0, "build threads (0 = all cores)")
    nlist: int = flag(0, "ctxir-ann: k-means cells (0 = ctxir.retrieval.ann's choice: 4096 at 1M)")
    nprobe: int = flag(0, "ctxir-ann: cells scanned per query (0 = ctxir.retrieval.ann's choice)")
    rescore: int = flag(4, "ctxir-ann/int8-flat/binary: re-score rescore × k candidates")
    codes: str = flag("sq8", "ctxir-ann: stored codes (sq8, fp16, flat)")
    faiss_m: int = 32
    faiss_ef_search: int = 128
    faiss_ef_construction: int = 40
    progress: bool = flag(True, "progress bars for long steps")


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


def build_exact(docs: np.ndarray, args: IndexSettings) -> Built:
    import torch

    corpus = torch.from_numpy(docs)

    def search(query: np.ndarray, k: int) -> np.ndarray:
        return torch.topk(corpus @ torch.from_numpy(query[0]), k).indices.numpy()

    return Built(search, docs.nbytes, 0.0, "float32 matrix in memory, torch matmul + topk")


def build_exact_st(docs: np.ndarray, args: IndexSettings) -> Built:
    import torch
    from sentence_transformers.util import semantic_search

    corpus = torch.from_numpy(docs)

    def search(query: np.ndarray, k: int) -> np.ndarray:
        row = semantic_search(torch.from_numpy(query), corpus, top_k=k, corpus_chunk_size=50_000)[0]
        return np.array([r["corpus_id"] for r in row])

    return Built(search, docs.nbytes, 0.0, "sentence-transformers semantic_search, corpus_chunk_size=50,000")


def build_faiss_hnsw(docs: np.ndarray, args: IndexSettings, sq8: bool) -> Built:
    """faiss HNSW over the float32 vectors, or over SQ8 codes with float re-scoring of ``rescore`` × k."""
    import faiss
    from tqdm.auto import tqdm

    start = time.perf_counter()
    codes = "SQ8" if sq8 else "Flat"
    index = faiss.index_factory(docs.shape[1], f"HNSW{args.faiss_m},{codes}", faiss.METRIC_INNER_PRODUCT)
    if sq8:
        sample = np.random.default_rng(args.seed).choice(len(docs), min(len(docs), 100_000), replace=False)
        index.train(docs[np.sort(sample)])
    hnsw = index.hnsw
    hnsw.efConstruction, hnsw.efSearch = args.faiss_ef_construction, args.faiss_ef_search
    chunk, label = max(10_000, len(docs) // 100), "faiss HNSW SQ8" if sq8 else "faiss HNSW"
    with tqdm(total=len(docs), unit="vec", desc=label, disable=not args.progress, mininterval=1.0) as bar:
        for begin in range(0, len(docs), chunk):
            index.add(docs[begin : begin + chunk])
            bar.update(min(chunk, len(docs) - begin))
    seconds = time.perf_counter() - start
    graph = hnsw.neighbors.size() * 4 + hnsw.levels.size() * 4 + hnsw.offsets.size() * 8
    ef = f"efConstruction={args.faiss_ef_construction} efSearch={args.faiss_ef_search}"
    if not sq8:
        notes = f"faiss IndexHNSWFlat M={args.faiss_m} {ef}, float32 vectors + graph in memory"
        return Built(lambda q, k: index.search(q, k)[1][0], docs.nbytes + graph, seconds, notes)
    search = _rescorer(docs, lambda q, k: index.search(q, k * max(1, args.rescore))[1][0])
    notes = f"faiss HNSW{args.faiss_m},SQ8 {ef} + float re-scoring of {args.rescore}×k"
    return Built(search, index.ntotal * faiss.downcast_index(index.storage).code_size + graph, seconds, notes)


def build_ctxir_ann(docs, args: IndexSettings, folder: Path, rescore: bool, previous: dict, mmap) -> Built:
    """Build + save + reopen; the other ctxir-ann rows reopen the first one's file."""
    from ctxir.retrieval.ann import AnnIndex, AnnParams, meta_path

    params = AnnParams(
        nlist=args.nlist, nprobe=args.nprobe, codes=args.codes, rescore=args.rescore if rescore else 0
    ).resolved(len(docs))
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

    extra = {
        "train_add_s": round(add_s, 2),
        "save_s": round(save_s, 2),
        "reopen_s": round(reopen_s, 3),
        "file_bytes": path.stat().st_size,
        "params": dataclasses.asdict(params),
    }
    notes = (
        f"faiss IVF{params.nlist},{args.codes} nprobe={params.nprobe} (k-means on {params.train_size:,}), "
        f"saved and reopened {'memory-mapped' if mmap else 'into memory'} (sha256-verified); "
        + (f"top {args.rescore}×k re-scored with float dots" if rescore else "no re-scoring: the file alone")
    )
    return Built(search, path.stat().st_size, add_s + save_s, notes, extra)


def build_int8_flat(docs: np.ndarray, args: IndexSettings) -> Built:
    import faiss

    start = time.perf_counter()
    index = faiss.IndexScalarQuantizer(
        docs.shape[1], faiss.ScalarQuantizer.QT_8bit, faiss.METRIC_INNER_PRODUCT
    )
    index.train(docs[:: max(1, len(docs) // 100_000)])
    index.add(docs)
    seconds = time.perf_counter() - start
    search = _rescorer(docs, lambda q, k: index.search(q, k * max(1, args.rescore))[1][0])
    notes = (
        f"faiss IndexScalarQuantizer QT_8bit (exhaustive int8 scan) + float re-scoring of {args.rescore}×k"
    )
    return Built(search, index.ntotal * index.code_size, seconds, notes)


def build_binary(docs: np.ndarray, args: IndexSettings) -> Built:
    import faiss
    from sentence_transformers.util.quantization import quantize_embeddings

    start = time.perf_counter()
    codes = quantize_embeddings(docs, precision="ubinary")
    index = faiss.IndexBinaryFlat(docs.shape[1])
    index.add(codes)
    seconds = time.perf_counter() - start

    def candidates(query: np.ndarray, k: int) -> np.ndarray:
        return index.search(quantize_embeddings(query, precision="ubinary"), k * max(1, args.rescore))[1][0]

    notes = f"quantize_embeddings ubinary + faiss IndexBinaryFlat (Hamming) + float re-scoring of {args.rescore}×k"
    return Built(_rescorer(docs, candidates), codes.nbytes, seconds, notes)


def build(name: str, docs: np.ndarray, args: IndexSettings, folder: Path, results: dict) -> Built:
    """The index ``name`` over ``docs``; the ctxir-ann rows after the first reopen its file (``results`` so far)."""
    if name.startswith("ctxir-ann"):
        other = next((results[n] for n in results if n.startswith("ctxir-ann")), {})
        rescore, mmap = name != "ctxir-ann-norescore", name == "ctxir-ann-mmap"
        return build_ctxir_ann(docs, args, folder, rescore, other, mmap)
    return BUILDERS[name](docs, args)


BUILDERS: dict[str, Callable[[np.ndarray, IndexSettings], Built]] = {
    "exact": build_exact,
    "exact-st": build_exact_st,
    "faiss-hnsw": lambda docs, args: build_faiss_hnsw(docs, args, sq8=False),
    "faiss-hnsw-sq8": lambda docs, args: build_faiss_hnsw(docs, args, sq8=True),
    "int8-flat": build_int8_flat,
    "binary": build_binary,
}
