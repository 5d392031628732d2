"""How much work the app takes on at once, how much it lets wait, and how much memory each visitor holds."""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
from dataclasses import dataclass

from ctxir.types import CtxirError

logger = logging.getLogger("ctxir.app")

# callback function name (what a BlockFunction carries, public or private) → its API endpoint
SLOW_VIEWS = {
    "do_attention": "/attention",
    "do_explain": "/explain",
    "do_explain_result": "/explain_result",
    "do_explain_pair": None,
    "do_what_moved": "/what_moved",
    "do_compare_pooling": "/compare_pooling",
    "do_upload": "/upload_corpus",
    "do_token_embeddings": "/token_embeddings",
    "do_layer_similarity": "/layer_similarity",
    "do_report": "/failure_report",
    "do_sample_report": "/failure_report_sample",
    "do_classify": "/classify",
    "do_load_reranker": None,  # the Search and Explain tabs' Load buttons: a model loaded (downloaded) by Hub id
}
MODEL_VIEWS = {
    "do_search": "/search",
    "do_score_pairs": "/score_pairs",
    "do_sentence_similarity": "/sentence_similarity",
    "do_model_info": "/model_info",
}
BUSY_PAGE = "This application is currently busy. Please try again."  # Gradio's page, on HTTP 503 (queue full)
BUSY_CLIENT = "Queue is full! Please try again."  # gradio_client's QueueError on the same 503


@dataclass(frozen=True)
class QueueLimits:
    """The queue's limits; ``app.py`` fills them from ``--concurrency``, ``--slow-concurrency``, ``--max-queue``."""

    concurrency: int = 2  # model views running at once (group "model"), and Gradio's default for other events
    slow_concurrency: int = 1  # slow views running at once (group "slow")
    # events waiting (not yet running), over all groups; one more is refused with HTTP 503
    max_queue: int = 32
    max_sessions: int = 128  # Gradio sessions whose state (last outputs per component) is kept in memory
    malloc_arenas: int = 2  # glibc malloc arenas (0 = glibc's default, 8 per core)
    # seconds a left visitor's session is kept after its last use; -1 = until max_sessions pushes it out
    closed_session_s: int = 60

    def __post_init__(self):
        lowest = dict(concurrency=1, slow_concurrency=1, max_queue=1, max_sessions=1, malloc_arenas=0)
        for name, low in {**lowest, "closed_session_s": -1}.items():
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise CtxirError(
                    f"--{name.replace('_', '-')} must be a whole number ≥ {low}, got {value!r}: "
                    "pass e.g. --concurrency 2 --slow-concurrency 1 --max-queue 32 --max-sessions 128 "
                    "--malloc-arenas 2 --closed-session-s 60"
                )

    def launch_kwargs(self) -> dict:
        """What ``launch`` takes of these limits (Gradio reads the session capacity there, not in ``queue``)."""
        return {"state_session_capacity": self.max_sessions}


def limit_malloc_arenas(arenas: int) -> bool:
    """Cap glibc's malloc arenas at ``arenas`` (0 = leave glibc's default)."""
    if arenas <= 0:
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return bool(libc.mallopt(-8, int(arenas)))  # M_ARENA_MAX in glibc's malloc.h
    except (OSError, AttributeError):
        return False


def group_of(fn) -> str | None:
    """The concurrency group of one Gradio ``BlockFunction``: "slow", "model" or None (Gradio's default)."""
    if not fn.queue or fn.fn is None or not fn.name.startswith("do_"):  # every view's callback is a do_*
        return None
    if fn.name in SLOW_VIEWS:
        return "slow"
    if fn.name not in MODEL_VIEWS:
        what = "is in neither SLOW_VIEWS nor MODEL_VIEWS of ctxir/app/limits.py: it shares the 'model' group"
        logger.warning("event %s (%s) %s", fn.name, fn.api_name, what)
    return "model"


def apply_limits(demo, limits: QueueLimits | None = None):
    """Put every model event of ``demo`` in its concurrency group."""
    from ctxir.app.gradio_fixes import ClosedSessions

    limits = limits or QueueLimits()
    workers = {"model": limits.concurrency, "slow": limits.slow_concurrency}
    for fn in demo.fns.values():
        group = group_of(fn)
        if group is not None:
            fn.concurrency_id, fn.concurrency_limit = group, workers[group]
    ClosedSessions.wire(demo, limits.closed_session_s)
    return demo.queue(max_size=limits.max_queue, default_concurrency_limit=limits.concurrency)
