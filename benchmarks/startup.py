"""``python -m benchmarks.startup --data outputs/synthetic-1m``: start-up time, each run a fresh process, on a large
corpus whose embeddings (and after the first run, indexes) exist. ``--modes``: ``library`` (what ``ctxir evaluate
--retriever hybrid`` builds before its first query, phase by phase, then dense query latency and recall@10),
``evaluate`` (that command, start to exit) and ``app`` (``AppState.load`` as ``python app.py --corpus D``)."""

from __future__ import annotations

import contextlib
import json
import os
import resource
import shlex
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

STARTED = time.perf_counter()  # the library phase "python_imports" counts from here

from benchmarks.common import load_average, opt  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
MODES = ("library", "evaluate", "app")


@dataclass
class StartupArgs:
    data: str = opt("outputs/synthetic-1m", "BEIR folder (python -m benchmarks.synthetic_corpus)")
    cache_dir: str = opt("", "ctxir cache root (default: DATA/cache)")
    modes: str = opt("library,evaluate,app", f"comma-separated, of {', '.join(MODES)}")
    runs: int = opt(2, "fresh processes per mode, one after another")
    search_queries: int = opt(300, "library mode: timed dense queries (0 = none)")
    index: str = opt("auto", "dense index: auto, exact, ann")
    output: str = opt("results/startup.json", "JSON written here")
    child: str = opt("", "internal: run one mode in this process and print its JSON")


def cpu_seconds() -> float:
    """User + system CPU seconds of this process so far (all threads)."""
    t = os.times()
    return round(t.user + t.system, 2)


def library_run(args: StartupArgs, cache: Path) -> dict:
    """Phase by phase, what evaluate builds; then dense search latency and recall against exact."""
    from ctxir.data import load_beir
    from ctxir.encoders import BiEncoder, EmbeddingCache
    from ctxir.retrieval import BM25Retriever, DenseRetriever, HybridRetriever

    phases, clock = {}, STARTED  # the first phase: the interpreter's imports of this script (numpy, ctxir)

    def phase(name: str) -> None:
        nonlocal clock
        now = time.perf_counter()
        phases[name] = round(now - clock, 2)
        clock = now

    phase("python_imports")
    corpus, queries, _ = load_beir(args.data, "test")
    phase("read_corpus")
    encoder = BiEncoder(device="cpu", cache=EmbeddingCache(cache / "embeddings"))
    phase("load_bi_encoder")
    bm25 = BM25Retriever(corpus, cache=cache / "bm25", show_progress=True)
    phase("bm25")
    dense = DenseRetriever(corpus, encoder, index=args.index, show_progress=True)
    phase("dense")
    hybrid = HybridRetriever([bm25, dense])
    hybrid.query("what is the boiling point of water", 10)
    phase("first_hybrid_query")
    record = {
        "phases_s": phases,
        "ready_s": round(time.perf_counter() - STARTED, 2),
        "ready_cpu_s": cpu_seconds(),
        "documents": len(corpus),
        "bm25": bm25.cache_status,
        "dense_index": dense.index_kind,
        "ann": None,
    }
    if dense.ann is not None:
        record["ann"] = {
            "status": dense.ann.status,
            "settings": dense.ann_settings,
            "build_s": round(dense.ann.build_s, 1),
            "file_mb": round(dense.ann_path.stat().st_size / 2**20, 1),
            "memory_mb": round(dense.ann.memory_bytes / 2**20, 1),
        }
    if args.search_queries and dense.ann is not None:
        record["search"] = search_numbers(dense, encoder, list(queries.values()), args.search_queries)
    return record


