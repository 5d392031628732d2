import json
import math

import numpy as np
import pytest
import torch

from ctxir.encoders import BiEncoder
from ctxir.encoders.models import load_transformer
from ctxir.explain import (
    COMPLETENESS_TOLERANCE,
    DEFAULT_IG_STEPS,
    cls_attention,
    explain,
    explain_bi_encoder,
    explain_cls_lr,
    explain_cross_encoder,
    mean_pooling_contributions,
)
from ctxir.rerank import ClsLrRanker, CrossEncoderReranker, cls_features
from ctxir.types import CtxirError

QUERY = "where do otters play"
DOC = "otters play on the river bank and the water"


# --- the pure tensor core -------------------------------------------------------------------------------------


def test_mean_pooling_contributions_hand_computed():
    # q̄ = (1, 1), ‖q̄‖ = √2; d̄ = (1, 0), ‖d̄‖ = 1; n·m = 2 → C = q·dᵀ / (2√2) = [[2], [0]] / (2√2)
    q = torch.tensor([[2.0, 0.0], [0.0, 2.0]])
    d = torch.tensor([[1.0, 0.0]])
    contributions = mean_pooling_contributions(q, d)
    assert contributions.shape == (2, 1)
    assert torch.allclose(contributions, torch.tensor([[1 / math.sqrt(2)], [0.0]], dtype=torch.float64))
    assert math.isclose(float(contributions.sum()), 1 / math.sqrt(2))  # cos((1, 1), (1, 0))


def test_mean_pooling_contributions_sum_to_cosine_of_means():
    rng = np.random.default_rng(0)
    q, d = rng.normal(size=(5, 16)), rng.normal(size=(9, 16))  # numpy is accepted too
    contributions = mean_pooling_contributions(q, d)
    q_mean, d_mean = q.mean(0), d.mean(0)
    cosine = q_mean @ d_mean / np.linalg.norm(q_mean) / np.linalg.norm(d_mean)
    assert contributions.shape == (5, 9)
    assert abs(float(contributions.sum()) - cosine) < 1e-12
    # scaling the tokens of one text (what a normalisation does to its mean) changes no contribution
    assert torch.allclose(mean_pooling_contributions(3 * q, d), contributions)


@pytest.mark.parametrize(
    ("q", "d", "match"),
    [
        (np.zeros((0, 4)), np.ones((2, 4)), "query_tokens must be a"),
        (np.ones((2, 4)), np.ones(4), "document_tokens must be a"),
        (np.ones((2, 4)), np.ones((2, 3)), "hidden size 4 but document_tokens 3"),
        (np.zeros((2, 4)), np.ones((2, 4)), "zero vector"),
    ],
)
def test_mean_pooling_contributions_rejects_bad_input(q, d, match):
    with pytest.raises(CtxirError, match=match):
        mean_pooling_contributions(q, d)


# --- the bi-encoder wrapper -----------------------------------------------------------------------------------


def _own_cosine(st, query, document) -> float:
    vectors = st.encode([query, document], normalize_embeddings=True)  # batched, padded: the model's own path
    return float(vectors[0] @ vectors[1])


def test_minilm_contributions_sum_to_its_own_cosine(minilm):
    result = explain_bi_encoder(minilm, QUERY, DOC)
    pairs = np.array(result["pair_contributions"])
    assert result["method"] == "exact" and result["pooling"] == "mean"
    # [CLS] and [SEP] are in the mean, as in sentence-transformers' Pooling
    assert result["query_tokens"][0] == "[CLS]" and result["query_tokens"][-1] == "[SEP]"
    assert pairs.shape == (len(result["query_tokens"]), len(result["document_tokens"]))  # rows = query tokens
    assert abs(pairs.sum() - _own_cosine(minilm, QUERY, DOC)) < 1e-5
    assert abs(result["cosine"] - _own_cosine(minilm, QUERY, DOC)) < 1e-5
    assert np.allclose(result["query_contributions"], pairs.sum(1))
    assert np.allclose(result["document_contributions"], pairs.sum(0))


def test_tiny_bi_encoder_contributions_sum_to_its_cosine(tiny_st):
    for query, document in [(QUERY, DOC), ("bank", "money deposit in the bank account")]:
        result = explain_bi_encoder(tiny_st, query, document, method="exact")
        assert abs(np.sum(result["pair_contributions"]) - _own_cosine(tiny_st, query, document)) < 1e-5


