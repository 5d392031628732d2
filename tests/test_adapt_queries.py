"""``ctxir adapt``'s pseudo-queries: the default mix, what the teacher reads, and an unknown kind."""

from __future__ import annotations

import pytest

from ctxir.adapt.queries import QUERY_KINDS, kinds_phrase, pseudo_queries

CORPUS = {
    f"d{i}": {
        "title": f"All about {topic} here",
        "text": f"library {topic} {topic} river banks catalogue solar storms reading services library. More words follow here, and then a few "
        "more words to crop a span from.",
    }
    for i, topic in enumerate(["otters", "otters", "satellites", "satellites", "ozone", "ozone"])
}


def test_the_default_mix_is_a_title_a_sentence_and_a_span_in_turn():
    assert QUERY_KINDS == ("title", "sentence", "span")
    drawn = pseudo_queries(CORPUS, per_doc=3, seed=0)
    assert [q.kind for q in drawn] == ["title", "sentence", "span"] * len(CORPUS)


def test_the_teacher_reads_the_positive_the_student_sees():
    from ctxir.adapt.negatives import scored_texts

    span = pseudo_queries(CORPUS, per_doc=1, kinds=["span"], seed=0)[0]
    assert scored_texts(span, {"negatives": []}, CORPUS)[1] == [span.positive]


def test_a_kind_that_is_not_known_is_named_with_the_kinds_there_are():
    with pytest.raises(Exception, match=r"--query-kinds 'topics' is not known: .*sentence, span, generated"):
        pseudo_queries(CORPUS, kinds=["topics"])


def test_a_title_and_a_sentence_each_leave_the_rest_as_positive_and_the_kinds_read_in_words():
    corpus = {
        "d1": {
            "title": "Where otters live",
            "text": "Otters dig dens in river banks. They eat fish and crabs at night.",
        }
    }
    drawn = [(q.kind, q.text) for q in pseudo_queries(corpus, per_doc=2, seed=0)]
    assert drawn == [("title", "Where otters live"), ("sentence", "Otters dig dens in river banks.")]
    counts = {"total": 5, "span": 1, "title": 2, "generated": 2, "sentence": 0}
    assert kinds_phrase(counts) == "titles, word spans and generated queries"
