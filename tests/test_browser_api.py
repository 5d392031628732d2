"""Issue #21 §3 and §5 in a real browser (Debian's chromium, every request to another host refused): a query of only
control characters is refused as empty, an explanation's interactive page draws offline from the one shared
plotly.js, and the page's own API docs name every output (no ``value_N``).

Needs /usr/bin/chromium (`apt-get install -y chromium`); never `playwright install`. Skips without it.
"""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.filterwarnings("ignore::pandas.errors.Pandas4Warning")]


@pytest.fixture(scope="module")
def app_url(app_state, serve):
    import app

    with serve(app.build_demo(app_state)) as url:
        yield url


def test_a_query_of_control_characters_is_refused_as_empty(offline_page, app_url):
    page = offline_page()
    page.goto(app_url)
    query = page.locator("#search-query textarea, #search-query input").first
    query.fill("\x00\x1b\u200b\u200b")  # nothing a person can see
    page.locator("#search-button").click()
    toast = page.locator('[data-testid="toast-body"]').first
    toast.wait_for(timeout=60_000)
    assert "query is empty: type some text" in toast.inner_text()
    assert "results" not in page.locator("#search-summary").inner_text()  # no "0 results"
    assert not page.context.blocked


def test_an_explanation_page_draws_offline_from_the_shared_plotly_js(offline_page, app_url):
    page = offline_page()
    page.goto(app_url)
    page.get_by_role("tab", name="Explain", exact=True).click()
    page.get_by_role("button", name="Explain", exact=True).click()
    links = page.locator("a[href*='.html'], a[href*='.js']")
    links.first.wait_for(timeout=120_000)
    hrefs = [links.nth(i).get_attribute("href") for i in range(links.count())]
    html = next(h for h in hrefs if ".html" in h.split("?")[0])
    js = next(h for h in hrefs if h.split("?")[0].endswith(".js"))
    assert js.split("/")[-1].startswith("plotly-")  # listed beside the page, to download with it
    exported = offline_page()
    response = exported.goto(html if html.startswith("http") else app_url.rstrip("/") + html)
    assert (
        response.ok and int(response.headers.get("content-length", "0") or 0) < 200_000
    )  # kilobytes, not 4.6 MB
    exported.locator(".js-plotly-plot .main-svg").first.wait_for(
        timeout=60_000
    )  # drawn by the shared plotly.js
    assert exported.evaluate("() => typeof window.Plotly") == "object"
    assert exported.locator("#ctxir-plotly-missing").is_hidden()
    assert not exported.context.blocked and not page.context.blocked  # nothing fetched from elsewhere


def test_the_pages_api_docs_name_and_describe_every_endpoint(offline_page, app_url):
    page = offline_page()
    page.goto(app_url)
    page.get_by_text("Use via API", exact=False).first.click()  # the page's footer: Gradio's API docs
    page.get_by_text("API name: /search", exact=False).first.wait_for(timeout=60_000)
    text = page.locator("body").inner_text()
    assert "value_" not in text and "parameter_" not in text  # every input and output has a name
    assert "Search a corpus: a first stage finds candidates" in text  # ctxir/app/api.py's descriptions
    assert 'The output value that appears in the "numbers" Json component.' in text
