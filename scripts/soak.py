"""A soak: the load test's mix against ``python app.py`` for ``--minutes``, watching for slow leaks (``analyse``:
RSS, file descriptors, threads, the output folder's cap, search p50 drift, failures). Exits 1 when a check fails.

    python scripts/soak.py --minutes 2 --output /tmp/soak.json
"""

from __future__ import annotations

import json
import os
import random
import shlex
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

if __package__ in (None, ""):  # run as a file: python scripts/soak.py
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ctxir.cli import flag
from ctxir.files import write_json
from scripts.load_test import answers, outcomes, percentile, record, rss_mb, serving, visitor, warm_cache

WINDOWS = 6  # 5-minute windows of the 30-minute soak


@dataclass
class SoakArgs:
    minutes: float = flag(30.0, "how long the mix runs and is measured, after warm-up")
    warm_up_s: float = flag(60.0, "seconds of the mix before the measured minutes (first calls, caches)")
    clients: int = flag(4, "visitors at once (steady load, not overload)")
    session_requests: int = flag(20, "requests per gradio_client session before the visitor starts a new one")
    sample_s: float = flag(2.0, "seconds between samples of RSS, fds, threads, disk")
    max_output_mb: int = flag(8, "the app's --max-output-mb: small, so the cap is reached within the run")
    app_args: str = flag("", "further flags for python app.py (quoted)")
    request_timeout_s: float = flag(180.0, "a request taking longer counts as hung")
    max_rss_growth: float = 0.05
    max_p50_ratio: float = 1.5
    min_latency_window_s: float = flag(60.0, "the latency check's first and last windows last at least this")
    confidence: float = flag(0.95, "one-sided confidence of the bound on the search p50 ratio checked")
    resamples: int = flag(4000, "bootstrap resamples for that bound")
    block_s: float = flag(5.0, "searches sent within this many seconds are resampled together")
    min_searches: int = flag(10, "answered searches each latency window needs, else the check fails")
    slack: int = flag(8, "file descriptors or threads the last window may add")
    startup_timeout_s: float = 600.0
    seed: int = 0
    output: str = flag("results/soak.json", "JSON written here")


def held(pid: int) -> tuple[int | None, int | None]:
    """(open file descriptors, threads) of ``pid``; None once it has gone."""
    try:
        process = psutil.Process(pid)
        return process.num_fds(), process.num_threads()
    except psutil.Error:
        return None, None


def output_files(folder: Path) -> list[tuple[str, int]]:
    """(name, bytes) of the app's returned files, without the shared plotly.js (kept on top of the cap)."""
    found = []
    for path in folder.rglob("*") if folder.exists() else []:
        try:
            if path.is_file() and not (path.name.startswith("plotly-") and path.name.endswith(".min.js")):
                found.append((path.name, path.stat().st_size))
        except OSError:  # removed by the app's pruning meanwhile
            continue
    return found


def in_window(rows: list[dict], bounds: tuple[float, float], key: str = "t") -> list[dict]:
    return [r for r in rows if bounds[0] <= r[key] < bounds[1]]


def latency_windows(seconds: float, args: SoakArgs) -> tuple[tuple[float, float], tuple[float, float]]:
    """The first and last windows whose search latencies are compared: ≥ ``--min-latency-window-s``, ≤ half the run."""
    width = min(max(seconds / WINDOWS, args.min_latency_window_s), seconds / 2)
    return (0.0, width), (seconds - width, seconds)


