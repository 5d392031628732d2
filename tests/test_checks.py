"""ctxir.checks: the input checks every entry point shares, and that each entry point checks once."""

import numpy as np
import pytest

from ctxir.checks import check_choice, check_int, check_queries, check_query, check_text, check_top_k
from ctxir.rerank import Reranker
from ctxir.rerank.pipeline import Pipeline
from ctxir.retrieval import BM25Retriever
from ctxir.types import CtxirError


@pytest.mark.parametrize(("value", "expected"), [(3, 3), (np.int64(4), 4), (5.0, 5), (" 6 ", 6), ("-1", -1)])
def test_check_int_accepts_whole_numbers(value, expected):
    assert check_int(value, "k", -1, 10) == expected


@pytest.mark.parametrize("value", [2.5, "2.5", True, None, "two", 11, -2, float("nan")])
def test_check_int_refuses_the_rest_and_names_the_parameter(value):
    with pytest.raises(CtxirError, match=r"^k must be a whole number from -1 to 10, got "):
        check_int(value, "k", -1, 10)


def test_text_checks_name_what_is_wrong():
    assert check_text("  a b ", "query") == "a b"
    with pytest.raises(CtxirError, match=r"^query is empty: type a few words to search for$"):
        check_query("   ")
    with pytest.raises(CtxirError, match=r"^title must be text, got int$"):
        check_text(3, "title")
    with pytest.raises(CtxirError, match="has 11 characters but at most 10 are accepted"):
        check_query("x" * 11, max_chars=10)
    with pytest.raises(CtxirError, match="query 'q2' is empty"):
        check_queries({"q1": "fine", "q2": " "})
    with pytest.raises(CtxirError, match="top_k must be a whole number ≥ 1, got True"):
        check_top_k(True)
    with pytest.raises(CtxirError, match="fusion 'mean' is not known: use one of 'rrf', 'weighted'"):
        check_choice("mean", "fusion", ("rrf", "weighted"))


@pytest.mark.parametrize(
    "text",
    [
        "\x00",
        "\x00\x00\x00",
        " \x00\x01\x1b\x7f ",
        "\u200b\ufeff",
        "\t\x0b\x0c\r\n",
        "\u2028\u00a0",
        "\x85\x9f",
    ],
)
def test_a_query_of_only_control_characters_is_empty(text):
    # the same message as an empty query, not a search for nothing that finds "0 results"
    with pytest.raises(CtxirError, match=r"^query is empty: type a few words to search for$"):
        check_query(text)
    with pytest.raises(CtxirError, match=r"^query 'q1' is empty"):
        check_queries({"q1": text})
    with pytest.raises(CtxirError, match=r"^query is empty"):
        BM25Retriever({"a": {"title": "", "text": "river bank"}}).query(text)


@pytest.mark.parametrize("text", ["\x00otters", "é", "\u4e2d", "\U0001f9a6", "\x00 a \x00", "-"])
def test_one_visible_character_makes_a_query(text):
    assert check_query(text) == text.strip()


class CountingReranker(Reranker):
    name = "length"

    def __init__(self):
        self.checked = 0

    def rerank(self, query, hits, corpus, top_k=None):
        self.checked += 1
        return super().rerank(query, hits, corpus, top_k)

    def score_pairs(self, query, texts):
        return np.array([len(t) for t in texts], dtype=np.float32)


def test_pipeline_checks_its_input_once_then_runs_the_unchecked_stages(monkeypatch):
    corpus = {
        "a": {"title": "", "text": "river bank otters"},
        "b": {"title": "", "text": "bank account money"},
    }
    calls = []
    import ctxir.rerank.pipeline as pipeline_module

    monkeypatch.setattr(pipeline_module, "check_query", lambda q: calls.append(q) or q.strip())
    reranker = CountingReranker()
    hits = Pipeline(BM25Retriever(corpus), reranker, depth=5).search(" bank ", 2).hits
    assert (
        calls == [" bank "] and reranker.checked == 0
    )  # neither the retriever nor the re-ranker checked again
    assert [h.doc_id for h in hits] == ["b", "a"]  # the longer text first: the re-ranker did run
