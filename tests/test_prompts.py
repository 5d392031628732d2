"""A bi-encoder's prompts: the model's own (config_sentence_transformers.json) unless overridden, "" for none, put
before queries and documents wherever ctxir encodes them, part of the cache key and of the results record."""

import json

import numpy as np
import pytest
from sentence_transformers import SentenceTransformer
from sentence_transformers.sentence_transformer.modules import Pooling

from ctxir.encoders.bi_encoder import BiEncoder, EmbeddingCache, model_prompts
from ctxir.evaluation.evaluate import main
from ctxir.retrieval.retrievers import DenseRetriever
from ctxir.types import CtxirError

PROMPTS = {"query": "query: ", "document": "passage: "}
TEXTS = ["otters play on the river bank", "the cat sat", "money in a bank account"]
CORPUS = {f"d{i}": {"title": "", "text": text} for i, text in enumerate(TEXTS)}


@pytest.fixture(scope="module")
def prompted_dir(tmp_path_factory, tiny_bert_dir):
    """The tests' tiny model saved with e5-style prompts, as a Hub model declares them."""
    folder = tmp_path_factory.mktemp("prompted") / "model"
    SentenceTransformer(str(tiny_bert_dir), device="cpu", prompts=PROMPTS).save(str(folder))
    return folder


@pytest.fixture
def st(prompted_dir):
    return SentenceTransformer(str(prompted_dir), device="cpu")


def unit(rows) -> np.ndarray:
    rows = np.asarray(rows, dtype=np.float32)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def test_the_models_own_prompts_are_used_as_encode_query_and_encode_document_use_them(st):
    encoder = BiEncoder(st, cache=False)
    assert (encoder.query_prompt, encoder.document_prompt) == ("query: ", "passage: ")
    queries, documents = encoder.encode(TEXTS, role="query"), encoder.encode(TEXTS, role="document")
    np.testing.assert_allclose(queries, unit(st.encode_query(TEXTS)), atol=1e-6)
    np.testing.assert_allclose(documents, unit(st.encode_document(TEXTS)), atol=1e-6)
    plain = encoder.encode(TEXTS)  # neither: the model's default prompt, which this one has not
    assert np.abs(queries - plain).max() > 1e-2 and np.abs(documents - plain).max() > 1e-2
    assert encoder.config["query_prompt"] == "query: " and encoder.config["document_prompt"] == "passage: "


def test_an_empty_prompt_turns_it_off_and_a_string_overrides_it(st, tiny_bert_dir):
    plain = SentenceTransformer(str(tiny_bert_dir), device="cpu").encode(TEXTS)
    off = BiEncoder(st, cache=False, query_prompt="", document_prompt="")
    np.testing.assert_allclose(off.encode(TEXTS, role="query"), unit(plain), atol=1e-6)
    np.testing.assert_allclose(off.encode(TEXTS, role="document"), unit(plain), atol=1e-6)
    mine = BiEncoder(st, cache=False, query_prompt="search: ")
    np.testing.assert_allclose(
        mine.encode(TEXTS, role="query"), unit(st.encode(TEXTS, prompt="search: ")), atol=1e-6
    )
    assert mine.document_prompt == "passage: "  # only the one given is replaced


def test_a_passage_prompt_is_the_document_prompt_and_a_model_without_prompts_has_none(tiny_bert_dir):
    tiny = SentenceTransformer(str(tiny_bert_dir), device="cpu")
    assert model_prompts(tiny) == {"query": "", "document": ""}
    tiny.prompts = {"query": "query: ", "document": "", "passage": "passage: "}
    assert model_prompts(tiny) == PROMPTS


