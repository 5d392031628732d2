"""``python -m benchmarks.app``: every endpoint of ``python app.py`` (or ``--url``) through ``gradio_client`` and
Gradio's HTTP API, beside its view function and whole callback in this process."""

from __future__ import annotations

import os

# as app.py, before anything imports torch: the in-process clocks run the models the way the app does
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import functools
import json
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from benchmarks.common import (
    cell,
    figure,
    finish,
    load_average,
    main_for,
    markdown_table,
    save_figure,
    summary_ms,
)
from ctxir import CtxirError
from ctxir.cli import flag
from ctxir.encoders.models import SHIPPED_CROSS_ENCODER

HTTP_SESSION = "benchmarks-app"  # the HTTP API calls' kept session (``http_call``)
APP_QUERIES = (
    "otters playing on the river bank",
    "bats hunting insects at night",
    "opening a savings account",
    "where do otters live",
    "interest rates at the central bank",
)


@dataclass
class AppBenchArgs:
    output: str = flag("", "JSON path (default: results/bench/app.json)")
    url: str = flag("", "an app already running ('' = start `python app.py` on a free port, then stop it)")
    corpus: str = flag("demo", "corpus name the search endpoints use")
    cross_encoder: str = flag("", "started app: CTXIR_CROSS_ENCODER ('' = the shipped cross-encoder)")
    rerank_backend: str = flag("", "started app: CTXIR_RERANK_BACKEND ('' = onnx-int8, as the recorded runs)")
    repeats: int = flag(10, "timed calls per endpoint")
    warmup: int = flag(1, "untimed calls per endpoint first")
    endpoints: str = flag("", "comma-separated labels to run ('' = all)")
    torch_threads: int = flag(0, "started app: CTXIR_TORCH_THREADS")
    in_process: bool = flag(True, "also time each endpoint's view and whole callback in this process")
    start_timeout_s: float = 600.0


def app_calls(corpus: str) -> dict[str, tuple[str, Callable[[int], tuple]]]:
    """label → (api_name, call number → arguments): the app's endpoints with a typical input each."""
    from ctxir.data.demo import demo_presets

    pair_docs = "\n".join(demo_presets()["pair_documents"])  # the Pair scoring tab's example: 5 documents
    document = "Otters dig dens in the river bank."
    sentences = (
        "The otter swam to the river bank.\nShe paid the money into the bank.\nBats sleep in caves by day."
    )

    def query(i: int) -> str:
        return APP_QUERIES[i % len(APP_QUERIES)]

    def search(first: str, rerank: str) -> Callable[[int], tuple]:
        return lambda i: (query(i), corpus, first, rerank, 10, 20)

    def attention(i: int) -> tuple:
        return ("bi-encoder", query(i), "Bats use echoes to find moths.", "model", [0, 5], [], 1, 2)

    return {
        "search bm25": ("/search", search("bm25", "none")),
        "search dense": ("/search", search("dense", "none")),
        "search hybrid": ("/search", search("hybrid", "none")),
        "search hybrid + cross-encoder top 20": ("/search", search("hybrid", "cross-encoder")),
        "score_pairs (5 documents)": ("/score_pairs", lambda i: (query(i), pair_docs)),
        "sentence_similarity (3 sentences)": ("/sentence_similarity", lambda i: (sentences, 6, "mean")),
        "model_info": ("/model_info", lambda i: ("bi-encoder", query(i))),
        "attention (2 layers × 2 heads)": ("/attention", attention),
        "explain (bi-encoder + cross-encoder)": ("/explain", lambda i: (query(i), document, "auto")),
    }


def answers(url: str, timeout: float = 10) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status == 200
    except OSError:
        return False


