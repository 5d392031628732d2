"""In a real browser (Debian's chromium), an error pop-up shows a hostile word as typed: no link, no image.

Needs /usr/bin/chromium (`apt-get install -y chromium`); never `playwright install`. Skips without it.
"""

from __future__ import annotations

import shutil
import socket
import tempfile
from pathlib import Path

import pytest

from ctxir import app_logic as logic

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
IMAGE = '<img src="https://evil.example/pixel.png">'
LINK = '<a href="https://evil.example/x">Log in</a>'

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium "
                       "(apt-get install -y chromium)"),
    pytest.mark.filterwarnings("ignore::pandas.errors.Pandas4Warning"),
]


@pytest.fixture(scope="module")
def app_url(_tiny_st):
    import app

    models = logic.AppModels.from_objects(_tiny_st, "tiny-bert")
    state = logic.AppState(models, logic.AppConfig(device="cpu"), {"p1": {"title": "", "text": "the river bank"}},
                           "public", cache=None)
    demo = app.build_demo(state)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    demo.queue().launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True)
    try:
        yield f"http://127.0.0.1:{port}/"
    finally:
        demo.close()


@pytest.mark.parametrize("typed", [IMAGE, LINK])
def test_the_error_pop_up_shows_a_hostile_word_as_text(app_url, typed):
    playwright_api = pytest.importorskip("playwright.sync_api")
    profile = tempfile.mkdtemp(prefix="ctxir-chromium-")
    requested: list[str] = []
    try:
        with playwright_api.sync_playwright() as p:
            context = p.chromium.launch_persistent_context(profile, executable_path=str(CHROMIUM), headless=True,
                                                           args=CHROMIUM_ARGS)
            context.on("request", lambda request: requested.append(request.url))
            page = context.new_page()
            page.goto(app_url)
            page.get_by_role("tab", name="Token embeddings").click()
            page.get_by_role("tab", name="Across layers").click()  # the word view is a sub-tab
            page.get_by_label("Word", exact=True).fill(typed)
            page.get_by_role("button", name="Compare layer by layer").click()
            toast = page.locator('[data-testid="toast-body"]').first
            toast.wait_for(timeout=60_000)
            text = toast.inner_text()
            links, images = toast.locator("a").count(), toast.locator("img").count()
            context.close()
    finally:
        shutil.rmtree(profile, ignore_errors=True)
    assert f"word {typed!r} is not in sentence 1" in text  # shown as typed, quotes and brackets included
    assert links == 0 and images == 0
    assert not [url for url in requested if "evil.example" in url]  # the image was never fetched