@pytest.mark.parametrize("pooling", [None, "mean", "cls", "max"])
def test_a_pooling_that_leaves_the_prompt_out_still_does(st, pooling):
    st.set_pooling_include_prompt(False)
    encoder = BiEncoder(st, pooling=pooling, cache=False)
    mode = pooling or "mean"
    # sentence-transformers' own Pooling in that mode, leaving the prompt out
    reference = SentenceTransformer(
        modules=[st[0], Pooling(st.get_embedding_dimension(), pooling_mode=mode, include_prompt=False)],
        device="cpu",
    )
    np.testing.assert_allclose(
        encoder.encode(TEXTS, role="query"), unit(reference.encode(TEXTS, prompt="query: ")), atol=1e-5
    )
    kept = BiEncoder(
        SentenceTransformer(st[0].auto_model.name_or_path, device="cpu"), pooling=mode, cache=False
    )
    assert np.abs(encoder.encode(TEXTS, role="query") - kept.encode(TEXTS, role="query")).max() > 1e-3


def test_dense_retrieval_encodes_documents_and_queries_with_their_prompts(st):
    encoder = BiEncoder(st, cache=False)
    dense = DenseRetriever(CORPUS, encoder, index="exact")
    np.testing.assert_allclose(dense.embeddings, encoder.encode(TEXTS, role="document"), atol=1e-6)
    hits = dense.query(TEXTS[0], top_k=3)
    cosines = encoder.encode(TEXTS, role="document") @ encoder.encode([TEXTS[0]], role="query")[0]
    assert [h.doc_id for h in hits] == [f"d{i}" for i in np.argsort(-cosines)]
    assert hits[0].score == pytest.approx(float(cosines.max()), abs=1e-5)
    assert dense.config["query_prompt"] == "query: " and dense.config["document_prompt"] == "passage: "


def test_the_document_prompt_is_part_of_the_cache_key_and_no_prompt_keeps_the_old_key(st, tmp_path):
    own = BiEncoder(st, cache=EmbeddingCache(tmp_path))
    off = BiEncoder(st, cache=EmbeddingCache(tmp_path), document_prompt="")
    other = BiEncoder(st, cache=EmbeddingCache(tmp_path), document_prompt="doc: ")
    keys = {e.cache_key(TEXTS, "document") for e in (own, off, other)}
    assert len(keys) == 3
    # the query prompt does not decide a document's vector: the corpus's cache stays valid when it changes
    assert BiEncoder(st, cache=False, query_prompt="q: ").cache_key(TEXTS, "document") == own.cache_key(
        TEXTS, "document"
    )
    # a text encoded without a prompt keeps the key caches were written under before prompts existed
    old = {k: v for k, v in off.config.items() if k not in ("model", "query_prompt", "document_prompt")}
    assert off.cache_key(TEXTS, "document") == EmbeddingCache.key(old, TEXTS)
    cached = own.encode_cached(TEXTS, role="document")
    np.testing.assert_allclose(own.cache.get(own.cache_key(TEXTS, "document")), cached)
    np.testing.assert_allclose(cached, own.encode(TEXTS, role="document"), atol=1e-6)


def test_bad_prompts_and_roles_say_what_is_valid(st):
    with pytest.raises(CtxirError, match=r"query_prompt must be a string .* got 3"):
        BiEncoder(st, cache=False, query_prompt=3)
    with pytest.raises(CtxirError, match=r"role 'passage' is not known: use one of 'query', 'document'"):
        BiEncoder(st, cache=False).encode(TEXTS, role="passage")


@pytest.fixture
def beir_dir(tmp_path, write_beir):
    return write_beir(
        tmp_path / "toy",
        {"q1": "river otters", "q2": "snake prey", "q3": "bank account"},
        {"test": {"q1": {"d1": 1}, "q2": {"d3": 1}, "q3": {"d2": 1}}},
    )


@pytest.mark.parametrize(
    ("flags", "used"),
    [
        ([], PROMPTS),
        (["--query-prompt", "search: ", "--document-prompt", ""], {"query": "search: ", "document": ""}),
    ],
)
def test_evaluate_records_the_prompts_it_used(beir_dir, tmp_path, prompted_dir, capsys, flags, used):
    out = tmp_path / "r.json"
    argv = [
        "--data",
        str(beir_dir),
        "--retriever",
        "hybrid",
        "--model",
        str(prompted_dir),
        "--output",
        str(out),
    ]
    assert main([*argv, "--cache-dir", str(tmp_path / "cache"), *flags]) == 0
    result = json.loads(out.read_text())
    assert result["prompts"] == {str(prompted_dir): used}
    assert result["config"]["query_prompt"] == (flags[1] if flags else None)
    assert f"query {used['query']!r}, document {used['document']!r}" in capsys.readouterr().out


