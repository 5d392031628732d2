"""``ctxir adapt``'s pseudo-queries: the ``keywords`` kind (a document's top TF-IDF terms) and the default mix."""

from __future__ import annotations

import pytest

from ctxir.adapt.queries import KEYWORD_TERMS, OTHER_KINDS, QUERY_KINDS, pseudo_queries
from ctxir.types import doc_text

# Every document has words of its own (once in the corpus), words shared with one other document, and the words all of
# them share ("library"), so the three rules below each have something to refuse.
CORPUS = {
    f"d{i}": {
        "title": "",
        "text": f"library zq{i}unique {topic} {topic} {pair} catalogue {pair} reading services library",
    }
    for i, (topic, pair) in enumerate(
        [
            ("otters", "river banks"),
            ("otters", "river banks"),
            ("satellites", "solar storms"),
            ("satellites", "solar storms"),
            ("ozone", "polar winter"),
            ("ozone", "polar winter"),
        ]
    )
}


def _keywords(corpus=CORPUS, seed=0):
    return [
        q for q in pseudo_queries(corpus, per_doc=1, kinds=["keywords"], seed=seed) if q.kind == "keywords"
    ]


def test_a_keyword_query_is_a_few_distinctive_terms_its_document_shares_with_another():
    queries = _keywords()
    assert len(queries) == len(CORPUS)
    for query in queries:
        words = query.text.split()
        document = doc_text(CORPUS[query.doc_id])
        # the positive is the whole document: the query's terms cannot be cut out of it
        assert query.positive == document
        assert all(w in document.split() for w in words)
        # no word twice, and the query is 2-4 terms (a pair counts once)
        assert len(words) == len(set(words))
        assert KEYWORD_TERMS[0] <= len(words) <= 2 * KEYWORD_TERMS[1]
        # not a word of this document alone (min_df=2), nor one every document has (max_df)
        assert not any("unique" in w for w in words)
        assert "library" not in words
    # the terms that tell a document from the others lead: its topic, never the corpus-wide filler
    assert all(CORPUS[q.doc_id]["text"].split()[2] in q.text.split() for q in queries)


def test_keyword_queries_are_seeded_and_leave_the_other_kinds_draws_alone():
    assert [q.text for q in _keywords(seed=3)] == [q.text for q in _keywords(seed=3)]
    mixed = pseudo_queries(CORPUS, per_doc=2, kinds=["sentence", "span", "keywords"], seed=1)
    without = pseudo_queries(CORPUS, per_doc=2, kinds=["sentence", "span"], seed=1)
    assert [q.text for q in mixed if q.kind != "keywords"] == [q.text for q in without]


def test_the_default_mix_is_a_title_a_sentence_and_a_span_without_keywords():
    # keywords were the default on one training draw's gain, which three seeds did not hold (docs/lab.md): they
    # are offered, not drawn unless asked for
    assert QUERY_KINDS == ("title", "sentence", "span") and "keywords" in OTHER_KINDS
    corpus = {
        d: {
            "title": f"All about {doc['text'].split()[2]} here",
            "text": doc["text"] + ". More words follow here, and then a few more words to crop a span from.",
        }
        for d, doc in CORPUS.items()
    }
    drawn = pseudo_queries(corpus, per_doc=3, seed=0)
    assert [q.kind for q in drawn] == ["title", "sentence", "span"] * len(corpus)
    asked = pseudo_queries(corpus, per_doc=3, kinds=["title", "keywords", "sentence", "span"], seed=0)
    assert [q.kind for q in asked] == ["title", "keywords", "sentence"] * len(corpus)


@pytest.mark.parametrize("texts", [["alpha beta gamma delta epsilon zeta eta theta"] * 1, ["", ""]])
def test_a_corpus_with_no_shared_terms_gets_no_keyword_query(texts):
    corpus = {f"d{i}": {"title": "", "text": t} for i, t in enumerate(texts)}
    assert _keywords(corpus) == []


def test_masked_keywords_are_the_keyword_queries_with_their_words_cut_out_of_the_positive():
    """The student must find the document by its other words; the teacher still reads the document whole (its BM25
    of the cut text would be nothing)."""
    import Stemmer

    from ctxir.adapt.negatives import scored_texts

    corpus = {
        doc_id: {"title": "", "text": doc["text"] + f" with its {doc_id} notes and more words about them"}
        for doc_id, doc in CORPUS.items()
    }
    plain = [q for q in pseudo_queries(corpus, per_doc=1, kinds=["keywords"], seed=0)]
    cut = pseudo_queries(corpus, per_doc=1, kinds=["masked-keywords"], seed=0)
    assert [q.text for q in cut] == [q.text for q in plain] and {q.kind for q in cut} == {"masked-keywords"}
    stem = Stemmer.Stemmer("english").stemWord
    for query in cut:
        stems = {stem(w) for w in query.text.split()}
        assert query.positive.split() and not {stem(w.lower()) for w in query.positive.split()} & stems
        assert "catalogue" in query.positive.split()  # the rest stays
        texts = scored_texts(query, {"negatives": [["d0", "bm25"]]}, corpus)[1]
        assert texts[0] == doc_text(corpus[query.doc_id])
    # the other kinds' teachers read the positive the student sees
    title = pseudo_queries(corpus, per_doc=1, kinds=["span"], seed=0)[0]
    assert scored_texts(title, {"negatives": []}, corpus)[1] == [title.positive]


def test_a_kind_that_is_not_known_is_named_with_the_kinds_there_are():
    with pytest.raises(
        Exception, match=r"--query-kinds 'topics' is not known: .*sentence, span, keywords, masked-keywords"
    ):
        pseudo_queries(CORPUS, kinds=["topics"])
