"""The app as a hostile visitor tries it (issue #13): uploads are per visitor, messages are text, disk is bounded.

Library-level tests use a tiny random BERT (conftest) and a one-document public corpus, so they run in seconds;
the HTTP tests launch that same small app and call it with gradio_client, one Client per visitor (each Client is
one Gradio session, like one browser tab).
"""

from __future__ import annotations

import html
import json
import os
import re
import signal
import tempfile
import time
from html.parser import HTMLParser
from pathlib import Path

import pytest

from ctxir.app.attention_tab import attention
from ctxir.app.config import AppConfig
from ctxir.app.embeddings_tab import model_info, token_embeddings
from ctxir.app.models import AppModels
from ctxir.app.outputs import Outputs
from ctxir.app.search import search
from ctxir.app.search_tab import compare_pooling, upload_corpus
from ctxir.app.similarity import layer_similarity, sentence_similarity
from ctxir.app.state import AppState
from ctxir.app.text import md_code
from ctxir.app.ui import user_error
from ctxir.types import CtxirError

pytestmark = pytest.mark.filterwarnings("ignore::pandas.errors.Pandas4Warning")

LINK = '<a href="https://evil.example/login">Log in again</a>'
IMAGE = '<img src="https://evil.example/pixel.png">'
SECRET = "the vault code is 4471 and the river key is under the otters stone"


# ---------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def tiny_models(_tiny_st):
    return AppModels.from_objects(_tiny_st, "tiny-bert")


def make_state(models, **config) -> AppState:
    """A fresh state: public corpus 'public' (two documents), no embedding cache, limits from ``config``."""
    corpus = {"p1": {"title": "", "text": "the river bank"}, "p2": {"title": "", "text": "money at the bank"}}
    return AppState(models, AppConfig(device="cpu", **config), corpus, "public", cache=None)


@pytest.fixture
def state(tiny_models):
    return make_state(tiny_models)


def corpus_file(folder: Path, name: str, text: str = SECRET) -> str:
    path = folder / name
    path.write_text(f"{text}\nan unrelated line about tea\n", encoding="utf-8")
    return str(path)


class Index:
    """Stands in for a CorpusIndex where only the bookkeeping is tested."""

    def __init__(self, name: str):
        self.name = name


class Tags(HTMLParser):
    """The tags a browser would build from a string."""

    def __init__(self, text: str):
        super().__init__()
        self.tags: list[str] = []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)


def shows_literally(message: str, typed: str) -> bool:
    """``message``, rendered as HTML, contains ``typed`` as text and builds no element."""
    return not Tags(message).tags and typed in html.unescape(message)


# ---------------------------------------------------------------- 1. uploads belong to their visitor


def test_an_upload_is_visible_and_searchable_only_by_its_owner(state, tmp_path):
    result = upload_corpus(state, corpus_file(tmp_path, "secret_notes.txt"), owner="alice")
    name = result.data["corpus"]
    assert name.startswith("secret_notes-")
    assert state.corpus_names_for("alice") == ["public", name]
    assert state.corpus_names_for("bob") == ["public"]  # bob's dropdown
    assert state.corpus_names == ["public"]  # the local caller (owner None) is another owner too
    hits = search(state, "vault code", name, "bm25", k=1, owner="alice")
    assert hits.rows[0]["text"].startswith("the vault code")
    # bob asks for alice's corpus by its exact name: refused, and the message lists only what bob may use
    with pytest.raises(
        CtxirError, match=r"corpus 'secret_notes-\w+' is not loaded: choose one of 'public' or"
    ) as err:
        search(state, "vault code", name, "bm25", k=1, owner="bob")
    assert "vault" not in str(err.value)
    with pytest.raises(CtxirError) as err:
        search(state, "vault code", "nope", "bm25", owner="bob")
    assert "secret_notes" not in str(
        err.value
    )  # an unknown-corpus error never names another visitor's corpus
    with pytest.raises(CtxirError, match="is not loaded"):
        compare_pooling(state, "vault code", name, layer=1, k=1, owner="bob")


def test_each_visitor_keeps_their_own_copy_of_the_same_file(state, tmp_path):
    path = corpus_file(tmp_path, "shared.txt")
    a = upload_corpus(state, path, owner="alice").data["corpus"]
    b = upload_corpus(state, path, owner="bob").data["corpus"]
    assert a == b and state.uploads.count == 2
    assert state.uploads.release("alice") == [a]
    assert search(state, "vault", b, "bm25", k=1, owner="bob").rows  # bob's copy is still there


