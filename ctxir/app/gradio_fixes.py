"""Every place the app works around Gradio (6.31) or the ``spaces`` package it starts on a Space: one function each.

Each says the version it is for, the symptom, and the test of tests/test_gradio_fixes.py that fails without it. On a
Gradio upgrade, take each out, run that test, and delete the fix whose test passes without it.
"""

from __future__ import annotations

import asyncio
import datetime
import functools
import threading
from typing import TYPE_CHECKING

import gradio as gr

from ctxir.app.ui import from_browser, user_error
from ctxir.rerank.registry import RERANKERS
from ctxir.types import CtxirError

if TYPE_CHECKING:
    from ctxir.app.models import AppModels


class ClosingEventLoopPolicy(asyncio.DefaultEventLoopPolicy):
    """Gradio 6.31: ``gradio.utils.safe_get_lock`` makes and sets a new event loop each time it runs outside one
    (``gr.Blocks()``, ``queue()``, each ``App``: five while the app is built) and drops the previous one unclosed.
    An unclosed selector loop is in a reference cycle; the garbage collector freed its sockets first, and each loop's
    ``__del__`` then printed ``Exception ignored in BaseEventLoop.__del__ … ValueError: Invalid file descriptor: -1``.
    This policy closes the main thread's loop when another replaces it (Gradio's locks bind to the server's loop, so
    nothing runs on the dropped ones); other threads' loops are left alone.

    Test: ``test_a_loop_gradio_replaces_is_closed``."""

    def __init__(self) -> None:
        super().__init__()
        self._main_loop: asyncio.AbstractEventLoop | None = None

    def set_event_loop(self, loop: asyncio.AbstractEventLoop | None) -> None:
        super().set_event_loop(loop)
        if threading.current_thread() is not threading.main_thread():
            return
        replaced, self._main_loop = self._main_loop, loop
        if (
            replaced is not None
            and replaced is not loop
            and not replaced.is_running()
            and not replaced.is_closed()
        ):
            replaced.close()


def track_tqdm_first() -> None:
    """Gradio 6.31 patches tqdm's methods when the first ``gr.Progress(track_tqdm=True)`` is made (in
    ``build_demo``); a bar started before that (the background indexing's) then fails at its next step (``'tqdm'
    object has no attribute '_progress'``) and the startup corpus is never indexed. Patch before any bar starts.

    Test: ``test_a_bar_started_before_the_app_is_built_keeps_running``."""
    gr.Progress(track_tqdm=True)


def retry_spaces_reload_server(attempts: int = 3) -> None:
    """spaces 0.51 (gradio 6.31 starts its reload server on a Space): the server's first step walks ``sys.modules``,
    which the app's background threads (the startup indexing, the first view) change as they import; now and then
    it fails ("RuntimeError: dictionary changed size during iteration") and that thread printed its traceback and
    died. Start it again, a few times, on exactly that error.

    Test: ``test_the_spaces_reload_server_is_started_again_after_sys_modules_changed``."""
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
    """Gradio 6.31 renders ``gr.Error``'s message as HTML, so ``user_error`` escapes it; an API client renders
    nothing and got ``'&lt;a&gt;'`` for ``'<a>'``. Gradio sends one message per error to whoever made the request,
    so the choice is made per request, in the one call every event goes through (``Blocks.process_api``: the queue,
    ``/gradio_api/call``, the MCP server). It covers the callbacks' errors (``ui.guard``) and the input checks
    Gradio runs before a callback (``named``), where Gradio gives no request to look at.

    Test: ``test_an_api_client_gets_an_errors_plain_text``."""
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
    """Gradio 6.31 refuses a request with fewer values than its event has inputs ("didn't receive enough input
    values"); gradio_client fills the missing trailing ones with the inputs' defaults, a raw HTTP or MCP caller
    does not. An event's last inputs are optional here (``png_figures``, the search's re-rank mode): the missing
    ones get their defaults, as gradio_client sends them. A request that sends every value is unchanged.

    Test: ``test_a_request_without_the_last_inputs_gets_their_defaults``."""
    validate = demo.validate_inputs

    def filled(block_fn, inputs: list) -> None:
        inputs.extend(getattr(block, "value", None) for block in block_fn.inputs[len(inputs) :])
        validate(block_fn, inputs)

    demo.validate_inputs = filled
    return demo


def named(component):
    """Gradio 6.31 checks some inputs itself before a callback runs (a slider's range, a radio's choices) and its
    message names no input ("Value 60 is greater than maximum value 50."). The component's check is wrapped so the
    message names it and says what is accepted, as text.

    Test: ``test_a_sliders_refusal_names_the_slider``."""
    check = component.preprocess

    def preprocess(payload):
        try:
            return check(payload)
        except (
            CtxirError
        ) as err:  # the component's own refusal with its reason (a re-ranker that is not loaded)
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
    """Gradio 6.31 refuses a radio's value that no choice lists. A model radio also takes what no choice lists
    yet, from an API client or a Load button: a cross-encoder's Hub id (or folder) passes to the callback, which
    loads it on demand (``AppModels.reranker``); any other name passes too, so that the callback's own check answers
    it (what the argument takes, ids included) rather than Gradio's list of the choices, which says nothing of ids.

    Test: ``test_a_model_radio_takes_a_hub_id_it_does_not_list``."""
    check = radio.preprocess

    def preprocess(payload):
        listed = [value for _, value in radio.choices]
        if isinstance(payload, str) and payload not in listed and payload not in RERANKERS:
            return payload.strip() if models.loadable(payload) else payload
        return check(payload)

    radio.preprocess = preprocess
    return radio


def refuse_unloaded(radio: gr.Radio, models: AppModels) -> gr.Radio:
    """Gradio 6.31 refuses a radio's value that no choice lists, saying only which values are accepted. A radio
    offers only the loaded re-rankers; an API client that sends a kind that is not loaded is told why and how to
    load one (``AppModels.reranker``'s message).

    Test: ``test_a_radio_says_why_a_kind_is_not_loaded``."""
    check = radio.preprocess

    def preprocess(payload):
        if payload in RERANKERS and payload not in models.rerankers:
            models.reranker(payload)  # raises CtxirError: why it is not loaded, and what to do
        return check(payload)

    radio.preprocess = preprocess
    return radio


# How long the record that a visitor left is kept once their session is gone: Gradio's own unload tasks for that
# visitor look the session up after the heartbeat ended, and a lookup of a dropped session makes a new, open one
LEFT_RECORD_S = 600


class ClosedSessions:
    """Gradio 6.31 marks a session closed when its visitor leaves (page closed, gradio_client ``Client`` closed: the
    heartbeat ends) but keeps its ``SessionState`` (about 1.6 MB here) until ``state_session_capacity`` pushes it
    out: RSS grew with every visitor seen. ``forget`` drops from Gradio's store (``demo.state_holder``) every
    session whose visitor left and that has not been used for ``after_s`` seconds (< 0: none).

    A visitor has left when Gradio marked their session closed or ``note`` recorded it: Gradio runs every unload
    handler of a visitor after the heartbeat ended, each looking the session up, and the lookup of a session
    already dropped (two visitors leaving at once) makes it again, open. A page that reconnects after the drop is
    served as one pushed out by the capacity is. Call ``forget`` on the server's event loop (``wire`` does).

    Test: ``test_a_left_visitors_session_is_forgotten``."""

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
        for session, when in list(self.left.items()):
            if session not in holder.session_data and (now - when).total_seconds() > LEFT_RECORD_S:
                self.left.pop(session, None)
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
