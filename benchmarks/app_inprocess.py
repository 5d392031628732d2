"""``python -m benchmarks.app_inprocess``: ``python app.py``'s cold start (empty embedding cache, then filled), the
app's search latency over every demo query stage by stage, and the attention view's time and size, in process."""

from __future__ import annotations

import os
import sys
import tempfile
import time
from dataclasses import asdict, dataclass

import numpy as np

from benchmarks.app import start_app, stop_app
from benchmarks.common import command_line, machine, main_for, opt, save


@dataclass
class BenchmarkArgs:
    repeats: int = opt(1, "passes over the demo queries per configuration")
    depth: int = opt(20, "candidates the cross-encoder re-ranks")
    torch_threads: int = opt(0, "torch intra-op threads; 0 = torch's default, as app.py")
    cold_start: bool = opt(True, "also time `python app.py` starting twice")
    attention_tokens: str = opt("64,128,256", "input lengths for the attention view")
    output: str = opt("results/app_benchmark.json", "JSON written here")
    cross_encoder: str = opt("", "cross-encoder id or folder ('' = the shipped one, else MiniLM, fresh head)")


def time_app_start(cache_dir: str, timeout_s: float = 600.0) -> float:
    """Seconds from `python app.py` to the first HTTP 200 of its page; stopped afterwards."""
    process, _url, seconds = start_app({"CTXIR_CACHE": cache_dir}, timeout_s)
    stop_app(process)
    return seconds


def percentiles(ms: list[float]) -> dict:
    return {
        "p50_ms": round(float(np.percentile(ms, 50)), 1),
        "p95_ms": round(float(np.percentile(ms, 95)), 1),
        "mean_ms": round(float(np.mean(ms)), 1),
        "n": len(ms),
    }


def text_of_tokens(tokenizer, source: str, n_tokens: int) -> str:
    """Real corpus words that are one token each, ``n_tokens - 2`` of them: exactly ``n_tokens`` with [CLS]/[SEP]."""
    words = [w for w in source.split() if w.isalpha() and len(tokenizer.tokenize(w)) == 1]
    text = " ".join(words[: n_tokens - 2])
    if len(tokenizer(text)["input_ids"]) != n_tokens:
        raise ValueError(f"could not build a text of exactly {n_tokens} tokens")
    return text


def unrounded_head_view_bytes(state, text: str, layers: int) -> int:
    """Size of bertviz's own head view HTML (float32 weights, no rounding) for comparison."""
    import torch
    from bertviz import head_view

    internals = state.models.inspect_input("bi-encoder", text, max_tokens=state.config.max_attention_tokens)
    attention = [torch.from_numpy(a).unsqueeze(0) for a in internals.attentions]
    html = head_view(attention, internals.tokens, include_layers=list(range(layers)), html_action="return")
    return len(html.data.encode())


def bench_search(state, queries: list[str], args: BenchmarkArgs, report: dict) -> None:
    """Search latency (wall and CPU ms, per stage) of each configuration over every query, into
    ``report["search"]``, saved after each configuration so an interrupted run keeps what it measured."""
    from ctxir.app.search import search

    configs = [("bm25", "none"), ("dense", "none"), ("hybrid", "none"), ("dense", "cross-encoder")]
    for first_stage, reranker in [*configs, ("hybrid", "cross-encoder")]:
        wall, cpu, stages = [], [], {}
        for _ in range(args.repeats):
            for query in queries:
                t0, c0 = time.perf_counter(), time.process_time()
                result = search(
                    state, query, first_stage=first_stage, reranker=reranker, k=10, depth=args.depth
                )
                wall.append((time.perf_counter() - t0) * 1000)
                # CPU time of this process (all its threads): what the query costs when the CPU is shared
                cpu.append((time.process_time() - c0) * 1000)
                for name, ms in result.data["timings_ms"].items():
                    stages.setdefault(name, []).append(ms)
        name = first_stage + ("" if reranker == "none" else f" + {reranker} top {args.depth}")
        row = {
            **percentiles(wall),
            "cpu_time": percentiles(cpu),
            "stages": {k: percentiles(v) for k, v in stages.items()},
        }
        report["search"][name] = row
        print(f"search {name}: {row['p50_ms']} ms p50, {row['p95_ms']} ms p95", flush=True)
        save(report, args.output)