def test_a_visitor_over_their_own_limit_loses_only_their_oldest_and_is_told(tiny_models, tmp_path):
    state = make_state(tiny_models, max_corpora=2)
    bob = upload_corpus(state, corpus_file(tmp_path, "bob.txt"), owner="bob").data["corpus"]
    names = [
        upload_corpus(state, corpus_file(tmp_path, f"a{i}.txt", f"text {i}"), owner="alice") for i in range(3)
    ]
    assert names[2].data["dropped"] == [names[0].data["corpus"]]
    assert "Your older upload(s)" in names[2].text and "at most 2" in names[2].text
    assert state.corpus_names_for("alice") == ["public", names[1].data["corpus"], names[2].data["corpus"]]
    assert state.corpus_names_for("bob") == ["public", bob]


def test_when_the_app_is_full_only_idle_visitors_lose_uploads_else_a_clear_refusal(tiny_models):
    state = make_state(tiny_models, max_total_uploads=3, upload_idle_s=600)
    now = [1000.0]
    state.uploads.clock = lambda: now[0]
    state.uploads.add(Index("b1"), "bob")
    state.uploads.add(Index("b2"), "bob")
    state.uploads.add(Index("c1"), "carol")
    # everyone is active: alice is refused, and nobody loses anything
    with pytest.raises(
        CtxirError,
        match=r"already holds 3 uploaded corpora of visitors who are using them.*"
        r"nothing of theirs is removed while they are active.*Try again",
    ) as err:
        state.uploads.add(Index("a1"), "alice")
    assert "b1" not in str(err.value) and "c1" not in str(err.value)
    with pytest.raises(CtxirError, match="already holds 3"):
        state.uploads.check_room("alice", "a1")  # the early check (before indexing) says the same
    assert state.uploads.count == 3
    # 11 minutes later carol searches (active) and bob has been idle: alice's upload takes bob's oldest
    now[0] += 660
    state.index("c1", "carol")
    assert state.uploads.add(Index("a1"), "alice") == []
    assert state.corpus_names_for("bob") == ["public", "b2"]
    assert state.corpus_names_for("carol") == ["public", "c1"]
    assert state.corpus_names_for("alice") == ["public", "a1"]
    # a visitor using their corpus counts as active: bob searches b2, so the next upload is refused again
    state.index("b2", "bob")
    with pytest.raises(CtxirError, match="already holds 3"):
        state.uploads.add(Index("d1"), "dave")
    assert state.uploads.count == 3


def test_an_ended_session_releases_its_uploads(state):
    state.uploads.add(Index("a1"), "alice")
    state.uploads.add(Index("a2"), "alice")
    state.uploads.add(Index("b1"), "bob")
    assert sorted(state.uploads.release("alice")) == ["a1", "a2"]
    assert state.corpus_names_for("alice") == ["public"] and state.uploads.count == 1
    assert state.uploads.release("alice") == []


def test_uploaded_embeddings_are_not_written_to_the_embedding_cache(tiny_models, tmp_path):
    from ctxir.encoders import EmbeddingCache

    cache_dir = tmp_path / "cache"
    corpus = {"p1": {"title": "", "text": "the river bank"}}
    state = AppState(tiny_models, AppConfig(device="cpu"), corpus, "public", cache=EmbeddingCache(cache_dir))
    public_files = sorted(p.name for p in cache_dir.rglob("*") if p.is_file())
    assert public_files  # the startup corpus is cached (so this check can see a write)
    name = upload_corpus(state, corpus_file(tmp_path, "notes.txt"), owner="alice").data["corpus"]
    search(state, "vault", name, "dense", k=1, owner="alice")
    compare_pooling(state, "vault", name, layer=1, k=1, owner="alice")  # pooled re-encodings too
    assert sorted(p.name for p in cache_dir.rglob("*") if p.is_file()) == public_files


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (
            b"first line\nsecond \x00 line\n",
            r"notes\.txt contains a NUL byte \(line 2, byte offset 18\): it is a binary "
            r"file or UTF-16 text.*Save it as UTF-8 text",
        ),
        ("a UTF-16 file\n".encode("utf-16"), r"contains a NUL byte \(line 1"),
    ],
)
def test_nul_bytes_in_an_upload_are_refused(state, tmp_path, content, message):
    path = tmp_path / "notes.txt"
    path.write_bytes(content)
    with pytest.raises(CtxirError, match=message):
        upload_corpus(state, str(path), owner="alice")
    assert state.uploads.count == 0


