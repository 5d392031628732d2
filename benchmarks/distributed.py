"""``python -m benchmarks.distributed``: a scaled-down run of the distributed path: Ray Data encoding with 1 vs 2
workers (alternating, medians), then Milvus Lite insert and search, on SciFact abstracts and all-MiniLM-L6-v2."""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np

from benchmarks.common import command_line
from ctxir.data import load_beir
from ctxir.encoders import BiEncoder
from ctxir.encoders.models import resolve_model
from ctxir.encoders.sharded import encode_sharded
from ctxir.evaluation import evaluate_run
from ctxir.retrieval import BM25Retriever, DenseRetriever
from ctxir.retrieval.milvus import VectorDBRetriever
from ctxir.types import run_from_hits

MODEL = "sentence-transformers/all-MiniLM-L6-v2"
MEDIANS = ("seconds", "docs_per_s", "first_shard_seconds", "after_first_docs_per_s", "per_worker_docs_per_s")


def uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()
    except OSError:
        return ""


def subset(corpus: dict, qrels: dict, size: int) -> dict:
    """The documents judged for the test queries first (so nDCG means something), then corpus order up to ``size``."""
    judged = [d for q in qrels for d in qrels[q] if d in corpus]
    ids = list(dict.fromkeys(judged + list(corpus)))[:size]
    return {i: corpus[i] for i in ids}


def timed(fn, repeats: int = 3) -> float:
    times = []
    for _ in range(repeats):
        began = time.perf_counter()
        fn()
        times.append(time.perf_counter() - began)
    return statistics.median(times)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--data", default=str(Path(__file__).resolve().parents[2] / "shared" / "data" / "scifact")
    )
    parser.add_argument("--docs", type=int, default=800)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--shard-size", type=int, default=100)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--out", default=str(Path(tempfile.gettempdir()) / "bench_engines.json"))
    return parser.parse_args(argv)


def load_subset(data: str, docs: int) -> tuple[dict, dict, dict]:
    """(corpus, queries, qrels) cut to ``docs`` documents, keeping only the queries with a judged one left."""
    corpus_all, queries, qrels = load_beir(data, "test")
    corpus = subset(corpus_all, qrels, docs)
    qrels = {q: {d: g for d, g in rel.items() if d in corpus} for q, rel in qrels.items()}
    qrels = {q: rel for q, rel in qrels.items() if rel}
    return corpus, {q: queries[q] for q in qrels}, qrels


def encode_runs(args: argparse.Namespace, corpus: dict, model, work: Path) -> tuple[float, dict, Path]:
    """(Ray's start-up seconds, the record's "encode", the last run's folder) of Ray Data encoding with each worker
    count, alternating, ``--repeats`` times; Ray is started once, before the clock."""
    import ray

    began = time.perf_counter()
    ray.init(
        num_cpus=max(os.cpu_count() or 1, max(args.workers)),
        include_dashboard=False,
        log_to_driver=False,
        logging_level="warning",
        runtime_env={
            "py_modules": [str(Path(__file__).resolve().parents[1] / "ctxir")],
            "env_vars": {"HF_HUB_OFFLINE": "1"},
        },
    )
    ray_start_seconds = round(time.perf_counter() - began, 2)
    settings = {"batch_size": args.batch_size, "shard_size": args.shard_size, "threads_per_worker": 1}
    runs: dict[int, list[dict]] = {w: [] for w in args.workers}
    folder = work
    for repeat in range(args.repeats):
        for workers in args.workers:
            folder = work / f"w{workers}-r{repeat}"
            result = encode_sharded(
                corpus, model, folder, **settings, show_progress=False, num_workers=workers
            )
            runs[workers].append(encode_figures(result, len(corpus), args.shard_size))
            print(f"workers={workers} repeat={repeat}: {runs[workers][-1]}", flush=True)
    ray.shutdown()
    encode = {
        str(w): {"runs": r, **{f"median_{k}": statistics.median(x[k] for x in r) for k in MEDIANS}}
        for w, r in runs.items()
    }
    if len(args.workers) == 2:
        a, b = (encode[str(w)]["median_seconds"] for w in args.workers)
        encode["speedup"] = round(a / b, 2)
    return ray_start_seconds, encode, folder


def encode_figures(result, docs: int, shard_size: int) -> dict:
    busy, first = sum(result.shard_seconds.values()), result.first_shard_seconds
    return {
        "seconds": round(result.seconds, 2),
        "docs_per_s": round(result.docs_per_second, 1),
        "first_shard_seconds": round(result.first_shard_seconds, 2),
        # after the first shard is back (actors up, model loaded): the encoding rate itself
        "after_first_docs_per_s": round((docs - shard_size) / max(result.seconds - first, 1e-9), 1),
        "per_worker_docs_per_s": round(docs / busy, 1),  # docs / summed shard seconds
        "workers_used": len(result.workers),
        "load_1min": round(os.getloadavg()[0], 2),
    }