def p50(values) -> float:
    """The median as ``load_test.percentile(values, 0.5)`` takes it (the upper one of an even count), unrounded."""
    return sorted(values)[len(values) // 2]


def p50_ratio_bounds(first: list, last: list, block_s=5.0, confidence=0.95, resamples=4000, seed=0) -> dict:
    """p50(last) / p50(first) of two windows' (t, seconds) searches, with one-sided block-bootstrap bounds."""
    import numpy as np

    rng = np.random.default_rng(seed)

    def medians(window):
        t = np.array([t for t, _ in window], dtype=float)
        values = np.array([v for _, v in window], dtype=float)
        order = np.argsort(values, kind="stable")
        block = np.unique(np.floor(t / block_s) if block_s > 0 else np.arange(len(t)), return_inverse=True)[1]
        blocks = block.max() + 1
        # how often each block is drawn, each time
        counts = rng.multinomial(blocks, np.full(blocks, 1 / blocks), size=resamples)
        weights = np.cumsum(counts[:, block[order]], axis=1)  # searches at or below each value, each time
        # the upper median of the redrawn searches, as load_test.percentile takes it: the value at index n // 2
        at = np.argmax(weights > (weights[:, -1] // 2)[:, None], axis=1)
        return values[order][at]

    ratios = medians(last) / medians(first)
    return {
        "ratio": round(p50([v for _, v in last]) / p50([v for _, v in first]), 3),
        "lower": round(float(np.quantile(ratios, 1 - confidence)), 3),
        "upper": round(float(np.quantile(ratios, confidence)), 3),
    }


def analyse(samples: list[dict], requests: list[dict], seconds: float, cap_bytes: int, args) -> dict:
    """The soak's figures and checks from samples and requests, ``t`` in seconds since the mix started."""
    width = seconds / WINDOWS
    bounds = [(i * width, (i + 1) * width) for i in range(WINDOWS)]
    second, last = bounds[1], bounds[-1]

    def values(window, key):
        return [s[key] for s in in_window(samples, window) if s[key] is not None]

    def search_seconds(window):  # (sent at, seconds)
        return [
            (r["t"], r["seconds"])
            for r in in_window(requests, window)
            if r["api"] == "/search" and r["outcome"] == "ok"
        ]

    def mean_of(window, key):  # made-up samples may leave the machine's load out
        found = [s[key] for s in in_window(samples, window) if s.get(key) is not None]
        return round(statistics.mean(found), 2) if found else None

    # a request's t is when it was sent: one sent during the warm-up is left out even when it ends after it
    samples = [s for s in samples if s["t"] >= 0]
    requests = [r for r in requests if r["t"] >= 0]
    rss_after_warm_up = statistics.mean(values(second, "rss_mb"))
    rss_last = statistics.mean(values(last, "rss_mb"))
    fds_after, fds_last = max(values(second, "fds")), max(values(last, "fds"))
    threads_after, threads_last = max(values(second, "threads")), max(values(last, "threads"))
    latency_first, latency_last = latency_windows(seconds, args)
    searches_first, searches_last = search_seconds(latency_first), search_seconds(latency_last)
    enough = min(len(searches_first), len(searches_last)) >= max(1, args.min_searches)
    bounds_p50 = {"ratio": None, "lower": None, "upper": None}
    if enough:
        bootstrap = (args.block_s, args.confidence, args.resamples, args.seed)
        bounds_p50 = p50_ratio_bounds(searches_first, searches_last, *bootstrap)
    if not enough:
        verdict = "too few searches to judge"
    elif bounds_p50["lower"] > args.max_p50_ratio:
        verdict = "slower beyond the bound"
    elif bounds_p50["upper"] > args.max_p50_ratio:
        verdict = "within the bound, but the windows cannot rule out more"
    else:
        verdict = "within the bound"
    # the app keeps the file just written even when it alone passes the cap
    over_cap = [s for s in samples if s["output_bytes"] > cap_bytes + s["largest_file"]]
    loads = [s["load_1min"] for s in samples if s.get("load_1min") is not None]
    counts = outcomes(requests)
    figures = {
        "windows_s": [[round(a, 1), round(b, 1)] for a, b in bounds],
        "rss_mb": {
            "start": samples[0]["rss_mb"],
            "after_warm_up_mean": round(rss_after_warm_up, 1),
            "last_window_mean": round(rss_last, 1),
            "peak": max(values((0, seconds + 1), "rss_mb")),
            "growth": round(rss_last / rss_after_warm_up - 1, 4),
        },
        "fds": {"start": samples[0]["fds"], "after_warm_up_max": fds_after, "last_window_max": fds_last},
        "threads": {
            "start": samples[0]["threads"],
            "after_warm_up_max": threads_after,
            "last_window_max": threads_last,
        },
        "output_folder": {
            "cap_mb": round(cap_bytes / 2**20, 2),
            "max_mb": round(max(s["output_bytes"] for s in samples) / 2**20, 2),
            "samples_over_cap": len(over_cap),
        },
        "search_p50_s": {
            "windows_s": [[round(a, 1), round(b, 1)] for a, b in (latency_first, latency_last)],
            "searches": [len(searches_first), len(searches_last)],
            "first_window": percentile([v for _, v in searches_first], 0.5),
            "last_window": percentile([v for _, v in searches_last], 0.5),
            "ratio": bounds_p50["ratio"],
            f"ratio_lower_{args.confidence:.0%}": bounds_p50["lower"],
            f"ratio_upper_{args.confidence:.0%}": bounds_p50["upper"],
            "max_ratio": args.max_p50_ratio,
            "verdict": verdict,
        },
        "load_average_1min": {
            "first_latency_window": mean_of(latency_first, "load_1min"),
            "last_latency_window": mean_of(latency_last, "load_1min"),
            "range": [min(loads, default=None), max(loads, default=None)],
        },
        "requests": {"total": len(requests), **counts},
        "per_api": {},
    }
    for api in sorted({r["api"] for r in requests}):
        ok = [r["seconds"] for r in requests if r["api"] == api and r["outcome"] == "ok"]
        figures["per_api"][api] = {"ok": len(ok), "p50_s": percentile(ok, 0.5)}
    checks = {
        "rss_growth_after_warm_up": figures["rss_mb"]["growth"] <= args.max_rss_growth,
        "fds_flat": fds_last <= fds_after + args.slack,
        "threads_flat": threads_last <= threads_after + args.slack,
        "output_folder_under_cap": not over_cap,
        # fails only on evidence: the lower bound of the ratio above the limit (or too few searches to tell)
        "search_p50_last_vs_first": enough and bounds_p50["lower"] <= args.max_p50_ratio,
        "no_error_or_hang": counts["error"] == 0 and counts["hung"] == 0,
    }
    return {"figures": figures, "checks": checks}


def run(args: SoakArgs) -> dict:
    work = Path(tempfile.mkdtemp(prefix="ctxir-soak-"))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "CTXIR_CACHE": str(work / "cache"), "TMPDIR": str(work)}
    warm_cache(args.app_args, env)
    flags = ["--max-output-mb", str(args.max_output_mb), *shlex.split(args.app_args)]
    log_path = work / "app.log"
    with serving(flags, env, log_path, args.startup_timeout_s) as (url, server):
        outputs = next(work.glob("ctxir-app-*"))
        seconds = args.minutes * 60
        records, samples, lock = [], [], threading.Lock()
        t0 = time.time() + args.warm_up_s  # what comes before is warm-up: negative times, in no window
        stop_at = t0 + seconds
        visitors = [
            threading.Thread(target=visitor, daemon=True,
                             args=(url, stop_at, args.request_timeout_s, random.Random(args.seed * 1000 + i),
                                   records, lock, t0, args.session_requests))
            for i in range(args.clients)
        ]  # fmt: skip
        for v in visitors:
            v.start()
        while any(v.is_alive() for v in visitors):
            files = [size for _, size in output_files(outputs)]
            fds, threads = held(server.pid)
            sample = {"t": time.time() - t0, "rss_mb": rss_mb(server.pid), "fds": fds, "threads": threads,
                      "output_bytes": sum(files),
                      "largest_file": max(files, default=0), "load_1min": os.getloadavg()[0]}  # fmt: skip
            if sample["rss_mb"] is None:
                raise SystemExit(f"the app died during the soak (see {log_path})")
            samples.append(sample)
            time.sleep(args.sample_s)
        alive = answers(url)
    result = analyse(samples, records, seconds, args.max_output_mb * 2**20, args)
    result["checks"]["still_serving"] = alive
    errors = sorted({r["message"] for r in records if r["outcome"] in ("error", "hung")})[:10]
    result = record("soak.py", args, server, passed=all(result["checks"].values()), **result, errors=errors)
    result["samples"] = samples
    result["requests"] = [[round(r["t"], 2), r["api"], r["outcome"], round(r["seconds"], 4)] for r in records]
    out = write_json(args.output, result, indent=1)
    print(json.dumps({k: v for k, v in result.items() if k not in ("samples", "requests")}, indent=1))
    print(f"{'passed' if result['passed'] else 'FAILED'}; written {out}")
    return result


def main(argv: list[str] | None = None) -> int:
    from ctxir.cli import cli_main

    return cli_main(SoakArgs, lambda args: 0 if run(args)["passed"] else 1, argv)


if __name__ == "__main__":
    sys.exit(main())