def test_a_nul_written_as_a_json_escape_is_refused(state, tmp_path):
    path = tmp_path / "escaped.jsonl"
    path.write_text(
        '{"id": "d1", "text": "fine"}\n{"id": "d2", "text": "bad \\u0000 here"}\n', encoding="utf-8"
    )
    with pytest.raises(CtxirError, match=r"escaped\.jsonl: document 'd2' contains a NUL character"):
        upload_corpus(state, str(path), owner="alice")


def test_a_hostile_file_name_becomes_a_plain_corpus_name(state, tmp_path):
    path = tmp_path / "<img src=x onerror=alert(1)>.txt"
    path.write_text("some text\n", encoding="utf-8")
    result = upload_corpus(state, str(path), owner="alice")
    assert result.data["corpus"].startswith("img_src_x_onerror_alert_1-")
    assert "from `<img src=x onerror=alert(1)>.txt` as corpus" in result.text  # a code span shows it as typed


# ---------------------------------------------------------------- 2. messages are text


@pytest.mark.parametrize("typed", [LINK, IMAGE])
def test_hostile_text_in_error_messages_shows_as_typed(state, typed):
    import gradio as gr

    cases = [
        (lambda: search(state, "river", typed, owner="bob"), "corpus"),
        (lambda: model_info(state, typed), "model"),
        (lambda: layer_similarity(state, ["the river bank", "the money bank"], typed), "word"),
        (lambda: token_embeddings(state, ["the river bank"], 0, 1, ["pca"], typed), "word"),
    ]
    for call, what in cases:
        with pytest.raises(CtxirError) as err:
            call()
        raw = str(err.value)
        shown_part = typed if typed in raw else typed[:40]  # a long word is quoted by its first 40 characters
        assert (
            shown_part in raw and Tags(raw).tags
        )  # the library message holds the raw text, which HTML renders
        shown = user_error(err.value)
        assert isinstance(shown, gr.Error)
        assert shows_literally(shown.message, shown_part), (what, shown.message)


def test_the_apps_own_placeholders_stay_readable(state):

    with pytest.raises(CtxirError) as err:
        search(state, "river", reranker="cross-encoder")  # the tiny app has no cross-encoder
    raw = str(err.value)
    assert "`--cross-encoder <its output folder>`" in raw
    assert Tags(raw).tags == ["its"]  # rendered as HTML, the placeholder would vanish as an unknown tag
    message = user_error(err.value).message
    assert shows_literally(message, "`--cross-encoder <its output folder>` (or set CTXIR_CROSS_ENCODER)")
    assert "'none'" in message  # quotes are not escaped: API clients read them as they are


def test_guarded_callbacks_escape_unexpected_errors_too():
    import gradio as gr

    from ctxir.app.ui import guard

    @guard
    def crashing():
        raise RuntimeError(IMAGE)

    with pytest.raises(gr.Error) as err:
        crashing()
    assert shows_literally(err.value.message, f"unexpected RuntimeError in crashing: {IMAGE}")


def test_cls_pooling_at_layer_0_warns_that_every_pair_scores_1(state):
    result = sentence_similarity(state, ["the river bank", "money and coffee"], layer=0, pooling="cls")
    assert result.data["similarity"] == [[1.0, 1.0], [1.0, 1.0]]  # what the warning is about
    assert len(result.data["warnings"]) == 1
    assert "CLS pooling at layer 0" in result.text and "choose layer 1 or higher" in result.text
    for layer, pooling in ((1, "cls"), (0, "mean")):
        assert (
            sentence_similarity(state, ["the river bank", "money"], layer=layer, pooling=pooling).data[
                "warnings"
            ]
            == []
        )
    compared = compare_pooling(state, "river", layer=0, k=2)
    assert compared.data["warnings"] and compared.text.startswith("⚠️ CLS pooling at layer 0")
    assert compare_pooling(state, "river", layer=1, k=2).data["warnings"] == []