def test_exact_split_follows_a_bi_encoders_layer(tiny_st):
    encoder = BiEncoder(tiny_st, layer=1, cache=False)  # mean over an inner layer: still exact
    result = explain_bi_encoder(encoder, QUERY, DOC, method="exact")
    vectors = encoder.encode([QUERY, DOC])
    assert abs(np.sum(result["pair_contributions"]) - float(vectors[0] @ vectors[1])) < 1e-5


@pytest.mark.parametrize("pooling", ["cls", "max"])
def test_non_mean_pooling_has_no_exact_split(minilm, pooling):
    encoder = BiEncoder(minilm, pooling=pooling, cache=False)  # a random tiny BERT's cosines are all ≈ 1
    with pytest.raises(CtxirError, match=f"no exact split .* {pooling!r} pooling"):
        explain_bi_encoder(encoder, QUERY, DOC, method="exact")
    result = explain_bi_encoder(encoder, QUERY, DOC)  # auto: falls back to IG and says so
    assert result["method"] == "integrated-gradients" and result["pair_contributions"] is None
    assert "no exact split" in result["note"]
    vectors = encoder.encode([QUERY, DOC])
    assert abs(result["cosine"] - float(vectors[0] @ vectors[1])) < 1e-5
    assert result["converged"] and result["completeness_error"] <= COMPLETENESS_TOLERANCE
    total = sum(result["query_contributions"]) + sum(result["document_contributions"])
    assert (
        abs(total - (result["cosine"] - result["baseline_cosine"]))
        <= 0.011 * abs(result["cosine"] - result["baseline_cosine"]) + 1e-5
    )


# --- cross-encoder and CLS-LR: Integrated Gradients -----------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_cross_encoder(tiny_bert_dir):
    from sentence_transformers import CrossEncoder

    torch.manual_seed(1)
    model = CrossEncoder(str(tiny_bert_dir), num_labels=1, device="cpu")
    with torch.no_grad():  # a random head of realistic scale: scores that vary between pairs
        model[0].auto_model.classifier.weight.normal_(0, 1.0)
    return model


def _check_ig(result, score):
    tokens, attributions = result["tokens"], np.array(result["attributions"])
    assert len(attributions) == len(tokens)
    assert abs(result["score"] - score) < 1e-5  # the number the ranker reports, not another one
    gap = result["score"] - result["baseline_score"]
    assert result["completeness_error"] == pytest.approx(abs(attributions.sum() - gap) / abs(gap), rel=1e-6)
    assert result["attributions_sum"] == pytest.approx(attributions.sum(), abs=1e-9)
    # the baseline keeps [CLS]/[SEP]: their attributions are exactly zero
    assert all(a == 0 for t, a in zip(tokens, attributions, strict=True) if t in ("[CLS]", "[SEP]"))
    assert tokens[result["sentence_b_start"] - 1] == "[SEP]"


@pytest.mark.parametrize("logit", [False, True])
def test_cross_encoder_ig_is_complete_at_default_steps(tiny_cross_encoder, logit):
    for query, document in [(QUERY, DOC), ("money", "she put her salary in the bank account")]:
        result = explain_cross_encoder(
            tiny_cross_encoder, query, document, logit=logit, max_steps=DEFAULT_IG_STEPS
        )
        reported = CrossEncoderReranker(tiny_cross_encoder).score_pairs(query, [document])[0]
        score = math.log(reported / (1 - reported)) if logit else reported  # reported = sigmoid(logit)
        _check_ig(result, score)
        assert result["n_steps"] == DEFAULT_IG_STEPS and result["converged"]
        assert result["completeness_error"] <= COMPLETENESS_TOLERANCE