@pytest.mark.parametrize("include_prompt", [True, False])
def test_onnx_int8_puts_the_prompt_before_the_texts_and_pools_it_as_the_model_does(
    st, tmp_path, include_prompt
):
    pytest.importorskip("onnxruntime")

    def torch_vectors(include: bool, prompt=None) -> np.ndarray:
        st.set_pooling_include_prompt(include)
        return BiEncoder(st, cache=False, query_prompt=prompt).encode(TEXTS, role="query")

    wanted = torch_vectors(include_prompt)
    others = [torch_vectors(not include_prompt), torch_vectors(include_prompt, prompt="")]
    st.set_pooling_include_prompt(include_prompt)
    vectors = BiEncoder(st, cache=False, backend="onnx-int8", onnx_dir=tmp_path).encode(TEXTS, role="query")
    # int8 rounding moves a vector a little; the prompt pooled the other way, or no prompt, moves it further
    assert np.einsum("nd,nd->n", vectors, wanted).min() > 0.99
    for other in others:
        assert np.abs(vectors - wanted).max() < np.abs(other - wanted).max() / 2


def test_the_apps_corpus_index_encodes_with_the_prompts_and_the_search_form_names_them(st, tmp_path):
    from types import SimpleNamespace

    from ctxir.app.corpus_index import CorpusIndex
    from ctxir.app.search_form import prompts_info

    cache = EmbeddingCache(tmp_path)
    steps = []
    index = CorpusIndex("c", CORPUS, st, progress=lambda f, m: steps.append(m), cache=cache)
    encoder = BiEncoder(st, cache=False)
    # the first start's encoding in steps wrote the vectors the dense retriever then read: one cache file
    assert any("encoding documents" in m for m in steps) and len(list(tmp_path.glob("*.npy"))) == 1
    np.testing.assert_allclose(index.dense.embeddings, encoder.encode(TEXTS, role="document"), atol=1e-6)
    hits = index.dense.query(TEXTS[1], top_k=1)
    best = encoder.encode(TEXTS, role="document") @ encoder.encode([TEXTS[1]], role="query")[0]
    assert hits[0].score == pytest.approx(float(best.max()), abs=1e-5)
    info = prompts_info(SimpleNamespace(bi_encoder=st))
    assert "query prompt 'query: '" in info and "document prompt 'passage: '" in info
    st.prompts = {"query": "", "document": ""}
    assert "declares none" in prompts_info(SimpleNamespace(bi_encoder=st))


def test_the_explanation_of_a_pair_is_of_the_texts_after_their_prompts(st):
    from ctxir.explain.bi_encoder import explain_bi_encoder

    encoder = BiEncoder(st, cache=False)
    cosine = float(
        encoder.encode([TEXTS[0]], role="query")[0] @ encoder.encode([TEXTS[2]], role="document")[0]
    )
    for model in (encoder, st):  # a BiEncoder's prompts, or a SentenceTransformer's own
        out = explain_bi_encoder(model, TEXTS[0], TEXTS[2], method="exact")
        assert out["cosine"] == pytest.approx(cosine, abs=1e-5)
        assert len(out["query_tokens"]) == len(st.tokenizer("query: " + TEXTS[0])["input_ids"])
    off = explain_bi_encoder(BiEncoder(st, cache=False, query_prompt=""), TEXTS[0], TEXTS[2], method="exact")
    assert len(off["query_tokens"]) == len(st.tokenizer(TEXTS[0])["input_ids"])