def test_markdown_summaries_show_user_text_as_typed(state):
    result = token_embeddings(state, ["the bank", "a bank"], 0, 1, ["pca"], "bank")
    assert "`bank` circled" in result.text
    assert md_code("a`b <img>") == "``a`b <img>``"  # a backtick inside cannot end the code span
    legend = layer_similarity(state, [f"the bank {IMAGE}", "the bank"], "bank").text
    assert "<img" not in legend and "&lt;img" in legend


# ---------------------------------------------------------------- 3. disk use is bounded


@pytest.fixture
def outputs(tmp_path, monkeypatch):

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return Outputs(max_age_s=600, max_bytes=3 * 2**20)


def test_the_output_folder_goes_at_exit_even_while_a_thread_writes_into_it(outputs):
    """SIGTERM's exit removes the folder while the first view may still be writing its files into it: the folder is
    closed to new files and removed until gone (one rmtree left it with the file written under it)."""
    import threading

    from ctxir.types import CtxirError

    refused, stop = [], threading.Event()

    def write():
        while not stop.is_set():
            try:
                outputs.text("x" * 4096, "late", ".html")
            except CtxirError as err:
                refused.append(str(err))
                return
            except OSError:  # the folder went under the write
                continue

    writers = [threading.Thread(target=write) for _ in range(3)]
    for thread in writers:
        thread.start()
    time.sleep(0.2)
    outputs.remove()
    stop.set()
    for thread in writers:
        thread.join()
    assert not outputs.root.exists()
    assert refused and all("stopping" in r for r in refused)


def test_the_first_views_pinned_files_count_against_the_output_cap(outputs):
    """The first view's files stay for the app's life (pinned), inside the cap: the other files share what is left,
    so the folder never holds more than the cap (the soak's check), however long the app runs."""
    pinned = outputs.pin([outputs.text("p" * 2**20, "first-view", ".html") for _ in range(2)])  # 2 MiB kept
    assert len(pinned) == 2
    for _ in range(8):
        outputs.text("x" * 2**19, "answer", ".html")  # 0.5 MiB each: 4 MiB more than the 3 MiB cap allows
    assert all(p.is_file() for p in pinned)
    assert outputs.bytes_used() + 2 * 2**20 <= outputs.max_bytes + 2**19  # the newest one may be just over


def test_60_attention_requests_keep_the_output_folder_under_its_cap(state, outputs, monkeypatch):
    """60 requests through the /attention callback; disk use stays under the stated 3 MiB cap (200 over real HTTP
    under ``-m slow``).

    The view itself is computed once for real (tiny BERT, 0.4 MiB of offline bertviz HTML) and handed back by each
    request, and figures are a small real plot, so 200 requests take seconds; what is measured is the callback's
    writing of the HTML and two PNGs per request into the app's one output folder.
    """
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    import app
    from ctxir.app import attention_tab

    real = attention(state, "the river bank and the otters play", "money at the bank", "model")
    assert real.data["html_bytes"] > 300_000

    def small_figure():
        fig = Figure(figsize=(1, 1), dpi=50)
        fig.add_subplot().plot([0, 1])
        return fig

    monkeypatch.setattr(attention_tab, "attention", lambda *a, **k: real)
    monkeypatch.setattr(
        attention_tab,
        "attention_pngs",
        lambda out, data: [
            out.png(small_figure(), "attention-heatmap"),
            out.png(small_figure(), "head-summary"),
        ],
    )
    demo = app.build_demo(state, outputs=outputs)
    callback = next(fn.fn for fn in demo.fns.values() if fn.api_name == "attention")
    peak, written = 0, 0
    for _ in range(60):
        _summary, _frame_html, html_file, heat, head_png, *_ = callback(
            "bi-encoder", "the river bank", "", "model", [], [], 0, 0, True
        )  # png_figures: the PNGs too
        written += sum(Path(p).stat().st_size for p in (html_file, heat, head_png))
        assert Path(html_file).parent == outputs.root and Path(html_file).read_text().startswith(
            "<!DOCTYPE html>"
        )
        peak = max(peak, outputs.bytes_used())
    assert written > 18 * 2**20  # 60 views wrote ~24 MiB in all, 8 times the cap ...
    assert peak <= 3 * 2**20  # ... and the folder never held more than its cap
    assert len(list(outputs.root.iterdir())) < 30