def test_a_window_reading_cross_encoder_is_explained_on_the_window_that_scored(tiny_st, tiny_cross_encoder):
    """MaxP re-rankers score a long document by its best window: the explanation is that window's, its score the
    document's score as the re-ranker reports it, cut after the title for a corpus document."""
    from ctxir.rerank import Passages
    from ctxir.types import doc_text

    reranker = CrossEncoderReranker(tiny_cross_encoder, passages=Passages(words=4, stride=4))
    text = "money goes to the bank . otters sleep in river dens . she put her salary"
    windows = Passages(words=4, stride=4).split("", text)
    assert len(windows) == 4
    result = explain_cross_encoder(reranker, QUERY, text, max_steps=DEFAULT_IG_STEPS)
    scores = reranker._score(QUERY, windows)
    best = int(np.argmax(scores))
    assert result["window"] == {
        "index": best + 1,
        "of": 4,
        "words": 4,
        "stride": 4,
        "score": pytest.approx(float(scores[best])),
        "text": windows[best],
    }
    _check_ig(result, reranker.score_pairs(QUERY, [text])[0])  # the pair-scoring tab's number
    assert result["completeness_error"] <= COMPLETENESS_TOLERANCE
    # a corpus document: every window after its title, as score_documents cut it when it ranked the document
    doc = {"title": "Otters", "text": text}
    full = explain(
        QUERY, doc_text(doc), bi_encoder=tiny_st, rerankers={"cross-encoder": reranker}, title="Otters"
    )
    window = full["cross_encoder"]["window"]
    assert window["text"].startswith("Otters ") and window["of"] == 4
    assert full["cross_encoder"]["score"] == pytest.approx(
        reranker.score_documents(QUERY, [doc])[0], abs=1e-5
    )
    assert full["bi_encoder"]["document_tokens"][:2] == ["[CLS]", "otters"]  # the bi-encoder reads it whole
    # a model that reads the first tokens explains the document as given
    assert "window" not in explain_cross_encoder(tiny_cross_encoder, QUERY, text)


def test_minilm_cross_encoder_ig_is_complete_at_default_steps(minilm_path):
    from ctxir.encoders.models import load_cross_encoder

    torch.manual_seed(0)
    # the MiniLM body, an untrained head drawn from this seed: loaded afresh (__wrapped__ skips the loader's cache,
    # which would hand back a model an earlier test drew with another random state: the run's order decided it)
    model = load_cross_encoder.__wrapped__(str(minilm_path), "cpu", num_labels=1)
    query = "where do otters live along the river bank"  # a demo query and passage (ctxir/assets)
    document = (
        "Otter dens. River otters dig their dens into the soft bank of a stream, often with an entrance "
        "below the waterline so they can come and go without being seen."
    )
    result = explain_cross_encoder(model, query, document, max_steps=DEFAULT_IG_STEPS, attention=False)
    _check_ig(result, CrossEncoderReranker(model).score_pairs(query, [document])[0])
    assert result["completeness_error"] <= COMPLETENESS_TOLERANCE


def test_a_term_match_head_is_explained_completely_with_its_matches_per_query_token(term_match_cross_encoder):
    """A head that reads token ids (the term-match term) still gets complete Integrated Gradients: that part stays in
    the baseline score, and ``term_match`` splits it exactly over the query tokens, the shared word first."""
    from sentence_transformers import CrossEncoder

    from ctxir.encoders.heads import SegmentCosineHead

    model = term_match_cross_encoder
    body, head = model[0], model[1]
    query, document = "otters river", "otters dig dens by the bank"
    result = explain_cross_encoder(model, query, document, max_steps=DEFAULT_IG_STEPS, attention=False)
    _check_ig(result, CrossEncoderReranker(model).score_pairs(query, [document])[0])
    assert result["converged"] and result["completeness_error"] <= COMPLETENESS_TOLERANCE
    match = result["term_match"]
    with torch.no_grad():
        term = float(
            head.term_match_scores(
                body(dict(model.tokenizer([query], [document], return_tensors="pt")))
            ).sum()
        )
    assert match["score"] == pytest.approx(term, abs=1e-5)
    assert sum(t["contribution"] for t in match["tokens"]) == pytest.approx(match["score"], abs=1e-5)
    by_token = {t["token"]: t["contribution"] for t in match["tokens"]}
    assert set(by_token) == {"[CLS]", "otters", "river", "[SEP]"}
    assert by_token["otters"] > by_token["river"]  # exact-match weight 3: the word the document shares
    # each query token's importance, softplus(v · t + c): an untrained v gives every token softplus(c) = 1
    assert [t["importance"] for t in match["tokens"]] == pytest.approx([1.0] * 4, abs=1e-6)
    # a plain head has no term to report
    assert "term_match" not in explain_cross_encoder(
        CrossEncoder(modules=[body, SegmentCosineHead(32)], device="cpu", activation_fn=torch.nn.Identity()),
        query,
        document,
        attention=False,
    )


