"""Every workaround of Gradio (6.31) or ``spaces``, one function each, with its symptom and the test of
tests/test_gradio_fixes.py that fails without it: on an upgrade, delete each fix whose test passes without it."""

from __future__ import annotations

import asyncio
import datetime
import functools
import threading
import warnings
from typing import TYPE_CHECKING

import gradio as gr

from ctxir.app.ui import from_browser, user_error
from ctxir.rerank.registry import RERANKERS
from ctxir.types import CtxirError

if TYPE_CHECKING:
    from ctxir.app.models import AppModels


class ClosingEventLoopPolicy(asyncio.DefaultEventLoopPolicy):
    """Gradio's ``safe_get_lock`` sets a new event loop each time and drops the old one unclosed, whose
    ``__del__`` printed ``Invalid file descriptor: -1``: close the main thread's loop when another replaces
    it. Test: ``test_a_loop_gradio_replaces_is_closed``."""

    def __init__(self) -> None:
        super().__init__()
        self._main_loop: asyncio.AbstractEventLoop | None = None

    def set_event_loop(self, loop: asyncio.AbstractEventLoop | None) -> None:
        super().set_event_loop(loop)
        if threading.current_thread() is not threading.main_thread():
            return
        replaced, self._main_loop = self._main_loop, loop
        if replaced not in (None, loop) and not replaced.is_running() and not replaced.is_closed():
            replaced.close()


