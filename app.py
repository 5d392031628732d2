"""ctxir Gradio app: search, pair scoring, token embeddings and attention heads — offline, API-first.

    python app.py                                   # built-in demo corpus + packaged all-MiniLM-L6-v2
    python app.py --corpus ../shared/data/scifact   # a BEIR folder (embeddings cached: 2nd start is fast)
    python app.py --cross-encoder outputs/cross-encoder --cls-lr outputs/cls-lr --port 7861

Every flag has an environment variable (CTXIR_CORPUS, ...), so the same file runs as a Hugging Face Space.
"""

from __future__ import annotations

import asyncio
import dataclasses
import importlib.util
import logging
import os
import signal
import sys
import time
from dataclasses import dataclass, field
from typing import Any

if __name__ == "__main__":
    # before torch loads libgomp: a worker thread's idle OpenMP team then sleeps instead of spinning on the cores
    # the next callback needs
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from ctxir.app.blocks import build_app, build_demo
from ctxir.app.config import AppConfig, env
from ctxir.app.gradio_fixes import ClosingEventLoopPolicy, retry_spaces_reload_server, track_tqdm_first
from ctxir.app.limits import QueueLimits, apply_limits, limit_malloc_arenas
from ctxir.app.outputs import Outputs
from ctxir.app.state import AppState

__all__ = ["AppArgs", "app_args_class", "build_app", "build_demo", "config_from_args", "main", "serve"]
from ctxir.checks import check_choice
from ctxir.cli import cli_main
from ctxir.encoders import BACKENDS
from ctxir.encoders.models import DEFAULT_BI_ENCODER, set_threads
from ctxir.rerank.rankers import RERANK_BACKENDS
from ctxir.rerank.registry import RERANKERS
from ctxir.retrieval import DENSE_INDEXES
from ctxir.types import CtxirError

logger = logging.getLogger("ctxir.app")


def env_flag(name: str) -> bool:
    """An on/off environment variable: 1, true, yes or on (any case) is on."""
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def _env(name: str, default: Any, help: str) -> Any:
    """A flag whose default (of ``default``'s type) comes from environment variable ``name`` when parsed."""
    return field(
        default_factory=lambda: type(default)(os.environ.get(name, default)),
        metadata={"help": f"{help} [{name}]"},
    )