def test_old_output_files_are_removed_after_max_age(outputs):
    old = outputs.root / "old.html"
    old.write_text("x" * 1000)
    os.utime(old, (time.time() - 601, time.time() - 601))
    outputs.html("<!DOCTYPE html>", "attention-head-view")
    assert not old.exists() and sorted(p.name for p in outputs.root.iterdir() if p.name != outputs.OWNER) == [
        p.name for _, _, p in outputs._files()
    ]
    assert len(outputs._files()) == 1  # the page just written; its owner.pid stays beside it


def test_interactive_pages_share_one_plotly_js_that_pruning_keeps(outputs):
    # issue #21: each view's HTML used to inline plotly.js (4.6 MB a page); now one copy serves every page
    import plotly.graph_objects as go

    from ctxir.app.ui import exports

    first = exports(outputs, "explanation", plots=[go.Figure(go.Bar(y=[1, 2]))])
    shared = Path(first[1])
    assert shared.suffix == ".js" and shared.stat().st_size > 3_000_000
    os.utime(shared, (time.time() - 3600, time.time() - 3600))  # older than max_age_s ...
    for _ in range(30):
        files = exports(outputs, "explanation", data={"x": 1}, plots=[go.Figure(go.Bar(y=[3]))])
        assert files[1] == str(shared) and Path(files[0]).stat().st_size < 100_000
        assert f'src="{shared.name}"' in Path(files[0]).read_text()
    assert shared.is_file() and list(outputs.root.glob("*.js")) == [shared]  # ... and it stays, the only copy
    assert outputs.bytes_used() <= 3 * 2**20  # the cap bounds the pages; the shared file is on top of it


# ---------------------------------------------------------------- the same, through the running app


@pytest.fixture(scope="module")
def served(tiny_models, tmp_path_factory, serve):
    """(url, state, app, gradio cache) of the small app on 127.0.0.1 with its own gradio cache folder (app: what
    ``build_app`` made)."""
    import app

    gradio_cache = tmp_path_factory.mktemp("gradio-cache")
    previous = os.environ.get("GRADIO_TEMP_DIR")
    os.environ["GRADIO_TEMP_DIR"] = str(gradio_cache)
    try:
        state = make_state(tiny_models)
        built = app.build_app(state)
    finally:
        if previous is None:
            os.environ.pop("GRADIO_TEMP_DIR")
        else:
            os.environ["GRADIO_TEMP_DIR"] = previous
    with serve(built) as url:
        yield url, state, built, gradio_cache


def refusal(url: str, endpoint: str, args: tuple) -> str:
    """The error message a gradio_client caller gets for ``args`` (the call must fail)."""
    from gradio_client.exceptions import AppError

    client = client_for(url)
    try:
        with pytest.raises(AppError) as err:
            client.predict(*args, api_name=endpoint)
    finally:
        client.close()
    return str(err.value)


def page_refusal(url: str, endpoint: str, args: tuple) -> str:
    """The error message a web page gets for ``args``: the same call with a browser's Fetch Metadata header."""
    import httpx

    url = url.rstrip("/")
    headers = {"Sec-Fetch-Mode": "cors", "Sec-Fetch-Site": "same-origin"}
    event = httpx.post(
        f"{url}/gradio_api/call{endpoint}", json={"data": list(args)}, headers=headers, timeout=60
    ).json()["event_id"]
    stream = httpx.get(f"{url}/gradio_api/call{endpoint}/{event}", headers=headers, timeout=120).text
    assert "event: error\ndata:" in stream, stream
    return json.loads(stream.split("event: error\ndata:", 1)[1].splitlines()[0])["error"]


def client_for(url: str):
    from tests.conftest import api_client

    return api_client(url, download_files=False)


