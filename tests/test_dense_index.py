"""The dense index choice (exact / ann / auto) and what a second start reloads instead of rebuilding.

Embeddings are written into the cache under the key the encoder computes, so the vectors are a known,
well-separated set and nothing is encoded.
"""

import os

import numpy as np
import pytest

from ctxir.encoders import BiEncoder, EmbeddingCache
from ctxir.rerank.pipeline import build_first_stages
from ctxir.retrieval import AUTO_ANN_THRESHOLD, BM25Retriever, DenseRetriever
from ctxir.types import CtxirError, doc_text

WORDS = [
    "otter",
    "river",
    "bank",
    "money",
    "loan",
    "python",
    "snake",
    "moth",
    "bat",
    "night",
    "savings",
    "code",
    "list",
    "interest",
    "prey",
    "dawn",
    "mud",
    "lend",
    "hunt",
    "den",
]


def make_corpus(n: int, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    return {f"d{i}": {"title": "", "text": " ".join(rng.choice(WORDS, 8)) + f" item{i}"} for i in range(n)}


def clustered(n: int, dim: int, seed: int = 0) -> np.ndarray:
    """(n, dim) unit vectors in n/20 tight clusters: an easy set, where exact top-10s are well separated."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((max(1, n // 20), dim)).astype(np.float32)
    x = centres[rng.integers(0, len(centres), n)] + 0.3 * rng.standard_normal((n, dim)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


@pytest.fixture
def cached(tiny_st, tmp_path):
    """(corpus, encoder, vectors): 1,200 documents whose clustered vectors are already in the encoder's cache."""
    corpus = make_corpus(1200)
    encoder = BiEncoder(tiny_st, cache=EmbeddingCache(tmp_path / "embeddings"))
    vectors = clustered(len(corpus), encoder.dimension)
    encoder.cache.put(encoder.cache_key([doc_text(d) for d in corpus.values()]), vectors)
    return corpus, encoder, vectors


def test_auto_picks_ann_from_the_threshold_and_config_says_so(cached, monkeypatch):
    corpus, encoder, _ = cached
    monkeypatch.setattr("ctxir.retrieval.retrievers.AUTO_ANN_THRESHOLD", len(corpus) + 1)
    below = DenseRetriever(corpus, encoder, index="auto")
    monkeypatch.setattr("ctxir.retrieval.retrievers.AUTO_ANN_THRESHOLD", len(corpus))
    at = DenseRetriever(corpus, encoder, index="auto")
    assert (below.index_kind, below.ann, below.config["ann_settings"]) == ("exact", None, None)
    assert at.index_kind == "ann" and at.ann is not None
    assert at.config["index_choice"] == "auto" and at.config["index_kind"] == "ann"
    assert at.config["ann_settings"]["type"] == f"IVF{at.ann.params.nlist},sq8"
    assert at.ann_path.parent == encoder.cache.root and at.ann_path.name == f"{at.cache_key}.ann.faiss"
    monkeypatch.undo()
    assert DenseRetriever(corpus, encoder).index_kind == (
        "ann" if len(corpus) >= AUTO_ANN_THRESHOLD else "exact"
    )


def test_the_index_is_an_argument_the_app_passes_down_and_bad_names_are_refused(cached, tiny_st, monkeypatch):
    """The dense index is the one named ("auto" when none is), never read from the environment: CTXIR_INDEX is
    app.py's --index, which passes it to every dense retriever of a corpus it searches (``CorpusIndex``)."""
    from ctxir.app.corpus_index import CorpusIndex

    corpus, encoder, _ = cached
    monkeypatch.setenv("CTXIR_INDEX", "ann")
    assert DenseRetriever(corpus, encoder).index_choice == "auto"
    assert DenseRetriever(corpus, encoder, index="ann").index_kind == "ann"
    index = CorpusIndex("c", corpus, tiny_st, cache=encoder.cache, index="ann")
    assert index.dense.index_kind == "ann" and index.hybrid.retrievers[1] is index.dense
    assert index.pooled("cls", 1).index_kind == "ann"  # compare pooling's retrievers too
    assert CorpusIndex("c", corpus, tiny_st, cache=encoder.cache).dense.index_choice == "auto"
    with pytest.raises(CtxirError, match=r"index 'ivf' is not known: use one of 'auto', 'exact', 'ann'"):
        DenseRetriever(corpus, encoder, index="ivf")


def test_ann_top_k_equals_exact_on_an_easy_set(cached):
    corpus, encoder, vectors = cached
    exact = DenseRetriever(corpus, encoder, index="exact")
    ann = DenseRetriever(corpus, encoder, index="ann")
    rng = np.random.default_rng(1)
    queries = vectors[rng.choice(len(vectors), 50, replace=False)] + 0.05 * rng.standard_normal(
        (50, vectors.shape[1])
    ).astype(np.float32)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    for e_hits, a_hits in zip(
        exact.search_embeddings(queries, 10), ann.search_embeddings(queries, 10), strict=True
    ):
        assert [h.doc_id for h in a_hits] == [h.doc_id for h in e_hits]
        # re-scored with the float vectors: the ANN's scores are the exact cosines
        assert [h.score for h in a_hits] == pytest.approx([h.score for h in e_hits], abs=1e-5)


def test_ann_index_is_reopened_not_rebuilt_and_embeddings_are_memory_mapped(cached):
    corpus, encoder, _ = cached
    first = DenseRetriever(corpus, encoder, index="ann")
    assert first.ann.status == "built: no index yet"
    stamp = os.stat(first.ann_path).st_mtime_ns
    second = DenseRetriever(corpus, encoder, index="ann")
    assert second.ann.status == "opened" and os.stat(second.ann_path).st_mtime_ns == stamp
    assert isinstance(second.embeddings, np.memmap) and not second.embeddings.flags.writeable
    query = second.embeddings[7:8].copy()
    assert second.search_embeddings(query, 1)[0][0].doc_id == "d7"


def test_a_stale_or_damaged_ann_index_is_rebuilt(cached):
    from ctxir.retrieval.ann import AnnParams

    corpus, encoder, _ = cached
    path = DenseRetriever(corpus, encoder, index="ann").ann_path
    other = DenseRetriever(
        corpus, encoder, index="ann", ann_params=AnnParams(nlist=8)
    )  # other build settings
    assert other.ann.status.startswith("built: stale") and other.config["ann_settings"]["nlist"] == 8
    with open(path, "r+b") as f:  # flip bytes in the middle of the index file: same size, different content
        f.seek(path.stat().st_size // 2)
        f.write(b"\xff" * 64)
    again = DenseRetriever(corpus, encoder, index="ann", ann_params=AnnParams(nlist=8))
    assert again.ann.status == f"built: {path.name} is corrupt (sha256 differs)"
    assert DenseRetriever(corpus, encoder, index="ann", ann_params=AnnParams(nlist=8)).ann.status == "opened"


def test_without_a_cache_the_ann_index_lives_in_memory(tiny_st):
    corpus = make_corpus(60)
    dense = DenseRetriever(corpus, BiEncoder(tiny_st, cache=False), index="ann")
    assert dense.ann_path is None and dense.ann.status == "built"
    assert len(dense.query("otter river", 5)) == 5


def test_bm25_index_reloaded_from_the_cache_scores_identically(tmp_path):
    corpus = make_corpus(300)
    queries = {"q1": "otter river den", "q2": "python code list", "q3": "savings interest loan"}
    built = BM25Retriever(corpus, cache=tmp_path)
    assert built.cache_status == "built: no cached index yet"
    loaded = BM25Retriever(corpus, cache=tmp_path)
    assert loaded.cache_status == "loaded"
    assert loaded.search(queries, 20) == built.search(queries, 20)
    assert (
        BM25Retriever(corpus, k1=1.2, cache=tmp_path).cache_status == "built: no cached index yet"
    )  # other key
    changed = dict(corpus, d0={"title": "", "text": "moths at night"})
    assert BM25Retriever(changed, cache=tmp_path).cache_status == "built: no cached index yet"
    assert len([p for p in tmp_path.iterdir() if not p.name.startswith(".")]) == 3
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary folder left behind


def test_a_damaged_bm25_cache_is_rebuilt(tmp_path):
    corpus = make_corpus(300)
    reference = BM25Retriever(corpus, cache=tmp_path).search({"q": "otter bank"}, 10)
    (folder,) = tmp_path.iterdir()
    data = folder / "data.csc.index.npy"
    data.write_bytes(data.read_bytes()[:-8])  # truncated
    rebuilt = BM25Retriever(corpus, cache=tmp_path)
    assert rebuilt.cache_status == "built: data.csc.index.npy is missing, truncated or corrupt"
    assert rebuilt.search({"q": "otter bank"}, 10) == reference
    assert BM25Retriever(corpus, cache=tmp_path).cache_status == "loaded"


def test_bm25_cache_by_default_only_for_large_corpora(tmp_path, monkeypatch):
    monkeypatch.setenv("CTXIR_CACHE", str(tmp_path))
    assert (
        BM25Retriever(make_corpus(50)).cache_status == "built"
    )  # under BM25_CACHE_MIN_DOCS: nothing written
    assert not (tmp_path / "bm25").exists()
    monkeypatch.setattr("ctxir.retrieval.retrievers.BM25_CACHE_MIN_DOCS", 10)
    assert BM25Retriever(make_corpus(50)).cache_status == "built: no cached index yet"
    assert BM25Retriever(make_corpus(50)).cache_status == "loaded"
    assert len(list((tmp_path / "bm25").iterdir())) == 1


def test_hybrid_fuses_the_same_ann_dense_retriever(cached, tmp_path):
    corpus, encoder, _ = cached
    stages = build_first_stages(
        corpus, ["dense", "hybrid"], [encoder], index="ann", bm25_options={"cache": tmp_path / "bm25"}
    )
    assert stages["hybrid"].retrievers[1] is stages["dense"] and stages["dense"].index_kind == "ann"
    assert stages["hybrid"].retrievers[0].cache_status == "built: no cached index yet"
    hits = stages["hybrid"].query("otter river", 10)
    assert len(hits) == 10 and len({h.doc_id for h in hits}) == 10


def test_embedding_cache_key_is_unchanged_by_block_hashing():
    """Keys written before block hashing must still be found: the digest is of the same bytes, text + NUL each."""
    import hashlib
    import json

    texts = [
        "otters",
        "",
        "bank\u2028loans",
        "caf\u00e9 \ud800 lone surrogate",
        *[f"doc {i}" for i in range(20_000)],
    ]
    config = {"weights": "3f2a", "pooling": "mean", "layer": -1}
    digest = hashlib.sha256(json.dumps(config, sort_keys=True).encode())
    for text in texts:
        digest.update(text.encode("utf-8", "surrogatepass"))
        digest.update(b"\x00")
    assert EmbeddingCache.key(config, texts) == digest.hexdigest()[:32]
    assert (
        EmbeddingCache.key(config, [])
        == hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()[:32]
    )


def test_a_large_mapped_cache_is_checked_on_a_sample_and_a_bad_sampled_row_is_caught(tmp_path, monkeypatch):
    from ctxir.encoders.bi_encoder import _looks_encoded

    monkeypatch.setattr("ctxir.encoders.bi_encoder.FULL_CHECK_ROWS", 1000)
    vectors = clustered(5000, 16)
    cache = EmbeddingCache(tmp_path)
    cache.put("k", vectors)
    assert _looks_encoded(cache.get("k", mmap=True), 5000, 16)
    vectors[0] = np.nan  # row 0 is in the first sampled run
    cache.put("k", vectors)
    assert not _looks_encoded(cache.get("k", mmap=True), 5000, 16)
    assert not _looks_encoded(cache.get("k"), 5000, 16)  # in memory: every row is checked


def test_app_index_flag_refuses_an_unknown_index_before_loading_anything():
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    done = subprocess.run(
        [sys.executable, "app.py", "--index", "hnsw"],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    assert done.returncode == 2
    assert "--index 'hnsw' is not known: use one of 'auto', 'exact', 'ann'" in done.stderr