@dataclass
class _AppArgs:
    host: str = _env(
        "CTXIR_HOST", "", "interface to listen on; empty = gradio's (GRADIO_SERVER_NAME or 127.0.0.1)"
    )
    port: int = _env("CTXIR_PORT", 0, "port; 0 = gradio's default (GRADIO_SERVER_PORT or 7860)")
    corpus: str = _env(
        "CTXIR_CORPUS", "", "BEIR folder or corpus file (.txt/.jsonl/.csv/.tsv); empty = built-in demo corpus"
    )
    bi_encoder: str = _env("CTXIR_BI_ENCODER", DEFAULT_BI_ENCODER, "bi-encoder Hub id or folder")
    # one flag per re-ranker kind (--cross-encoder, --cls-lr, ...) is added from ctxir.rerank.registry by app_args_class
    device: str = _env("CTXIR_DEVICE", "auto", "auto, cpu, cuda, mps")
    index: str = _env(
        "CTXIR_INDEX",
        "auto",
        "dense index: auto (the ANN index from ctxir.retrieval.AUTO_ANN_THRESHOLD "
        "documents up, exact search below), exact, or ann; the ANN index is kept beside the cached "
        "embeddings and reopened on the next start",
    )
    backend: str = _env(
        "CTXIR_BACKEND",
        "torch",
        "how the bi-encoder encodes the searched corpora and queries: torch, or onnx-int8 (ONNX Runtime, "
        "int8 weights, CPU: faster at the same quality, docs/results.md; exported once into the cache folder). "
        "Compare pooling, pair scoring, explanations and the inspection views stay on torch",
    )
    rerank_backend: str = _env(
        "CTXIR_RERANK_BACKEND",
        "torch",
        "how the cross-encoders score (re-ranking, pair scoring), on the CPU: torch, onnx (ONNX "
        "Runtime, float32: torch's scores) or onnx-int8 (faster; the layers a model shares with its "
        "base in int8: docs/bench/shipped-int8-suite.json says where it keeps the 0.005 rule). "
        "Exported once into the cache folder. A GPU, the explanations and the inspection views use torch",
    )
    torch_threads: int = _env(
        "CTXIR_TORCH_THREADS",
        0,
        "torch intra-op threads; 0 = torch's default (all cores, "
        "fastest on a machine of its own); 1 is steadier on a CPU shared with other jobs",
    )
    max_attention_tokens: int = _env(
        "CTXIR_MAX_ATTENTION_TOKENS", 256, "longest input (tokens) the attention view accepts"
    )
    max_upload_docs: int = _env("CTXIR_MAX_UPLOAD_DOCS", 5_000, "most documents an uploaded corpus may have")
    rerank_depth: int = _env("CTXIR_RERANK_DEPTH", 20, "default number of first-stage candidates re-scored")
    max_extra_models: int = _env(
        "CTXIR_MAX_EXTRA_MODELS",
        2,
        "models visitors load by Hub id to compare (Search, Pair scoring, Token embeddings, Attention) kept at "
        "once, the least recently used evicted first; 0 = none (docs/guides/app.md)",
    )
    max_extra_mb: int = _env("CTXIR_MAX_EXTRA_MB", 1024, "MiB of weights those models may hold in all")
    allow_remote_code: bool = field(
        default=False,
        metadata={
            "help": "let a model a visitor loads by Hub id run code from its repository (an auto_map in its "
            "config); off by default [CTXIR_TRUST_REMOTE_CODE]"
        },
    )
    max_output_mb: int = _env(
        "CTXIR_MAX_OUTPUT_MB",
        200,
        "most MB of returned files (figures, attention HTML) kept on disk; the oldest are removed first "
        "(the plotly.js every interactive page loads is kept besides)",
    )
    output_max_age_s: int = _env("CTXIR_OUTPUT_MAX_AGE_S", 600, "seconds a returned file is kept on disk")
    concurrency: int = _env(
        "CTXIR_CONCURRENCY", 2, "model views (search, pair scoring, ...) run at once; see ctxir/app/limits.py"
    )
    slow_concurrency: int = _env(
        "CTXIR_SLOW_CONCURRENCY",
        1,
        "slow views (attention, explain, upload, t-SNE, ...) run at once, beside the model views",
    )
    max_queue: int = _env(
        "CTXIR_MAX_QUEUE",
        32,
        "requests that may wait; one more is refused at once with 'busy, try again' (docs/reference/app.md)",
    )
    max_sessions: int = _env(
        "CTXIR_MAX_SESSIONS",
        128,
        "visitors' sessions whose last outputs Gradio keeps in memory; the least recently active are dropped first",
    )
    malloc_arenas: int = _env(
        "CTXIR_MALLOC_ARENAS",
        2,
        "glibc malloc arenas (0 = glibc's default, 8 per core); "
        "2 keeps RSS from growing burst after burst (docs/reference/app.md)",
    )
    closed_session_s: int = _env(
        "CTXIR_CLOSED_SESSION_S",
        60,
        "seconds Gradio's state of a visitor who left (page closed, API client closed) is kept after "
        "its last use; -1 = until --max-sessions pushes it out (Gradio's way: RSS grew with every visitor "
        "seen, docs/reference/app.md)",
    )


def _reranker_flag(kind) -> tuple[str, type, Any]:
    default = kind.default_model()
    return (
        kind.key,
        str,
        _env(
            env(kind),
            default,
            (
                f"{kind.label} re-ranker: an id or folder (default: {default or 'none: this installation ships none'}; "
                f"{kind.how_to_get.replace('train one with', 'a model from')}); 'none' to skip; if it cannot be loaded the "
                "app starts without it"
            ),
        ),
    )


def app_args_class() -> type:
    """The app's flags: ``_AppArgs`` plus one per re-ranker kind of ``ctxir.rerank.registry`` (as registered now)."""
    args = dataclasses.make_dataclass(
        "AppArgs", [_reranker_flag(kind) for kind in RERANKERS.values()], bases=(_AppArgs,)
    )
    args.__module__ = __name__
    return args


AppArgs = app_args_class()


