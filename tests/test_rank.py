"""``ctxir.rank(query, documents, model, top_k)``: a list of texts ranked in one call, as sentence-transformers'
``CrossEncoder.rank`` ranks them, by any re-ranker kind, model folder or loaded re-ranker.

Models are tiny (conftest's random BERT, as a cross-encoder folder and under a CLS-LR ranker) or the shipped ones;
a word-overlap re-ranker gives scores exact enough to spell the whole answer out."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

import ctxir
from ctxir.encoders.models import load_cross_encoder, load_transformer
from ctxir.rerank import ClsLrRanker, Reranker, cls_features, registry
from ctxir.rerank.registry import RERANKERS, load_reranker, rank
from ctxir.types import CtxirError
from tests import tiny_models
from tests.conftest import TINY_VOCAB

QUERY = "otters play on the river bank"
DOCS = ["tea and coffee", "otters play on the river bank", "the river", "the bank", "river bank"]


class WordOverlap(Reranker):
    """How many query words a text shares: scores known in advance, ties included."""

    name = "overlap"

    def score_pairs(self, query: str, texts: Sequence[str]) -> np.ndarray:
        words = set(query.split())
        return np.array([len(words & set(t.split())) for t in texts], dtype=np.float32)


@pytest.fixture(scope="module")
def cross_encoder_dir(tmp_path_factory):
    """A tiny one-label cross-encoder saved as a Hub cross-encoder is."""
    return tiny_models.save_tiny_cross_encoder(tmp_path_factory.mktemp("rank") / "ce", TINY_VOCAB)


@pytest.fixture(scope="module")
def cls_lr_dir(tiny_bert_dir, tmp_path_factory):
    """A CLS-LR ranker over the tiny BERT, fitted on a few pairs and saved as training/train_cls_lr.py saves one."""
    tokenizer, body = load_transformer(str(tiny_bert_dir), "cpu", attentions=False)
    pairs = [(QUERY, text) for text in DOCS] * 2
    labels = [0, 1, 1, 0, 1] * 2
    ranker = ClsLrRanker.fit(str(tiny_bert_dir), cls_features(body, tokenizer, pairs), labels, device="cpu")
    return ranker.save(tmp_path_factory.mktemp("rank") / "cls-lr")


def test_the_answer_is_every_document_best_first_with_its_index_score_and_text():
    # overlap: 0, 6, 2, 2, 2 — equal scores keep their input order, as CrossEncoder.rank's stable sort does
    assert rank(QUERY, DOCS, model=WordOverlap()) == [
        {"corpus_id": 1, "score": 6.0, "text": "otters play on the river bank"},
        {"corpus_id": 2, "score": 2.0, "text": "the river"},
        {"corpus_id": 3, "score": 2.0, "text": "the bank"},
        {"corpus_id": 4, "score": 2.0, "text": "river bank"},
        {"corpus_id": 0, "score": 0.0, "text": "tea and coffee"},
    ]
    assert ctxir.rank is rank and "rank" in ctxir.__all__


def test_top_k_keeps_the_best_and_no_document_gives_no_answer():
    ranked = rank(QUERY, DOCS, model=WordOverlap())
    assert rank(QUERY, DOCS, model=WordOverlap(), top_k=2) == ranked[:2]
    assert rank(QUERY, tuple(DOCS), model=WordOverlap(), top_k=10) == ranked
    assert rank(QUERY, [], model=WordOverlap()) == []


def test_a_cross_encoder_folder_ranks_as_sentence_transformers_ranks_it(cross_encoder_dir):
    ours = rank(QUERY, DOCS, model=str(cross_encoder_dir))
    theirs = load_cross_encoder(str(cross_encoder_dir), "cpu").rank(QUERY, DOCS, return_documents=True)
    assert [r["corpus_id"] for r in ours] == [r["corpus_id"] for r in theirs]
    assert [r["text"] for r in ours] == [r["text"] for r in theirs]
    assert np.allclose([r["score"] for r in ours], [r["score"] for r in theirs], atol=1e-6)
    own = load_reranker("cross-encoder", str(cross_encoder_dir), "cpu").score_pairs(QUERY, DOCS)
    assert [r["corpus_id"] for r in ours] == sorted(range(len(DOCS)), key=lambda i: -own[i])
    assert all(DOCS[r["corpus_id"]] == r["text"] and r["score"] == float(own[r["corpus_id"]]) for r in ours)


def test_a_cls_lr_folder_ranks_by_its_own_scores(cls_lr_dir):
    own = ClsLrRanker.load(cls_lr_dir, device="cpu").score_pairs(QUERY, DOCS)
    ranked = rank(QUERY, DOCS, model=str(cls_lr_dir), top_k=3)
    assert [r["corpus_id"] for r in ranked] == list(np.argsort(-own, kind="stable")[:3])
    assert np.allclose([r["score"] for r in ranked], np.sort(own)[::-1][:3], atol=1e-6)


@pytest.mark.parametrize("kind", list(RERANKERS))
def test_each_kind_ranks_with_its_default_model(kind):
    if not RERANKERS[kind].available()[0]:
        pytest.skip(f"{kind}: {RERANKERS[kind].available()[1]}")
    documents = ["Otters dig dens in the river bank.", "Banks approve loans.", "Bats hunt moths at night."]
    own = load_reranker(kind).score_pairs("where do otters live?", documents)
    ranked = rank("where do otters live?", documents, model=kind)
    assert [r["corpus_id"] for r in ranked] == list(np.argsort(-own, kind="stable"))
    assert [r["score"] for r in ranked] == [float(own[r["corpus_id"]]) for r in ranked]
    if kind == registry.DEFAULT_RERANKER:  # None: the shipped cross-encoder, the kind's default
        assert rank("where do otters live?", documents) == ranked


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"query": ""}, r"query must be text with a visible character, got '': pass the words"),
        ({"query": " \x00"}, r"query must be text .*, got ' \\x00'"),
        ({"query": None}, r"query must be text .*, got None"),
        (
            {"documents": "otters play"},
            r"documents must be a list of str, got 'otters play' \(type str\): pass the texts to rank as a list, "
            r"e\.g\. \['otters play'\] for one",
        ),
        (
            {"documents": {"d1": "otters"}},
            r"documents must be a list of str, got \{'d1': 'otters'\} \(type dict\)",
        ),
        (
            {"documents": ["otters", 3]},
            r"documents\[1\] must be a str, got 3 \(type int\): pass each document's text",
        ),
        ({"top_k": 0}, r"top_k must be None \(every document\) or a whole number ≥ 1, got 0: pass how many"),
        ({"top_k": 2.5}, r"top_k must be .*, got 2\.5"),
        ({"top_k": True}, r"top_k must be .*, got True"),
        (
            {"model": "colbert"},
            r"model 'colbert' is no re-ranker kind, model folder or Hub id: use one of 'cross-encoder', "
            r"'cls-lr', 'sts-cross-encoder' \(its default model\), the path of a folder that exists",
        ),
        ({"model": "none"}, r"model 'none' is no re-ranker kind"),
        ({"model": "./no/such/folder"}, r"model './no/such/folder' is no re-ranker kind"),
        (
            {"model": 42},
            r"model must be None, a re-ranker kind, .*, got 42 \(type int\): pass e\.g\. 'cross-encoder'",
        ),
    ],
)
def test_bad_input_is_refused_naming_the_argument_before_any_model_loads(arguments, message, monkeypatch):
    def no_loading(*args, **kwargs):
        raise AssertionError("a model was loaded for input that is refused")

    monkeypatch.setattr(registry, "load_reranker", no_loading)
    given = {"query": QUERY, "documents": DOCS, "model": None, "top_k": None, **arguments}
    with pytest.raises(CtxirError, match=message):
        rank(**given)
