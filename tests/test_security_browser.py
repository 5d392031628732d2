"""In a real browser (Debian's chromium): an error pop-up shows a hostile word as typed (no link, no image); an
uploaded corpus whose titles and texts hold HTML and Markdown, searched with a hostile query, explained and scored
as pairs, shows as text (nothing runs, no element is injected, the tables keep their rows and cells); a request
past a full queue is told the app is busy. The new tests block every request to a host other than the app.

Needs /usr/bin/chromium (`apt-get install -y chromium`); never `playwright install`. Skips without it.
"""

from __future__ import annotations

import socket
import time

import pytest

from ctxir.app.config import AppConfig
from ctxir.app.models import AppModels
from ctxir.app.state import AppState

try:
    from playwright.sync_api import TimeoutError as PlaywrightTimeout
    from playwright.sync_api import expect
except ImportError:  # browser tests skip without playwright
    PlaywrightTimeout, expect = TimeoutError, None

IMAGE = '<img src="https://evil.example/pixel.png">'
LINK = '<a href="https://evil.example/x">Log in</a>'

pytestmark = [pytest.mark.browser, pytest.mark.filterwarnings("ignore::pandas.errors.Pandas4Warning")]


@pytest.fixture(scope="module")
def app_url(_tiny_st, serve):
    import app

    models = AppModels.from_objects(_tiny_st, "tiny-bert")
    state = AppState(
        models, AppConfig(device="cpu"), {"p1": {"title": "", "text": "the river bank"}}, "public", cache=None
    )
    with serve(app.build_demo(state)) as url:
        yield url


@pytest.mark.parametrize("typed", [IMAGE, LINK])
def test_the_error_pop_up_shows_a_hostile_word_as_text(offline_page, app_url, typed):
    page = offline_page()
    requested: list[str] = []
    page.context.on("request", lambda request: requested.append(request.url))
    page.goto(app_url)
    page.get_by_role("tab", name="Token embeddings").click()
    page.get_by_role("tab", name="Across layers").click()  # the word view is a sub-tab
    word = page.get_by_label("Word", exact=True)
    button = page.get_by_role("button", name="Compare layer by layer")
    toast = page.locator('[data-testid="toast-body"]').first
    # The sub-tab mounts its fields lazily: a word typed while it is still mounting is put back to the default
    # ("bank", a valid word: no error, no pop-up; the screenshots of the failed runs showed it, and the field read
    # "bank" right after the typing). So type until the word stays typed, then click once; the pop-up's content is
    # asserted as always.
    for _ in range(10):
        word.fill(typed)
        page.wait_for_timeout(500)
        if word.input_value() == typed:
            break
    expect(word).to_have_value(typed)
    button.click()
    toast.wait_for(timeout=30_000)
    text = toast.inner_text()
    links, images = toast.locator("a").count(), toast.locator("img").count()
    assert f"word {typed!r} is not in sentence 1" in text  # shown as typed, quotes and brackets included
    assert links == 0 and images == 0
    assert not [url for url in requested if "evil.example" in url]  # the image was never fetched


def test_text_typed_as_the_across_layers_sub_tab_opens_stays_typed(offline_page, app_url):
    """Issue #34: the sub-tab, which mounts its fields on its first opening, put a word typed at once back to its
    default ("bank"; the error pop-up test above retries its typing for it). Not reproduced on gradio 6.31 (this
    test, and 8 of 8 tries on a page of the same tabs, timer and load event); it fails if the reset comes back."""
    page = offline_page()
    page.goto(app_url)
    page.get_by_role("tab", name="Token embeddings").click()
    page.get_by_role("tab", name="Across layers").click()
    word = page.get_by_label("Word", exact=True)
    sentences = page.get_by_label("Sentences containing the word (one per line)")
    word.fill("otters")
    sentences.fill("Otters swim.\nOtters dig.")
    page.wait_for_timeout(1500)
    assert word.input_value() == "otters" and sentences.input_value() == "Otters swim.\nOtters dig."


# ---------------------------------------------------------------- hostile documents, titles and queries