def config_from_args(args) -> AppConfig:
    models = {name: getattr(args, kind.key) for name, kind in RERANKERS.items() if hasattr(args, kind.key)}
    return AppConfig(
        corpus=args.corpus,
        bi_encoder=args.bi_encoder,
        device=args.device,
        index=check_choice(args.index, "--index", DENSE_INDEXES),
        backend=check_choice(args.backend, "--backend", BACKENDS),
        rerank_backend=check_choice(args.rerank_backend, "--rerank-backend", RERANK_BACKENDS),
        max_attention_tokens=args.max_attention_tokens,
        max_upload_docs=args.max_upload_docs,
        rerank_depth=args.rerank_depth,
        max_extra_models=args.max_extra_models,
        max_extra_mb=args.max_extra_mb,
        # the flag, or its environment variable (a boolean flag's default is not read from the environment)
        allow_remote_code=args.allow_remote_code or env_flag("CTXIR_TRUST_REMOTE_CODE"),
        # off on a Space (SPACE_ID set), where a path a visitor types names the server's files
        allow_model_paths=not os.environ.get("SPACE_ID") and not env_flag("CTXIR_NO_MODEL_PATHS"),
        **AppConfig.reranker_settings(models),
    )


def refuse_zero_gpu() -> None:
    """ZeroGPU hardware is refused at start, with what to choose instead (docs/guides/publish.md)."""
    if os.environ.get("SPACES_ZERO_GPU", "").lower() in ("1", "true"):
        raise CtxirError(
            "this Space runs on ZeroGPU hardware (SPACES_ZERO_GPU is set), which ctxir does not support: choose "
            "'CPU basic' (the free 2-vCPU hardware the app is built for) or a GPU such as 'Nvidia T4' in the Space's "
            "settings (docs/guides/publish.md)"
        )


def serve(args: AppArgs) -> int:
    """Load once, then serve until stopped; a CtxirError (bad flag, missing model) ends it with one line, exit 2."""
    # 1. limits, threads and signals: SIGTERM, SIGHUP and SIGINT exit at once through exit_now (atexit clean-up)
    refuse_zero_gpu()
    asyncio.set_event_loop_policy(ClosingEventLoopPolicy())  # before gradio makes its first loop
    retry_spaces_reload_server()
    limits = QueueLimits(*(getattr(args, f.name) for f in dataclasses.fields(QueueLimits)))  # checked now
    limit_malloc_arenas(limits.malloc_arenas)  # before any thread allocates
    set_threads(args.torch_threads)
    config = config_from_args(args)  # a bad --index, --backend or --rerank-backend fails here, before loading
    for signum in (signal.SIGTERM, getattr(signal, "SIGHUP", None), signal.SIGINT):
        if signum is not None:
            signal.signal(signum, lambda *_: sys.exit(0))
    # 2. the models, before serving; the startup corpus is indexed in the background while the page is served
    started = time.perf_counter()
    track_tqdm_first()
    state = AppState.load(config, background=True)
    logger.info("models loaded in %.1f s; serving while the corpus is indexed", time.perf_counter() - started)
    # 3. build (each tab's example answer computed in the background: ctxir.app.first_view) and serve
    built = build_app(
        state,
        outputs=Outputs(max_age_s=args.output_max_age_s, max_bytes=args.max_output_mb * 2**20),
        first_view="start",
    )
    demo = built.demo
    # a Space's reloader looks for the launched Blocks in __main__ (else it printed "Launching demo not found")
    globals()["demo"] = demo
    # every public endpoint is also an MCP tool (gradio's MCP server at /gradio_api/mcp/; needs the mcp package)
    mcp = importlib.util.find_spec("mcp") is not None
    if not mcp:
        logger.warning("MCP server off: the mcp package is not installed (pip install -r requirements.txt)")
    apply_limits(demo, limits).launch(
        server_name=args.host or None,
        server_port=args.port or None,
        show_error=True,
        allowed_paths=[str(built.outputs.root)],
        mcp_server=mcp,
        max_file_size=int(state.config.max_upload_mb * 2**20),
        **limits.launch_kwargs(),
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    return cli_main(app_args_class(), serve, argv)


def exit_now(code: object) -> None:
    """Exit with ``code`` after the atexit handlers, skipping the C++ static destructors (they aborted at SIGTERM)."""
    import atexit

    if isinstance(code, str):  # sys.exit("message"): the message on stderr, status 1
        print(code, file=sys.stderr)
        code = 1
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    try:
        status = main()
    except SystemExit as stop:  # SIGTERM, SIGHUP, SIGINT (serve's handlers), --help, a bad flag
        status = stop.code
    except KeyboardInterrupt:  # Ctrl-C before serve's handlers (while importing): stopped as asked
        status = 130
    exit_now(status)
