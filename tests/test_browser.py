"""A real browser (Debian's chromium, driven by Playwright) with every non-local request blocked: the app loads,
a search shows results, and the bertviz attention iframe actually draws (SVG elements) with no internet.

Needs /usr/bin/chromium (`apt-get install -y chromium`); never `playwright install`. Skips without it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.filterwarnings("ignore::pandas.errors.Pandas4Warning")]


@pytest.fixture(scope="module")
def app_url(app_state, serve):
    import app
    from ctxir import app_logic as logic

    examples, app_state.examples = app_state.examples, logic.demo_queries()[:8]  # as on the demo corpus
    try:
        demo = app.build_demo(app_state)
    finally:
        app_state.examples = examples
    with serve(demo) as url:
        yield url


def test_search_and_offline_attention_view_draw_in_a_browser(offline_page, app_url):
    page = offline_page()
    errors: list[str] = []
    page.on("pageerror", lambda err: errors.append(str(err)))
    page.goto(app_url)
    page.wait_for_selector("#search-button", timeout=60_000)

    # 1. a search shows a results table
    page.get_by_label("Query").first.fill("how do bats find insects at night")
    page.click("#search-button")
    page.wait_for_function("() => (document.querySelector('#search-summary')?.innerText || '').includes('results')",
                           timeout=60_000)
    assert "animals-0" in page.inner_text("#search-results")

    # 2. the attention tab's iframe draws bertviz's SVG with d3/jQuery served from Python packages
    page.get_by_role("tab", name="Attention").click()
    page.click("#attention-button")
    page.wait_for_selector("#attention-view iframe", timeout=60_000)
    frame = page.frame_locator("#attention-view iframe")
    frame.locator("svg").first.wait_for(timeout=30_000)
    page.wait_for_timeout(500)
    assert frame.locator("svg").count() >= 1
    assert frame.locator("svg text").count() >= 10  # token labels on both sides
    assert frame.locator("svg line").count() > 100  # attention lines between tokens
    assert frame.locator("#layer option").count() == 6  # the layer selector was filled by jQuery
    height = page.eval_on_selector("#attention-view iframe", "e => e.getBoundingClientRect().height")
    assert height > 300  # the frame grew to its drawing
    assert not [e for e in errors if "bertviz" in e or "d3" in e or "jQuery" in e]
    # nothing the view needs came from outside 127.0.0.1 (blocked requests would have broken the drawing)
    assert not [u for u in page.context.blocked if "cdnjs" in u or "d3" in u or "jquery" in u]
    page.close()


# ---------------------------------------------------------------- every tab, looked at on a laptop and a phone

VIEWPORTS = ("laptop", "phone")  # conftest's sizes: 1366 × 900 and 390 × 844


def _done(page, selector: str, contains: str, timeout: int = 120_000) -> None:
    """Wait until ``selector``'s text contains ``contains``, then for its pending plots to be drawn."""
    page.wait_for_function("([s, c]) => (document.querySelector(s)?.innerText || '').includes(c)",
                           arg=[selector, contains], timeout=timeout)
    page.wait_for_function("() => !document.querySelector('.eta-bar, .progress-text')", timeout=timeout)


def _shoot(page, folder: Path, name: str) -> Path:
    page.wait_for_timeout(800)  # plots finish their transition
    path = folder / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


def _tab(page, name: str) -> None:
    page.get_by_role("tab", name=name, exact=True).click()
    page.wait_for_timeout(400)


