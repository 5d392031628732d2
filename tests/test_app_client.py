"""The running app through its public API: gradio_client against build_demo(...) on 127.0.0.1, a free port.

Every endpoint is called and its real result checked; bad input must come back as an error message while
the app keeps serving.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import httpx
import numpy as np
import pytest

from ctxir.data.demo import demo_presets
from ctxir.viz import script_files

pytestmark = pytest.mark.filterwarnings("ignore::pandas.errors.Pandas4Warning")


@pytest.fixture(scope="module")
def served(app_state, serve):
    """(client, url) for the app launched in this process; closed after the module."""
    import app
    from tests.conftest import api_client

    demo = app.build_demo(app_state)
    with serve(demo) as url:
        yield api_client(url), url


def test_api_lists_every_endpoint(served):
    client, _ = served
    endpoints = set(client.view_api(print_info=False, return_format="dict")["named_endpoints"])
    assert endpoints == {
        "/search",
        "/compare_pooling",
        "/upload_corpus",
        "/score_pairs",
        "/model_info",
        "/token_embeddings",
        "/layer_similarity",
        "/sentence_similarity",
        "/attention",
        "/explain",
        "/explain_result",
        "/what_moved",
        "/failure_report",
        "/failure_report_sample",
        "/classify",
    }


def test_search_endpoint(served):
    client, _ = served
    table, summary, data = client.predict(
        "otters playing on the river bank",
        "demo-subset",
        "hybrid",
        "cross-encoder",
        5,
        10,
        api_name="/search",
    )
    assert table["headers"][:2] == ["rank", "doc_id"] and len(table["data"]) == 5
    assert {"hybrid", "cross-encoder", "total"} <= set(data["timings_ms"])
    _, _, first = client.predict(
        "otters playing on the river bank", "demo-subset", "hybrid", "none", 10, 10, api_name="/search"
    )
    assert "animals-01" in [h["doc_id"] for h in first["hits"]]
    # the (untrained) cross-encoder only reorders the hybrid top 10; a client that sends no re-rank mode (written
    # before it existed) gets the default, fused with the first stage
    assert {h["doc_id"] for h in data["hits"]} <= {h["doc_id"] for h in first["hits"]}
    assert data["mode"] == "fused" and data["fusion"]["method"] == "rrf"
    fused = [h["fused_score"] for h in data["hits"]]
    assert fused == sorted(fused, reverse=True)
    assert all(h["rank_change"] == h["hybrid_rank"] - h["rank"] for h in data["hits"])
    assert "5 results" in summary
    _, _, alone = client.predict(
        "otters playing on the river bank",
        "demo-subset",
        "hybrid",
        "cross-encoder",
        5,
        10,
        "alone",
        api_name="/search",
    )
    scores = [h["rerank_score"] for h in alone["hits"]]
    assert alone["mode"] == "alone" and scores == sorted(scores, reverse=True)
    assert all(h["rank_change"] == h["hybrid_rank"] - h["rerank_rank"] for h in alone["hits"])


def test_compare_pooling_endpoint(served):
    client, _ = served
    table, _text, data = client.predict(
        "bats hunting insects at night", "demo-subset", 6, 5, api_name="/compare_pooling"
    )
    assert data["layer"] == 6 and len(data["rankings"]["mean"]) == 5 and len(data["rankings"]["cls"]) == 5
    assert table["headers"][:2] == ["rank", "mean_doc_id"]


def test_upload_corpus_endpoint_then_search_it(served, tmp_path):
    from gradio_client import handle_file

    client, _ = served
    path = tmp_path / "notes.csv"
    path.write_text(
        'id,title,text\nn1,Kettles,"An electric kettle boils water in about two minutes."\n'
        'n2,Comets,"A comet grows a tail of gas and dust as it nears the Sun."\n',
        encoding="utf-8",
    )
    _summary, _table, data = client.predict(handle_file(str(path)), api_name="/upload_corpus")
    corpus = data["corpus"]
    assert data["documents"] == 2 and corpus.startswith("notes-")
    _, _, hits = client.predict("icy visitor with a tail", corpus, "dense", "none", 1, 20, api_name="/search")
    assert hits["hits"][0]["doc_id"] == "n2"


def test_score_pairs_endpoint(served):
    client, _ = served
    presets = demo_presets()
    _table, png, formation, tokens, data = client.predict(
        presets["pair_query"], "\n".join(presets["pair_documents"]), api_name="/score_pairs"
    )
    assert png is None  # the chart's PNG only when asked for (png_figures, the last input)
    _table, png, *_ = client.predict(
        presets["pair_query"], "\n".join(presets["pair_documents"]), "", True, api_name="/score_pairs"
    )
    assert Path(png).read_bytes()[:4] == b"\x89PNG"
    cos = [r["bi_encoder_cosine"] for r in data["scores"]]
    assert min(cos[:2]) > max(cos[3:])  # the two relevant documents beat the two unrelated ones
    assert all(0 <= r["cls_lr_probability"] <= 1 for r in data["scores"])
    assert tokens["data"][0][:2] == [0, "[CLS]"] and "[SEP]" in formation


def test_model_info_reports_the_architecture(served):
    client, _ = served
    _text, tokens, info = client.predict("bi-encoder", "The bank approved the loan.", api_name="/model_info")
    assert (info["layers"], info["hidden_size"], info["ffn_size"], info["attention_heads"]) == (
        6,
        384,
        1536,
        12,
    )
    assert info["vocab_size"] == 30522 and 22_000_000 < info["parameters"] < 23_000_000
    assert info["special_tokens"]["cls_token"] == {"token": "[CLS]", "id": 101}
    rows = [dict(zip(tokens["headers"], row, strict=True)) for row in tokens["data"]]
    assert [r["token"] for r in rows] == ["[CLS]", "the", "bank", "approved", "the", "loan", ".", "[SEP]"]
    assert rows[0]["special"] and not rows[2]["special"]
    assert client.predict("cross-encoder", "", api_name="/model_info")[2]["layers"] == 6


def test_token_embeddings_endpoint(served):
    client, _ = served
    sentences = "I sat on the bank of the river.\nShe deposited her salary at the bank."
    proj, drift, _text, data = client.predict(
        "bi-encoder", sentences, "bank", 0, 6, ["pca"], api_name="/token_embeddings"
    )
    assert Path(proj).read_bytes()[:4] == b"\x89PNG" and Path(drift).read_bytes()[:4] == b"\x89PNG"
    assert set(data["points"]["pca"]) == {"0", "6"}
    assert len(data["points"]["pca"]["6"]) == len(data["tokens"])


def test_bank_senses_drift_apart_in_the_middle_layers(served):
    client, _ = served
    river, money = demo_presets()["bank_contexts"][:2]  # river bank vs salary at the bank
    word_png, sent_png, _text, data = client.predict(
        "bi-encoder", f"{river}\n{money}", "bank", api_name="/layer_similarity"
    )
    curve = data["word_cosine"]["1 vs 2"]
    assert len(curve) == 7 and set(data["sentence_cosine"]) == {"1 vs 2"}
    # Layer 0 holds the same token embedding (+ position): near-identical. Context pulls the senses apart.
    assert curve[0] > 0.9 and min(curve[2:5]) < curve[0] - 0.05
    assert Path(word_png).is_file() and Path(sent_png).is_file()


def test_sentence_similarity_prefers_paraphrases(served):
    client, _ = served
    sentences = "\n".join(demo_presets()["similarity_sentences"])
    png, data = client.predict(sentences, 6, "mean", api_name="/sentence_similarity")
    sim = np.asarray(data["similarity"])
    np.testing.assert_allclose(np.diag(sim), 1.0, atol=1e-3)
    np.testing.assert_allclose(sim, sim.T, atol=1e-3)
    cat, kitten, central_bank = 5, 6, 0
    assert sim[cat, kitten] > sim[cat, central_bank] + 0.2
    assert Path(png).read_bytes()[:4] == b"\x89PNG"


def test_attention_endpoint(served):
    client, url = served
    _summary, html, html_file, heat, head_png, table, data = client.predict(
        "bi-encoder",
        "how do bats find insects",
        "Bats use echoes to find moths.",
        "model",
        [0, 5],
        [],
        1,
        2,
        True,  # png_figures: the two PNGs too
        api_name="/attention",
    )
    assert html.startswith("<iframe") and "srcdoc=" in html and "cdnjs" not in html
    document = Path(html_file).read_text(encoding="utf-8")
    assert document.startswith("<!DOCTYPE html>") and "window.requirejs" in document
    # the page's view links jQuery and d3 from the app (the answer weighs ~80 KB, not ~510 KB), and the app serves
    # them at those links, relative to its page; the download stays standalone, the two inlined
    sources = script_files()
    links = re.findall(r"&lt;script src=&quot;([^&]+)&quot;", html)
    assert len(html) < 150_000 and [link.rsplit("/", 1)[-1] for link in links] == list(sources), links
    for link, source in zip(links, sources.values(), strict=True):
        assert httpx.get(url.rstrip("/") + "/" + link, timeout=30).text == source
        assert source[:2000] in document
    assert data["layers"] == [0, 5] and data["sentence_b_start"] is not None
    assert data["heatmap"]["layer"] == 1 and data["heatmap"]["head"] == 2
    assert len(table["data"]) == 72 and Path(heat).read_bytes()[:4] == b"\x89PNG"
    assert Path(head_png).read_bytes()[:4] == b"\x89PNG"
    # without png_figures (a call written before it): no PNG, the rest as before
    *_, heat, head_png, table, data = client.predict(
        "bi-encoder", "how do bats find insects", "", "head", [0], [], 1, 2, api_name="/attention"
    )
    assert (heat, head_png) == (None, None) and data["heatmap"]["head"] == 2 and len(table["data"]) == 72


@pytest.mark.parametrize(
    ("endpoint", "args", "message"),
    [
        ("/search", ("", "demo-subset", "dense", "none", 5, 20), "query is empty"),
        ("/search", ("\x00\x00\x00", "demo-subset", "dense", "none", 5, 20), "query is empty"),
        ("/search", ("x" * 100_000, "demo-subset", "dense", "none", 5, 20), "query has 100,000 characters"),
        ("/search", ("otters", "nope", "dense", "none", 5, 20), "corpus 'nope' is not loaded"),
        ("/attention", ("bi-encoder", " ".join(["bank"] * 300), "", "head", [], [], 0, 0), "at most 256"),
        ("/attention", ("gpt-99", "hello", "", "head", [], [], 0, 0), "model 'gpt-99' is not loaded"),
        ("/model_info", ("gpt-99", ""), "model 'gpt-99' is not loaded"),
        (
            "/layer_similarity",
            ("bi-encoder", "a river\nthe bank", "bank"),
            "word 'bank' is not in sentence 1",
        ),
        (
            "/layer_similarity",
            ("bi-encoder", "I sat on the bank.\nThe cat slept.", "bank"),
            r"word 'bank' is not in sentence 2 \('The cat slept.'\)",
        ),
        ("/layer_similarity", ("bi-encoder", "I sat on the bank.", "bank"), "at least 2 non-empty line"),
        (
            "/sentence_similarity",
            ("one\ntwo", 6, "sum"),
            r"pooling must be one of \['mean', 'cls', 'max'\], got 'sum'",
        ),
    ],
)
def test_bad_input_is_an_error_message_and_the_app_keeps_serving(served, endpoint, args, message):
    from gradio_client.exceptions import AppError

    client, _ = served
    with pytest.raises(AppError, match=message):
        client.predict(*args, api_name=endpoint)
    _, _, data = client.predict("river otters", "demo-subset", "bm25", "none", 1, 20, api_name="/search")
    assert len(data["hits"]) == 1


HOSTILE = "<img src=x onerror=alert(1)> & co"


def test_error_messages_reach_api_clients_as_plain_text(served):
    # the page escapes them (its pop-up renders HTML: test_security_browser); a client renders nothing, so it reads
    # the message as written, not '&lt;img'
    from gradio_client.exceptions import AppError

    client, _ = served
    with pytest.raises(AppError) as err:
        client.predict(
            "otters", HOSTILE, "dense", "none", 5, 20, api_name="/search"
        )  # raised by the callback
    assert f"corpus {HOSTILE!r} is not loaded" in str(err.value) and "&lt;" not in str(err.value)
    with pytest.raises(AppError) as err:
        client.predict(
            "otters", "demo-subset", HOSTILE, "none", 5, 20, api_name="/search"
        )  # by Gradio's check
    assert f"First stage must be one of ['bm25', 'dense', 'hybrid'], got {HOSTILE!r}" in str(err.value)


def test_error_messages_over_plain_http_are_plain_text(served):
    # curl's view: POST /gradio_api/call/search, then read the event stream
    import httpx

    url = served[1].rstrip("/")
    event = httpx.post(
        f"{url}/gradio_api/call/search",
        json={"data": ["otters", HOSTILE, "dense", "none", 5, 20]},
        timeout=60,
    ).json()["event_id"]
    stream = httpx.get(f"{url}/gradio_api/call/search/{event}", timeout=60).text
    assert (
        "event: error" in stream
        and f"corpus {HOSTILE!r} is not loaded"
        in json.loads(stream.split("event: error\ndata:", 1)[1].splitlines()[0])["error"]
    )
    # the same request from a web page (Fetch Metadata headers) is escaped for its HTML pop-up
    event = httpx.post(
        f"{url}/gradio_api/call/search",
        json={"data": ["otters", HOSTILE, "dense", "none", 5, 20]},
        headers={"Sec-Fetch-Mode": "cors"},
        timeout=60,
    ).json()["event_id"]
    stream = httpx.get(f"{url}/gradio_api/call/search/{event}", timeout=60).text
    assert "corpus '&lt;img src=x onerror=alert(1)&gt; &amp; co' is not loaded" in stream


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        (
            "latin1.txt",
            "caf\xe9 au lait\n".encode("latin-1"),
            r"latin1\.txt is not UTF-8: byte\(s\) e9 at line 1",
        ),
        (
            "bad.jsonl",
            b'{"id": "1", "text": "ok"}\n{"id": 2, "text": \n',
            r"bad\.jsonl line 2: expected a JSON object",
        ),
        (
            "dupes.jsonl",
            b'{"id": "1", "text": "a"}\n{"id": "1", "text": "b"}\n',
            r"document id '1' appears twice, on line 1 and line 2",
        ),
        ("notext.csv", b"id,body\n1,hello\n", r"expected a header row with a 'text' column"),
        # Gradio's file box refuses it before the app (which would say: unsupported file type '.pdf')
        ("corpus.pdf", b"%PDF-1.4", r"Invalid file type.*'\.txt', '\.jsonl', '\.csv', '\.tsv'"),
        ("empty.txt", b"\n\n", r"contains no documents"),
    ],
)
def test_bad_uploads_are_error_messages(served, app_state, tmp_path, name, content, message):
    from gradio_client import handle_file
    from gradio_client.exceptions import AppError

    client, _ = served
    path = tmp_path / name
    path.write_bytes(content)
    before = app_state.corpus_names
    with pytest.raises(AppError, match=message):
        client.predict(handle_file(str(path)), api_name="/upload_corpus")
    assert app_state.corpus_names == before


def test_json_outputs_are_plain_json(served):
    client, _ = served
    *_, data = client.predict("bats", "demo-subset", "dense", "none", 3, 20, api_name="/search")
    assert json.loads(json.dumps(data)) == data


def test_failure_report_endpoint(served, tmp_path):
    """A saved report uploaded → its summary, the page in a sandboxed frame, the standalone HTML file, the JSON."""
    from gradio_client import handle_file

    from ctxir.evaluation.report import failure_cases, report_meta, write_report

    client, _ = served
    corpus = {
        "d1": {"title": "Otters", "text": "Otters dig dens in the river bank."},
        "d2": {"title": "Loans", "text": "The bank approved the loan."},
    }
    qrels, run = {"q1": {"d1": 1}}, {"q1": {"d2": 2.0, "d1": 1.0}}
    cases = failure_cases(qrels, run, corpus, {"q1": "where do otters live"})
    _, report_json = write_report(tmp_path / "r.html", cases, report_meta(qrels, run, "nDCG@10", "dense"))
    summary, frame, page, data = client.predict(handle_file(str(report_json)), 10, api_name="/failure_report")
    assert "**1 worst query**" in summary and data["cases"][0]["qid"] == "q1"
    assert 'sandbox=""' in frame and "where do otters live" in Path(page).read_text(encoding="utf-8")
    bad = tmp_path / "notes.json"
    bad.write_text('{"hello": 1}')
    with pytest.raises(Exception, match=r"notes\.json is neither a ctxir failure report"):
        client.predict(handle_file(str(bad)), 10, api_name="/failure_report")
    # the sample needs no file: BM25 on the demo corpus, judged by the qrels that ship with ctxir
    summary, frame, page, data = client.predict(2, api_name="/failure_report_sample")
    assert summary.startswith("**2 worst queries** of `bm25`") and len(data["cases"]) == 2
    assert (
        data["kind"] == "sample"
        and 'sandbox=""' in frame
        and "Failure report — bm25" in Path(page).read_text()
    )


def test_every_endpoint_has_a_worked_example_in_the_api_guide_and_each_runs(served, tmp_path, monkeypatch):
    """Every Python block of docs/guides/api.md runs, in order, against this app (tests/doc_examples.py), and between them
    they call every endpoint the app has (ctxir/app/api.py's ENDPOINTS, and what view_api() lists)."""
    from ctxir.app.api import ENDPOINTS
    from tests.doc_examples import run_doc_examples

    client, url = served
    monkeypatch.chdir(tmp_path)  # the blocks write their example files (a corpus, a labelled CSV, a report)
    called = set(run_doc_examples(client, url, "demo-subset", monkeypatch))
    endpoints = {f"/{name}" for name in ENDPOINTS} | set(
        client.view_api(print_info=False, return_format="dict")["named_endpoints"]
    )
    assert not endpoints - called, (
        f"no worked example in docs/guides/api.md calls {sorted(endpoints - called)}"
    )
