"""The first view (issue #49 §5): a served app's first page carries each tab's example answer, computed once for every
visitor (ctxir/app/first_view.py)."""

from __future__ import annotations

import json
import urllib.request

import pytest

from benchmarks.app import first_view
from ctxir.app import attention_tab, pairs_tab
from ctxir.app.first_view import FIRST_VIEWS

pytestmark = pytest.mark.filterwarnings("ignore::pandas.errors.Pandas4Warning")


def page_load(url: str, session: str) -> dict:
    """What a browser does when the page opens: its load events run for a new session, as the page's own script calls
    them (``benchmarks.app.first_view``); returns {elem_id or component id: value} of the first view's answer."""
    with urllib.request.urlopen(f"{url}config", timeout=120) as response:
        config = json.load(response)
    names = {c["id"]: c.get("props", {}).get("elem_id") or c["id"] for c in config["components"]}
    return {names[i]: value for i, value in first_view(url, session).items()}


def value(update):
    return update.get("value") if isinstance(update, dict) and update.get("__type__") == "update" else update


def counting(fn, calls: list):
    def counted(*args, **kwargs):
        calls.append(fn.__name__)
        return fn(*args, **kwargs)

    return counted


def test_a_served_apps_first_page_shows_every_tabs_example_answer_computed_once(
    app_state, serve, monkeypatch
):
    import app

    calls: list[str] = []
    # the tabs' callbacks look these up when they run: every computation of the examples is counted
    monkeypatch.setattr(attention_tab, "attention", counting(attention_tab.attention, calls))
    monkeypatch.setattr(pairs_tab, "score_pairs", counting(pairs_tab.score_pairs, calls))
    # the tests' corpus has no example queries of its own; the demo corpus's first is the search form's example
    monkeypatch.setattr(app_state, "examples", ["where do otters live along the river bank"])
    built = app.build_app(app_state, first_view="start")
    first = built.first_view
    with serve(built) as url:
        shown = page_load(url, "visitor-1")
        again = page_load(url, "visitor-2")
    assert first.failed == {} and set(first.chains) == set(FIRST_VIEWS)
    # once for both visitors (and for the background start that computed it): one attention view, one pair table
    assert first.runs == 1 and sorted(calls) == ["attention", "score_pairs"]
    assert shown == again
    # the first search: its result table, with the example's hits
    hits = value(shown["search-results"])
    assert hits["data"] and "doc_id" in hits["headers"]
    # the pair table, shown, one row per example document
    pairs = shown["pair-table"]
    assert pairs["visible"] is True and len(value(pairs)["data"]) == 5
    # the embedding plot (plotly), shown
    plot = shown["projection-plot"]
    assert plot["visible"] is True and value(plot)["type"] == "plotly" and "data" in value(plot)["plot"]
    # the attention view: bertviz's page in its frame, and the heatmap
    assert value(shown["attention-view"]).startswith("<iframe") and "srcdoc=" in value(
        shown["attention-view"]
    )
    assert shown["attention-heatmap"]["visible"] is True
    # the explanation and the classification
    assert "cosine" in value(shown["explain-summary"]).lower()
    assert value(shown["classify-table"])["data"]


def test_tabs_open_with_their_forms_only_when_the_first_view_is_off(app_state):
    import app

    assert app.build_app(app_state, first_view="off").first_view is None
    with pytest.raises(Exception, match="first_view"):
        app.build_demo(app_state, first_view="later")


def test_an_example_that_cannot_be_answered_leaves_its_tab_as_it_was(app_state, monkeypatch):
    """A failing example (here the pair scoring) is logged and skipped; the other tabs still get theirs."""
    import gradio as gr

    import app
    from ctxir.types import CtxirError

    def refuse(*_args, **_kwargs):
        raise CtxirError("no model to score with")

    monkeypatch.setattr(pairs_tab, "score_pairs", refuse)
    first = app.build_app(app_state).first_view
    first.chains = {api: first.chains[api] for api in ("score_pairs", "model_info")}
    # before they are computed a page gets nothing (it does not wait), and starts their computation
    assert first.values() == [gr.skip()] * len(first.components)
    assert first.ready.wait(600)
    values = dict(zip(map(id, first.components), first.values(), strict=True))
    assert set(first.failed) == {"score_pairs"} and "no model to score with" in first.failed["score_pairs"]
    table = next(c for c in first.components if getattr(c, "elem_id", None) == "pair-table")
    info = next(c for c in first.components if getattr(c, "elem_id", None) == "info-summary")
    assert values[id(table)] == gr.skip() and "layers" in values[id(info)]["value"]