def test_the_apps_search_takes_other_prompts_and_says_which_it_used(st, prompted_dir):
    from ctxir.app.config import AppConfig
    from ctxir.app.models import AppModels
    from ctxir.app.pairs_tab import score_pairs
    from ctxir.app.search import search
    from ctxir.app.state import AppState

    models = AppModels.from_objects(st, str(prompted_dir))
    state = AppState(models, AppConfig(device="cpu", max_compare_docs=3), CORPUS, "tiny", cache=None)

    def scores(data) -> list[float]:
        return [h["dense_score"] for h in data["hits"]]

    def expected(**prompts) -> list[float]:
        encoder = BiEncoder(st, cache=False, **prompts)
        cosines = encoder.encode(TEXTS, role="document") @ encoder.encode([TEXTS[0]], role="query")[0]
        return sorted((round(float(c), 4) for c in cosines), reverse=True)

    own = search(state, TEXTS[0], "tiny", "dense", k=3)
    assert own.data["prompts"] == PROMPTS and "the query after `query: `" in own.text
    assert scores(own.data) == pytest.approx(expected(), abs=2e-4)
    off = search(state, TEXTS[0], "tiny", "dense", k=3, query_prompt="", document_prompt="")
    assert off.data["prompts"] == {"query": "", "document": ""} and "encoded" not in off.text
    assert scores(off.data) == pytest.approx(expected(query_prompt="", document_prompt=""), abs=2e-4)
    assert search(state, TEXTS[0], "tiny", "bm25", k=3, query_prompt="q: ").data["prompts"] is None
    small = AppState(models, AppConfig(device="cpu", max_compare_docs=2), CORPUS, "tiny", cache=None)
    assert (
        search(small, TEXTS[0], "tiny", "hybrid", k=3, query_prompt="q: ").data["prompts"]["query"] == "q: "
    )
    with pytest.raises(
        CtxirError, match=r"document prompt 'doc: ' would encode all 3 documents .* limit of 2"
    ):
        search(small, TEXTS[0], "tiny", "dense", k=3, document_prompt="doc: ")
    # Pair scoring's bi-encoder cosine is the one a search ranks by: each text after its prompt
    cosines = [row["bi_encoder_cosine"] for row in score_pairs(state, TEXTS[0], TEXTS).rows]
    assert sorted(cosines, reverse=True) == pytest.approx(expected(), abs=2e-4)


@pytest.fixture
def prompted_state(st, prompted_dir):
    from ctxir.app.config import AppConfig
    from ctxir.app.models import AppModels
    from ctxir.app.state import AppState

    return AppState(
        AppModels.from_objects(st, str(prompted_dir)), AppConfig(device="cpu"), CORPUS, "tiny", cache=None
    )


def cosines_with(st, query_prompt=None, document_prompt=None) -> list[float]:
    """The cosine of TEXTS[0] and each of TEXTS, each after the prompts given (None: the model's own)."""
    encoder = BiEncoder(st, cache=False, query_prompt=query_prompt, document_prompt=document_prompt)
    return (encoder.encode(TEXTS, role="document") @ encoder.encode([TEXTS[0]], role="query")[0]).tolist()


@pytest.mark.parametrize(
    ("query_prompt", "document_prompt", "used"),
    [
        (None, None, PROMPTS),
        ("search: ", None, {"query": "search: ", "document": "passage: "}),
        ("", "", {"query": "", "document": ""}),
    ],
)
def test_pair_scoring_takes_other_prompts_and_says_which_it_used(
    st, prompted_dir, prompted_state, query_prompt, document_prompt, used
):
    from ctxir.app.pairs_tab import score_pairs

    r = score_pairs(prompted_state, TEXTS[0], TEXTS, "", query_prompt, document_prompt)
    assert r.data["prompts"] == {str(prompted_dir): used}
    cosines = [row["bi_encoder_cosine"] for row in r.rows]
    assert cosines == pytest.approx(cosines_with(st, used["query"], used["document"]), abs=2e-4)
    assert ("the query after `search: ` and each document after `passage: `" in r.text) == (
        query_prompt == "search: "
    )
    assert ("encoded" in r.text) == any(used.values())