def test_too_few_steps_are_raised_until_complete(tiny_cross_encoder):
    result = explain_cross_encoder(tiny_cross_encoder, QUERY, DOC, n_steps=1, max_steps=64, logit=True)
    assert result["n_steps"] > 1 and result["converged"]
    assert result["completeness_error"] <= COMPLETENESS_TOLERANCE
    capped = explain_cross_encoder(tiny_cross_encoder, QUERY, DOC, n_steps=1, max_steps=1, logit=True)
    assert capped["n_steps"] == 1 and not capped["converged"]  # reported, not hidden
    assert capped["completeness_error"] > COMPLETENESS_TOLERANCE


@pytest.fixture(scope="module")
def tiny_cls_lr(tiny_bert_dir):
    tokenizer, model = load_transformer(str(tiny_bert_dir), "cpu", attentions=False)
    pairs = [(f"query {i}", t) for i in range(6) for t in ("river bank", "python code", "tea")]
    feats = cls_features(model, tokenizer, pairs) + np.random.default_rng(0).normal(0, 0.01, (len(pairs), 32))
    labels = [1 if t == "river bank" else 0 for _, t in pairs]
    return ClsLrRanker.fit(str(tiny_bert_dir), feats.astype(np.float32), labels, device="cpu")


def test_cls_lr_ig_attributes_the_logit(tiny_cls_lr):
    result = explain_cls_lr(tiny_cls_lr, QUERY, DOC)
    logit = tiny_cls_lr.score_pairs(QUERY, [DOC])[0]  # coef·CLS + b; predict_proba would be its sigmoid
    _check_ig(result, logit)
    assert "logit" in result["score_kind"] and result["model_kind"] == "cls-lr"
    assert result["completeness_error"] <= COMPLETENESS_TOLERANCE


def test_cls_lr_attributions_are_linear_in_coef(tiny_bert_dir, tiny_cls_lr):
    # through coef·CLS + b: doubling coef doubles every attribution; the intercept cancels out
    doubled = ClsLrRanker(str(tiny_bert_dir), 2 * tiny_cls_lr.coef, tiny_cls_lr.intercept + 5.0, device="cpu")
    one = explain_cls_lr(tiny_cls_lr, QUERY, DOC, attention=False)
    two = explain_cls_lr(doubled, QUERY, DOC, attention=False)
    assert np.allclose(two["attributions"], 2 * np.array(one["attributions"]), atol=1e-5)


def test_mask_baseline_replaces_words_with_mask(tiny_cls_lr):
    pad = explain_cls_lr(tiny_cls_lr, QUERY, DOC, attention=False)
    mask = explain_cls_lr(tiny_cls_lr, QUERY, DOC, attention=False, baseline="mask")
    assert mask["baseline"] == "mask" and mask["score"] == pad["score"]
    assert mask["baseline_score"] != pad["baseline_score"]


# --- attention from [CLS] -------------------------------------------------------------------------------------


def test_cls_attention_rows_are_softmax_distributions(tiny_bert_dir):
    tokenizer, model = load_transformer(str(tiny_bert_dir), "cpu", attentions=False)  # sdpa: no weights
    before = model.config._attn_implementation
    report = cls_attention(QUERY, DOC, model, tokenizer)
    attention = np.array(report["attention"])
    assert attention.shape == (2, len(report["tokens"]))  # (layers, tokens)
    assert (attention >= 0).all() and np.allclose(attention.sum(1), 1.0, atol=1e-5)
    assert model.config._attn_implementation == before  # switched to eager for one pass only
    eager_tokenizer, eager = load_transformer(str(tiny_bert_dir), "cpu", attentions=True)
    assert np.allclose(cls_attention(QUERY, DOC, eager, eager_tokenizer)["attention"], attention, atol=1e-5)


def test_cross_encoder_report_carries_cls_attention(tiny_cross_encoder):
    result = explain_cross_encoder(tiny_cross_encoder, QUERY, DOC)
    attention = np.array(result["cls_attention"])
    assert attention.shape == (2, len(result["tokens"]))
    assert np.allclose(attention.sum(1), 1.0, atol=1e-5)


# --- explain(): the /explain answer ---------------------------------------------------------------------------