PWN_IMG = "<img src=x onerror=window.__pwned=1>"
PWN_SCRIPT = "<script>window.__pwned=2</script>"
HOSTILE_DOCS = [  # (id, title, text): HTML that would run, and Markdown that would restyle or break a table
    ("h1", PWN_IMG, f"otters on the river bank {PWN_SCRIPT} play"),
    ("h2", "| a | b |", "**bold** river [link](http://x) `code` bank | c |"),
    ("h3", "**loud** title", '<b>not bold</b> the bank <a href="http://x">click</a> money'),
]
PAIR_TABLE = ".ctxir-table:has(th[title='document'])"  # the Pair scoring tab's scores
HOSTILE_QUERY = "<img src=x onerror=window.__pwned=3> river bank <script>window.__pwned=4</script>"
INJECTED = (
    "img[src='x'], a[href='http://x'], a[href='http://x/'], b, #search-results strong, "
    "#search-results script, #search-results em, #search-results code"
)


def _assert_nothing_ran(page, where: str) -> None:
    pwned = page.evaluate("() => window.__pwned")
    assert pwned is None, f"{where}: injected script ran (window.__pwned = {pwned!r})"
    injected = page.eval_on_selector_all(INJECTED, "els => els.map(e => e.outerHTML.slice(0, 120))")
    assert not injected, f"{where}: user text became elements: {injected}"


def _table(page, selector: str) -> tuple[list[str], list[list[str]]]:
    """(header texts, rows of cell texts) of a Gradio 6 Dataframe as drawn (its rows are ``role=row`` elements of a
    virtual list, each cell a ``role=gridcell``)."""
    headers = [h.strip() for h in page.locator(f"{selector} thead th").all_inner_texts()]
    rows = page.eval_on_selector_all(
        f"{selector} [role=row].virtual-row",
        "rows => rows.map(r => [...r.querySelectorAll('[role=gridcell]')].map(c => c.innerText.trim()))",
    )
    return headers, rows


def test_hostile_documents_and_queries_show_as_text_in_search_explain_and_pairs(
    offline_page, app_url, tmp_path
):
    """Upload a corpus whose titles and texts hold HTML and Markdown, search it with a hostile query, explain a
    result, score the same texts as pairs: nothing runs, no element is injected, the literal text is in the tables
    and each table keeps one row per document and one cell per column."""
    import json

    corpus = tmp_path / "hostile.jsonl"
    corpus.write_text(
        "".join(json.dumps({"_id": i, "title": t, "text": x}) + "\n" for i, t, x in HOSTILE_DOCS)
    )
    page = offline_page()
    page.goto(app_url)
    page.wait_for_selector("#search-button", timeout=60_000)
    # 1. upload through the page: the corpus becomes the chosen one
    page.get_by_text("Upload your own corpus").click()
    page.get_by_role("tabpanel").locator("input[type=file]").first.set_input_files(str(corpus))
    page.wait_for_timeout(1500)  # the file lands before the click
    page.get_by_role("button", name="Index this corpus").click()
    page.wait_for_function("() => document.body.innerText.includes('Indexed 3 documents')", timeout=60_000)
    _assert_nothing_ran(page, "after the upload")
    # 2. a hostile query over it
    page.fill("#search-query textarea, #search-query input", HOSTILE_QUERY)
    page.click("#search-button")
    page.wait_for_function(
        "() => (document.querySelector('#search-summary')?.innerText || '').includes('3 results')",
        timeout=60_000,
    )
    page.wait_for_timeout(1500)  # the page's table is redrawn by the private step after the answer
    _assert_nothing_ran(page, "after the search")
    page.wait_for_selector("#search-results [role=row].virtual-row", timeout=30_000)
    headers, rows = _table(page, "#search-results")
    title_col, text_col = headers.index("title"), headers.index("text")
    assert len(rows) == 3 and all(len(row) == len(headers) for row in rows), (headers, rows)
    shown = {row[headers.index("doc_id")]: (row[title_col], row[text_col]) for row in rows}
    assert shown == {i: (t, x) for i, t, x in HOSTILE_DOCS}, shown  # every character as typed
    # 3. explain a result (its title is in the choice list, its tokens in the panel)
    page.click('#search-results [data-testid="cell-0-2"]')
    page.wait_for_function(
        "() => (document.querySelector('#search-explain-summary')?.innerText || '').includes('cosine')",
        timeout=90_000,
    )
    _assert_nothing_ran(page, "after explaining a result")
    # 4. the same texts as pair scoring documents
    page.get_by_role("tab", name="Pair scoring").click()
    page.get_by_label("Query", exact=True).last.fill(HOSTILE_QUERY)
    page.get_by_label("Documents (one per line)").fill("\n".join(f"{t} {x}" for _, t, x in HOSTILE_DOCS))
    page.click("#score-pairs-button")
    page.wait_for_function(
        "() => (document.querySelector('#pair-summary')?.innerText || '').includes('Input formation')",
        timeout=60_000,
    )
    page.wait_for_timeout(1500)  # the page's table is redrawn by the private step after the answer
    page.wait_for_selector(f"{PAIR_TABLE} [role=row].virtual-row", timeout=30_000)
    pair_headers, pair_rows = _table(page, PAIR_TABLE)
    _assert_nothing_ran(page, "after pair scoring")
    page.click("#explain-pair-button")
    page.wait_for_function(
        "() => (document.querySelector('#pair-explain-summary')?.innerText || '').includes('cosine')",
        timeout=90_000,
    )
    _assert_nothing_ran(page, "after explaining a pair")
    assert len(pair_rows) == 3 and all(len(row) == len(pair_headers) for row in pair_rows), (
        pair_headers,
        pair_rows,
    )
    documents = [row[pair_headers.index("document")] for row in pair_rows]
    assert documents == [f"{t} {x}"[:120] for _, t, x in HOSTILE_DOCS], (
        documents
    )  # as typed (≤ 120 characters)


