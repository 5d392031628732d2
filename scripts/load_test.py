"""Overload ``python app.py`` on loopback in ``--bursts`` identical bursts of ``--clients`` gradio_client visitors
calling ``MIX``, and record each request's outcome (ok, refused, error, hung), latency and the server's RSS.

    python scripts/load_test.py --clients 16 --bursts 1 --burst-s 20 --output /tmp/load.json
"""

from __future__ import annotations

import contextlib
import itertools
import os
import platform
import random
import shlex
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import psutil

if __package__ in (None, ""):  # run as a file: python scripts/load_test.py
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.app import answers, start_app, stop_app
from ctxir import kinds
from ctxir.cli import flag
from ctxir.files import write_json
from ctxir.types import CtxirError

ROOT = Path(__file__).resolve().parents[1]


SENTENCES = "I sat on the river bank.\nShe deposited money at the bank."
# (api name, arguments, weight): what a visitor does, searches most
MIX = [
    ("/search", ("otters playing on the river bank", None, kinds.DENSE, "none", 10, 20), 5),
    ("/search", ("interest rates at the bank", None, kinds.HYBRID, "none", 10, 20), 3),
    ("/score_pairs", ("river bank", "Otters dig dens in the river bank.\nThe bank raised its rates."), 2),
    ("/sentence_similarity", (SENTENCES, 6, "mean"), 1),
    ("/attention", (kinds.BI_ENCODER, "The otters played on the river bank.", "", "head", [], [], 5, 1), 1),
    ("/explain", ("river bank", "Otters dig dens in the river bank.", kinds.BI_ENCODER), 1),
    ("/token_embeddings", (kinds.BI_ENCODER, SENTENCES, "bank", 0, 6, ["pca"]), 1),
]


@dataclass
class LoadArgs:
    clients: int = flag(64, "concurrent visitors, each its own session")
    bursts: int = flag(3, "identical bursts; RSS growth is compared between them")
    burst_s: float = flag(40.0, "seconds each burst lasts")
    pause_s: float = flag(5.0, "quiet seconds between bursts")
    request_timeout_s: float = flag(120.0, "a request taking longer counts as hung")
    app_args: str = flag("", "extra flags for python app.py (quoted)")
    warm_cache: bool = flag(True, "encode the startup corpus into the app's fresh embedding cache first")
    startup_timeout_s: float = 600.0
    seed: int = 0
    output: str = flag("results/load_test.json", "JSON written here")


def rss_mb(pid: int) -> float | None:
    """Resident memory of ``pid`` and its children (gradio may fork helpers), in MB; None once it has gone."""
    try:
        process = psutil.Process(pid)
        total, children = process.memory_info().rss, process.children()
    except psutil.Error:
        return None
    for child in children:
        with contextlib.suppress(psutil.Error):
            total += child.memory_info().rss
    return total / 2**20


def searches(url: str) -> bool:
    """The app answers a search (its startup corpus is indexed)."""
    from gradio_client import Client

    try:
        client = Client(url, verbose=False)
        try:
            client.predict(*MIX[0][1], api_name=MIX[0][0])
        finally:
            client.close()
        return True
    except Exception as err:
        print(f"waiting for a first search: {str(err)[:200]}", flush=True)
        return False


def classify(err: BaseException) -> str:
    text = str(err).lower()
    busy = ("queue is full", "too many", "busy", "try again")
    return "refused" if any(word in text for word in busy) else "error"


def request(client, api: str, call: tuple, timeout_s: float) -> tuple[str, str]:
    """One call through ``client``: (outcome, message), the outcome "ok", "refused", "error" or "hung"."""
    job = client.submit(*call, api_name=api)
    try:
        job.result(timeout=timeout_s)
        return "ok", ""
    except TimeoutError:
        job.cancel()
        return "hung", f"no answer in {timeout_s:.0f} s"
    except Exception as err:
        return classify(err), str(err)[:200]


def visitor(url: str, stop_at: float, timeout_s: float, rng, records: list, lock, t0=0.0, session_requests=0):
    """Calls of ``MIX`` until ``stop_at`` (``t``: seconds since ``t0``), a new session every ``session_requests``."""
    from gradio_client import Client

    calls = [(api, call) for api, call, weight in MIX for _ in range(weight)]
    while time.time() < stop_at:
        try:
            client = Client(url, verbose=False)
        except Exception as err:  # the app refused even the page: that is a result too
            with lock:
                records.append({"t": time.time() - t0, "api": "connect", "outcome": classify(err), "seconds": 0.0,
                                "message": str(err)[:200]})  # fmt: skip
            if not session_requests:
                return
            time.sleep(1.0)
            continue
        try:
            for _ in range(session_requests) if session_requests else itertools.count():
                if time.time() >= stop_at:
                    break
                api, call = rng.choice(calls)
                started, sent = time.perf_counter(), time.time() - t0
                outcome, message = request(client, api, call, timeout_s)
                with lock:
                    records.append({"t": sent, "api": api, "outcome": outcome,
                                    "seconds": time.perf_counter() - started, "message": message})  # fmt: skip
                if outcome == "refused":
                    time.sleep(1.0)  # a person told "busy, try again" clicks again a moment later
        finally:
            client.close()  # the visitor leaves: its heartbeat stops, as when a browser tab is closed


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    values = sorted(values)
    return round(values[min(len(values) - 1, int(q * len(values)))], 3)