def test_two_visitors_over_http_see_only_their_own_uploads(served, tmp_path, monkeypatch):
    from gradio_client import handle_file
    from gradio_client.exceptions import AppError

    monkeypatch.setenv(
        "GRADIO_HEARTBEAT_INTERVAL", "1"
    )  # the server notices a closed session within a second
    url, state, _demo, _cache = served
    alice, bob = client_for(url), client_for(url)
    try:
        _text, _table, data = alice.predict(
            handle_file(corpus_file(tmp_path, "secret_notes.txt")), api_name="/upload_corpus"
        )
        name = data["corpus"]
        _, _, hits = alice.predict("vault code", name, "bm25", "none", 1, 20, api_name="/search")
        assert hits["hits"][0]["text"].startswith("the vault code")
        with pytest.raises(AppError) as err:
            bob.predict("vault code", name, "bm25", "none", 1, 20, api_name="/search")
        assert f"corpus '{name}' is not loaded: choose one of 'public' or upload" in str(err.value)
        with pytest.raises(AppError) as err:
            bob.predict("vault code", "nope", "bm25", "none", 1, 20, api_name="/search")
        assert "secret_notes" not in str(err.value)
        assert state.corpus_names_for(bob.session_hash) == ["public"]
        assert state.corpus_names_for(alice.session_hash) == ["public", name]
    finally:
        bob.close()
    # alice leaves (her client stops its heartbeat, like a closed tab): the app releases her upload
    alice.close()
    deadline = time.time() + 30
    while state.corpus_names_for(alice.session_hash) != ["public"] and time.time() < deadline:
        time.sleep(0.2)
    assert state.corpus_names_for(alice.session_hash) == ["public"]


@pytest.mark.parametrize(
    ("endpoint", "args", "typed"),
    [
        ("/search", ("river", LINK, "bm25", "none", 3, 20), LINK),
        ("/search", ("river", IMAGE, "bm25", "none", 3, 20), IMAGE),
        ("/model_info", (LINK, ""), LINK),
        ("/attention", (IMAGE, "the river bank", "", "head", [], [], 0, 0), IMAGE),
        ("/layer_similarity", ("bi-encoder", "the river bank\nthe money bank", IMAGE), IMAGE),
        (
            "/search",
            ("river", "public", "bm25", "cross-encoder", 3, 20),
            "`--cross-encoder <its output folder>`",
        ),
    ],
)
def test_error_messages_over_http_are_text(served, endpoint, args, typed):
    # an API client renders nothing: it reads the message as written (issue #21), not '&lt;a href=…'
    message = refusal(served[0], endpoint, args)
    assert typed in message and "&lt;" not in message and "&amp;" not in message, message
    # a web page renders its pop-up as HTML: the same refusal reaches it escaped, shown as typed
    shown = page_refusal(served[0], endpoint, args)
    assert shows_literally(shown, typed) and shown != message, shown


def test_warnings_reach_api_clients_as_plain_text_and_web_pages_escaped(served, monkeypatch):
    """gr.Warning's message is rendered as HTML by the page (gradio's docs: "Can be HTML, which will be rendered
    in the modal"), so the app escapes it there; an API client renders nothing and reads it as written. What the
    queue sends each caller is read where Gradio hands it over (``Queue.log_message``, per event)."""
    import httpx

    from ctxir.app import similarity

    url, _state, built, _cache = served
    demo = built.demo
    typed = "CLS pooling at layer 0 makes <every> cosine 1 & says <img src=x> as typed"
    monkeypatch.setattr(similarity, "cls_warnings", lambda *_: [typed])
    sent = []
    log_message = demo._queue.log_message
    monkeypatch.setattr(demo._queue, "log_message", lambda **kw: sent.append(kw["log"]) or log_message(**kw))
    args = ["a\nb", 0, "cls"]

    def warned(headers: dict) -> list[str]:
        sent.clear()
        event = httpx.post(
            f"{url.rstrip('/')}/gradio_api/call/sentence_similarity",
            json={"data": args},
            headers=headers,
            timeout=60,
        ).json()["event_id"]
        stream = httpx.get(
            f"{url.rstrip('/')}/gradio_api/call/sentence_similarity/{event}", headers=headers, timeout=120
        ).text
        assert "event: complete" in stream, stream
        return list(sent)

    client = client_for(url)  # gradio_client itself: x-gradio-user: api
    try:
        client.predict(*args, api_name="/sentence_similarity")
    finally:
        client.close()
    assert sent == [typed]
    assert warned({"x-gradio-user": "mcp"}) == [typed] and warned({}) == [typed]  # MCP; curl, requests, httpx
    for page in ({"Sec-Fetch-Mode": "cors", "Sec-Fetch-Site": "same-origin"}, {"x-gradio-user": "app"}):
        shown = warned(page)
        assert len(shown) == 1 and shows_literally(shown[0], typed) and shown[0] != typed, shown


# the app's one limit for each (served's AppConfig keeps the defaults): the page's number boxes and the view's check
MAX_K, MAX_DEPTH = AppConfig.max_k, AppConfig.max_rerank_depth