def test_explain_json_has_the_issue_keys(tiny_st, tiny_cross_encoder, tiny_cls_lr):
    result = explain(
        QUERY,
        DOC,
        bi_encoder=tiny_st,
        rerankers={"cross-encoder": CrossEncoderReranker(tiny_cross_encoder), "cls-lr": tiny_cls_lr},
    )
    json.dumps(result, allow_nan=False)  # JSON-able: lists of floats, token strings
    bi = result["bi_encoder"]
    assert {"cosine", "query_tokens", "document_tokens", "pair_contributions"} <= set(bi)
    assert len(bi["pair_contributions"]) == len(bi["query_tokens"])
    assert all(len(row) == len(bi["document_tokens"]) for row in bi["pair_contributions"])
    for key in ("cross_encoder", "cls_lr"):
        assert {"score", "tokens", "attributions", "completeness_error"} <= set(result[key])
    assert (
        result["cross_encoder"]["model_kind"] == "cross-encoder"
        and result["cls_lr"]["model_kind"] == "cls-lr"
    )


def test_explain_without_a_cross_encoder_uses_the_cls_lr(tiny_st, tiny_cls_lr):
    result = explain(QUERY, DOC, bi_encoder=tiny_st, rerankers={"cls-lr": tiny_cls_lr}, attention=False)
    assert result["cross_encoder"]["model_kind"] == "cls-lr"
    only_bi = explain(QUERY, DOC, bi_encoder=tiny_st)
    assert "cross_encoder" not in only_bi and "cls_lr" not in only_bi


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"query": "  "}, "query is empty"),
        ({"document": ""}, "document is empty"),
        ({"query": None}, "query must be a string"),
        ({"baseline": "zeros"}, "baseline 'zeros' is not known: use one of 'pad', 'mask'"),
        ({"n_steps": 0}, "n_steps must be a positive integer, got 0"),
        ({"n_steps": 64, "max_steps": 8}, r"max_steps must be an integer ≥ n_steps \(64\), got 8"),
    ],
)
def test_explain_refuses_bad_input(tiny_st, tiny_cross_encoder, kwargs, match):
    args = {
        "query": QUERY,
        "document": DOC,
        "bi_encoder": tiny_st,
        "rerankers": {"cross-encoder": tiny_cross_encoder},
        **kwargs,
    }
    with pytest.raises(CtxirError, match=match):
        explain(**args)


def test_wrong_model_types_are_named(tiny_st, tiny_cross_encoder):
    with pytest.raises(CtxirError, match="method 'fast' is not known: use one of 'auto', 'exact'"):
        explain_bi_encoder(tiny_st, QUERY, DOC, method="fast")
    with pytest.raises(CtxirError, match="bi_encoder must be a SentenceTransformer"):
        explain_bi_encoder(tiny_cross_encoder, QUERY, DOC)
    with pytest.raises(CtxirError, match="cross_encoder must be a CrossEncoder"):
        explain_cross_encoder(tiny_st, QUERY, DOC)
    with pytest.raises(CtxirError, match=r"cls_lr must be a ctxir\.ClsLrRanker"):
        explain_cls_lr(tiny_cross_encoder, QUERY, DOC)


def test_an_explanation_beside_a_search_in_another_thread_changes_neither(tiny_cross_encoder):
    """The app explains (its first view, a visitor) while another visitor's search scores with the same torch model:
    the explanation's hooks on the word embeddings must not reach the search's passes (ctxir.encoders.models.model_lock)."""
    import threading

    reranker = CrossEncoderReranker(tiny_cross_encoder, backend="torch")
    docs = ["otters", "otters play on the river bank and the water all day long with many more words"]
    expected = reranker.score_pairs(QUERY, docs)
    alone = explain_cross_encoder(reranker, "money", DOC, n_steps=8, max_steps=8, attention=False)
    scores, errors, stop = [], [], threading.Event()

    def search():
        while not stop.is_set():
            try:
                scores.append(reranker.score_pairs(QUERY, docs))
            except Exception as err:  # a pass that read the hooked vectors of another length
                errors.append(err)
                return

    thread = threading.Thread(target=search)
    thread.start()
    try:
        beside = [
            explain_cross_encoder(reranker, "money", DOC, n_steps=8, max_steps=8, attention=False)
            for _ in range(3)
        ]
    finally:
        stop.set()
        thread.join()
    assert not errors, errors
    assert scores and all(np.allclose(s, expected, atol=1e-6) for s in scores)
    for result in beside:
        assert result["attributions"] == pytest.approx(alone["attributions"], abs=1e-6)
