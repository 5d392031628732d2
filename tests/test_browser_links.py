"""Links to a view (ctxir/app/links.py): the Search, Pair scoring and Attention tabs each show a link under their
answer; opened in a new page it selects the tab, fills the same inputs and shows the same answer.

The browser tests need /usr/bin/chromium (`apt-get install -y chromium`); never `playwright install`. They skip
without it. The checks of the link's encoding run without a browser.
"""

from __future__ import annotations

import pytest

from ctxir.app import links

TIMEOUT = 120_000  # ms: a shared 2-core machine runs the views of two pages at once


# ---------------------------------------------------------------- the link's encoding, without a browser


def test_a_link_keeps_each_input_as_the_event_received_it():
    query = links.link_query(
        "attention",
        {
            "text": "a bank & <b>",
            "layers": [0, 2],
            "heads": [],
            "heatmap_head": 1.0,
            "k": 2.5,
            "text_pair": None,
        },
    )
    assert query == "endpoint=attention&text=a+bank+%26+%3Cb%3E&layers=0&layers=2&heads=&heatmap_head=1&k=2.5"
    shown = links.link_html("search", {"query": '"><script>alert(1)</script>'})
    assert "<script>" not in shown and 'href="?endpoint=search&amp;query=%22%3E%3Cscript%3E' in shown


def test_a_link_value_is_read_back_as_its_input_holds_it():
    import gradio as gr

    with gr.Blocks():
        number, group = gr.Number(10), gr.CheckboxGroup([0, 1, 2], value=[])
        box, check = gr.Textbox(), gr.Checkbox()
    assert links.value_for(number, "k", ["5"]) == 5 and links.value_for(number, "k", ["2.5"]) == 2.5
    assert (
        links.value_for(group, "layers", ["0", "2"]) == [0, 2]
        and links.value_for(group, "layers", [""]) == []
    )
    assert (
        links.value_for(box, "query", ["a\nb"]) == "a\nb" and links.value_for(check, "png", ["true"]) is True
    )
    with pytest.raises(gr.Error, match=r"the link's k='five' is not a number: write a number such as k=5"):
        links.value_for(number, "k", ["five"])


def test_a_page_opens_only_the_view_its_link_names(app_state):
    import gradio as gr

    import app

    demo = app.build_demo(app_state, first_view="off")
    loads = [fn for fn in demo.fns.values() if fn.name == "open_link"]
    assert len(loads) == len(links.LINKED)  # one per linked view, each filling only its own tab

    from starlette.datastructures import QueryParams

    class Request:
        def __init__(self, **params):
            self.query_params = QueryParams(params)

    def changed(fn, request) -> list:
        return [value for value in fn.fn(request) if not (isinstance(value, dict) and value == gr.skip())]

    opened = [changed(fn, Request(endpoint="score_pairs", query="otters", documents="a\nb")) for fn in loads]
    assert [len(values) for values in opened] == [0, 4, 0]  # the tab, the run, the query and the documents
    tab, _, query, documents = opened[1]
    pair_tab = next(b for b in demo.blocks.values() if isinstance(b, gr.Tab) and b.label == "Pair scoring")
    assert tab.selected in (pair_tab.id, pair_tab._id) and query == "otters" and documents == "a\nb"
    assert [len(changed(fn, Request(utm_source="x"))) for fn in loads] == [
        0,
        0,
        0,
    ]  # no link: the page as it is
    with pytest.raises(
        gr.Error, match=r"endpoint='explain' is not a view this app links to: use one of 'search'"
    ):
        loads[0].fn(Request(endpoint="explain"))


# ---------------------------------------------------------------- in a browser


@pytest.fixture(scope="module")
def app_url(app_state, serve):
    import app

    # tabs open with their forms only: what a linked page shows is the link's answer, not an example's
    with serve(app.build_demo(app_state, first_view="off")) as url:
        yield url


def _wait_text(page, selector: str, contains: str) -> None:
    page.wait_for_function(
        "([s, c]) => (document.querySelector(s)?.innerText || '').includes(c)",
        arg=[selector, contains],
        timeout=TIMEOUT,
    )
    page.wait_for_function("() => !document.querySelector('.eta-bar, .progress-text')", timeout=TIMEOUT)


