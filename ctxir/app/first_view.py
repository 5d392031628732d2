"""The first view: each tab opens on its example's answer, computed once for every visitor."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import gradio as gr

from ctxir.app.ui import PRIVATE

logger = logging.getLogger("ctxir.app")

FIRST_VIEWS = (
    *("search", "score_pairs", "explain", "model_info", "token_embeddings", "layer_similarity"),
    *("sentence_similarity", "attention", "classify"),
)
UPDATE = "__type__"


class FirstView:
    """The example answers of ``apis`` in ``demo`` (built on ``state``), computed once: ``values()`` per page."""

    def __init__(self, demo: gr.Blocks, state, out, apis: tuple[str, ...] = FIRST_VIEWS):
        self.demo, self.state, self.out = demo, state, out
        fns = list(demo.fns.values())
        by_api = {fn.api_name: fn for fn in fns if fn.api_name and fn.api_visibility == "public"}
        self.chains = {api: self._chain(by_api[api], fns) for api in apis if api in by_api}
        self.components = list(
            {id(c): c for chain in self.chains.values() for step in chain for c in step.outputs}.values()
        )
        self.answers: dict[int, dict] | None = None  # id(component) → its update, once computed
        self.failed: dict[str, str] = {}  # api → why its example was not answered
        self.runs = 0  # computations done: 1 after the first, whoever asked (tests check it stays 1)
        self.ready = threading.Event()
        self._lock = threading.Lock()  # held while computing
        self._started = threading.Lock()  # taken by the first start, never released

    @staticmethod
    def _chain(first, fns: list) -> list:
        """``first`` and the steps Gradio runs after it (not those run only on failure), in order."""
        chain, queue = [], [first]
        while queue:
            step = queue.pop(0)
            chain.append(step)
            queue += [f for f in fns if f.trigger_after == step._id and not f.trigger_only_on_failure]
        return chain

    def start(self, wait_for_server_s: float = 120.0) -> threading.Thread | None:
        """Compute once in a background thread (None if started before), after indexing, once the server runs."""
        seen = threading.Event()  # the server was seen running: once it is not, the app closed

        def closed() -> bool:
            if getattr(self.demo, "is_running", False):
                seen.set()
                return False
            return seen.is_set()

        def run():
            self.state.indexing.done.wait()
            deadline = time.monotonic() + wait_for_server_s
            while not getattr(self.demo, "is_running", False) and time.monotonic() < deadline:
                time.sleep(0.2)
            # a closed app stops between examples: a pass still in torch at exit aborts the process
            self.compute(stop=closed)

        if not self._started.acquire(blocking=False):
            return None
        thread = threading.Thread(target=run, name="ctxir-first-view", daemon=True)
        thread.start()
        return thread

    def compute(self, stop: Callable[[], bool] | None = None) -> dict[int, dict] | None:
        """Every chain's answer, once (a second caller waits for the first and gets the same answers)."""
        with self._lock:
            if self.answers is None:
                started = time.perf_counter()
                self.state.indexing.done.wait()
                answers: dict[int, dict] = {}
                for api, chain in self.chains.items():
                    if stop is not None and stop():
                        logger.info("first view stopped: the app closed")
                        self.failed.clear()
                        return None
                    try:
                        answers |= self._replay(chain)
                    except Exception as err:  # gr.Error included: the tab opens with its form only
                        self.failed[api] = (
                            getattr(err, "plain_message", None) or str(err) or type(err).__name__
                        )
                        # a stopping app closes its output folder under the examples: no fault to report then
                        log = logger.info if getattr(self.out, "closed", False) else logger.warning
                        log("first view of /%s not shown: %s", api, self.failed[api])
                # its downloads stay as long as the app: every visitor is offered them (Outputs.pin)
                values = [update.get("value") for update in answers.values()]
                self.out.pin(
                    v for value in values for v in (value if isinstance(value, list | tuple) else [value])
                )
                self.answers, self.runs = answers, self.runs + 1
                self.ready.set()
                logger.info(
                    "first view: %d of %d examples answered in %.1f s",
                    len(self.chains) - len(self.failed),
                    len(self.chains),
                    time.perf_counter() - started,
                )
            return self.answers

    @staticmethod
    def _replay(chain: list) -> dict[int, dict]:
        """Run ``chain`` as a click does: each step's inputs are the values the steps before it gave."""
        from gradio.helpers import special_args

        shown: dict[int, dict] = {}
        for step in chain:
            values = []
            for block in step.inputs:
                update = shown.get(id(block), {})
                values.append(update["value"] if "value" in update else _initial(block))
            values, *_ = special_args(step.fn, values, request=None)
            result = step.fn(*values)
            results = [result] if len(step.outputs) == 1 else list(result or [])
            for block, value in zip(step.outputs, results, strict=True):
                is_update = isinstance(value, dict) and value.get(UPDATE) == "update"
                shown[id(block)] = shown.get(id(block), {}) | (
                    value if is_update else {UPDATE: "update", "value": value}
                )
        return shown

    def values(self) -> list:
        """What a page that opens shows: each component's first-view update."""
        if not self.ready.is_set():
            self.start(wait_for_server_s=0)  # a page opened: the server runs
            return [gr.skip() for _ in self.components]
        # copies: Gradio takes the value out of an update dict it sends
        return [dict(self.answers[id(c)]) if id(c) in self.answers else gr.skip() for c in self.components]


def _initial(block) -> Any:
    """A component's initial value as its event receives it (Gradio preprocesses what the page sends)."""
    value = getattr(block, "value", None)
    if value is None or not hasattr(block, "preprocess"):
        return value
    try:
        return block.preprocess(value)
    except Exception:  # a value the component only shows (e.g. a placeholder table): passed as it is
        return value


def wire(demo: gr.Blocks, state, out, start: bool = False) -> FirstView:
    """Inside ``demo``'s open Blocks: every page that opens gets the first view."""
    first = FirstView(demo, state, out)
    if first.components:
        demo.load(first.values, None, first.components, show_progress="hidden", **PRIVATE)
    if start:
        first.start()
    return first