def test_a_full_queue_tells_the_visitor_the_app_is_busy(offline_page, tmp_path):
    """With the slow view held and the queue full (ctxir/app/limits.py), a click in the page is refused at once
    with Gradio's message, as a pop-up, instead of a spinner that never ends."""
    import threading

    import gradio as gr

    from ctxir.app.limits import BUSY_PAGE, QueueLimits, apply_limits
    from tests.conftest import api_client

    hold, running = threading.Event(), threading.Event()

    def do_attention(text):
        running.set()
        hold.wait(60)
        return text

    with gr.Blocks() as demo:
        box = gr.Textbox(label="Text")
        gr.Button("Show attention").click(do_attention, box, box, api_name="attention")
    limits = QueueLimits(max_queue=1)
    apply_limits(demo, limits)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    demo.launch(
        server_name="127.0.0.1",
        server_port=port,
        prevent_thread_lock=True,
        quiet=True,
        **limits.launch_kwargs(),
    )
    client = api_client(f"http://127.0.0.1:{port}/")
    try:
        # one runs, then one waits: full. The second is sent only once the first runs: sent together, the second
        # can find the first still queued and be refused, leaving the queue empty.
        jobs = [client.submit("held", api_name="/attention")]
        assert running.wait(60), "the first request never started"
        jobs.append(client.submit("held", api_name="/attention"))
        deadline = time.time() + 60
        while len(demo._queue) < 1:  # the second one waits: the queue is full
            assert time.time() < deadline, "the queue did not fill"
            time.sleep(0.05)
        page = offline_page()
        page.goto(f"http://127.0.0.1:{port}/")
        page.get_by_role("button", name="Show attention").click(timeout=60_000)
        toast = page.locator('[data-testid="toast-body"]').first
        toast.wait_for(timeout=60_000)
        text = toast.inner_text()
        hold.set()
        assert [job.result(timeout=30) for job in jobs] == ["held", "held"]  # the queued ones still complete
    finally:
        hold.set()
        client.close()
        demo.close()
    assert BUSY_PAGE in text
