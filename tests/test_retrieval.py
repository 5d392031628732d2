import pytest

from ctxir.encoders import BiEncoder
from ctxir.retrieval import BM25Retriever, DenseRetriever, HybridRetriever
from ctxir.retrieval.fusion import reciprocal_rank_fusion, weighted_score_fusion
from ctxir.types import CtxirError, Hit

CORPUS = {
    "river": {"title": "Rivers", "text": "Otters play along the muddy river bank at dawn."},
    "money": {"title": "Savings", "text": "Open a savings account at your bank to earn interest."},
    "code": {"title": "", "text": "Python list comprehensions build lists in one line of code."},
    "snake": {"title": "", "text": "The python is a large snake that constricts its prey."},
}


def test_bm25_ranks_lexical_match_first():
    bm25 = BM25Retriever(CORPUS)
    hits = bm25.query("savings account interest", 4)
    assert hits[0].doc_id == "money" and all(isinstance(h, Hit) for h in hits)
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)


def test_bm25_stems_and_drops_non_matches():
    hits = BM25Retriever(CORPUS).query("constricting snakes", 10)
    assert [h.doc_id for h in hits] == ["snake"]  # stemming: constricting→constrict, snakes→snake
    assert BM25Retriever(CORPUS).query("the of and", 10) == []  # stop words only: no hit, no error


def test_search_many_and_top_k_larger_than_corpus():
    results = BM25Retriever(CORPUS).search({"q1": "python", "q2": "river otters"}, top_k=50)
    assert set(results) == {"q1", "q2"} and results["q2"][0].doc_id == "river"
    assert {h.doc_id for h in results["q1"]} == {"code", "snake"}


@pytest.mark.parametrize("bad", ["", "   "])
def test_empty_query_is_a_clear_error(bad):
    with pytest.raises(CtxirError, match="query is empty"):
        BM25Retriever(CORPUS).query(bad)


def test_empty_corpus_and_bad_top_k():
    with pytest.raises(CtxirError, match="corpus is empty"):
        BM25Retriever({})
    with pytest.raises(CtxirError, match="top_k must be a whole number"):
        BM25Retriever(CORPUS).query("python", 0)


def test_rrf_by_hand():
    a = [Hit("x", 9.0), Hit("y", 5.0)]
    b = [Hit("y", 0.9), Hit("z", 0.8), Hit("x", 0.1)]
    fused = reciprocal_rank_fusion([a, b], k=1)
    # x: 1/2 + 1/4 = 0.75; y: 1/3 + 1/2 = 0.8333; z: 1/3
    assert [h.doc_id for h in fused] == ["y", "x", "z"]
    assert fused[0].score == pytest.approx(1 / 3 + 1 / 2) and fused[2].score == pytest.approx(1 / 3)
    weighted = reciprocal_rank_fusion([a, b], k=1, weights=[2, 1])
    assert weighted[0].doc_id == "x" and weighted[0].score == pytest.approx(2 / 2 + 1 / 4)


def test_weighted_fusion_by_hand():
    a = [Hit("x", 10.0), Hit("y", 6.0), Hit("z", 2.0)]  # min-max → x 1, y .5, z 0
    b = [Hit("z", 0.9), Hit("y", 0.5)]  # → z 1, y 0
    fused = {h.doc_id: h.score for h in weighted_score_fusion([a, b], weights=[1, 3])}
    assert fused == pytest.approx({"x": 1.0, "y": 0.5, "z": 3.0})
    with pytest.raises(CtxirError, match=r"weights .* must be 2 non-negative numbers"):
        weighted_score_fusion([a, b], weights=[1])


def test_dense_exact_and_ann_agree(tiny_st, tmp_path):
    from ctxir.encoders import EmbeddingCache

    enc = BiEncoder(tiny_st, cache=EmbeddingCache(tmp_path))
    exact = DenseRetriever(CORPUS, enc, index="exact")
    ann = DenseRetriever(CORPUS, enc, index="ann")
    q = enc.encode(["otters on the river bank", "python code"])
    for e_hits, a_hits in zip(exact.search_embeddings(q, 4), ann.search_embeddings(q, 4), strict=True):
        # A random tiny model gives near-tied scores, so compare doc → score rather than order.
        exact_scores = {h.doc_id: h.score for h in e_hits}
        assert exact_scores.keys() == {h.doc_id for h in a_hits} == CORPUS.keys()
        assert all(abs(exact_scores[h.doc_id] - h.score) < 1e-5 for h in a_hits)
    with pytest.raises(CtxirError, match="index 'ivf' is not known"):
        DenseRetriever(CORPUS, enc, index="ivf")


def test_dense_minilm_understands_paraphrase(minilm, tmp_path):
    from ctxir.encoders import EmbeddingCache

    dense = DenseRetriever(CORPUS, BiEncoder(minilm, cache=EmbeddingCache(tmp_path)))
    assert dense.query("venomous reptile squeezing its victims", 1)[0].doc_id == "snake"
    assert dense.query("where do otters live", 1)[0].doc_id == "river"


def test_hybrid_fuses_both(tiny_st):
    bm25 = BM25Retriever(CORPUS)
    dense = DenseRetriever(CORPUS, BiEncoder(tiny_st, cache=None))
    hybrid = HybridRetriever([bm25, dense], fusion="rrf", k=60)
    hits = hybrid.query("python snake", 4)
    expected = reciprocal_rank_fusion([bm25.query("python snake", 100), dense.query("python snake", 100)], 60)
    assert hits == expected[:4]
    with pytest.raises(CtxirError, match="at least two retrievers"):
        HybridRetriever([bm25])
    with pytest.raises(CtxirError, match="fusion 'max' is not known"):
        HybridRetriever([bm25, dense], fusion="max")


def test_bm25_stemming_is_a_choice_and_none_is_plain_bm25s():
    import bm25s

    from ctxir.retrieval import BM25Retriever

    corpus = {
        "a": {"title": "", "text": "running shoes for runners"},
        "b": {"title": "", "text": "the run was long"},
        "c": {"title": "", "text": "a quiet evening"},
    }
    stemmed = BM25Retriever(corpus).query("run", 3)
    plain = BM25Retriever(corpus, stemmer=None).query("run", 3)
    assert {h.doc_id for h in stemmed if h.score > 0} == {"a", "b"}  # run ~ running/runners once stemmed
    assert {h.doc_id for h in plain if h.score > 0} == {"b"}
    # stemmer=None scores exactly as bm25s does on its own (same tokenizer settings, no stemmer)
    retriever = bm25s.BM25(k1=1.5, b=0.75, method="lucene")
    texts = [" ".join(filter(None, (corpus[d]["title"], corpus[d]["text"]))) for d in corpus]
    retriever.index(bm25s.tokenize(texts, stopwords="en", show_progress=False), show_progress=False)
    docs, scores = retriever.retrieve(
        bm25s.tokenize(["run"], stopwords="en", show_progress=False), k=3, show_progress=False
    )
    ours = {h.doc_id: h.score for h in plain}
    theirs = {
        list(corpus)[int(i)]: float(score) for i, score in zip(docs[0], scores[0], strict=True) if score > 0
    }
    assert theirs and {d: s for d, s in ours.items() if s > 0} == pytest.approx(theirs, abs=1e-6)
    with pytest.raises(CtxirError, match=r"stemmer 'klingon' is not known"):
        BM25Retriever(corpus, stemmer="klingon")