def outcomes(records: list[dict]) -> dict[str, int]:
    return {o: sum(r["outcome"] == o for r in records) for o in ("ok", "refused", "error", "hung")}


def summarise(records: list[dict], rss: list[float]) -> dict:
    per_api = {}
    for api in sorted({r["api"] for r in records}):
        mine = [r for r in records if r["api"] == api]
        ok = [r["seconds"] for r in mine if r["outcome"] == "ok"]
        p50, p95 = percentile(ok, 0.5), percentile(ok, 0.95)
        per_api[api] = {"requests": len(mine), **outcomes(mine), "p50_s": p50, "p95_s": p95}
    messages = sorted(
        {r["message"] for r in records if r["outcome"] in ("refused", "error") and r["message"]}
    )
    return {
        "requests": len(records),
        **outcomes(records),
        "per_api": per_api,
        "messages": messages[:10],
        "rss_mb": {"start": round(rss[0], 1), "end": round(rss[-1], 1), "peak": round(max(rss), 1)},
    }


def one_burst(url: str, server: subprocess.Popen, args: LoadArgs, burst: int, log_name: str) -> dict:
    """Burst ``burst`` (0-based): ``args.clients`` visitors for ``args.burst_s``, the app's RSS sampled every 0.5 s."""
    records, lock, rss = [], threading.Lock(), [rss_mb(server.pid)]
    stop_at = time.time() + args.burst_s
    rngs = [random.Random(args.seed * 1000 + burst * 100 + i) for i in range(args.clients)]
    visitors = [(url, stop_at, args.request_timeout_s, rng, records, lock) for rng in rngs]
    threads = [threading.Thread(target=visitor, daemon=True, args=a) for a in visitors]
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        value = rss_mb(server.pid)
        if value is None:
            raise SystemExit(f"the app died during burst {burst + 1} (see {log_name})")
        rss.append(value)
        time.sleep(0.5)
    rss.append(rss_mb(server.pid))
    return summarise(records, rss)


def warm_cache(app_args: str, env: dict) -> None:
    """The startup corpus's embeddings into the fresh cache, in a process of their own: a run measures serving."""
    code = (
        "import sys; from ctxir.app.config import AppConfig; from ctxir.app.state import AppState; "
        "AppState.load(AppConfig(corpus=sys.argv[1]))"
    )
    words = shlex.split(app_args)
    corpus = words[words.index("--corpus") + 1] if "--corpus" in words[:-1] else ""
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    subprocess.run([sys.executable, "-c", code, corpus], cwd=ROOT, env=env, check=True, **quiet)


@contextlib.contextmanager
def serving(flags: list[str], env: dict, log_path: Path, timeout_s: float):
    """``python app.py FLAGS`` on a free loopback port, once it answers a search: yields (url, server)."""
    with log_path.open("w") as log:
        try:
            server, url, _ = start_app(env, timeout_s, flags, log)
        except CtxirError as err:
            raise SystemExit(f"{err} (see {log_path})") from err
    try:
        deadline = time.time() + timeout_s
        while not searches(url):
            if server.poll() is not None or time.time() > deadline:
                raise SystemExit(f"the app's searches fail (see {log_path})")
            time.sleep(1)
        yield url, server
    finally:
        stop_app(server)


def record(script: str, settings, server, **fields) -> dict:
    """What every run writes around its results: the command as typed, the app's, the machine, the date."""
    return {
        "command": f"python scripts/{script} "
        + " ".join(f"--{k.replace('_', '-')} {shlex.quote(str(v))}" for k, v in asdict(settings).items()),
        "app_command": " ".join(server.args[1:]),
        **fields,
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "load_average": os.getloadavg()},
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
    }


def run(args: LoadArgs) -> dict:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "CTXIR_CACHE": tempfile.mkdtemp(prefix="ctxir-load-cache-")}
    if args.warm_cache:
        warm_cache(args.app_args, env)
    log = Path(tempfile.mktemp(prefix="ctxir-load-app-", suffix=".log"))
    with serving(shlex.split(args.app_args), env, log, args.startup_timeout_s) as (url, server):
        bursts = []
        for burst in range(args.bursts):
            summary = one_burst(url, server, args, burst, str(log))
            if bursts:
                previous = bursts[-1]["rss_mb"]["end"]
                summary["rss_growth_vs_previous"] = round(summary["rss_mb"]["end"] / previous - 1, 4)
            bursts.append(summary)
            rss = summary["rss_mb"]
            print(
                f"burst {burst + 1}: {summary['requests']} requests, ok {summary['ok']}, refused "
                f"{summary['refused']}, error {summary['error']}, hung {summary['hung']}; RSS "
                f"{rss['start']:.0f} → {rss['end']:.0f} MB (peak {rss['peak']:.0f})",
                flush=True,
            )
            time.sleep(args.pause_s)
        alive = answers(url)
    fields = {"args": asdict(args), "bursts": bursts, "still_serving": alive}
    result = record("load_test.py", args, server, **fields, app_exit_code=server.returncode)
    out = write_json(args.output, result, indent=1)
    print(f"still serving: {alive}; written {out}")
    return result


def main(argv: list[str] | None = None) -> int:
    from ctxir.cli import cli_main

    return cli_main(LoadArgs, run, argv)


if __name__ == "__main__":
    sys.exit(main())