def test_a_bi_encoder_compared_by_id_keeps_its_own_prompts_unless_others_are_given(
    prompted_state, tiny_bert_dir, tmp_path
):
    from ctxir.app.pairs_tab import score_pairs

    plain = str(tmp_path / "plain")
    SentenceTransformer(str(tiny_bert_dir), device="cpu").save(plain)
    # left as the app's bi-encoder's own (as the page sends them), its prompts are not the compared model's
    own = score_pairs(prompted_state, TEXTS[0], TEXTS, plain, PROMPTS["query"], PROMPTS["document"])
    assert own.data["prompts"][plain] == {"query": "", "document": ""}
    other = score_pairs(prompted_state, TEXTS[0], TEXTS, plain, "search: ")
    assert other.data["prompts"][plain] == {"query": "search: ", "document": ""}
    assert f"`{plain}` encoded the query after `search: `." in other.text
    compared = [row[f"{plain} cosine"] for row in other.rows]
    wanted = cosines_with(SentenceTransformer(plain, device="cpu"), "search: ")
    assert compared == pytest.approx(wanted, abs=2e-4)
    with pytest.raises(CtxirError, match=r"query prompt 3 must be text of at most"):
        score_pairs(prompted_state, TEXTS[0], TEXTS, "", 3)


def test_the_explanation_takes_other_prompts_and_says_which_it_used(st, prompted_state):
    from ctxir.app.explain_tab import explain_pair

    own = explain_pair(prompted_state, TEXTS[0], TEXTS[2], "bi-encoder")
    assert own.data["prompts"] == PROMPTS and "the query after `query: `" in own.text
    assert own.data["bi_encoder"]["cosine"] == pytest.approx(cosines_with(st)[2], abs=1e-5)
    off = explain_pair(prompted_state, TEXTS[0], TEXTS[2], "bi-encoder", query_prompt="")
    assert off.data["prompts"] == {"query": "", "document": "passage: "}
    assert "the query after" not in off.text and "each document after `passage: `" in off.text
    assert len(off.data["bi_encoder"]["query_tokens"]) == len(st.tokenizer(TEXTS[0])["input_ids"])
    assert off.data["bi_encoder"]["cosine"] == pytest.approx(cosines_with(st, "")[2], abs=1e-5)


def test_the_status_line_names_the_bi_encoders_prompts(st, prompted_state):
    from ctxir.app.blocks import status_line

    assert "(prompts: query `query: `, document `passage: `)" in status_line(prompted_state)
    st.prompts = {"query": "", "document": ""}
    assert "(no prompts)" in status_line(prompted_state)


@pytest.mark.parametrize(("prompts", "wanted"), [(PROMPTS, True), ({"query": "", "document": ""}, False)])
def test_adapt_trains_on_the_texts_after_the_models_prompts(st, tmp_path, monkeypatch, prompts, wanted):
    import sentence_transformers

    from ctxir.adapt.train import TrainPlan, train_adapter

    seen = {}

    def arguments(**kwargs):  # the trainer's arguments, seen; training itself is tests/test_adapt.py's
        seen.update(kwargs)
        raise KeyboardInterrupt

    monkeypatch.setattr(sentence_transformers, "SentenceTransformerTrainingArguments", arguments)
    st.prompts = dict(prompts)
    rows = {"anchor": ["q"], "positive": ["p"], "negative": ["n"]}
    with pytest.raises(KeyboardInterrupt):
        train_adapter(st, rows, TrainPlan(), tmp_path, None)
    expected = {"anchor": "query: ", "positive": "passage: ", "negative": "passage: "}
    assert seen["prompts"] == (expected if wanted else None)


def test_adapts_prompt_flags_become_the_adapters_own_prompts(st, prompted_dir, tmp_path):
    """``ctxir adapt --query-prompt/--document-prompt``: the base encoder mines with them, and the adapter is trained
    and saved declaring them (so evaluating it later uses them); "" turns one off, hiding a "passage" prompt too."""
    from transformers import HfArgumentParser

    from ctxir.adapt.cli import AdaptArgs, _encoder
    from ctxir.encoders.bi_encoder import set_prompts

    (args,) = HfArgumentParser(AdaptArgs).parse_args_into_dataclasses(
        args=["--model", str(prompted_dir), "--query-prompt", "q: ", "--document-prompt", ""]
    )
    encoder = _encoder(args)
    assert (encoder.query_prompt, encoder.document_prompt) == ("q: ", "")
    st.prompts = {"query": "query: ", "passage": "passage: "}
    set_prompts(st, args.query_prompt, args.document_prompt)
    assert model_prompts(st) == {"query": "q: ", "document": ""}
    st.save(str(tmp_path / "adapted"))
    assert model_prompts(SentenceTransformer(str(tmp_path / "adapted"), device="cpu")) == model_prompts(st)
    set_prompts(st, None, "doc: ")  # None keeps the model's own
    assert model_prompts(st) == {"query": "q: ", "document": "doc: "}


