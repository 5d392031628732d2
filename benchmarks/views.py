"""``python -m benchmarks.views``: the app's view functions timed in process on each device asked for, and whether
every device returns the same results (the same documents in the same order, scores within a tolerance)."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from benchmarks.common import (
    cell,
    finish,
    load_average,
    main_for,
    markdown_table,
    set_torch_threads,
    summary_ms,
)
from ctxir import CtxirError
from ctxir.cli import flag

SEARCH_QUERY = "where do otters live along the river bank"


@dataclass
class ViewsArgs:
    output: str = flag("", "JSON path (default: results/bench/views.json)")
    devices: str = flag("cpu", "comma-separated: cpu, cuda, cuda:N, mps")
    repeats: int = flag(10, "timed calls per view")
    warmup: int = flag(2, "untimed calls per view first")
    explain_repeats: int = flag(3, "timed calls of the explanation (integrated gradients)")
    threads: int = flag(0, "torch threads (0 = all cores)")
    rerank_backend: str = flag("onnx-int8", "how the cross-encoders score on the CPU (as app.py's)")
    score_tolerance: float = flag(0.02, "largest score difference between two devices counted as the same")


def view_calls(state) -> dict[str, Callable]:
    """Label → a call of one view with the app's own examples (what a first visitor clicks)."""
    from ctxir.app.attention_tab import attention
    from ctxir.app.embeddings_tab import model_info, token_embeddings
    from ctxir.app.explain_tab import explain_pair
    from ctxir.app.pairs_tab import score_pairs
    from ctxir.app.search import search
    from ctxir.app.similarity import layer_similarity, sentence_similarity
    from ctxir.data.demo import demo_presets

    presets = demo_presets()
    pair_query, documents = presets["pair_query"], presets["pair_documents"]
    calls: dict[str, Callable] = {}
    for first_stage in ("bm25", "dense", "hybrid"):
        calls[f"search {first_stage}"] = lambda s=first_stage: search(
            state, SEARCH_QUERY, first_stage=s, k=10
        )
        if "cross-encoder" in state.models.rerankers:
            calls[f"search {first_stage} + cross-encoder top 20"] = lambda s=first_stage: search(
                state, SEARCH_QUERY, first_stage=s, reranker="cross-encoder", k=10, depth=20
            )
    calls |= {
        "score_pairs (5 documents)": lambda: score_pairs(state, pair_query, documents),
        "model_info": lambda: model_info(state, "bi-encoder", presets["bank_contexts"][0]),
        "token_embeddings (pca)": lambda: token_embeddings(
            state, presets["bank_contexts"], 0, -1, ["pca"], "bank"
        ),
        "layer_similarity": lambda: layer_similarity(state, presets["bank_contexts"], "bank"),
        "sentence_similarity": lambda: sentence_similarity(state, presets["similarity_sentences"]),
        "attention (cross-encoder pair)": lambda: attention(
            state, pair_query, documents[0], model="cross-encoder"
        ),
        "explain_pair (cross-encoder)": lambda: explain_pair(
            state, pair_query, documents[0], "cross-encoder"
        ),
    }
    return calls


def fingerprint(label: str, result) -> dict:
    """What must not depend on the device: the documents in order or each model's ranks, and every score shown."""
    if not (label.startswith("search") or label.startswith("score_pairs")):
        return {}
    scores = [
        float(v)
        for row in result.rows
        for k, v in row.items()
        if k.endswith(("_score", "_probability", "_cosine")) and isinstance(v, (int, float))
    ]
    if label.startswith("search"):
        return {"ids": [str(r["doc_id"]) for r in result.rows], "scores": scores}
    ranks = [f"{k}={v}" for row in result.rows for k, v in row.items() if k.endswith("_rank")]
    return {"ids": ranks, "scores": scores}


def time_device(device: str, args: ViewsArgs) -> dict:
    """Load the app's models on ``device`` as app.py does, then time every view."""
    from ctxir.app.config import AppConfig
    from ctxir.app.state import AppState

    started = time.perf_counter()
    state = AppState.load(AppConfig(device=device, rerank_backend=args.rerank_backend))
    return time_views(state, device, args) | {"load_s": round(time.perf_counter() - started, 2)}


