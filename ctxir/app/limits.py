"""How much work the app takes on at once, and how much it lets wait: Gradio's queue, set deliberately.

Gradio gives every event its own queue with ``default_concurrency_limit`` workers, so with ~20 model views the app
would run up to 2 × 20 model calls at once on a CPU with 2 cores, each holding its activations in memory. Here the
events that run a model share two concurrency groups instead (Gradio's ``concurrency_id``; ``apply_limits`` sets it
on the built app, before the queue creates the per-group queues on the first request, see ``Queue.
create_event_queue_for_fn``):

* ``model`` (``--concurrency``, default 2): searches, pair scoring, sentence similarity, model info — a fraction of
  a second each; two at once keep both cores busy.
* ``slow`` (``--slow-concurrency``, default 1): attention (bertviz page + figures), explanations (integrated
  gradients: tens of forward passes), what moved, compare pooling (re-encodes a corpus), uploads (encodes a
  corpus), token embeddings (t-SNE), layer similarity, the failure report — one at a time, so slow views never
  take every worker and searches keep flowing beside them.

The light follow-up steps that draw an answer's figures and files keep Gradio's default (their own queue each,
``--concurrency`` workers). At most ``--max-queue`` events (default 32) wait, over all groups; one more is refused
at once by Gradio with HTTP 503 — the page shows "This application is currently busy. Please try again.",
gradio_client raises ``QueueError("Queue is full! Please try again.")`` — instead of waiting without end.

Memory per visitor is bounded too. Gradio keeps a ``SessionState`` per session (one per page load, one per
gradio_client ``Client``): a copy of every component's config with the last value each event returned to it — the
bertviz page, tables, JSON — about 1.6 MB per session here (measured on the packaged MiniLM after an attention view,
a search and an explanation), kept after the page closes until ``state_session_capacity`` sessions (Gradio's
default 10,000: 16 GB) push it out, least recently used first. ``--max-sessions`` (default 128, ≈ 200 MB) sets that
capacity. A visitor whose session was pushed out keeps their uploads (``AppState`` holds them by session hash) and
every view works as before; only the choices an answer put in a list (the documents of the last pair scoring to
explain) are forgotten, so the pair scoring is run again.

A visitor who leaves (closes the page, or a gradio_client ``Client`` is closed: their heartbeat ends) makes Gradio
mark their session closed, but Gradio keeps its ``SessionState`` all the same, until the capacity pushes it out.
Visitors that come and go so filled the 128 places one by one: the soak (``scripts/soak.py``: 4 visitors, a new
session every 20 requests, about 5 sessions a minute) grew RSS by about 5 MB a minute for the first half hour, each
session 0.45 MB (a search and a pair scoring, traced in-process) to 1.6 MB (with an attention view). The app now
forgets a closed session ``--closed-session-s`` (default 60) after its last use (``gradio_fixes.ClosedSessions``,
run when a visitor leaves), so what is held follows the visitors present, not the visitors seen.

The rest of the growth was the C allocator's: glibc gives threads that allocate at the same time arenas of their
own, up to 8 per core, and keeps what each frees for that arena's reuse; Gradio runs callbacks on a pool of up to 40
threads and torch allocates large temporary buffers in each. ``--malloc-arenas`` (default 2) caps the arenas at
startup (``mallopt(M_ARENA_MAX)``, the knob the ``MALLOC_ARENA_MAX`` variable sets). The load test's bursts
(docs/reliability.md) measured the third burst growing RSS 12.8% over the second with glibc's default, 3.0% with
``MALLOC_ARENA_MAX=2`` and 1.3% with this flag at 2.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
from dataclasses import dataclass

logger = logging.getLogger("ctxir.app")

# callback function → its API endpoint (private callbacks have none); the function name is what an event's
# BlockFunction carries whether its API is public or private (the Explain action of the pair tab is private)
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
    max_queue: int = (
        32  # events waiting (not yet running), over all groups; one more is refused with HTTP 503
    )
    max_sessions: int = 128  # Gradio sessions whose state (last outputs per component) is kept in memory
    malloc_arenas: int = 2  # glibc malloc arenas (0 = glibc's default, 8 per core)
    # seconds a left visitor's session is kept after its last use; -1 = until max_sessions pushes it out
    closed_session_s: int = 60

    def __post_init__(self):
        for name, low in (
            ("concurrency", 1),
            ("slow_concurrency", 1),
            ("max_queue", 1),
            ("max_sessions", 1),
            ("malloc_arenas", 0),
            ("closed_session_s", -1),
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                from ctxir.types import CtxirError

                raise CtxirError(
                    f"--{name.replace('_', '-')} must be a whole number ≥ {low}, got {value!r}: "
                    "pass e.g. --concurrency 2 --slow-concurrency 1 --max-queue 32 --max-sessions 128 "
                    "--malloc-arenas 2 --closed-session-s 60"
                )

    def launch_kwargs(self) -> dict:
        """What ``launch`` takes of these limits (Gradio reads the session capacity there, not in ``queue``)."""
        return {"state_session_capacity": self.max_sessions}


M_ARENA_MAX = -8  # glibc's malloc.h


def limit_malloc_arenas(arenas: int) -> bool:
    """Cap glibc's malloc arenas at ``arenas`` (0 = leave glibc's default); call before threads allocate. True when
    the cap was set, False where there is no glibc (macOS, musl) or it refused."""
    if arenas <= 0:
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return bool(libc.mallopt(M_ARENA_MAX, int(arenas)))
    except (OSError, AttributeError):
        return False


def group_of(fn) -> str | None:
    """The concurrency group of one Gradio ``BlockFunction``: "slow", "model" or None (Gradio's default). A queued
    callback named ``do_*`` that neither table names (a view added later) runs a model by this app's convention:
    it joins "model", so it is bounded all the same, and a warning says to classify it."""
    if not fn.queue or fn.fn is None:
        return None
    if fn.name in SLOW_VIEWS:
        return "slow"
    if fn.name in MODEL_VIEWS:
        return "model"
    if fn.name.startswith("do_"):
        logger.warning(
            "event %s (%s) is in neither SLOW_VIEWS nor MODEL_VIEWS of ctxir/app/limits.py: it shares "
            "the 'model' group",
            fn.name,
            fn.api_name,
        )
        return "model"
    return None


def apply_limits(demo, limits: QueueLimits | None = None):
    """Put every model event of ``demo`` in its concurrency group, forget the sessions of visitors who left
    ``limits.closed_session_s`` ago (``gradio_fixes.ClosedSessions``) and enable the queue with ``limits``; returns
    ``demo`` (call before ``launch``, and pass it ``**limits.launch_kwargs()``). The groups are set on the built
    events because the tabs build their events without knowing the app's flags; Gradio reads
    ``concurrency_id``/``concurrency_limit`` when an event first enters the queue."""
    from ctxir.app.gradio_fixes import ClosedSessions

    limits = limits or QueueLimits()
    workers = {"model": limits.concurrency, "slow": limits.slow_concurrency}
    for fn in demo.fns.values():
        group = group_of(fn)
        if group is not None:
            fn.concurrency_id, fn.concurrency_limit = group, workers[group]
    ClosedSessions.wire(demo, limits.closed_session_s)
    return demo.queue(max_size=limits.max_queue, default_concurrency_limit=limits.concurrency)
