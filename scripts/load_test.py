"""Overload the app on loopback and record what happens: successes, refusals, errors, latency, server memory.

    python scripts/load_test.py                                   # 64 clients, 3 bursts of 40 s, mixed endpoints
    python scripts/load_test.py --clients 16 --bursts 1 --burst-s 20 --output /tmp/load.json
    python scripts/load_test.py --app-args "--max-queue 64 --max-sessions 10000 --malloc-arenas 0"

Starts ``python app.py`` as a separate process (so the clients do not share its interpreter; its embedding cache
fresh and warmed first, see ``--warm-cache``), waits until it answers a search, then runs ``--bursts`` identical
bursts: ``--clients`` threads, each with its own gradio_client session, calling a mix of endpoints (searches, pair
scoring, sentence similarity, and the slow attention, explain and token-embedding views) for ``--burst-s`` seconds,
then leaving (``Client.close``). A refused visitor tries again after 1 s. Each request ends as "ok", "refused" (the app said it is busy: the queue is full) or "error" (anything
else, with the message), or "hung" if it takes longer than ``--request-timeout-s``. The server's RSS is sampled
from /proc every 0.5 s; after the last burst the page must still answer.

Written to ``--output`` (JSON): per burst the counts, latency percentiles per endpoint, RSS at its start and end
and its peak, and the growth of each burst over the one before (the issue's bound: a further identical burst grows
RSS by at most 10%).
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import platform
import random
import shlex
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ctxir import kinds

ROOT = Path(__file__).resolve().parents[1]


# (api name, arguments, weight): what a visitor does, searches most
MIX = [
    ("/search", ("otters playing on the river bank", None, kinds.DENSE, "none", 10, 20), 5),
    ("/search", ("interest rates at the bank", None, kinds.HYBRID, "none", 10, 20), 3),
    ("/score_pairs", ("river bank", "Otters dig dens in the river bank.\nThe bank raised its rates."), 2),
    ("/sentence_similarity", ("I sat on the river bank.\nShe deposited money at the bank.", 6, "mean"), 1),
    ("/attention", (kinds.BI_ENCODER, "The otters played on the river bank.", "", "head", [], [], 5, 1), 1),
    ("/explain", ("river bank", "Otters dig dens in the river bank.", kinds.BI_ENCODER), 1),
    (
        "/token_embeddings",
        (
            kinds.BI_ENCODER,
            "I sat on the river bank.\nShe deposited money at the bank.",
            "bank",
            0,
            6,
            ["pca"],
        ),
        1,
    ),
]
BUSY_WORDS = ("queue is full", "too many", "busy", "try again")


@dataclass
class LoadArgs:
    clients: int = field(default=64, metadata={"help": "concurrent visitors, each its own session"})
    bursts: int = field(default=3, metadata={"help": "identical bursts; RSS growth is compared between them"})
    burst_s: float = field(default=40.0, metadata={"help": "seconds each burst lasts"})
    pause_s: float = field(default=5.0, metadata={"help": "quiet seconds between bursts"})
    request_timeout_s: float = field(
        default=120.0, metadata={"help": "a request taking longer counts as hung"}
    )
    app_args: str = field(default="", metadata={"help": "extra flags for python app.py (quoted)"})
    warm_cache: bool = field(
        default=True,
        metadata={
            "help": "encode the startup corpus into the app's fresh embedding cache before starting it"
        },
    )
    startup_timeout_s: float = 600.0
    seed: int = 0
    output: str = field(default="results/load_test.json", metadata={"help": "JSON written here"})


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_mb(pid: int) -> float | None:
    """Resident memory of ``pid`` and its children (gradio may fork helpers), in MB; None once it has gone."""
    total, found = 0, False
    for candidate in [pid, *_children(pid)]:
        try:
            for line in Path(f"/proc/{candidate}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
                    found = True
        except OSError:
            continue
    return total / 1024 if found else None


def _children(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status == 200
    except OSError:
        return False


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


def _flag(command_line: str, name: str) -> str:
    """The value of ``name`` in a command line ("" when absent)."""
    words = shlex.split(command_line)
    return words[words.index(name) + 1] if name in words[:-1] else ""


def classify(err: BaseException) -> str:
    text = str(err).lower()
    return "refused" if any(word in text for word in BUSY_WORDS) else "error"


def visitor(
    url: str, stop_at: float, timeout_s: float, rng: random.Random, records: list, lock: threading.Lock
):
    from gradio_client import Client

    try:
        client = Client(url, verbose=False)
    except Exception as err:  # the app refused even the page: that is a result too
        with lock:
            records.append(
                {"api": "connect", "outcome": classify(err), "seconds": 0.0, "message": str(err)[:200]}
            )
        return
    calls = [(api, args) for api, args, weight in MIX for _ in range(weight)]
    try:
        _visit(client, calls, stop_at, timeout_s, rng, records, lock)
    finally:
        client.close()  # the visitor leaves: its heartbeat stops, as when a browser tab is closed


def _visit(client, calls, stop_at, timeout_s, rng, records, lock):
    while time.time() < stop_at:
        api, args = rng.choice(calls)
        started = time.perf_counter()
        job = client.submit(*args, api_name=api)
        try:
            job.result(timeout=timeout_s)
            outcome, message = "ok", ""
        except concurrent.futures.TimeoutError:
            outcome, message = "hung", f"no answer in {timeout_s:.0f} s"
            job.cancel()
        except Exception as err:
            outcome, message = classify(err), str(err)[:200]
        with lock:
            records.append(
                {"api": api, "outcome": outcome, "seconds": time.perf_counter() - started, "message": message}
            )
        if outcome == "refused":
            time.sleep(
                1.0
            )  # a person told "busy, try again" clicks again a moment later, not in a tight loop


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    values = sorted(values)
    return round(values[min(len(values) - 1, int(q * len(values)))], 3)


def summarise(records: list[dict], rss: list[float]) -> dict:
    outcomes = {o: sum(r["outcome"] == o for r in records) for o in ("ok", "refused", "error", "hung")}
    per_api = {}
    for api in sorted({r["api"] for r in records}):
        ok = [r["seconds"] for r in records if r["api"] == api and r["outcome"] == "ok"]
        per_api[api] = {
            "requests": sum(r["api"] == api for r in records),
            "ok": len(ok),
            **{
                o: sum(r["api"] == api and r["outcome"] == o for r in records)
                for o in ("refused", "error", "hung")
            },
            "p50_s": percentile(ok, 0.5),
            "p95_s": percentile(ok, 0.95),
        }
    messages = sorted(
        {r["message"] for r in records if r["outcome"] in ("refused", "error") and r["message"]}
    )
    return {
        "requests": len(records),
        **outcomes,
        "per_api": per_api,
        "messages": messages[:10],
        "rss_mb": {"start": round(rss[0], 1), "end": round(rss[-1], 1), "peak": round(max(rss), 1)},
    }


def one_burst(url: str, server: subprocess.Popen, args: LoadArgs, burst: int, log_name: str) -> dict:
    """Burst number ``burst`` (0-based): ``args.clients`` visitors for ``args.burst_s``, the app's RSS sampled
    every 0.5 s; → its summary. Stops the run if the app dies meanwhile."""
    records, lock, rss = [], threading.Lock(), [rss_mb(server.pid)]
    stop_at = time.time() + args.burst_s
    threads = [
        threading.Thread(
            target=visitor,
            daemon=True,
            args=(
                url,
                stop_at,
                args.request_timeout_s,
                random.Random(args.seed * 1000 + burst * 100 + i),
                records,
                lock,
            ),
        )
        for i in range(args.clients)
    ]
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


def run(args: LoadArgs) -> dict:
    # 1. start the app in its own process, with its own output folder and a fresh embedding cache
    port = free_port()
    url = f"http://127.0.0.1:{port}/"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "CTXIR_CACHE": tempfile.mkdtemp(prefix="ctxir-load-cache-")}
    if args.warm_cache:
        # the startup corpus's embeddings are written to the fresh cache first, in a process of their own: the
        # bursts measure serving, not the first start's indexing (which app.py runs beside the first requests)
        subprocess.run(
            [
                sys.executable,
                "-c",
                "from ctxir.app.config import AppConfig; from ctxir.app.state import AppState; "
                "AppState.load(AppConfig(corpus=__import__('sys').argv[1]))",
                _flag(args.app_args, "--corpus"),
            ],
            cwd=ROOT,
            env=env,
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    command = [
        sys.executable,
        "app.py",
        "--port",
        str(port),
        "--host",
        "127.0.0.1",
        *shlex.split(args.app_args),
    ]
    log = open(tempfile.mktemp(prefix="ctxir-load-app-", suffix=".log"), "w")  # noqa: SIM115
    server = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.time() + args.startup_timeout_s
        while not answers(url) or not searches(url):
            if server.poll() is not None or time.time() > deadline:
                raise SystemExit(f"the app did not start, or its searches fail (see {log.name})")
            time.sleep(1)
        # 2. identical bursts, RSS sampled throughout
        bursts = []
        for burst in range(args.bursts):
            summary = one_burst(url, server, args, burst, log.name)
            if bursts:
                previous = bursts[-1]["rss_mb"]["end"]
                summary["rss_growth_vs_previous"] = round(summary["rss_mb"]["end"] / previous - 1, 4)
            bursts.append(summary)
            print(
                f"burst {burst + 1}: {summary['requests']} requests, ok {summary['ok']}, refused "
                f"{summary['refused']}, error {summary['error']}, hung {summary['hung']}; RSS "
                f"{summary['rss_mb']['start']:.0f} → {summary['rss_mb']['end']:.0f} MB "
                f"(peak {summary['rss_mb']['peak']:.0f})",
                flush=True,
            )
            time.sleep(args.pause_s)
        # 3. still serving?
        alive = answers(url)
    finally:
        server.terminate()
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()
    result = {
        "command": "python scripts/load_test.py "
        + " ".join(f"--{k.replace('_', '-')} {shlex.quote(str(v))}" for k, v in asdict(args).items()),
        "app_command": " ".join(command[1:]),
        "args": asdict(args),
        "bursts": bursts,
        "still_serving": alive,
        "app_exit_code": server.returncode,
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "load_average": os.getloadavg()},
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
    }
    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"still serving: {alive}; written {out}")
    return result


def main(argv: list[str] | None = None) -> int:
    from ctxir.cli import cli_main

    return cli_main(LoadArgs, run, argv)


if __name__ == "__main__":
    sys.exit(main())
