"""Each workaround of ctxir/app/gradio_fixes.py against the Gradio installed: each test fails with the fix taken out
(its symptom on that Gradio), so a Gradio upgrade that makes a fix needless shows here as a test that passes
without it."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap

import gradio as gr
import pytest

from ctxir.app import gradio_fixes
from ctxir.app.ui import guard
from ctxir.types import CtxirError


class Request:
    def __init__(self, session_hash: str = "", **headers):
        self.headers, self.session_hash = headers, session_hash


def test_a_loop_gradio_replaces_is_closed():
    """Gradio makes and sets a new event loop each time it needs a lock outside one; the one it replaced is closed."""
    from gradio.utils import safe_get_lock

    previous = asyncio.get_event_loop_policy()
    asyncio.set_event_loop_policy(gradio_fixes.ClosingEventLoopPolicy())
    try:
        safe_get_lock()
        first = asyncio.get_event_loop_policy().get_event_loop()
        safe_get_lock()
        assert first.is_closed() and not asyncio.get_event_loop_policy().get_event_loop().is_closed()
    finally:
        asyncio.get_event_loop_policy().get_event_loop().close()
        asyncio.set_event_loop_policy(previous)


def test_a_bar_started_before_the_app_is_built_keeps_running():
    """A tqdm bar started before the app's first ``gr.Progress(track_tqdm=True)`` (the startup indexing's) keeps
    counting after it (a fresh process: Gradio patches tqdm once per process)."""
    script = textwrap.dedent(
        """
        import tqdm
        from ctxir.app.gradio_fixes import track_tqdm_first
        import gradio as gr

        track_tqdm_first()
        bar = tqdm.tqdm(total=3, disable=False)
        bar.update(1)
        gr.Progress(track_tqdm=True)  # what building the app does
        bar.update(1)
        bar.close()
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]


def test_the_spaces_reload_server_is_started_again_after_sys_modules_changed(monkeypatch):
    from gradio import http_server

    calls = []

    def flaky(reloader):
        calls.append(reloader)
        if len(calls) == 1:
            raise RuntimeError("dictionary changed size during iteration")
        return "serving"

    monkeypatch.setattr(http_server, "watchfn_spaces", flaky)
    gradio_fixes.retry_spaces_reload_server()
    assert http_server.watchfn_spaces("reloader") == "serving" and calls == ["reloader", "reloader"]

    def broken(reloader):
        raise RuntimeError("another error")

    monkeypatch.setattr(http_server, "watchfn_spaces", broken)
    gradio_fixes.retry_spaces_reload_server()
    with pytest.raises(RuntimeError, match="another error"):  # only that one error is retried
        http_server.watchfn_spaces("reloader")


def _one_event(fn, *inputs):
    with gr.Blocks() as demo:
        boxes = [gr.Textbox(), *inputs]
        out = gr.Textbox()
        gr.Button().click(fn, boxes, out, api_name="probe")
    return demo, next(iter(demo.fns.values()))


def test_an_api_client_gets_an_errors_plain_text():
    @guard
    def refuse(text):
        raise CtxirError(f"corpus {text!r} is not loaded")

    demo, block_fn = _one_event(refuse)
    gradio_fixes.plain_errors_for_api(demo)

    def message(**headers) -> str:
        with pytest.raises(gr.Error) as err:
            asyncio.run(demo.process_api(block_fn, ["<a>"], request=Request(**headers)))
        return err.value.message

    assert message(**{"x-gradio-user": "api"}) == "corpus '<a>' is not loaded"
    assert message(**{"x-gradio-user": "app"}) == "corpus '&lt;a&gt;' is not loaded"  # a page renders HTML


def test_a_request_without_the_last_inputs_gets_their_defaults():
    demo, block_fn = _one_event(lambda text, png: text, gr.Checkbox(value=True))
    gradio_fixes.fill_missing_inputs(demo)
    inputs = ["river"]
    demo.validate_inputs(block_fn, inputs)
    assert inputs == ["river", True]


def test_a_sliders_refusal_names_the_slider():
    slider = gradio_fixes.named(gr.Slider(1, 50, step=1, label="top k"))
    with pytest.raises(gr.Error) as err:
        slider.preprocess(60)
    assert err.value.plain_message == "top k must be a number from 1 to 50, got 60"


def test_a_left_visitors_session_is_forgotten():
    """Gradio marks a left visitor's session closed and keeps it; the unload handler wired here drops it."""
    from gradio.state_holder import StateHolder

    demo, _ = _one_event(lambda text: text)
    holder = StateHolder()
    holder.set_blocks(demo)
    for session in ("left", "present"):
        holder[session]  # as a request of that session makes it
    holder["left"].is_closed = True  # what Gradio does when the heartbeat ends
    gradio_fixes.ClosedSessions.wire(demo, after_s=0)
    unload = [fn.fn for fn in demo.fns.values() if any(t[1] == "unload" for t in fn.targets)]
    for fn in unload:  # as Gradio runs a visitor's unload handlers
        asyncio.run(fn(Request("left")))
    assert list(holder.session_data) == ["present"]


class Models:  # the parts of AppModels the radios' checks use
    rerankers = frozenset()

    @staticmethod
    def loadable(name: str) -> bool:
        return "/" in name

    @staticmethod
    def reranker(name: str):
        raise CtxirError(f"{name} re-ranker is not available: restart the app with --{name} FOLDER")


def test_a_model_radio_takes_a_hub_id_it_does_not_list():
    radio = gradio_fixes.accept_model_ids(gr.Radio(["auto", "bi-encoder"], value="auto"), Models())
    assert radio.preprocess(" org/cross-encoder ") == "org/cross-encoder"  # loaded on demand by the callback
    assert radio.preprocess("bi-encoder") == "bi-encoder"


def test_a_radio_says_why_a_kind_is_not_loaded():
    radio = gradio_fixes.refuse_unloaded(gr.Radio(["none"], value="none"), Models())
    with pytest.raises(CtxirError, match="cls-lr re-ranker is not available: restart the app with --cls-lr"):
        radio.preprocess("cls-lr")


def test_the_apps_css_is_kept_without_a_warning():
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        blocks = gradio_fixes.styled_blocks("body { color: red }")
    assert blocks._deprecated_css == "body { color: red }"  # what launch() applies when it gets no css