@pytest.fixture(scope="module")
def screenshot_dir(tmp_path_factory) -> Path:
    """$CTXIR_SCREENSHOTS if set (to look at them afterwards), else a temporary folder."""
    import os

    folder = os.environ.get("CTXIR_SCREENSHOTS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        return Path(folder)
    return tmp_path_factory.mktemp("screenshots")


@pytest.mark.parametrize("viewport", VIEWPORTS)
def test_screenshot_of_every_tab(offline_page, app_url, screenshot_dir, viewport, report_json):
    """Each tab after its main action, full page, into ``screenshot_dir`` ({viewport}-{tab}.png): for a person to
    look at. Checks what can be measured: no page wider than the screen."""
    page = offline_page(viewport)
    shots, widths = [], {}
    page.goto(app_url)
    page.wait_for_selector("#search-button", timeout=60_000)
    shots.append(_shoot(page, screenshot_dir, f"{viewport}-0-start"))

    def overflow(name):
        widths[name] = page.evaluate("() => document.documentElement.scrollWidth - window.innerWidth")

    page.click("#search-button")
    _done(page, "#search-summary", "results")
    shots.append(_shoot(page, screenshot_dir, f"{viewport}-1-search-results"))
    overflow("search")
    # without a re-ranker the table has no re-ranker columns, and no header wraps (one line each)
    headers = page.locator("#search-results thead th").all_inner_texts()
    assert [h.strip() for h in headers if h.strip()][:3] == ["rank", "doc_id", "dense_score"], headers
    assert not [h for h in headers if "rerank" in h]
    heights = page.eval_on_selector_all("#search-results thead th", "ths => ths.map(t => t.offsetHeight)")
    assert max(heights) < 60, heights
    assert page.locator("#search-csv").is_visible()  # the results as CSV
    page.locator("#search-reranker").get_by_text("cross-encoder").click()
    page.click("#search-button")
    _done(page, "#search-summary", "re-scored")
    page.wait_for_function("() => (document.querySelector('#search-results thead')?.innerText || '')"
                           ".includes('rerank_score')", timeout=30_000)
    page.click('#search-results [data-testid="cell-1-2"]')  # clicking a row explains it
    _done(page, "#search-explain-summary", "cosine")
    page.get_by_text("What moved:").click()
    page.click("#what-moved-button")
    _done(page, "#what-moved-summary", "changed rank")
    shots.append(_shoot(page, screenshot_dir, f"{viewport}-1-search-explained"))
    overflow("search explained")
    # compare pooling: both rankings side by side in three columns, the CLS side on screen
    page.get_by_text("Compare pooling:").click()
    page.click("#pool-button")
    _done(page, "#pool-summary", "share")
    page.wait_for_function("() => (document.querySelector('#pool-table thead')?.innerText || '')"
                           ".includes('CLS pooling')", timeout=30_000)
    right = page.eval_on_selector("#pool-table", "e => e.getBoundingClientRect().right")
    assert right <= page.viewport_size["width"], right
    cls_right = page.eval_on_selector_all("#pool-table thead th", "ths => Math.max(...ths.map("
                                          "t => t.getBoundingClientRect().right))")
    assert cls_right <= right + 1, (cls_right, right)  # the CLS column is in the box, not scrolled away
    shots.append(_shoot(page, screenshot_dir, f"{viewport}-1-search-pooling"))
    # a failing search clears the last answer: no stale "10 results" above the error
    page.fill("#search-query textarea", "")
    page.click("#search-button")
    page.locator('[data-testid="toast-body"]').first.wait_for(timeout=30_000)
    assert "results" not in page.inner_text("#search-summary")  # (Gradio marks it "Error")
    assert not page.locator("#search-results").is_visible()
    page.locator('[data-testid="toast-close"]').first.click()  # out of the next screenshots

    _tab(page, "Pair scoring")
    page.click("#score-pairs-button")
    _done(page, "#pair-summary", "Input formation")
    page.click("#explain-pair-button")
    _done(page, "#pair-explain-summary", "cosine")
    shots.append(_shoot(page, screenshot_dir, f"{viewport}-2-pairs"))
    overflow("pairs")

    _tab(page, "Explain")
    page.click("#explain-button")
    _done(page, "#explain-summary", "cosine")
    shots.append(_shoot(page, screenshot_dir, f"{viewport}-3-explain"))
    overflow("explain")

    _tab(page, "Token embeddings")
    for sub, button, summary, done in (("Tokens", "#info-button", "#info-summary", "parameters"),
                                       ("Projection", "#project-button", "#project-summary", "tokens from"),
                                       ("Across layers", "#layer-sim-button", "#layer-sim-summary", "Sentences:"),
                                       ("Sentence similarity", "#sentence-sim-button", "#sentence-sim-summary",
                                        "pooling")):
        _tab(page, sub)
        page.click(button)
        _done(page, summary, done)  # (a bare non-empty check would see the progress timer's text)
        if sub == "Projection":  # the projection is interactive: hovering a point names its token and sentence
            page.locator("#projection-plot .scatterlayer .point").first.wait_for(timeout=30_000)
            page.locator("#projection-plot .scatterlayer .point").nth(3).hover(force=True)
            page.wait_for_selector("#projection-plot .hoverlayer .hovertext", timeout=10_000)
            hover = page.locator("#projection-plot .hoverlayer .hovertext").first.text_content()  # SVG: no innerText
            assert any(f"{i}: " in hover for i in range(1, 5)), hover  # '…token…\n1: I sat on the bank…'
        shots.append(_shoot(page, screenshot_dir, f"{viewport}-4-embeddings-{sub.lower().replace(' ', '-')}"))
    overflow("embeddings")

    _tab(page, "Attention")
    page.click("#attention-button")
    page.wait_for_selector("#attention-view iframe", timeout=60_000)
    _done(page, "#attention-summary", "tokens")
    shots.append(_shoot(page, screenshot_dir, f"{viewport}-5-attention"))
    overflow("attention")

    _tab(page, "Failure report")
    page.set_input_files("#report-file input[type=file]", str(report_json))
    page.wait_for_timeout(1500)  # the upload lands before the click
    page.click("#report-button")
    _done(page, "#report-summary", "worst queries")
    page.frame_locator("#report-view iframe").locator("h1").wait_for(timeout=30_000)
    shots.append(_shoot(page, screenshot_dir, f"{viewport}-6-failure-report"))
    # the framed report itself, scrolled into view (a full-page capture may leave a frame below the fold blank)
    page.locator("#report-view iframe").scroll_into_view_if_needed()
    page.wait_for_timeout(500)
    page.locator("#report-view iframe").screenshot(path=str(screenshot_dir / f"{viewport}-6-failure-report-frame.png"))
    overflow("report")
    page.context.close()
    assert all(p.stat().st_size > 10_000 for p in shots)
    # a wide table or plot scrolls inside its own box; the page itself never runs off the screen
    assert max(widths.values()) <= 2, widths


@pytest.fixture(scope="module")
def report_json(tmp_path_factory) -> Path:
    from ctxir.report import failure_cases, report_meta, write_report

    corpus = {"d1": {"title": "Otter dens", "text": "River otters dig their dens into the soft bank of a stream."},
              "d2": {"title": "Loans", "text": "The bank approved the loan after checking the savings account."},
              "d3": {"title": "Bats", "text": "Bats hunt moths at night by echolocation."}}
    queries = {"q1": "where do otters live", "q2": "how do bats find insects at night"}
    qrels, run = {"q1": {"d1": 1}, "q2": {"d3": 1}}, {"q1": {"d2": 2.0, "d1": 1.0}, "q2": {"d3": 3.0, "d1": 0.5}}
    folder = tmp_path_factory.mktemp("report")
    cases = failure_cases(qrels, run, corpus, queries)
    return write_report(folder / "report.html", cases, report_meta(qrels, run, "nDCG@10", "bm25"))[1]


def test_the_page_is_served_while_the_startup_corpus_is_indexed(offline_page, app_state, serve, screenshot_dir,
                                                                monkeypatch):
    """app.py indexes the startup corpus in the background: the page shows how far it has got, a search meanwhile
    gets a message (not a hang), and when indexing ends the line goes and the same search works."""
    import threading

    import app
    from ctxir import app_logic as logic
    from ctxir.app import state as state_module

    gate = threading.Event()

    def slow(self, encoder, step, chunk=None):
        step(0.3, "encoding documents: 768 of 2,560 done")
        gate.wait(120)

    monkeypatch.setattr(state_module.CorpusIndex, "_encode_in_steps", slow)
    corpus = {i: d for i, d in logic.demo_corpus().items() if i.startswith("animals-")}
    state = logic.AppState(app_state.models, logic.AppConfig(device="cpu"), corpus, "big", cache=None,
                           background=True)
    demo = app.build_demo(state)
    page = offline_page("laptop")
    try:
        with serve(demo) as url:
            page.goto(url)
            page.wait_for_selector("#search-button", timeout=60_000)
            _done(page, "#indexing-status", "768 of 2,560")
            assert "Indexing corpus 'big'" in page.inner_text("#indexing-status")
            page.fill("#search-query textarea", "how do bats find insects at night")
            page.click("#search-button")
            page.get_by_text("is still being indexed").first.wait_for(timeout=30_000)
            _shoot(page, screenshot_dir, "laptop-7-indexing")
            gate.set()
            page.wait_for_selector("#indexing-status", state="hidden", timeout=60_000)  # the timer saw it finish
            page.click("#search-button")
            _done(page, "#search-summary", "results")
            assert "animals-0" in page.inner_text("#search-results")
    finally:
        gate.set()