def search_numbers(dense, encoder, texts: list[str], count: int) -> dict:
    """p50/p95 of single dense queries (1 thread) and recall@10 against exact search over the same vectors."""
    import faiss
    import torch

    from benchmarks.search import exact_top_k, recall_at_k

    texts = (texts * (count // len(texts) + 1))[:count]
    vectors = encoder.encode(texts)  # (count, dim); repeated texts are timed again, not cached
    torch.set_num_threads(1)
    faiss.omp_set_num_threads(1)
    for v in vectors[:20]:  # warm-up
        dense.search_embeddings(v[None], 10)
    times = []
    for v in vectors:
        start = time.perf_counter()
        dense.search_embeddings(v[None], 10)
        times.append((time.perf_counter() - start) * 1000)
    unique = np.unique(vectors, axis=0)  # exact top-10 of each distinct query
    recall = recall_at_k(list(dense.ann.search(unique, 10)[0]), exact_top_k(dense.embeddings, unique, 10), 10)
    return {
        "queries": len(vectors),
        "distinct": len(unique),
        "p50_ms": round(float(np.percentile(times, 50)), 3),
        "p95_ms": round(float(np.percentile(times, 95)), 3),
        "recall_at_10_vs_exact": round(recall, 4),
        "threads": 1,
    }


def app_run(args: StartupArgs) -> dict:
    from app import AppArgs, config_from_args
    from ctxir.app.state import AppState

    imported = time.perf_counter() - STARTED
    state = AppState.load(config_from_args(AppArgs(corpus=args.data)), background=False)
    index = state.index(state.default_corpus)
    return {
        "python_imports_s": round(imported, 2),
        "ready_s": round(time.perf_counter() - STARTED, 2),
        "ready_cpu_s": cpu_seconds(),
        "documents": state.default_size,
        "bm25": getattr(index.bm25, "cache_status", None),
        "dense_index": index.dense.index_kind,
        "ann": getattr(index.dense.ann, "status", None),
    }


def child(args: StartupArgs) -> dict:
    cache = Path(args.cache_dir or Path(args.data) / "cache")
    before = load_average()
    if args.child == "library":
        record = library_run(args, cache)
    elif args.child == "app":
        record = app_run(args)
    else:
        raise SystemExit(f"--child {args.child!r} is not a mode run in-process: use library or app")
    return {**record, "load_average_before": before, "load_average_after": load_average()}


def spawn(mode: str, args: StartupArgs, cache: Path) -> dict:
    env = {**os.environ, "CTXIR_CACHE": str(cache), "HF_HUB_OFFLINE": "1"}
    flags = ["--data", args.data, "--cache-dir", str(cache), "--index", args.index]
    if mode == "evaluate":
        output = str(Path(args.output).with_suffix(".evaluate.json"))
        flags += ["--retriever", "hybrid", "--max-queries", "10", "--output", output]
        command = [sys.executable, "-m", "ctxir", "evaluate", *flags]
    else:
        flags += ["--child", mode, "--search-queries", str(args.search_queries)]
        command = [sys.executable, "-m", "benchmarks.startup", *flags]
    before, start = load_average(), time.perf_counter()
    cpu_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True)
    wall = round(time.perf_counter() - start, 2)
    cpu_after = resource.getrusage(resource.RUSAGE_CHILDREN)
    # CPU seconds the process used (all its threads): unlike the wall clock, barely moved by other jobs' load
    cpu = round(cpu_after.ru_utime - cpu_before.ru_utime + cpu_after.ru_stime - cpu_before.ru_stime, 2)
    if done.returncode != 0:
        raise SystemExit(f"{shlex.join(command)} exited {done.returncode}")
    record = (
        json.loads(done.stdout.strip().splitlines()[-1])
        if mode != "evaluate"
        else {"load_average_before": before, "load_average_after": load_average()}
    )
    return {
        "mode": mode,
        "command": shlex.join(command),
        "process_wall_s": wall,
        "process_cpu_s": cpu,
        **record,
    }


def run(args: StartupArgs) -> int:
    from ctxir.checks import check_choice
    from ctxir.files import write_json

    if args.child:
        print(json.dumps(child(args)), flush=True)
        return 0
    modes = [check_choice(m.strip(), "mode", MODES) for m in args.modes.split(",") if m.strip()]
    cache = Path(args.cache_dir or Path(args.data) / "cache")
    runs = []
    for mode in modes:
        for number in range(1, args.runs + 1):
            print(f"== {mode}, run {number} of {args.runs}", flush=True)
            runs.append({"run": number, **spawn(mode, args, cache)})
            print(json.dumps(runs[-1], indent=1), flush=True)
    record = {
        "command": shlex.join(["python", "-m", "benchmarks.startup", *sys.argv[1:]]),
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "cores": os.cpu_count(),
        "settings": asdict(args),
        "runs": runs,
    }
    with contextlib.suppress(OSError, ValueError):
        record["synthetic"] = json.loads((Path(args.data) / "synthetic.json").read_text())
    write_json(args.output, record)
    print(f"wrote {args.output}")
    return 0


def main(argv: list[str] | None = None) -> int:
    from ctxir.cli import cli_main

    return cli_main(StartupArgs, run, argv)


if __name__ == "__main__":
    sys.exit(main())