def time_views(state, device: str, args: ViewsArgs) -> dict:
    """Every view of ``state`` (p50/p95 over the repeats) and what it returned that must not depend on the device."""
    import torch

    out: dict = {"device": device, "views": {}}
    for label, call in view_calls(state).items():
        repeats = args.explain_repeats if label.startswith("explain") else args.repeats
        try:
            for _ in range(args.warmup):
                result = call()
            times = []
            for _ in range(repeats):
                begin = time.perf_counter()
                result = call()
                if device.startswith("cuda"):
                    torch.cuda.synchronize()
                times.append(time.perf_counter() - begin)
        except CtxirError as err:  # a view this installation cannot serve is reported, not fatal
            out["views"][label] = {"error": str(err)}
            continue
        out["views"][label] = summary_ms(times) | {"result": fingerprint(label, result)}
        print(f"{device:>6}  {label:<42} p50 {out['views'][label]['p50_ms']:8.1f} ms", flush=True)
    return out


def agreement(runs: list[dict], tolerance: float) -> dict:
    """Per view: do all devices return the same documents in the same order, and the largest score difference."""
    out: dict = {}
    first = runs[0]["views"]
    for label, row in first.items():
        if "result" not in row or not row["result"]:
            continue
        others = [r["views"].get(label, {}).get("result") for r in runs[1:]]
        if any(o is None for o in others):
            continue
        base = np.asarray(row["result"]["scores"], dtype=float)
        gaps = [
            float(np.max(np.abs(base - np.asarray(o["scores"], dtype=float)))) for o in others if len(base)
        ]
        gap = max(gaps, default=0.0)
        same = all(o["ids"] == row["result"]["ids"] for o in others)
        out[label] = {
            "same_order": same,
            "max_score_difference": round(gap, 5),
            "within_tolerance": gap <= tolerance,
        }
    return out


def run_views(args: ViewsArgs, argv: list[str] | None = None) -> dict:
    import torch

    from ctxir.encoders.models import pick_device

    devices = [d.strip() for d in args.devices.split(",") if d.strip()]
    if not devices:
        raise CtxirError(f"--devices {args.devices!r} names no device: give e.g. cpu or cpu,cuda")
    for device in devices:
        pick_device(device)
    if args.repeats < 1 or args.explain_repeats < 1 or args.warmup < 0:
        raise CtxirError("--repeats and --explain-repeats must be ≥ 1, --warmup ≥ 0")
    from ctxir.checks import check_choice
    from ctxir.rerank.rankers import RERANK_BACKENDS

    check_choice(args.rerank_backend, "--rerank-backend", RERANK_BACKENDS)  # as app.py checks it
    load_before, started = load_average(), time.perf_counter()
    threads = set_torch_threads(args.threads)

    runs = [time_device(device, args) for device in devices]  # each loads the app's models afresh
    results = {"runs": runs, "agreement": agreement(runs, args.score_tolerance) if len(runs) > 1 else {}}
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    data = {
        "search_query": SEARCH_QUERY,
        "threads": threads,
        "gpu": gpu,
        "rerank_backend": args.rerank_backend,
    }
    timing = (
        "each view function called in process as the app's callbacks call it, after warm-up calls; "
        "p50/p95 over the repeats; a GPU's work is synchronized before the clock stops"
    )
    return finish("views", format_views, args, argv, load_before, started, results, data=data, timing=timing)


def format_views(record: dict) -> str:
    runs = record["results"]["runs"]
    labels = list(runs[0]["views"])
    agree = record["results"]["agreement"]
    header = ["view", *(f"{r['device']} p50 ms" for r in runs)] + (["same results"] if agree else [])
    rows = []
    for label in labels:
        row = [label, *(cell(r["views"].get(label, {}).get("p50_ms"), "{:.1f}") for r in runs)]
        a = agree.get(label)
        if a is None:
            row += ["–"] if agree else []
        elif a["same_order"] and a["within_tolerance"]:
            row.append("yes")
        else:
            row.append(f"no (order {a['same_order']}, Δ {a['max_score_difference']})")
        rows.append(row)
    rows.append(["(models loaded, s)", *(f"{r['load_s']:.1f}" for r in runs)] + ([""] if agree else []))
    return markdown_table(header, rows)


def main(argv: list[str] | None = None) -> int:
    return main_for("views", ViewsArgs, run_views, argv)


if __name__ == "__main__":
    sys.exit(main())