@pytest.mark.parametrize(
    ("endpoint", "args", "message"),
    [
        (
            "/search",
            ("river", "public", "bm25", "none", 2.5, 20),
            f"k must be a whole number from 1 to {MAX_K}, got 2.5",
        ),
        (
            "/search",
            ("river", "public", "bm25", "none", MAX_K + 1, 20),
            f"k must be a whole number from 1 to {MAX_K}, got {MAX_K + 1}",
        ),
        (
            "/search",
            ("river", "public", "bm25", "none", 5, MAX_DEPTH + 1),
            f"re-rank depth must be a whole number from 1 to {MAX_DEPTH}, got {MAX_DEPTH + 1}",
        ),
        (
            "/search",
            ("river", "public", IMAGE, "none", 5, 20),
            "First stage must be one of ['bm25', 'dense', 'hybrid']",
        ),
        (
            "/attention",
            ("bi-encoder", "the river bank", "", "head", [], [], 0, 1.5),
            "heatmap head must be a whole number from 0 to 3, got 1.5",
        ),
        (
            "/attention",
            ("bi-encoder", "the river bank", "", "head", [7], [], 0, 0),
            "Layers (none = all) must be one of",
        ),
        ("/sentence_similarity", ("a\nb", 9, "mean"), r"layer must be a number from 0 to 2, got 9"),
    ],
)
def test_numbers_and_choices_over_http_name_the_parameter(served, endpoint, args, message):
    raw = refusal(served[0], endpoint, args)
    assert message in raw or re.search(message, raw), raw  # plain text for an API client (issue #21)
    shown = page_refusal(served[0], endpoint, args)  # escaped for a web page
    assert not Tags(shown).tags and html.unescape(shown) == raw


def test_returned_files_are_served_from_the_output_folder_without_a_copy(served):
    url, _state, built, gradio_cache = served
    client = client_for(url)
    try:
        for _ in range(3):
            _summary, _frame_html, html_file, heat, head_png, *_ = client.predict(
                "bi-encoder",
                "the river bank",
                "money at the bank",
                "model",
                [],
                [],
                0,
                0,
                True,  # png_figures: the PNGs too
                api_name="/attention",
            )
            for returned in (html_file, heat, head_png):
                assert Path(returned["path"]).parent == built.outputs.root
        _, data = client.predict("a\nb", 0, "cls", api_name="/sentence_similarity")
        assert data["warnings"] and "CLS pooling at layer 0" in data["warnings"][0]
    finally:
        client.close()
    copies = [p for p in gradio_cache.rglob("*") if p.is_file() and p.suffix in (".html", ".png")]
    assert copies == []  # nothing of ours was copied into gradio's cache
    assert json.loads(json.dumps(data)) == data


@pytest.mark.slow
def test_200_real_attention_requests_over_http_stay_under_the_cap(tiny_models, tmp_path, monkeypatch, serve):
    """The full path, nothing stubbed: 200 /attention calls over HTTP (tiny BERT: minutes on a shared CPU). The
    output folder stays under its 3 MiB cap and gradio's own cache gets no copy of any returned file."""
    import app

    monkeypatch.setenv("GRADIO_TEMP_DIR", str(tmp_path / "gradio-cache"))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    outputs = Outputs(max_age_s=600, max_bytes=3 * 2**20)
    demo = app.build_demo(make_state(tiny_models), outputs=outputs)
    peak, written = 0, 0
    with serve(demo) as url:
        client = client_for(url)
        try:
            for i in range(200):
                result = client.predict(
                    "bi-encoder",
                    f"the river bank {i}",
                    "money at the bank",
                    ["head", "model"][i % 2],
                    [],
                    [],
                    0,
                    0,
                    True,  # png_figures: the PNGs too
                    api_name="/attention",
                )
                assert all(Path(f["path"]).parent == outputs.root for f in result[2:5])  # served in place
                written += result[-1]["html_bytes"]
                peak = max(peak, outputs.bytes_used())
        finally:
            client.close()
    gradio_files = [p for p in (tmp_path / "gradio-cache").rglob("*") if p.is_file()]
    assert written > 50 * 2**20 and peak <= 3 * 2**20
    assert not [p for p in gradio_files if p.suffix in (".html", ".png")]


# ---------------------------------------------------------------- the output folder goes when a signal stops the app