def test_the_prompt_flags_are_the_models_and_each_extra_model_keeps_its_own(
    beir_dir, tmp_path, prompted_dir, tiny_bert_dir
):
    out = tmp_path / "r.json"
    argv = [
        "--data",
        str(beir_dir),
        "--retriever",
        "hybrid",
        "--model",
        str(tiny_bert_dir),
        "--output",
        str(out),
    ]
    argv += [
        "--extra-models",
        str(prompted_dir),
        "--query-prompt",
        "search: ",
        "--cache-dir",
        str(tmp_path / "c"),
    ]
    assert main(argv) == 0
    assert json.loads(out.read_text())["prompts"] == {
        str(tiny_bert_dir): {"query": "search: ", "document": ""},
        str(prompted_dir): PROMPTS,
    }


def test_a_text_that_is_neither_takes_the_models_default_prompt_as_encode_does(st):
    st.default_prompt_name = "query"
    encoder = BiEncoder(st, cache=False, query_prompt="")
    assert encoder.prompt() == "query: "
    np.testing.assert_allclose(encoder.encode(TEXTS), unit(st.encode(TEXTS)), atol=1e-6)
    # a query is encoded with the query prompt, here none: the default does not reach it (as encode_query)
    np.testing.assert_allclose(
        encoder.encode(TEXTS, role="query"), unit(st.encode(TEXTS, prompt="")), atol=1e-6
    )


def test_what_moved_ranks_with_the_search_forms_prompts_and_says_which(
    st, prompted_dir, term_match_cross_encoder
):
    from ctxir.app.config import AppConfig
    from ctxir.app.models import AppModels
    from ctxir.app.search import search
    from ctxir.app.state import AppState
    from ctxir.app.what_moved import what_moved

    models = AppModels.from_objects(st, str(prompted_dir), cross_encoder=term_match_cross_encoder)
    state = AppState(models, AppConfig(device="cpu"), CORPUS, "tiny", cache=None)
    for prompts in ({}, {"query_prompt": "", "document_prompt": ""}, {"query_prompt": "q: "}):
        moved = what_moved(state, TEXTS[0], "tiny", "dense", "cross-encoder", k=3, depth=3, n=1, **prompts)
        searched = search(state, TEXTS[0], "tiny", "dense", k=3, **prompts)
        assert moved.data["prompts"] == searched.data["prompts"]
        assert ("`q: `" in moved.text) == (prompts.get("query_prompt") == "q: ")
        assert ("the query after `query: `" in moved.text) == (not prompts)


def test_compare_pooling_encodes_with_the_search_forms_prompts_and_says_which(st, prompted_state):
    from ctxir.app.search_tab import compare_pooling

    def mean_scores(**prompts) -> list[float]:  # the tiny model's CLS vectors all point the same way
        encoder = BiEncoder(st, cache=False, pooling="mean", **prompts)
        cosines = encoder.encode(TEXTS, role="document") @ encoder.encode([TEXTS[0]], role="query")[0]
        return sorted((round(float(c), 4) for c in cosines), reverse=True)

    for prompts in ({}, {"query_prompt": "", "document_prompt": ""}, {"query_prompt": "q: "}):
        result = compare_pooling(prompted_state, TEXTS[0], "tiny", k=3, **prompts)
        wanted = {
            "query": prompts.get("query_prompt", "query: "),
            "document": prompts.get("document_prompt", "passage: "),
        }
        assert result.data["prompts"] == wanted
        assert [h["score"] for h in result.data["rankings"]["mean"]] == pytest.approx(
            mean_scores(**prompts), abs=2e-4
        )
        assert ("the query after `q: `" in result.text) == (
            "query_prompt" in prompts and prompts["query_prompt"] == "q: "
        )