def ndcg10(qrels: dict, run: dict) -> float:
    return round(evaluate_run(qrels, run, k_values=(10,), metrics=("ndcg",)).aggregate["nDCG@10"], 4)


def engine_search(engine, queries: dict, qrels: dict, query_vectors: np.ndarray, repeats: int) -> dict:
    """Each engine mode: batch queries/s, one query's median latency (50 queries), nDCG@10."""
    texts = list(queries.values())
    search: dict = {}
    for mode in ("dense", "bm25", "hybrid"):
        engine.mode = mode
        vectors = None if mode == "bm25" else query_vectors
        batch_s = timed(lambda v=vectors: engine.search_embeddings(v, 10, texts), repeats)
        single = []
        for i in range(50):
            one = None if vectors is None else vectors[i : i + 1]
            single.append(timed(lambda v=one, t=texts[i : i + 1]: engine.search_embeddings(v, 10, t), 1))
        run = run_from_hits(dict(zip(queries, engine.search_embeddings(vectors, 100, texts), strict=True)))
        search[mode] = {
            "batch_qps": round(len(texts) / batch_s, 1),
            "single_query_p50_ms": round(1000 * statistics.median(single), 2),
            "nDCG@10": ndcg10(qrels, run),
        }
    engine.mode = "dense"
    return search


def ctxir_baselines(
    corpus: dict, encoder, queries: dict, qrels: dict, query_vectors: np.ndarray, repeats: int
) -> tuple[dict, DenseRetriever]:
    """ctxir's own exact dense search and stemmed BM25 on the same subset, to set the engine's figures against."""
    exact = DenseRetriever(corpus, encoder, index="exact")
    runs = {
        "dense exact (ctxir)": run_from_hits(
            dict(zip(queries, exact.search_embeddings(query_vectors, 100), strict=True))
        ),
        "bm25 stemmed (ctxir)": run_from_hits(BM25Retriever(corpus).search(queries, 100)),
    }
    figures = {name: {"nDCG@10": ndcg10(qrels, run)} for name, run in runs.items()}
    figures["dense exact (ctxir)"]["batch_qps"] = round(
        len(queries) / timed(lambda: exact.search_embeddings(query_vectors, 10), repeats), 1
    )
    return figures, exact


def milvus_lite(
    corpus: dict, queries: dict, qrels: dict, model, shards: Path, work: Path, repeats: int
) -> dict:
    """Insert the shards into Milvus Lite (BM25 computed by the engine), then search it and ctxir alike."""
    encoder = BiEncoder(model, device="cpu", cache=None)
    began = time.perf_counter()
    engine = VectorDBRetriever.from_shards(
        shards, corpus, encoder, uri=str(work / "engine.db"), mode="dense", insert_batch=500
    )
    insert_s = time.perf_counter() - began
    query_vectors = encoder.encode(list(queries.values()))
    search = engine_search(engine, queries, qrels, query_vectors, repeats)
    search["ctxir"], exact = ctxir_baselines(corpus, encoder, queries, qrels, query_vectors, repeats)
    pairs = zip(
        engine.search_embeddings(query_vectors, 10), exact.search_embeddings(query_vectors, 10), strict=True
    )
    overlap = np.mean([len({h.doc_id for h in a} & {h.doc_id for h in b}) / 10 for a, b in pairs])
    return {
        "insert_seconds": round(insert_s, 2),
        "insert_docs_per_s": round(len(corpus) / insert_s, 1),
        "note": "insert = read shards + verify + insert with the engine's BM25 + flush",
        "search": search,
        "dense_top10_overlap_with_exact": round(float(overlap), 4),
    }


def main(argv: list[str] | None = None) -> int:
    import ray

    args = parse_args(argv)
    corpus, queries, qrels = load_subset(args.data, args.docs)
    model = resolve_model(MODEL)
    record: dict = {
        "command": command_line("distributed", argv),
        "machine": {
            "platform": platform.platform(),
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "uptime_before": uptime(),
            "note": "shared machine: other jobs and a niced training run",
        },
        "versions": {"ray": ray.__version__, **_versions()},
        "docs": len(corpus),
        "queries": len(queries),
        "shard_size": args.shard_size,
        "batch_size": args.batch_size,
        "threads_per_worker": 1,
    }
    print(f"{len(corpus)} docs, {len(queries)} queries; {record['machine']['uptime_before']}", flush=True)

    work = Path(tempfile.mkdtemp(prefix="bench-engines-"))
    record["ray_start_seconds"], record["encode"], last_folder = encode_runs(args, corpus, model, work)

    record["milvus_lite"] = milvus_lite(corpus, queries, qrels, model, last_folder, work, args.repeats)

    record["machine"]["uptime_after"] = uptime()
    Path(args.out).write_text(json.dumps(record, indent=2) + "\n")
    print(json.dumps(record, indent=2))
    return 0


def _versions() -> dict:
    from importlib.metadata import version

    return {p: version(p) for p in ("pymilvus", "milvus-lite", "torch", "sentence-transformers")}


if __name__ == "__main__":
    sys.exit(main())