@pytest.mark.parametrize("kind", ["png", "html", "shared script"])
def test_a_write_under_way_when_the_app_stops_is_waited_for_and_its_folder_still_goes(
    tmp_path, monkeypatch, kind
):
    """The first view writes in the background while SIGTERM's exit removes the folder: a write that had started
    (its name given) but not yet made its folder (ctxir.files creates the parent) recreated the folder after the
    removal, which the exit then left behind (CI, test_app_restart). The removal now waits for the writes under way;
    one that starts after it is refused as the app stopping."""
    import threading

    import ctxir.app.outputs as outputs_module
    import ctxir.viz

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    out = outputs_module.Outputs()
    go, waiting = threading.Event(), threading.Event()

    def held(write):  # the write, held after its name was given and before its folder is made
        def wrapper(*args, **kwargs):
            waiting.set()
            go.wait(10)
            return write(*args, **kwargs)

        return wrapper

    monkeypatch.setattr(outputs_module, "atomic_path", held(outputs_module.atomic_path))
    monkeypatch.setattr(outputs_module, "write_atomic", held(outputs_module.write_atomic))
    monkeypatch.setattr(ctxir.viz, "save_png", lambda fig, path: Path(path).write_bytes(b"png"))
    write = {
        "png": lambda: out.png(None, "figure"),
        "html": lambda: out.html("<p>x</p>", "page"),
        "shared script": lambda: out.shared("d3-v5-test.min.js", lambda: "d3"),
    }[kind]
    writer = threading.Thread(target=write)
    writer.start()
    assert waiting.wait(10)
    stopper = threading.Thread(target=out.remove)
    stopper.start()
    time.sleep(0.3)  # the removal has begun and found the write under way
    go.set()
    writer.join(10)
    stopper.join(20)
    assert not out.root.exists(), sorted(p.name for p in out.root.iterdir())
    with pytest.raises(CtxirError, match="the app is stopping"):
        write()


# `python app.py` stopped by SIGTERM (a container stop, a process manager), SIGHUP or Ctrl-C; one app started per
# signal (~35 s each), so all three run under -m slow; the default run checks SIGTERM on the app it already starts
# in tests/test_app_restart.py
@pytest.mark.parametrize(
    "signum",
    [
        pytest.param(signal.SIGTERM, marks=pytest.mark.slow),
        pytest.param(signal.SIGHUP, marks=pytest.mark.slow),
        pytest.param(signal.SIGINT, marks=pytest.mark.slow),
    ],
)
def test_a_signal_removes_the_output_folder(tmp_path, tiny_bert_dir, signum, app_process):
    env = {
        **os.environ,
        "TMPDIR": str(tmp_path),
        "HF_HUB_OFFLINE": "1",
        "CTXIR_CROSS_ENCODER": "none",
        "CTXIR_CLS_LR": "none",
        "CTXIR_TORCH_THREADS": "1",
        "GRADIO_ANALYTICS_ENABLED": "False",
        "CTXIR_CACHE": str(tmp_path / "cache"),
        "CTXIR_BI_ENCODER": str(tiny_bert_dir),
    }
    proc = app_process(env)
    folders = list(tmp_path.glob("ctxir-app-*"))
    assert len(folders) == 1 and folders[0].is_dir()
    proc.send_signal(signum)
    proc.wait(timeout=30)
    assert not folders[0].exists()


def test_every_table_of_the_page_shows_its_cells_as_text(tiny_models):
    """Gradio draws a Dataframe cell as text only with datatype "str" (or "number"); "markdown" or "html" would turn
    a document's ``<img onerror=…>`` into a running script and ``**bold**`` into markup (the Chromium test
    tests/test_security_browser.py::test_hostile_documents_and_queries_show_as_text_in_search_explain_and_pairs
    fails both ways). Every table the app builds keeps a text datatype."""
    import gradio as gr

    import app

    demo = app.build_demo(make_state(tiny_models))
    tables = [b for b in demo.blocks.values() if isinstance(b, gr.Dataframe)]
    assert len(tables) >= 5  # search results, upload sample, pair scores, tokens, attention summary, ...
    for table in tables:
        kinds = table.datatype if isinstance(table.datatype, list) else [table.datatype]
        assert set(kinds) <= {"str", "number"}, (table.elem_id, table.label, table.datatype)
