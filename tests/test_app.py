"""The app's views (the ctxir.app tab modules: what every app callback does), tested directly, plus app.py's
wiring without a server.

The models are the packaged all-MiniLM-L6-v2, a CrossEncoder built on the same body (untrained head) and
a CLS-LR ranker fitted on a few pairs, so every re-ranker path runs offline. Scores of the untrained
cross-encoder are not meaningful; tests check what the app does with them (ordering, ranks, shapes).
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from ctxir.app.attention_tab import attention, parse_indices
from ctxir.app.config import AppConfig
from ctxir.app.corpus_index import CorpusIndex
from ctxir.app.embeddings_tab import model_info, token_embeddings
from ctxir.app.models import AppModels
from ctxir.app.pairs_tab import score_pairs
from ctxir.app.report_tab import failure_report
from ctxir.app.search import search
from ctxir.app.search_tab import compare_pooling, upload_corpus
from ctxir.app.state import AppState
from ctxir.app.text import md_code
from ctxir.checks import check_int
from ctxir.data.demo import demo_corpus, demo_presets
from ctxir.types import CtxirError


@pytest.fixture(scope="module")
def state(app_state):
    return app_state


@pytest.fixture(scope="module")
def presets():
    return demo_presets()


# ---------------------------------------------------------------- search


def test_dense_search_finds_the_river_bank_passages(state):
    result = search(state, "otters playing on the river bank", first_stage="dense", k=5)
    ids = [r["doc_id"] for r in result.rows]
    assert ids[0] == "animals-01"  # "River otters dig their dens into the soft bank of a stream"
    assert [r["rank"] for r in result.rows] == [1, 2, 3, 4, 5]
    scores = [r["dense_score"] for r in result.rows]
    assert scores == sorted(scores, reverse=True)
    assert result.rows[0]["rerank_rank"] is None and result.rows[0]["rank_change"] is None
    assert set(result.data["timings_ms"]) == {"dense", "total"}
    json.dumps(result.data)  # API users get plain JSON


@pytest.mark.parametrize("first_stage", ["bm25", "hybrid"])
def test_other_first_stages(state, first_stage):
    result = search(state, "how do banks approve a personal loan", first_stage=first_stage, k=3)
    assert result.rows and "finance-02" in [r["doc_id"] for r in result.rows]
    assert f"{first_stage}_score" in result.rows[0]


@pytest.mark.parametrize("reranker", ["cross-encoder", "cls-lr"])
def test_reranking_keeps_both_stages_scores_and_ranks(state, reranker, monkeypatch):
    # a re-ranker that scored below BM25 alone is offered fused only (test_a_reranker_below_bm25_is_offered_fused_only);
    # the alone mode's mechanics are the same for every kind
    monkeypatch.setattr(state.models.reranker(reranker), "fused_only", None)
    first = search(state, "river otters", first_stage="dense", k=8)
    result = search(state, "river otters", first_stage="dense", reranker=reranker, k=8, depth=8, mode="alone")
    first_rank = {r["doc_id"]: r["rank"] for r in first.rows}
    assert {r["doc_id"] for r in result.rows} == set(first_rank)  # re-ranking 8 of 8 reorders, adds nothing
    for row in result.rows:
        assert row["dense_rank"] == first_rank[row["doc_id"]]
        assert row["rank_change"] == row["dense_rank"] - row["rerank_rank"]
        assert row["rank"] == row["rerank_rank"] and row["fused_score"] is None
    scores = [r["rerank_score"] for r in result.rows]
    assert scores == sorted(scores, reverse=True)
    assert reranker in result.data["timings_ms"]
    assert (result.data["mode"], result.data["fusion"]) == ("alone", None)


@pytest.mark.parametrize("reranker", ["cross-encoder", "cls-lr"])
def test_fused_mode_is_the_default_and_orders_by_rrf_of_both_ranks(state, reranker):
    result = search(state, "river otters", first_stage="dense", reranker=reranker, k=8, depth=8)
    assert result.data["mode"] == "fused"
    assert result.data["fusion"] == {
        "method": "rrf",
        "weights": [1.0, 1.0],
        "k": 60.0,
        "chosen_on": "ctxir's default, not tuned",
    }
    for row in result.rows:  # RRF by hand: 1/(60 + first-stage rank) + 1/(60 + re-ranker rank)
        assert row["fused_score"] == pytest.approx(
            1 / (60 + row["dense_rank"]) + 1 / (60 + row["rerank_rank"]), abs=6e-5
        )  # shown to 4 decimals
        assert row["rank_change"] == row["dense_rank"] - row["rank"]
    expected = sorted(
        result.rows, key=lambda r: (-(1 / (60 + r["dense_rank"]) + 1 / (60 + r["rerank_rank"])), r["doc_id"])
    )
    assert [r["doc_id"] for r in result.rows] == [r["doc_id"] for r in expected]
    assert "fuses it with the dense ranking (RRF k=60" in result.text


def test_missing_reranker_explains_how_to_provide_one(state, state_with):
    without = state_with(
        state,
        models={
            "rerankers": {},
            "unavailable": {
                "cross-encoder": "model 'x' is not in the local cache",
                "cls-lr": "no CLS-LR ranker was given",
            },
        },
    )
    with pytest.raises(CtxirError, match=r"train_cross_encoder\.py.*--cross-encoder") as err:
        search(without, "river otters", reranker="cross-encoder")
    assert "'x' is not in the local cache" in str(err.value)
    with pytest.raises(CtxirError, match=r"--cls-lr"):
        search(without, "river otters", reranker="cls-lr")
    assert search(without, "river otters", reranker="none").rows  # the rest of the app still works
    scores = score_pairs(without, "river otters", ["Otters live by rivers.", "Bank loans."])
    assert scores.rows[0]["cross_encoder_score"] is None and "cross-encoder" in scores.data["unavailable"]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"query": ""}, "query is empty"),
        ({"query": "   "}, "query is empty"),
        (
            {"query": "\x00\x00\x1b\u200b"},
            "query is empty",
        ),  # nothing visible: not a search that finds 0 results
        ({"query": "x" * 100_000}, r"query has 100,000 characters but at most 2,000"),
        (
            {"first_stage": "splade"},
            r"first stage 'splade' is not known: use one of 'bm25', 'dense', 'hybrid'",
        ),
        ({"reranker": "colbert"}, r"re-ranker 'colbert' is not known"),
        ({"k": 0}, r"k must be a whole number from 1 to 50, got 0"),
        (
            {"k": 51},
            r"k must be a whole number from 1 to 50, got 51",
        ),  # AppConfig.max_k, the page's limit too
        ({"k": "ten"}, r"got 'ten'"),
        ({"corpus": "nope"}, r"corpus 'nope' is not loaded: choose one of 'demo-subset'"),
    ],
)
def test_search_bad_input(state, kwargs, message):
    args = {"query": "river otters", **kwargs}
    with pytest.raises(CtxirError, match=message):
        search(state, **args)


def test_compare_pooling_mean_at_last_layer_is_the_models_own_ranking(state):
    dense = search(state, "bats hunting insects at night", first_stage="dense", k=5)
    result = compare_pooling(state, "bats hunting insects at night", layer=-1, k=5)
    assert [r["mean_doc_id"] for r in result.rows] == [r["doc_id"] for r in dense.rows]
    assert result.data["layer"] == 6 and 0 <= result.data["overlap"] <= 5
    assert all(r["cls_doc_id"] for r in result.rows)
    with pytest.raises(CtxirError, match="layer must be a whole number from -1 to 6, got 9"):
        compare_pooling(state, "bats", layer=9)


# ---------------------------------------------------------------- upload


def test_upload_limits(state, state_with, tmp_path):
    path = tmp_path / "big.txt"
    path.write_text("\n".join(f"document number {i}" for i in range(6)), encoding="utf-8")
    small = state_with(state, config={"max_upload_docs": 5})
    with pytest.raises(CtxirError, match=r"big\.txt has 6 documents; this app indexes at most 5"):
        upload_corpus(small, str(path))
    with pytest.raises(CtxirError, match="no file was uploaded"):
        upload_corpus(state, None)
    # the page's file box refuses other types first (tests/test_app_client.py); the view says so too
    pdf = tmp_path / "corpus.pdf"
    pdf.write_bytes(b"%PDF-1.4")
    with pytest.raises(CtxirError, match=r"unsupported file type '\.pdf'"):
        upload_corpus(state, str(pdf))


# ---------------------------------------------------------------- pair scoring


def test_score_pairs_three_scores_and_input_formation(state, presets):
    result = score_pairs(state, presets["pair_query"], "\n".join(presets["pair_documents"]))
    rows = result.rows
    assert len(rows) == 5
    cosine_rank = {r["doc"]: r["cosine_rank"] for r in rows}
    assert max(cosine_rank[1], cosine_rank[2]) < min(
        cosine_rank[4], cosine_rank[5]
    )  # relevant above unrelated
    assert all(0.0 <= r["cls_lr_probability"] <= 1.0 for r in rows)
    assert all(isinstance(r["cross_encoder_score"], float) for r in rows)
    assert sorted(r["cross_encoder_rank"] for r in rows) == [1, 2, 3, 4, 5]
    form = result.data["input_formation"][0]
    assert form["tokens"][0] == "[CLS]" and form["tokens"].count("[SEP]") == 2
    sep = form["tokens"].index("[SEP]")
    assert form["token_type_ids"] == [0] * (sep + 1) + [1] * (len(form["tokens"]) - sep - 1)
    assert form["text"].startswith("[CLS] how do bats find insects at night [SEP] bats")
    assert result.extra_rows[0] == {"position": 0, "token": "[CLS]", "token_id": 101, "token_type": 0}
    assert result.data["documents"] == presets["pair_documents"]  # what the chart and its PNG draw


def test_score_pairs_bad_input(state):
    with pytest.raises(CtxirError, match="documents is empty"):
        score_pairs(state, "query", "")
    with pytest.raises(CtxirError, match="documents has 40 lines but at most 32"):
        score_pairs(state, "query", "\n".join(f"doc {i}" for i in range(40)))
    with pytest.raises(CtxirError, match="documents line 2 has 100,000 characters"):
        score_pairs(state, "query", ["fine", "y" * 100_000])


# ---------------------------------------------------------------- token embeddings


def test_unknown_model_is_refused_with_the_loaded_choices(state):
    with pytest.raises(
        CtxirError, match=r"model 'gpt-99' is not loaded in this app: choose one of 'bi-encoder'"
    ):
        model_info(state, "gpt-99")
    with pytest.raises(CtxirError, match="--bi-encoder"):
        attention(state, "text", model="gpt-99")


def test_token_embeddings_projects_two_layers(state, presets):
    result = token_embeddings(state, presets["bank_contexts"][:2], 0, -1, ["pca", "tsne"], "bank")
    data = result.data
    n_tokens = len(data["tokens"])
    assert data["layers"] == [0, 6]
    for method in ("pca", "tsne"):
        for layer in ("0", "6"):
            assert np.asarray(data["points"][method][layer]).shape == (n_tokens, 2)
            assert all(len(repr(v).split(".")[-1]) <= 3 for xy in data["points"][method][layer] for v in xy)
    assert "[CLS]" not in {t["token"] for t in data["tokens"]}
    drift = np.asarray(data["consecutive_layer_cosine"][0]["cosine"])
    assert drift.shape == (6, len(data["consecutive_layer_cosine"][0]["tokens"]))
    assert np.all(drift <= 1.0) and np.all(drift > -1.0)
    assert set(result.figures) == {"projection", "consecutive_layers"}
    with pytest.raises(CtxirError, match="word 'zebra' is in none of the sentences"):
        token_embeddings(state, presets["bank_contexts"][:2], 0, 6, ["pca"], "zebra")
    with pytest.raises(CtxirError, match="layer B must be a whole number from -1 to 6, got 7"):
        token_embeddings(state, presets["bank_contexts"][:2], 0, 7, ["pca"])


# ---------------------------------------------------------------- attention


def test_attention_view_pair_heatmap_and_summary(state):
    result = attention(
        state,
        "I sat on the bank of the river.",
        "She deposited money at the bank.",
        view="head",
        layers="0-1",
        heads=[0, 3],
        heatmap_layer=2,
        heatmap_head=5,
    )
    data = result.data
    assert data["tokens"][0] == "[CLS]" and data["sentence_b_start"] == data["tokens"].index("[SEP]") + 1
    assert data["layers"] == [0, 1] and data["heads"] == [0, 3]
    weights = np.asarray(data["heatmap"]["weights"])
    np.testing.assert_allclose(weights.sum(1), 1.0, atol=0.01)  # rows of rounded softmax weights
    assert all(
        len(repr(x).split(".")[-1]) <= 3 for row in data["heatmap"]["weights"] for x in row
    )  # short JSON
    assert len(data["head_summary"]) == 6 * 12
    assert "cdnjs" not in result.html and "window.requirejs" in result.html
    assert data["html_bytes"] == len(result.html.encode())
    model = attention(state, "The bank approved the loan.", view="model")
    assert model.data["sentence_b_start"] is None and "include_heads" in model.html


def test_attention_limits(state):
    long_text = " ".join(["bank"] * 300)
    with pytest.raises(CtxirError, match=r"302 tokens but this view accepts at most 256"):
        attention(state, long_text)
    medium = " ".join(["bank"] * 150)  # 152 tokens: all 6 layers × 12 heads is too much to send
    with pytest.raises(CtxirError, match=r"choose at most 4 layer\(s\)"):
        attention(state, medium)
    assert attention(state, medium, layers=[5], heads=[0, 1]).data["layers"] == [5]
    with pytest.raises(CtxirError, match=r"text has 100,000 characters but at most 5,000"):
        attention(state, "z" * 100_000)
    with pytest.raises(CtxirError, match="layer 9 does not exist"):
        attention(state, "short text", layers="9")
    with pytest.raises(CtxirError, match=r"layers 'a,b' is not a list of numbers"):
        attention(state, "short text", layers="a,b")
    with pytest.raises(CtxirError, match="heatmap head must be a whole number from 0 to 11, got 12"):
        attention(state, "short text", heatmap_head=12)


def test_parse_indices_and_check_int():
    assert parse_indices("0-2, 5", "layers") == [0, 1, 2, 5]
    assert parse_indices([3, 1, 3], "heads") == [1, 3]
    assert parse_indices("", "heads") == [] and parse_indices(None, "heads") == []
    assert check_int(3.0, "k", 1, 5) == 3 and check_int("4", "k", 1, 5) == 4
    for bad in (True, 2.5, "x", None):
        with pytest.raises(CtxirError, match="k must be a whole number"):
            check_int(bad, "k", 1, 5)


# ---------------------------------------------------------------- startup and app wiring


def test_app_starts_without_rerankers_that_cannot_be_loaded(minilm_path, tmp_path, caplog):
    config = AppConfig(
        bi_encoder=str(minilm_path),
        cross_encoder=str(tmp_path / "no-such-ce"),
        cls_lr=str(tmp_path),
        device="cpu",
    )
    models = AppModels.load(config)
    assert "cross-encoder" not in models.rerankers and "does not exist" in models.why_not("cross-encoder")
    assert "cls-lr" not in models.rerankers and "is not a CLS-LR ranker folder" in models.why_not("cls-lr")
    assert "cross-encoder re-ranker unavailable, the app starts without it" in caplog.text
    with pytest.raises(CtxirError, match="restart the app with `--cross-encoder"):
        models.reranker("cross-encoder")


def test_unknown_bi_encoder_is_a_clear_startup_error(capsys, tmp_path):
    import torch

    import app

    threads = torch.get_num_threads()  # main() sets the process's torch threads: restore them for other tests
    try:
        code = app.main(["--bi-encoder", str(tmp_path / "missing-model"), "--corpus", ""])
    finally:
        torch.set_num_threads(threads)
    assert code == 2
    assert "model folder" in capsys.readouterr().err


def test_flags_read_environment_variables(monkeypatch):
    from transformers import HfArgumentParser

    import app

    monkeypatch.setenv("CTXIR_CLS_LR", "/models/cls-lr")
    monkeypatch.setenv("CTXIR_PORT", "7999")
    (args,) = HfArgumentParser(app.AppArgs).parse_args_into_dataclasses(args=["--cross-encoder", "ce-folder"])
    assert (args.cls_lr, args.port, args.cross_encoder) == ("/models/cls-lr", 7999, "ce-folder")
    config = app.config_from_args(args)
    assert config.cls_lr == "/models/cls-lr" and config.cross_encoder == "ce-folder"


def test_build_demo_exposes_every_endpoint_and_turns_errors_into_gr_error(state):
    import gradio as gr

    import app
    from ctxir.app.ui import guard

    demo = app.build_demo(state)
    names = {fn.api_name for fn in demo.fns.values() if fn.api_name and fn.api_visibility == "public"}
    assert names == {
        "search",
        "compare_pooling",
        "upload_corpus",
        "score_pairs",
        "model_info",
        "token_embeddings",
        "layer_similarity",
        "sentence_similarity",
        "attention",
        "explain",
        "explain_result",
        "what_moved",
        "failure_report",
        "failure_report_sample",
        "classify",
    }

    @guard
    def failing():
        raise CtxirError("query is empty: type some text")

    with pytest.raises(gr.Error, match="query is empty"):
        failing()

    @guard
    def crashing():
        raise RuntimeError("boom")

    with pytest.raises(
        gr.Error, match=r"unexpected RuntimeError in crashing: boom\. The app is still running"
    ):
        crashing()


# ---------------------------------------------------------------- start-up in the background (page served first)


def test_startup_corpus_indexed_in_the_background_refuses_searches_until_ready(state, monkeypatch):
    """app.py serves the page while the startup corpus is indexed: a search meanwhile is told how far it is, the
    page line says the same, and once ready the same search works and the line is gone."""
    gate, entered = __import__("threading").Event(), __import__("threading").Event()

    def slow_encoding(self, encoder, step, chunk=None):
        step(0.4, "encoding documents: 100 of 250 done")
        entered.set()
        gate.wait(30)

    monkeypatch.setattr(CorpusIndex, "_encode_in_steps", slow_encoding)
    corpus = {
        "d1": {"title": "Otters", "text": "Otters dig dens in the river bank."},
        "d2": {"title": "Loans", "text": "The bank approved the loan."},
    }
    background = AppState(state.models, AppConfig(device="cpu"), corpus, "big", cache=None, background=True)
    assert entered.wait(30)
    assert not background.ready and background.corpus_names == ["big"]  # listed while indexing
    line = background.indexing.text()
    assert "'big'" in line and "2 documents" in line and "100 of 250" in line and "40%" in line
    with pytest.raises(
        CtxirError, match=r"corpus 'big' is still being indexed \(encoding documents: 100 of 250"
    ):
        search(background, "otters", "big")
    gate.set()
    assert background.wait_ready(60)
    assert background.indexing.text() == ""
    assert search(background, "otters", "big", k=1).rows[0]["doc_id"] == "d1"


def test_a_failed_background_index_is_reported_not_raised(state, monkeypatch):
    def broken(self, encoder, step, chunk=None):
        raise CtxirError("disk full while writing the embedding cache")

    monkeypatch.setattr(CorpusIndex, "_encode_in_steps", broken)
    corpus = {"d1": {"title": "", "text": "x"}}
    failed = AppState(state.models, AppConfig(device="cpu"), corpus, "big", cache=None, background=True)
    assert not failed.wait_ready(30)
    assert "Indexing corpus 'big' failed: disk full" in failed.indexing.text()
    with pytest.raises(CtxirError, match=r"corpus 'big' could not be indexed \(disk full"):
        search(failed, "x")


def test_first_start_encodes_in_reported_steps_into_the_cache(state, tmp_path, monkeypatch):
    from ctxir.app import corpus_index
    from ctxir.encoders import BiEncoder, EmbeddingCache
    from ctxir.types import doc_text

    monkeypatch.setattr(corpus_index, "ENCODE_CHUNK", 10)
    corpus = dict(list(demo_corpus().items())[:25])
    cache = EmbeddingCache(tmp_path)
    steps = []
    index = CorpusIndex("c", corpus, state.models.bi_encoder, "", lambda f, m: steps.append((f, m)), cache)
    encoding = [(f, m) for f, m in steps if m.startswith("encoding documents")]
    assert [m.split(":")[1].split(" done")[0].strip() for _, m in encoding] == [
        "0 of 25",
        "10 of 25",
        "20 of 25",
    ]
    assert [f for f, _ in encoding] == sorted(f for f, _ in encoding) and steps[-1] == (1.0, "ready")
    # the cache holds what one pass would encode, so the retriever read it instead of encoding again
    encoder = BiEncoder(state.models.bi_encoder, cache=cache)
    texts = [doc_text(d) for d in corpus.values()]
    np.testing.assert_allclose(cache.get(encoder.cache_key(texts)), encoder.encode(texts), atol=1e-5)
    np.testing.assert_allclose(index.dense.embeddings, cache.get(encoder.cache_key(texts)))
    steps.clear()
    CorpusIndex("c", corpus, state.models.bi_encoder, "", lambda f, m: steps.append((f, m)), cache)
    assert any("read from the cache" in m for _, m in steps) and not any(
        "encoding documents" in m for _, m in steps
    )


# ---------------------------------------------------------------- what the page shows (the API keeps every column)


def test_results_table_shows_no_empty_or_repeated_columns(state, monkeypatch):
    from ctxir.app.search_tab import pooling_table, results_table
    from ctxir.app.ui import column_widths

    plain = search(state, "otters playing on the river bank", first_stage="bm25", k=3)
    assert list(results_table(plain.rows, "bm25")[0]) == ["rank", "doc_id", "bm25_score", "title", "text"]
    fused = search(state, "otters playing on the river bank", first_stage="dense", reranker="cls-lr", k=3)
    assert list(results_table(fused.rows, "dense")[0]) == [
        "rank",
        "doc_id",
        "fused_score",
        "rerank_score",
        "rerank_rank",
        "rank_change",
        "dense_score",
        "dense_rank",
        "title",
        "text",
    ]  # fused: the re-ranker's own rank is not the final one, so it is shown
    monkeypatch.setattr(state.models.reranker("cls-lr"), "fused_only", None)
    reranked = search(
        state, "otters playing on the river bank", first_stage="dense", reranker="cls-lr", k=3, mode="alone"
    )
    shown = results_table(reranked.rows, "dense")
    assert list(shown[0]) == [
        "rank",
        "doc_id",
        "rerank_score",
        "rank_change",
        "dense_score",
        "dense_rank",
        "title",
        "text",
    ]
    assert [r["doc_id"] for r in shown] == [r["doc_id"] for r in reranked.rows]
    assert {"rerank_rank", "rerank_score"} <= set(plain.rows[0])  # the API's rows keep them
    widths = column_widths(list(shown[0]))
    assert widths[:3] == ["60px", "120px", "132px"]  # rerank_score: 12 characters of bold monospace
    rest = 1180 - sum(int(w[:-2]) for w in widths[:-1])
    assert widths[-1] == f"{max(340, rest)}px"  # the text column takes the rest, never under 340 px
    pooled = compare_pooling(state, "bats hunting insects at night", layer=-1, k=2)
    cells = pooling_table(pooled.rows)
    assert list(cells[0]) == ["rank", "mean pooling", "CLS pooling"]
    first = pooled.rows[0]
    assert (
        cells[0]["mean pooling"]
        == f"{first['mean_title'] or first['mean_doc_id']} · {first['mean_score']:.3f}"
    )


# ---------------------------------------------------------------- failure report view


@pytest.fixture
def report_files(state, tmp_path):
    """A saved failure report (FILE.json) and a results JSON over a three-document BEIR folder."""
    from ctxir.evaluation.report import failure_cases, report_meta, write_report

    folder = tmp_path / "tinybeir"
    (folder / "qrels").mkdir(parents=True)
    corpus = {
        "d1": {"title": "Otters", "text": "Otters dig dens in the river bank."},
        "d2": {"title": "Loans", "text": "The bank approved the loan."},
        "d3": {"title": "Bats", "text": "Bats hunt moths at night."},
    }
    queries = {"q1": "where do <b>otters</b> live", "q2": "bats at night"}
    qrels = {"q1": {"d1": 1}, "q2": {"d3": 1}}
    run = {"q1": {"d2": 2.0, "d1": 1.0}, "q2": {"d3": 3.0, "d1": 0.5}}
    (folder / "corpus.jsonl").write_text(
        "".join(json.dumps({"_id": i, **d}) + "\n" for i, d in corpus.items())
    )
    (folder / "queries.jsonl").write_text(
        "".join(json.dumps({"_id": i, "text": t}) + "\n" for i, t in queries.items())
    )
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td3\t1\n")
    cases = failure_cases(qrels, run, corpus, queries)
    _, report_json = write_report(tmp_path / "report.html", cases, report_meta(qrels, run, "nDCG@10", "bm25"))
    results = tmp_path / "results.json"
    results.write_text(json.dumps({"config": {"data": str(folder), "split": "test"}, "runs": {"bm25": run}}))
    return folder, report_json, results


def test_failure_report_shows_a_saved_report_sandboxed(state, report_files):
    from ctxir.viz.attention import iframe

    _, report_json, _ = report_files
    r = failure_report(state, report_json)
    assert r.data["kind"] == "report" and [c["qid"] for c in r.data["cases"]] == ["q1", "q2"]
    assert "**2 worst queries**" in r.text and "bm25" in r.text
    assert "where do &lt;b&gt;otters&lt;/b&gt; live" in r.html and "<b>otters</b>" not in r.html  # escaped
    frame = iframe(r.html, title="failure report", sandbox=True)
    assert frame.startswith('<iframe title="failure report" sandbox="" srcdoc="') and "<b>" not in frame


def test_a_hand_edited_report_builds_no_element_of_its_own(state, report_files, tmp_path):
    """An uploaded report is the visitor's file: markup put into any field (even a number's) stays text, and the
    page is framed with every sandbox restriction, so it could run no script either way."""
    from ctxir.viz.attention import iframe

    _, report_json, _ = report_files
    raw = json.loads(report_json.read_text())
    hostile = '<img src=x onerror="alert(1)">'
    raw["cases"][0].update(num_relevant=hostile, num_retrieved=hostile)
    raw["cases"][0]["results"][0]["rank"] = hostile
    raw["meta"]["system"] = hostile
    edited = tmp_path / "edited.json"
    edited.write_text(json.dumps(raw))
    with pytest.raises(CtxirError, match=r"edited\.json was changed or damaged after ctxir wrote it"):
        failure_report(state, edited)  # its checksum no longer matches
    del raw[
        "sha256"
    ]  # as a report written before ctxir kept one (or one whose editor dropped it): drawn, safely
    edited.write_text(json.dumps(raw))
    r = failure_report(state, edited)
    assert "<img" not in r.html and r.html.count("&lt;img src=x onerror=&quot;alert(1)&quot;&gt;") >= 3
    assert md_code(hostile) in r.text  # the summary shows the system's name as code: text, not markup
    frame = iframe(r.html, sandbox=True)
    assert frame.count("<") == 2 and 'sandbox=""' in frame  # <iframe …></iframe>: nothing else is an element


def test_failure_report_from_a_results_json_needs_the_apps_own_beir_corpus(state, report_files):
    import types

    folder, _, results = report_files
    served = types.SimpleNamespace(config=AppConfig(corpus=str(folder)), default_corpus="tinybeir")
    r = failure_report(served, results, worst=1)
    assert r.data["kind"] == "results" and [c["qid"] for c in r.data["cases"]] == ["q1"]  # nDCG 0.63 < 1.0
    assert "without model explanations" in r.text and "ctxir report results.json" in r.text
    with pytest.raises(
        CtxirError,
        match=r"results.json is a results JSON: .* started on 'demo-subset', which has "
        r"no qrels\. Start the app with `--corpus .*tinybeir`",
    ):
        failure_report(state, results)
    other = types.SimpleNamespace(
        config=AppConfig(corpus=str(folder.parent / "scifact")), default_corpus="scifact"
    )
    (folder.parent / "scifact" / "qrels").mkdir(parents=True)
    with pytest.raises(CtxirError, match=r"was made on '.*tinybeir' but this app serves '.*scifact'"):
        failure_report(other, results)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, r"no file was uploaded: choose a failure report's \.json"),
        ("not json", r"bad.json is not a JSON file \(Expecting value"),
        ("[1, 2]", r"bad.json holds a JSON list, not an object"),
        (
            '{"hello": 1}',
            r"bad.json is neither a ctxir failure report \(no \"format\": 'ctxir-failure-report'\) nor a "
            r"results JSON",
        ),
        (
            '{"format": "ctxir-failure-report", "version": 9, "cases": [], "meta": {}}',
            r"report version 9; this ctxir "
            r"reads versions up to 1",
        ),
        (
            '{"format": "ctxir-failure-report", "version": 1, "cases": [{"qid": "q"}], "meta": {}}',
            r"bad.json is not a report this app can draw \(KeyError",
        ),
    ],
)
def test_failure_report_bad_files(state, tmp_path, content, message):
    path = None
    if content is not None:
        path = tmp_path / "bad.json"
        path.write_text(content)
    with pytest.raises(CtxirError, match=message):
        failure_report(state, path)


def test_no_table_shows_placeholder_headers_before_its_first_answer(state):
    """An empty gr.Dataframe draws "1 2 3" as headers: every table is hidden until its view answers, or starts
    with its real column names."""
    import gradio as gr

    import app

    demo = app.build_demo(state)
    tables = [c for c in demo.blocks.values() if isinstance(c, gr.Dataframe)]
    assert len(tables) >= 8
    for table in tables:
        headers = (table.value or {}).get("headers") or []
        assert table.visible is False or (headers and headers != ["1", "2", "3"]), (table.label, headers)


def test_a_reranker_below_bm25_is_offered_fused_only(state, monkeypatch):
    """The shipped CLS-LR ranker scores below BM25 alone on collections of its evaluation.json: loaded, it is marked
    fused-only; the search then refuses "alone" for it, says why and what to use, and fuses it as usual."""
    from ctxir.rerank.registry import alone_below_bm25, load_reranker

    why = alone_below_bm25("ctxir/assets/models/cls-lr")
    assert (
        why
        and "alone it scored below BM25 on " in why
        and load_reranker("cls-lr", device="cpu").fused_only == why
    )
    monkeypatch.setattr(
        state.models.reranker("cls-lr"), "fused_only", why
    )  # the test state's ranker is in memory
    with pytest.raises(
        CtxirError,
        match=r"the cls-lr re-ranker is offered fused with the first stage only: alone it "
        r"scored below BM25 on .* Use re-rank mode 'fused'",
    ):
        search(state, "river otters", first_stage="bm25", reranker="cls-lr", k=3, mode="alone")
    assert search(state, "river otters", first_stage="bm25", reranker="cls-lr", k=3).data["mode"] == "fused"


def test_score_pairs_shows_a_calibrated_probability_beside_the_raw_score(state, presets, monkeypatch):
    """A cross-encoder with a calibration (its folder's calibration.json) gets a probability column; the raw score
    stays beside it in the JSON, the ranks are the raw score's, and the chart draws the probability."""
    from ctxir.app.pairs_tab import chart_columns
    from ctxir.rerank.calibration import Calibration

    docs = "\n".join(presets["pair_documents"])
    plain = score_pairs(state, presets["pair_query"], docs)
    assert all(r["cross_encoder_probability"] is None for r in plain.rows)
    assert "cross-encoder score" in chart_columns(plain.rows)
    ranker = state.models.reranker("cross-encoder")
    # Centred on the raw scores with a slope that keeps the shown (rounded, 4 decimals) probabilities apart: the
    # test's untrained head scores all five within ~0.01, and a flat calibration tied them, leaving the order to
    # the sort (scale 2 did on CI); at 20 the scores' own rounding moves a probability by < 0.0003.
    raw = [r["cross_encoder_score"] for r in plain.rows]
    scale, bias = 20.0, -20.0 * float(np.mean(raw))
    monkeypatch.setattr(ranker, "calibration", Calibration(scale=scale, bias=bias), raising=False)
    result = score_pairs(state, presets["pair_query"], docs)
    for row in result.rows:
        expected = 1 / (1 + np.exp(-(scale * row["cross_encoder_score"] + bias)))
        assert row["cross_encoder_probability"] == pytest.approx(expected, abs=1e-3)
        assert 0.0 <= row["cross_encoder_probability"] <= 1.0
    # the probability keeps the raw score's order: read in rank order it never rises (two raw scores closer than
    # the shown 4 decimals can tie, and a sort by probability alone then left the tie in input order: [1, 2, 3, 5, 4]
    # on CI), and it is not flat
    by_rank = sorted(result.rows, key=lambda r: r["cross_encoder_rank"])
    assert [r["cross_encoder_rank"] for r in by_rank] == [1, 2, 3, 4, 5]
    probabilities = [r["cross_encoder_probability"] for r in by_rank]
    assert probabilities == sorted(probabilities, reverse=True) and probabilities[0] > probabilities[-1]
    columns = chart_columns(result.rows)
    assert "cross-encoder probability" in columns and "cross-encoder score" not in columns
    assert result.data["scores"][0]["cross_encoder_score"] == result.rows[0]["cross_encoder_score"]
    # the text says what the probability reads against: the share of relevant pairs it was fitted on
    assert "P(rel)" not in plain.text and "P(rel): its raw score calibrated on dev pairs;" in result.text
    fitted = Calibration(scale, bias, "held-out claims", report={"pairs": 400, "relevant": 30})
    monkeypatch.setattr(ranker, "calibration", fitted, raising=False)
    text = score_pairs(state, presets["pair_query"], docs).text
    assert (
        "calibrated on held-out claims, 7.5% of them relevant: read it against that rate, not against 50 %"
        in text
    )


def test_pair_ranks_follow_the_unrounded_scores_where_the_table_shows_a_tie():
    """Two scores 0.00002 apart show alike at 4 decimals; the ranks still follow the scores (and so the calibrated
    probabilities computed from them), not the documents' order (it ranked [0.5106, 0.5107] the wrong way round)."""
    from ctxir.app.pairs_tab import _add_ranks, model_names, score_columns

    key = "cross_encoder_score"
    rank_key = score_columns()[key][0]
    values = {k: None for k in score_columns()}
    values[key] = [1.23452, 1.23454, 0.5]
    rows = [{key: round(v, 4)} for v in values[key]]
    assert rows[0][key] == rows[1][key]
    _add_ranks(rows, values)
    assert [r[rank_key] for r in rows] == [2, 1, 3]
    assert model_names("org/a, org/b\norg/a", 2) == ["org/a", "org/b"]  # commas or lines, each once
    assert all(r[score_columns()["bi_encoder_cosine"][0]] is None for r in rows)


def test_what_moveds_summary_says_when_the_fused_mode_orders_only_ties():
    from ctxir.app.what_moved import _summary

    text = _summary("q", "hybrid", "cross-encoder", 20, 0, 0, True, ties_only=True)
    assert "order only its ties" in text
    assert text.endswith("Mode 'alone' ranks by the re-ranker's own scores (`rerank_rank`).")