def bench_attention(state, args: BenchmarkArgs, report: dict) -> None:
    """The attention view's time and HTML size at each --attention-tokens length, both views, into the report."""
    from ctxir.app import attention_tab
    from ctxir.viz import MAX_ATTENTION_CELLS

    tokenizer = state.models.inspect["bi-encoder"].tokenizer
    source = " ".join(doc["text"] for doc in state.index(None).corpus.values())
    n_layers = state.models.num_layers
    for n_tokens in [int(x) for x in args.attention_tokens.split(",")]:
        text = text_of_tokens(tokenizer, source, n_tokens)
        # the most layers the size limit allows at this length, all heads
        layers = max(1, min(n_layers, MAX_ATTENTION_CELLS // (n_tokens**2 * state.models.num_heads)))
        for view in ("head", "model"):
            times, size = [], 0
            for _ in range(3):
                t0 = time.perf_counter()
                result = attention_tab.attention(state, text, view=view, layers=list(range(layers)))
                times.append((time.perf_counter() - t0) * 1000)
                size = result.data["html_bytes"]
            row = {
                "tokens": n_tokens,
                "view": view,
                "layers": layers,
                "heads": state.models.num_heads,
                "median_ms": round(float(np.median(times)), 1),
                "html_mib": round(size / 2**20, 2),
            }
            if view == "head":
                row["unrounded_html_mib"] = round(unrounded_head_view_bytes(state, text, layers) / 2**20, 2)
            report["attention"].append(row)
            print("attention", row, flush=True)


def run(args: BenchmarkArgs, argv: list[str] | None = None) -> dict:
    import torch

    from ctxir.app.config import AppConfig
    from ctxir.app.state import AppState
    from ctxir.data.demo import demo_queries
    from ctxir.encoders.models import SHIPPED_CROSS_ENCODER, SHIPPED_MODELS, packaged_minilm_path

    if args.torch_threads > 0:  # the same rule as app.py
        torch.set_num_threads(args.torch_threads)
    threads = {"torch_threads": torch.get_num_threads(), "load_average": os.getloadavg()}
    report: dict = {
        "config": asdict(args),
        "machine": machine() | threads,
        "command": command_line("app_inprocess", argv),
    }
    if args.cold_start:
        cache = tempfile.mkdtemp(prefix="ctxir-bench-cache-")
        report["cold_start_s"] = {
            "empty_embedding_cache": round(time_app_start(cache), 1),
            "embedding_cache_filled": round(time_app_start(cache), 1),
        }
        print("cold start (s):", report["cold_start_s"], flush=True)
        save(report, args.output)

    started = time.perf_counter()
    shipped = SHIPPED_MODELS[SHIPPED_CROSS_ENCODER]
    cross_encoder = args.cross_encoder or (
        SHIPPED_CROSS_ENCODER if shipped.is_dir() else str(packaged_minilm_path())
    )
    config = AppConfig(cross_encoder=cross_encoder, device="cpu", rerank_depth=args.depth)
    state = AppState.load(config)
    report["in_process_load_s"] = round(time.perf_counter() - started, 1)
    report["cross_encoder"] = cross_encoder
    report["search"] = {}
    bench_search(state, demo_queries(), args, report)
    report["attention"] = []
    bench_attention(state, args, report)

    report["load_average_at_end"] = os.getloadavg()
    save(report, args.output)
    return report


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    return main_for("app_inprocess", BenchmarkArgs, run, argv)


if __name__ == "__main__":
    sys.exit(main())
