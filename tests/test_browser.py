"""A real browser (Debian's chromium, driven by Playwright) with every non-local request blocked: the app loads,
a search shows results, and the bertviz attention iframe actually draws (SVG elements) with no internet.

Needs /usr/bin/chromium (`apt-get install -y chromium`); never `playwright install`. Skips without it.
"""

from __future__ import annotations

import shutil
import socket
import tempfile
from pathlib import Path

import pytest

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium "
                       "(apt-get install -y chromium)"),
    pytest.mark.filterwarnings("ignore::pandas.errors.Pandas4Warning"),
]


@pytest.fixture(scope="module")
def app_url(app_state):
    import app

    demo = app.build_demo(app_state)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    demo.queue().launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True,
                        allowed_paths=[str(demo.ctxir_outputs.root)])
    try:
        yield f"http://127.0.0.1:{port}/"
    finally:
        demo.close()


@pytest.fixture(scope="module")
def browser_context():
    playwright_api = pytest.importorskip("playwright.sync_api")
    profile = tempfile.mkdtemp(prefix="ctxir-chromium-")
    with playwright_api.sync_playwright() as p:
        context = p.chromium.launch_persistent_context(profile, executable_path=str(CHROMIUM), headless=True,
                                                       args=CHROMIUM_ARGS)
        blocked: list[str] = []

        def offline(route):
            url = route.request.url
            if url.startswith(("http://127.0.0.1", "data:", "blob:", "about:")):
                return route.continue_()
            blocked.append(url)
            return route.abort()

        context.route("**/*", offline)
        context.blocked = blocked
        try:
            yield context
        finally:
            context.close()
            shutil.rmtree(profile, ignore_errors=True)


def test_search_and_offline_attention_view_draw_in_a_browser(app_url, browser_context):
    page = browser_context.new_page()
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
    assert not [u for u in browser_context.blocked if "cdnjs" in u or "d3" in u or "jquery" in u]
    page.close()