def _link(page, selector: str) -> str:
    """The absolute address of the link shown at ``selector`` (the browser resolves its relative href)."""
    page.locator(f"{selector} a[data-link]").wait_for(timeout=TIMEOUT)
    return page.eval_on_selector(f"{selector} a[data-link]", "a => a.href")


def _selected_tab(page) -> str:
    return page.locator('[role="tab"][aria-selected="true"]').first.inner_text().strip()


@pytest.mark.browser
@pytest.mark.filterwarnings("ignore::pandas.errors.Pandas4Warning")
def test_a_search_link_reopens_the_search_and_its_results(offline_page, app_url):
    page = offline_page()
    page.goto(app_url)
    page.wait_for_selector("#search-button", timeout=60_000)
    page.fill("#search-query textarea", "where do otters live along the river bank")
    page.fill("#search-k input", "4")
    page.click("#search-button")
    _wait_text(page, "#search-summary", "results")
    results = page.inner_text("#search-results")
    assert "geography-" in results or "animals-" in results
    url = _link(page, "#search-link")
    assert url.startswith(app_url) and "endpoint=search" in url and "k=4" in url

    opened = offline_page()
    opened.goto(url)
    _wait_text(opened, "#search-summary", "results")
    assert _selected_tab(opened) == "Search"
    assert opened.input_value("#search-query textarea") == "where do otters live along the river bank"
    assert opened.input_value("#search-k input") == "4"
    assert opened.inner_text("#search-results") == results
    assert _link(opened, "#search-link") == url  # the reopened view links to itself


@pytest.mark.browser
@pytest.mark.filterwarnings("ignore::pandas.errors.Pandas4Warning")
def test_a_pair_scoring_link_reopens_its_tab_and_scores(offline_page, app_url):
    page = offline_page()
    page.goto(app_url)
    page.wait_for_selector("#search-button", timeout=60_000)
    page.get_by_role("tab", name="Pair scoring", exact=True).click()
    page.get_by_label("Query").nth(1).fill("where do otters live")  # the Search tab's query box is the first
    page.get_by_label("Documents (one per line)").fill(
        "Otters dig dens in the river bank.\nBanks approve loans."
    )
    page.click("#score-pairs-button")
    _wait_text(page, "#pair-summary", "Input formation")
    page.locator("#pair-table table").wait_for(timeout=TIMEOUT)
    scores = page.inner_text("#pair-table")
    assert "Banks approve loans." in scores
    url = _link(page, "#pair-link")
    assert "endpoint=score_pairs" in url

    opened = offline_page()
    opened.goto(url)
    _wait_text(opened, "#pair-summary", "Input formation")
    opened.locator("#pair-table table").wait_for(timeout=TIMEOUT)
    assert _selected_tab(opened) == "Pair scoring"
    assert opened.get_by_label("Documents (one per line)").input_value().endswith("Banks approve loans.")
    assert opened.inner_text("#pair-table") == scores


@pytest.mark.browser
@pytest.mark.filterwarnings("ignore::pandas.errors.Pandas4Warning")
def test_an_attention_link_reopens_its_tab_inputs_and_figures(offline_page, app_url):
    page = offline_page()
    page.goto(app_url)
    page.wait_for_selector("#search-button", timeout=60_000)
    page.get_by_role("tab", name="Attention", exact=True).click()
    page.fill("#attention-text textarea", "otters play on the river bank")
    page.locator("#attention-layers input[type=checkbox]").nth(1).check()  # layer 1
    page.click("#attention-button")
    _wait_text(page, "#attention-summary", "tokens")
    summary = page.inner_text("#attention-summary")
    assert "layers [1]" in summary
    url = _link(page, "#attention-link")
    assert "endpoint=attention" in url and "layers=1" in url

    opened = offline_page()
    opened.goto(url)
    _wait_text(opened, "#attention-summary", "tokens")
    assert _selected_tab(opened) == "Attention"
    assert opened.input_value("#attention-text textarea") == "otters play on the river bank"
    assert "layers [1]" in opened.inner_text("#attention-summary")
    assert opened.inner_text("#attention-summary").split(" built in ")[0] == summary.split(" built in ")[0]
    opened.wait_for_selector("#attention-view iframe", timeout=TIMEOUT)
    opened.locator("#attention-heatmap .js-plotly-plot").wait_for(timeout=TIMEOUT)  # drawn after the answer