def start_app(env: dict, timeout_s: float = 600.0, flags: list[str] = (), log=subprocess.DEVNULL) -> tuple:
    """(process, url, seconds until HTTP 200) of ``python app.py FLAGS`` on a free loopback port."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    root = Path(__file__).resolve().parents[1]
    started = time.perf_counter()
    process = subprocess.Popen(
        [sys.executable, str(root / "app.py"), "--host", "127.0.0.1", "--port", str(port), *flags],
        cwd=root,
        env={**os.environ, "HF_HUB_OFFLINE": "1", **env},
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}/"
    try:
        while time.perf_counter() - started < timeout_s:
            if process.poll() is not None:
                raise CtxirError(f"app.py exited with code {process.returncode} while starting")
            if answers(url, timeout=2):
                return process, url, time.perf_counter() - started
            time.sleep(0.2)
        raise CtxirError(f"app.py did not answer within {timeout_s} s")
    except BaseException:
        stop_app(process)
        raise


def answered(value) -> bool:
    """Whether a load event's value changes its component: not Gradio's "skip" (an update with empty ``props``)."""
    if not (isinstance(value, dict) and value.get("__type__") == "update"):
        return True
    rest = {k: v for k, v in value.items() if k not in ("__type__", "props")}
    return bool(rest) or any(k != "__type__" for k in value.get("props") or {})


def first_view(url: str, session: str = "benchmarks-app", timeout: float = 600.0) -> dict:
    """{component id: value} of the page's largest load event, called every 0.2 s until it carries answers."""
    with urllib.request.urlopen(f"{url}config", timeout=timeout) as response:
        config = json.load(response)
    loads = [d for d in config["dependencies"] if any(t[1] == "load" for t in d["targets"])]
    if not loads:
        raise CtxirError(f"the app at {url} has no load event: no first view to wait for")
    event = max(loads, key=lambda d: len(d["outputs"]))
    body = {
        "data": [],
        "fn_index": event["id"],
        "session_hash": session,
        "event_data": None,
        "trigger_id": None,
    }
    request = urllib.request.Request(
        f"{url}gradio_api/run/predict", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    deadline = time.monotonic() + timeout
    while True:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            shown = dict(zip(event["outputs"], json.load(response)["data"], strict=True))
        if any(map(answered, shown.values())) or time.monotonic() > deadline:
            return shown
        time.sleep(0.2)


def stop_app(process) -> None:
    process.terminate()
    try:
        process.wait(timeout=30)
    except Exception:
        process.kill()
        process.wait()


def callback_ms(output) -> float | None:
    """The time the app says its callback took (``timings_ms.total`` in an endpoint's output), else None."""
    for part in output if isinstance(output, tuple | list) else (output,):
        timings = part.get("timings_ms") if isinstance(part, dict) else None
        if isinstance(timings, dict) and "total" in timings:
            return float(timings["total"])
    return None


def http_call(url: str, api_name: str, data, timeout: float = 600.0, session: str | None = None) -> tuple:
    """(outputs, JSON bytes) of one call through Gradio's HTTP API as ``curl`` makes it (``session``: a kept hash)."""
    endpoint = f"{url.rstrip('/')}/gradio_api/call/{api_name.lstrip('/')}"
    body = {"data": list(data), **({"session_hash": session} if session else {})}
    request = urllib.request.Request(
        endpoint, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=timeout) as response:
        event_id = json.load(response)["event_id"]
    event = None
    with urllib.request.urlopen(f"{endpoint}/{event_id}", timeout=timeout) as stream:
        for raw in stream:
            line = raw.decode("utf-8").rstrip("\r\n")
            if line.startswith("event:"):
                event = line.partition(":")[2].strip()
            elif line.startswith("data:") and event in ("complete", "error"):
                payload = line.partition(":")[2].strip()
                if event == "error":
                    raise CtxirError(f"{api_name} answered with an error: {payload[:200]}")
                return json.loads(payload), len(payload.encode())
    raise CtxirError(f"{api_name}: the event stream ended without a result")


def file_bytes(output) -> int:
    """Bytes of the files among ``gradio_client``'s outputs (it downloads each one and gives its path)."""
    total = 0
    for part in output if isinstance(output, tuple | list) else (output,):
        if isinstance(part, tuple | list):
            total += file_bytes(part)
        elif isinstance(part, str) and len(part) < 4096 and os.path.isabs(part) and os.path.isfile(part):
            total += os.path.getsize(part)
    return total


@dataclass
class InProcess:
    """The app's models loaded in this process, and per endpoint: its view function and its whole callback."""

    views: dict[str, Callable]
    callbacks: dict[str, object]  # api name → Gradio's BlockFunction

    @classmethod
    def load(cls, args: AppBenchArgs) -> InProcess:
        """Loaded as the app ``run_app`` starts loads them."""
        from ctxir.app.blocks import build_demo
        from ctxir.app.config import AppConfig
        from ctxir.app.state import AppState
        from ctxir.encoders.models import set_threads

        set_threads(args.torch_threads)
        cross_encoder = args.cross_encoder or SHIPPED_CROSS_ENCODER
        backend = args.rerank_backend or "onnx-int8"
        config = AppConfig(cross_encoder=cross_encoder, cls_lr="none", device="cpu", rerank_backend=backend)
        state = AppState.load(config)
        return cls.of(state, build_demo(state))

    @classmethod
    def of(cls, state, demo) -> InProcess:
        """The views of ``state`` and the callbacks of ``demo`` (built on it)."""
        callbacks = {f"/{fn.api_name}": fn for fn in demo.fns.values() if fn.api_name}
        return cls(views=view_functions(state), callbacks=callbacks)

    def view(self, api_name: str, data: tuple) -> None:
        self.views[api_name](*data)

    def callback(self, api_name: str, data: tuple) -> None:
        """The endpoint's callback as Gradio calls it: missing trailing inputs at their defaults."""
        from gradio.helpers import special_args

        block_fn = self.callbacks[api_name]
        values = list(data) + [getattr(b, "value", None) for b in block_fn.inputs[len(data) :]]
        values, *_ = special_args(block_fn.fn, values, request=None)
        block_fn.fn(*values)


def view_functions(state) -> dict[str, Callable]:
    """API name → the view function its callback runs, taking the endpoint's inputs in their order."""
    from ctxir.app.attention_tab import attention
    from ctxir.app.embeddings_tab import model_info
    from ctxir.app.explain_tab import explain_pair
    from ctxir.app.pairs_tab import score_pairs
    from ctxir.app.search import search
    from ctxir.app.similarity import sentence_similarity

    views = {"/search": search, "/score_pairs": score_pairs, "/sentence_similarity": sentence_similarity}
    views |= {"/model_info": model_info, "/explain": explain_pair}
    return {api: functools.partial(view, state) for api, view in views.items()} | {
        "/attention": lambda model, text, pair, view, layers, heads, layer, head: attention(
            state, text, pair, view, layers, heads, layer, head, model
        )
    }


def time_endpoints(client, calls: dict, chosen, args, url: str = "", local: InProcess | None = None) -> dict:
    """Each chosen endpoint timed one call at a time (``url``: HTTP API too; ``local``: in process too)."""
    results: dict = {}
    for label in chosen:
        api_name, make = calls[label]
        # in turn: the view and the callback in process, gradio_client, the HTTP API as a new session and in one
        steps = [] if local is None else [("view", local.view), ("callback", local.callback)]
        steps.append(("client", lambda a, d: client.predict(*d, api_name=a)))
        if url:
            steps.append(("http", lambda a, d: http_call(url, a, d)))
            steps.append(("http_session", lambda a, d: http_call(url, a, d, session=HTTP_SESSION)))
        clocks: dict[str, list[float]] = {name: [] for name, _ in steps}
        inside, json_bytes, files, error = [], [], [], None
        try:
            for i in range(args.warmup + args.repeats):
                outputs = {}
                for name, step in steps:
                    start = time.perf_counter()
                    outputs[name] = step(api_name, make(i))
                    clocks[name].append(time.perf_counter() - start)
                if i < args.warmup:
                    clocks = {name: [] for name in clocks}
                    continue
                files.append(file_bytes(outputs["client"]))
                json_bytes += [outputs["http"][1]] if url else []
                if (ms := callback_ms(outputs["client"])) is not None:
                    inside.append(ms / 1000)
        except Exception as err:
            error = f"{type(err).__name__}: {str(err)[:200]}"
        times = clocks["client"][: len(files)]  # the calls every clock took
        row = results[label] = {"api_name": api_name, **(summary_ms(times) if times else {"n": 0})}
        whole = {
            name: summary_ms(c[: len(times)]) for name, c in clocks.items() if times and len(c) >= len(times)
        }
        if inside and len(inside) == len(times):
            row["callback_p50_ms"] = summary_ms(inside)["p50_ms"]
        if "http_session" in whole:
            row["http_session_p50_ms"] = whole["http_session"]["p50_ms"]
        if "http" in whole:
            row["http_p50_ms"], row["http_p95_ms"] = whole["http"]["p50_ms"], whole["http"]["p95_ms"]
        for name in ("view", "callback"):
            if name in whole:
                row[f"in_process_{name}_p50_ms"] = whole[name]["p50_ms"]
        if json_bytes:
            row["json_bytes"] = int(max(json_bytes))
        if files:
            row["file_bytes"] = int(max(files))
        if error:
            row["error"] = error
        print(f"{label}: {row}", flush=True)
    return results


def run_app(args: AppBenchArgs, argv: list[str] | None = None) -> dict:
    from gradio_client import Client

    calls = app_calls(args.corpus)
    chosen = [c.strip() for c in args.endpoints.split(",") if c.strip()] or list(calls)
    unknown = [c for c in chosen if c not in calls]
    if unknown or args.repeats < 1 or args.warmup < 0:
        raise CtxirError(f"--endpoints {unknown}: use labels of {list(calls)}; --repeats ≥ 1, --warmup ≥ 0")
    load_before, started = load_average(), time.perf_counter()
    process, start_s, url, first_view_s, shown = None, None, args.url, None, {}
    if not url:
        env = {
            "CTXIR_CROSS_ENCODER": args.cross_encoder or SHIPPED_CROSS_ENCODER,
            "CTXIR_CLS_LR": "none",
            "CTXIR_TORCH_THREADS": str(args.torch_threads),
            **({"CTXIR_RERANK_BACKEND": args.rerank_backend} if args.rerank_backend else {}),
        }
        print("starting python app.py …", flush=True)
        launched = time.perf_counter()
        process, url, start_s = start_app(env, args.start_timeout_s)
    try:
        if process is not None:  # the page's first view: every tab's example answered
            shown = first_view(url, timeout=args.start_timeout_s)
            first_view_s = time.perf_counter() - launched
            print(f"page in {start_s:.1f} s, its first view in {first_view_s:.1f} s", flush=True)
        # loaded once the started app serves, so its cold start is timed alone
        local = InProcess.load(args) if args.in_process else None
        results = time_endpoints(Client(url, verbose=False), calls, chosen, args, url, local)
    finally:
        if process is not None:
            stop_app(process)
    data = {
        "app": f"python app.py started by this command, cross-encoder "
        f"{args.cross_encoder or SHIPPED_CROSS_ENCODER + ' (shipped)'}, scoring backend "
        f"{args.rerank_backend or 'onnx-int8'}"
        if start_s is not None
        else f"an app already running at {url}",
        "corpus": args.corpus,
        "cold_start_s": round(start_s, 1) if start_s is not None else None,
        "first_view_s": round(first_view_s, 1) if first_view_s is not None else None,
        "first_view_values": sum(map(answered, shown.values())),
    }
    view = ", and in this process of the view (in_process_view_p50_ms) and the whole callback"
    timing = (
        "wall time per call of gradio_client.Client.predict (p50_ms, p95_ms), of the HTTP API as curl calls it, "
        f"as a new session (http_p50_ms) and in one kept session (http_session_p50_ms){view if args.in_process else ''}; "
        f"one call at a time, {args.warmup} warm-up then {args.repeats} timed, queries rotating"
    )
    return finish("app", format_app, args, argv, load_before, started, results, data=data, timing=timing)


def ratio(numerator, denominator) -> str:
    return "–" if not numerator or not denominator else f"{numerator / denominator:.1f}×"


def format_app(record: dict) -> str:
    rows = []
    for label, r in record["results"].items():
        view, callback = r.get("in_process_view_p50_ms"), r.get("in_process_callback_p50_ms")
        client, session = r.get("p50_ms"), r.get("http_session_p50_ms")
        ms = [view, callback, client, r.get("p95_ms"), r.get("http_p50_ms"), r.get("http_p95_ms"), session]
        ratios = [ratio(client, view), ratio(client, callback), ratio(session, view)]
        kb = [cell(r.get(key) and r[key] / 1000, "{:,.1f}") for key in ("json_bytes", "file_bytes")]
        cells = [*(cell(v, "{:.0f}") for v in ms), *ratios, *kb]
        rows.append([label, f"`{r['api_name']}`", *cells, str(r["n"]), r.get("error", "")])
    return markdown_table(
        "endpoint | api | view in process, p50 ms | callback in process, p50 ms | gradio_client p50 ms | p95 ms | "
        "HTTP API p50 ms | p95 ms | HTTP API, one session, p50 ms | gradio_client ÷ view | "
        "gradio_client ÷ callback | HTTP API, one session ÷ view | JSON KB | files KB | calls | error",
        rows,
    )


def plot_app(records: list[dict], path: str) -> None:
    plt, fig, ax = figure(7, 3.4, 1)
    rows = {k: v for k, v in records[-1]["results"].items() if v.get("p50_ms") is not None}
    at = range(len(rows))
    bars = (
        ("in_process_callback_p50_ms", "callback in process", "tab:gray"),
        ("p50_ms", "gradio_client", "tab:green"),
        ("http_p50_ms", "HTTP API", "tab:blue"),
    )
    for offset, (key, label, colour) in zip((-0.27, 0.0, 0.27), bars, strict=True):
        values = [r.get(key) or 0 for r in rows.values()]
        ax.barh([i + offset for i in at], values, height=0.27, color=colour, label=label)
    ax.set(xlabel="p50 ms per call", xscale="log", yticks=list(at), yticklabels=list(rows))
    ax.legend(fontsize=7)
    ax.invert_yaxis()
    ax.tick_params(axis="y", labelsize=7)
    save_figure(plt, fig, path)


def main(argv: list[str] | None = None) -> int:
    return main_for("app", AppBenchArgs, run_app, argv)


if __name__ == "__main__":
    sys.exit(main())