def styled_blocks(css: str, **kwargs) -> gr.Blocks:
    """Gradio 6 reads ``css`` in ``launch()``, and warns when the constructor gets it ("The parameters have
    been moved"), though it still applies it there: a demo keeps its style however it is launched, without the
    warning. Test: ``test_the_apps_css_is_kept_without_a_warning``."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The parameters have been moved", category=UserWarning)
        return gr.Blocks(css=css, **kwargs)


def track_tqdm_first() -> None:
    """Gradio patches tqdm at the first ``gr.Progress(track_tqdm=True)``; a bar started before it (the
    background indexing's) then failed (``'tqdm' object has no attribute '_progress'``): patch before any bar
    starts. Test: ``test_a_bar_started_before_the_app_is_built_keeps_running``."""
    gr.Progress(track_tqdm=True)


def retry_spaces_reload_server(attempts: int = 3) -> None:
    """spaces 0.51's reload server walks ``sys.modules`` while background threads import, and died of
    "dictionary changed size during iteration": start it again, a few times, on exactly that error. Test:
    ``test_the_spaces_reload_server_is_started_again_after_sys_modules_changed``."""
    from gradio import http_server

    start = http_server.watchfn_spaces
    if getattr(start, "retries", False):
        return

    @functools.wraps(start)
    def watchfn_spaces(reloader):
        for attempt in range(attempts):
            try:
                return start(reloader)
            except RuntimeError as err:
                if "changed size during iteration" not in str(err) or attempt == attempts - 1:
                    raise

    watchfn_spaces.retries = True
    http_server.watchfn_spaces = watchfn_spaces


def plain_errors_for_api(demo: gr.Blocks) -> gr.Blocks:
    """``user_error`` escapes a message for the page (Gradio renders it as HTML), and an API client got
    ``'&lt;a&gt;'`` for ``'<a>'``: ``Blocks.process_api``, which every event goes through, gives API clients
    the plain text. Test: ``test_an_api_client_gets_an_errors_plain_text``."""
    process_api = demo.process_api

    @functools.wraps(process_api)
    async def process_api_with_plain_errors(*args, **kwargs):
        try:
            return await process_api(*args, **kwargs)
        except gr.Error as error:
            plain = getattr(error, "plain_message", None)
            request = kwargs.get("request")
            if plain is not None and not from_browser(request[0] if isinstance(request, list) else request):
                error.message = plain
            raise

    demo.process_api = process_api_with_plain_errors
    return demo


def fill_missing_inputs(demo: gr.Blocks) -> gr.Blocks:
    """Gradio refuses a request with fewer values than inputs; gradio_client sends the defaults, a raw HTTP or
    MCP caller does not: missing trailing inputs (``png_figures``, the re-rank mode) get their defaults. Test:
    ``test_a_request_without_the_last_inputs_gets_their_defaults``."""
    validate = demo.validate_inputs

    def filled(block_fn, inputs: list) -> None:
        inputs.extend(getattr(block, "value", None) for block in block_fn.inputs[len(inputs) :])
        validate(block_fn, inputs)

    demo.validate_inputs = filled
    return demo


def named(component):
    """Gradio's own check of a slider's range or a radio's choices names no input ("Value 60 is greater than
    maximum value 50."): the message names the component and what it accepts. Test:
    ``test_a_sliders_refusal_names_the_slider``."""
    check = component.preprocess

    def preprocess(payload):
        try:
            return check(payload)
        except CtxirError as err:  # the component's own refusal with its reason (a re-ranker not loaded)
            raise user_error(str(err)) from None
        except Exception:
            if isinstance(component, gr.Slider):
                accepted = f"must be a number from {component.minimum:g} to {component.maximum:g}"
            else:
                accepted = f"must be one of {[value for _, value in component.choices]!r}"
            raise user_error(f"{component.label} {accepted}, got {payload!r}") from None

    component.preprocess = preprocess
    return component


def accept_model_ids(radio: gr.Radio, models: AppModels) -> gr.Radio:
    """Gradio refuses a radio's value that no choice lists: a model radio passes any other name to the
    callback, which loads a Hub id on demand or says what the argument takes. Test:
    ``test_a_model_radio_takes_a_hub_id_it_does_not_list``."""
    check = radio.preprocess

    def preprocess(payload):
        listed = [*(value for _, value in radio.choices), *RERANKERS]
        if isinstance(payload, str) and payload not in listed:
            return payload.strip() if models.loadable(payload) else payload
        return check(payload)

    radio.preprocess = preprocess
    return radio


def refuse_unloaded(radio: gr.Radio, models: AppModels) -> gr.Radio:
    """Gradio refuses an unlisted radio value saying only what is accepted: a re-ranker kind that is not
    loaded is told why and how to load one. Test: ``test_a_radio_says_why_a_kind_is_not_loaded``."""
    check = radio.preprocess

    def preprocess(payload):
        if payload in RERANKERS and payload not in models.rerankers:
            models.reranker(payload)  # raises CtxirError: why it is not loaded, and what to do
        return check(payload)

    radio.preprocess = preprocess
    return radio


# how long the record that a visitor left outlives their session (Gradio's unload tasks look it up afterwards)
LEFT_RECORD_S = 600


class ClosedSessions:
    """Gradio keeps a left visitor's ``SessionState`` (~1.6 MB) until the session capacity pushes it out, so
    RSS grew with every visitor: ``forget`` drops each session whose visitor left (closed, or ``note``d: a
    lookup of a dropped session reopens it) unused for ``after_s`` seconds (< 0: none). Call it on the
    server's loop. Test: ``test_a_left_visitors_session_is_forgotten``."""

    def __init__(self, after_s: float) -> None:
        self.after_s = after_s
        self.left: dict[str, datetime.datetime] = {}

    def note(self, session_hash: str, now: datetime.datetime | None = None) -> None:
        if session_hash:
            self.left[session_hash] = now or datetime.datetime.now()

    def forget(self, demo, now: datetime.datetime | None = None) -> int:
        """Drop the sessions of visitors who left ``after_s`` ago or more; returns how many."""
        holder = getattr(demo, "state_holder", None)
        if self.after_s < 0 or holder is None:
            return 0
        now = now or datetime.datetime.now()
        with holder.lock:
            gone = [
                session
                for session, state in list(holder.session_data.items())
                if (state.is_closed or session in self.left)
                and (now - holder.time_last_used.get(session, now)).total_seconds() >= self.after_s
            ]
        for session in gone:
            holder.delete_state(session)  # a gr.State's delete callback runs, as when Gradio expires it
            with holder.lock:
                holder.session_data.pop(session, None)
                holder.time_last_used.pop(session, None)
        recent = {s: when for s, when in self.left.items() if (now - when).total_seconds() <= LEFT_RECORD_S}
        self.left = {s: when for s, when in self.left.items() if s in holder.session_data or s in recent}
        return len(gone)

    @classmethod
    def wire(cls, demo: gr.Blocks, after_s: float) -> ClosedSessions:
        """On ``demo``, each visitor who leaves is noted and the sessions left long enough are forgotten."""
        sessions = cls(after_s)

        async def forget_left_sessions(request: gr.Request):
            sessions.note(getattr(request, "session_hash", None) or "")
            sessions.forget(demo)

        demo.unload(forget_left_sessions)
        return sessions
