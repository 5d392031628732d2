"""ctxir Gradio app: search, pair scoring, token embeddings and attention heads — offline, API-first.

Every flag has an environment variable (CTXIR_CORPUS, ...), so the same file runs as a Hugging Face Space."""

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
    # before torch loads libgomp: an idle OpenMP team then sleeps instead of spinning on the cores callbacks need
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
    host: str = _env("CTXIR_HOST", "", "interface to listen on; empty = GRADIO_SERVER_NAME or 127.0.0.1")
    port: int = _env("CTXIR_PORT", 0, "port; 0 = GRADIO_SERVER_PORT or 7860")
    corpus: str = _env("CTXIR_CORPUS", "", "BEIR folder or corpus file (.txt/.jsonl/.csv/.tsv); empty = demo")
    bi_encoder: str = _env("CTXIR_BI_ENCODER", DEFAULT_BI_ENCODER, "bi-encoder Hub id or folder")
    # one flag per re-ranker kind (--cross-encoder, --cls-lr, ...) is added from ctxir.rerank.registry by app_args_class
    device: str = _env("CTXIR_DEVICE", "auto", "auto, cpu, cuda, mps")
    index: str = _env("CTXIR_INDEX", "auto", "auto (ANN from AUTO_ANN_THRESHOLD documents up), exact or ann")
    backend: str = _env("CTXIR_BACKEND", "torch", "how the bi-encoder encodes: torch, onnx-int8 (faster)")
    rerank_backend: str = _env(
        "CTXIR_RERANK_BACKEND", "torch", "how cross-encoders score on a CPU: torch, onnx, onnx-int8 (faster)"
    )
    torch_threads: int = _env("CTXIR_TORCH_THREADS", 0, "torch threads; 0 = all cores")
    max_attention_tokens: int = _env("CTXIR_MAX_ATTENTION_TOKENS", 256, "longest attention input (tokens)")
    max_upload_docs: int = _env("CTXIR_MAX_UPLOAD_DOCS", 5_000, "most documents an uploaded corpus may have")
    rerank_depth: int = _env("CTXIR_RERANK_DEPTH", 20, "default number of first-stage candidates re-scored")
    max_extra_models: int = _env(
        "CTXIR_MAX_EXTRA_MODELS", 2, "models loaded by Hub id kept at once, LRU out first; 0 = none"
    )
    max_extra_mb: int = _env("CTXIR_MAX_EXTRA_MB", 1024, "MiB of weights those models may hold in all")
    allow_remote_code: bool = field(
        default=False,
        metadata={"help": "let a model loaded by Hub id run its repository's code [CTXIR_TRUST_REMOTE_CODE]"},
    )
    max_output_mb: int = _env("CTXIR_MAX_OUTPUT_MB", 200, "MB of returned files on disk, oldest out first")
    output_max_age_s: int = _env("CTXIR_OUTPUT_MAX_AGE_S", 600, "seconds a returned file is kept on disk")
    concurrency: int = _env("CTXIR_CONCURRENCY", 2, "model views (search, pair scoring, ...) run at once")
    slow_concurrency: int = _env("CTXIR_SLOW_CONCURRENCY", 1, "slow views (attention, explain, ...) at once")
    max_queue: int = _env("CTXIR_MAX_QUEUE", 32, "requests that may wait; one more is refused with 'busy'")
    max_sessions: int = _env("CTXIR_MAX_SESSIONS", 128, "sessions Gradio keeps in memory, LRU out first")
    malloc_arenas: int = _env("CTXIR_MALLOC_ARENAS", 2, "glibc malloc arenas; 0 = glibc's default")
    closed_session_s: int = _env(
        "CTXIR_CLOSED_SESSION_S", 60, "seconds a left visitor's session is kept; -1 = until --max-sessions"
    )


def _reranker_flag(kind) -> tuple[str, type, Any]:
    how = kind.how_to_get.replace("train one with", "a model from")
    help = f"{kind.label} re-ranker: an id or folder ({how}); 'none' skips it; one that fails to load is left out"
    return kind.key, str, _env(env(kind), kind.default_model(), help)


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
    same = ("corpus", "bi_encoder", "device", "max_attention_tokens", "max_upload_docs", "rerank_depth")
    return AppConfig(
        **{name: getattr(args, name) for name in (*same, "max_extra_models", "max_extra_mb")},
        index=check_choice(args.index, "--index", DENSE_INDEXES),
        backend=check_choice(args.backend, "--backend", BACKENDS),
        rerank_backend=check_choice(args.rerank_backend, "--rerank-backend", RERANK_BACKENDS),
        # the flag, or its environment variable (a boolean flag's default is not read from the environment)
        allow_remote_code=args.allow_remote_code or env_flag("CTXIR_TRUST_REMOTE_CODE"),
        # off on a Space (SPACE_ID set), where a path a visitor types names the server's files
        allow_model_paths=not os.environ.get("SPACE_ID") and not env_flag("CTXIR_NO_MODEL_PATHS"),
        **AppConfig.reranker_settings(models),
    )


def serve(args: AppArgs) -> int:
    """Load once, then serve until stopped; a CtxirError (bad flag, missing model) ends it with one line, exit 2."""
    # 1. limits, threads and signals: SIGTERM, SIGHUP and SIGINT exit at once through exit_now (atexit clean-up)
    if os.environ.get("SPACES_ZERO_GPU", "").lower() in ("1", "true"):
        raise CtxirError(
            "this Space runs on ZeroGPU hardware (SPACES_ZERO_GPU is set), which ctxir does not support: choose "
            "'CPU basic' or a GPU such as 'Nvidia T4' in the Space's settings (docs/guides/publish.md)"
        )
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
    outputs = Outputs(max_age_s=args.output_max_age_s, max_bytes=args.max_output_mb * 2**20)
    built = build_app(state, outputs=outputs, first_view="start")
    # a Space's reloader looks for the launched Blocks in __main__ (else it printed "Launching demo not found")
    globals()["demo"] = demo = built.demo
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
