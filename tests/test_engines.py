"""ctxir.retrieval.milvus: Milvus (Lite, embedded here) behind the Retriever contract, and
ctxir.encoders.sharded (+ shards): Ray Data sharded encoding.

Milvus tests run Milvus Lite in this process on a temporary file; the Ray tests start one local Ray for the module
(about half a minute on a busy 2-core machine) and shut it down after. Both skip when their package is missing.
"""

from __future__ import annotations

import importlib.util
import json
import random

import numpy as np
import pytest

from ctxir.encoders import BiEncoder
from ctxir.encoders.sharded import encode_sharded
from ctxir.encoders.shards import encoder_fingerprint, iter_shards, read_manifest, shard_plan
from ctxir.evaluation import evaluate_run
from ctxir.rerank import Reranker
from ctxir.rerank.pipeline import Pipeline
from ctxir.retrieval import DenseRetriever
from ctxir.retrieval.fusion import fuse
from ctxir.retrieval.milvus import (
    CollectionSettings,
    EngineCorpus,
    VectorDBRetriever,
    build_collection,
    engine_of,
)
from ctxir.types import CtxirError, Hit, run_from_hits

HAS_MILVUS = all(importlib.util.find_spec(m) is not None for m in ("pymilvus", "milvus_lite"))
HAS_RAY = importlib.util.find_spec("ray") is not None
needs_milvus = pytest.mark.skipif(
    not HAS_MILVUS,
    reason="pymilvus / milvus-lite not installed (pip install pymilvus==3.0.2 milvus-lite==3.2.2)",
)
needs_ray = pytest.mark.skipif(not HAS_RAY, reason="ray not installed (pip install 'ray[data]==2.60.0')")

WORDS = [
    "river",
    "bank",
    "money",
    "deposit",
    "otters",
    "play",
    "python",
    "snake",
    "code",
    "water",
    "account",
    "salary",
    "cat",
    "dog",
    "sun",
    "moon",
    "tea",
    "coffee",
    "music",
    "song",
    "sat",
    "the",
    "of",
    "and",
]


def _load_sharded(folder) -> tuple[list[str], np.ndarray]:
    """Every id and vector of a sharded encoding, in corpus order."""
    shards = list(iter_shards(folder))
    return [i for ids, _ in shards for i in ids], np.concatenate([vectors for _, vectors in shards])


def synthetic_corpus(n: int, seed: int = 0) -> dict:
    rng = random.Random(seed)
    return {
        f"d{i:03d}": {
            "title": rng.choice(["", rng.choice(WORDS)]),
            "text": " ".join(rng.choices(WORDS, k=rng.randint(4, 14))),
        }
        for i in range(n)
    }


CORPUS = synthetic_corpus(300)
ONE_DOC = {"a": {"title": "", "text": "a"}}
QUERIES = {f"q{i}": " ".join(random.Random(100 + i).choices(WORDS, k=3)) for i in range(40)}


class OverlapReranker(Reranker):
    """Toy re-ranker: shared words with the query (ties by id in Reranker)."""

    name = "overlap"

    def score_pairs(self, query, texts):
        words = set(query.split())
        return np.array([len(words & set(t.split())) for t in texts], dtype=np.float32)


@pytest.fixture
def encoder(tiny_st):
    return BiEncoder(tiny_st, device="cpu", cache=None)


@pytest.fixture
def engine(tmp_path, encoder):
    return VectorDBRetriever.from_corpus(CORPUS, encoder, uri=str(tmp_path / "engine.db"), mode="hybrid")


def test_shard_plan_and_uri_kinds():
    assert shard_plan(7, 3) == [(0, 0, 3), (1, 3, 6), (2, 6, 7)] and shard_plan(3, 10) == [(0, 0, 3)]
    assert engine_of("x/ctxir.db") == "milvus-lite" and engine_of("https://milvus:19530") == "milvus"
    with pytest.raises(CtxirError, match="neither a local Milvus Lite file"):
        engine_of("ctxir.sqlite")
    with pytest.raises(CtxirError, match="shard_size"):
        shard_plan(3, 0)


@needs_milvus
def test_engine_dense_returns_the_exact_top_10(tmp_path, encoder):
    engine = VectorDBRetriever.from_corpus(CORPUS, encoder, uri=str(tmp_path / "e.db"), mode="dense")
    exact = DenseRetriever(CORPUS, encoder, index="exact")
    got, want = engine.search(QUERIES, top_k=10), exact.search(QUERIES, top_k=10)
    found = sum(len({h.doc_id for h in got[q]} & {h.doc_id for h in want[q]}) for q in QUERIES)
    assert found / (10 * len(QUERIES)) >= 0.99  # recall@10 of the engine against exact search
    for q in QUERIES:
        assert all(isinstance(h, Hit) for h in got[q]) and len(got[q]) == 10
        exact_scores = {h.doc_id: h.score for h in want[q]}
        # scores are cosines, the same numbers DenseRetriever gives
        assert all(abs(h.score - exact_scores[h.doc_id]) < 1e-5 for h in got[q] if h.doc_id in exact_scores)
    assert engine.config["retriever"] == "milvus" and engine.config["engine"] == "milvus-lite"
    assert engine.config["weights"] == encoder.config["weights"]


@needs_milvus
def test_engine_hnsw_index(tmp_path, encoder):
    engine = VectorDBRetriever.from_corpus(
        CORPUS, encoder, uri=str(tmp_path / "h.db"), index_type="HNSW", bm25=False
    )
    exact = DenseRetriever(CORPUS, encoder, index="exact")
    got, want = engine.search(QUERIES, top_k=10), exact.search(QUERIES, top_k=10)
    found = sum(len({h.doc_id for h in got[q]} & {h.doc_id for h in want[q]}) for q in QUERIES)
    assert engine.config["index_type"] == "HNSW" and found / (10 * len(QUERIES)) >= 0.95


@needs_milvus
def test_pipeline_reranker_and_evaluation_take_the_engine_unchanged(engine, encoder):
    reranker = OverlapReranker()
    result = Pipeline(engine, reranker, depth=20).search(QUERIES["q0"], top_k=5)
    assert len(result.hits) == 5 and set(result.timings_ms) == {"milvus", "overlap"}
    runs = Pipeline(engine, reranker, depth=20).run(QUERIES, show_progress=False)
    # judged relevant: the first stage's best-scored documents (all of them when RRF ties)
    qrels = {
        q: {d: 1 for d, s in run.items() if s == max(run.values())} for q, run in runs["first_stage"].items()
    }
    scores = evaluate_run(qrels, runs["first_stage"], k_values=(1, 20)).aggregate
    assert scores["nDCG@1"] == 1.0 and scores["Recall@20"] == 1.0
    assert (
        evaluate_run(qrels, runs["rerank"], k_values=(20,)).aggregate["Recall@20"] == 1.0
    )  # same 20 candidates

    # corpus=None: documents come back from the engine; the re-ranker sees the same texts, so the same run
    lazy = VectorDBRetriever(None, encoder, uri=engine.uri, collection=engine.collection, mode="hybrid")
    assert isinstance(lazy.corpus, EngineCorpus) and len(lazy.corpus) == len(CORPUS)
    assert Pipeline(lazy, reranker, depth=20).run(QUERIES, show_progress=False) == runs
    doc = lazy.corpus["d007"]
    assert doc["title"] == CORPUS["d007"]["title"] and doc["text"] == CORPUS["d007"]["text"]
    assert "nope" not in lazy.corpus and sorted(lazy.corpus) == sorted(CORPUS)


@needs_milvus
def test_hybrid_is_rrf_of_the_engines_own_dense_and_bm25(engine):
    texts = list(QUERIES.values())
    opened = {m: VectorDBRetriever(CORPUS, engine.encoder, engine.uri, mode=m) for m in ("dense", "bm25")}
    parts = {mode: retriever._search(texts, top_k=100) for mode, retriever in opened.items()}
    hybrid = engine._search(texts, top_k=10)
    for i in range(len(texts)):
        want = fuse([parts["dense"][i], parts["bm25"][i]], "rrf", k=60)[:10]
        assert [round(h.score, 6) for h in hybrid[i]] == [round(h.score, 6) for h in want]
        # the same documents at each score level (the engine may order exact ties differently)
        assert {(h.doc_id, round(h.score, 6)) for h in hybrid[i]} <= {
            (h.doc_id, round(h.score, 6)) for h in fuse([parts["dense"][i], parts["bm25"][i]], "rrf", k=60)
        }


@needs_milvus
def test_bm25_in_the_engine(tmp_path, encoder):
    corpus = {
        "a": {"title": "Otters", "text": "Otters dig dens in the river bank."},
        "b": {"title": "Banks", "text": "Banks lend money to savers."},
        "c": {"title": "", "text": "Bats hunt moths over the river at night."},
    }
    bm25 = VectorDBRetriever.from_corpus(corpus, encoder, uri=str(tmp_path / "b.db"), mode="bm25")
    hits = bm25.query("river otters", top_k=10)
    assert [h.doc_id for h in hits] == ["a", "c"] and hits[0].score > hits[1].score > 0  # b shares no word
    assert bm25.query("the of and", top_k=10) == []  # stop words only
    assert bm25.config["mode"] == "bm25" and "weights" not in bm25.config  # no model in a BM25-only search


@needs_milvus
def test_reopening_checks_model_corpus_and_settings(tmp_path, encoder, tiny_st):
    uri = str(tmp_path / "r.db")
    VectorDBRetriever.from_corpus(CORPUS, encoder, uri=uri)
    again = VectorDBRetriever(CORPUS, encoder, uri=uri)  # opened as built
    assert again.rows == len(CORPUS)
    # an identical build is a no-op (nothing inserted); a build killed half-way is never served
    assert not build_collection(
        again.client, "ctxir", iter([]), CORPUS, again.meta["fingerprint"], 32, again.meta["corpus_sha256"]
    )
    with pytest.raises(CtxirError, match="inserted 0 documents"):
        build_collection(again.client, "half", iter([]), CORPUS, again.meta["fingerprint"], 32, "digest")
    with pytest.raises(CtxirError, match="interrupted"):
        VectorDBRetriever(CORPUS, encoder, uri=uri, collection="half")
    with pytest.raises(CtxirError, match="another model or pooling"):
        VectorDBRetriever(CORPUS, BiEncoder(tiny_st, pooling="cls", cache=None), uri=uri)
    smaller = dict(list(CORPUS.items())[:50])
    with pytest.raises(CtxirError, match="holds 300 documents, the corpus 50"):
        VectorDBRetriever(smaller, encoder, uri=uri)
    with pytest.raises(CtxirError, match="overwrite=True"):
        VectorDBRetriever.from_corpus(smaller, encoder, uri=uri)
    assert VectorDBRetriever.from_corpus(smaller, encoder, uri=uri, overwrite=True, bm25=False).rows == 50
    with pytest.raises(CtxirError, match="built without BM25"):
        VectorDBRetriever(smaller, encoder, uri=uri, mode="hybrid")
    with pytest.raises(CtxirError, match="does not exist"):
        VectorDBRetriever(smaller, encoder, uri=uri, collection="other")
    with pytest.raises(CtxirError, match="mode"):
        VectorDBRetriever(smaller, encoder, uri=uri, mode="sparse")


# ------------------------------------------------------------------------------------------------ Ray


@pytest.fixture(scope="module")
def ray_session():
    if not HAS_RAY:
        pytest.skip("ray not installed")
    import ray

    yield ray
    ray.shutdown()


@needs_ray
@pytest.mark.slow  # a minute of Ray workers; the sharded encoding's other tests run by default
@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # Ray Data's own DataContext deprecations
def test_encode_sharded_1_vs_2_workers_identical_and_resumable(ray_session, tmp_path, tiny_bert_dir, tiny_st):
    corpus = synthetic_corpus(130, seed=1)
    one = encode_sharded(
        corpus,
        str(tiny_bert_dir),
        tmp_path / "w1",
        num_workers=1,
        batch_size=16,
        shard_size=30,
        show_progress=False,
    )
    two = encode_sharded(
        corpus,
        str(tiny_bert_dir),
        tmp_path / "w2",
        num_workers=2,
        batch_size=16,
        shard_size=30,
        show_progress=False,
    )
    assert one.encoded == two.encoded == [0, 1, 2, 3, 4] and one.skipped == [] and len(two.workers) <= 2
    ids1, vectors1 = _load_sharded(tmp_path / "w1")
    ids2, vectors2 = _load_sharded(tmp_path / "w2")
    assert ids1 == ids2 == list(corpus) and vectors1.shape == (130, 32) and vectors1.dtype == np.float32
    np.testing.assert_allclose(vectors1, vectors2, atol=1e-5)
    local = BiEncoder(tiny_st, device="cpu", cache=None)
    np.testing.assert_allclose(vectors1, local.encode_corpus(corpus)[1], atol=1e-5)  # = encoding in-process

    manifest = read_manifest(tmp_path / "w1")
    assert manifest["fingerprint"] == encoder_fingerprint(local) and manifest["rows"] == 130
    assert [s["rows"] for s in manifest["shards"]] == [30, 30, 30, 30, 10]
    assert {k: v for k, v in manifest.items() if k != "folder"} == {
        k: v for k, v in read_manifest(tmp_path / "w2").items() if k != "folder"
    }  # the worker count leaves no trace
    assert not any(p.suffix == ".pkl" for p in (tmp_path / "w1").iterdir())

    # resume: nothing to do; a damaged shard and a shard whose text changed are encoded again, the rest skipped
    again = encode_sharded(
        corpus,
        str(tiny_bert_dir),
        tmp_path / "w1",
        num_workers=2,
        batch_size=16,
        shard_size=30,
        show_progress=False,
    )
    assert again.encoded == [] and again.skipped == [0, 1, 2, 3, 4] and again.seconds == 0
    shard = tmp_path / "w1" / "shard-00001.npy"
    shard.write_bytes(shard.read_bytes()[:100])
    changed = dict(corpus, d125={"title": "", "text": "otters play by the river"})
    fixed = encode_sharded(
        changed,
        str(tiny_bert_dir),
        tmp_path / "w1",
        num_workers=1,
        batch_size=16,
        shard_size=30,
        show_progress=False,
    )
    assert fixed.encoded == [1, 4] and fixed.skipped == [0, 2, 3]
    ids3, vectors3 = _load_sharded(tmp_path / "w1")
    assert ids3 == list(changed)
    np.testing.assert_allclose(vectors3[:120], vectors1[:120], atol=1e-5)
    np.testing.assert_allclose(vectors3, local.encode_corpus(changed)[1], atol=1e-5)

    if HAS_MILVUS:  # the shards load into the engine and search like a collection built in-process
        from_shards = VectorDBRetriever.from_shards(
            tmp_path / "w2", corpus, local, uri=str(tmp_path / "s.db")
        )
        built = VectorDBRetriever.from_corpus(corpus, local, uri=str(tmp_path / "c.db"))
        queries = dict(list(QUERIES.items())[:10])
        assert run_from_hits(from_shards.search(queries, 10)).keys() == queries.keys()
        got, want = from_shards.search(queries, 10), built.search(queries, 10)
        assert all([h.doc_id for h in got[q]] == [h.doc_id for h in want[q]] for q in queries)
        with pytest.raises(CtxirError, match="other texts"):
            VectorDBRetriever.from_shards(tmp_path / "w2", changed, local, uri=str(tmp_path / "s2.db"))


def test_a_ray_started_here_carries_this_ctxir_folder_to_its_workers(monkeypatch):
    """``_ensure_ray`` starts Ray with the ctxir package folder the driver runs as a py_module, so the workers
    import the same code whether or not ctxir is installed on the nodes."""
    import sys
    import types
    from pathlib import Path

    import ctxir
    from ctxir.encoders import sharded

    started = {}
    fake = types.SimpleNamespace(
        is_initialized=lambda: False, init=lambda address=None, **kw: started.update(kw)
    )
    monkeypatch.setitem(sys.modules, "ray", fake)
    assert sharded._ensure_ray(None, 2, {"env_vars": {"A": "1"}}) is fake
    assert started["runtime_env"]["py_modules"] == [str(Path(ctxir.__file__).resolve().parent)]
    assert started["runtime_env"]["env_vars"]["A"] == "1" and started["num_cpus"] == 2


def test_encode_sharded_checks_its_input(tmp_path):
    with pytest.raises(CtxirError, match="num_workers"):
        encode_sharded(ONE_DOC, "model", tmp_path, num_workers=0)
    with pytest.raises(CtxirError, match="empty"):
        encode_sharded({}, "model", tmp_path)


def test_manifest_checks(tmp_path):
    (tmp_path / "manifest.json").write_text(json.dumps({"format": "other"}))
    with pytest.raises(CtxirError, match="not a ctxir shard manifest"):
        read_manifest(tmp_path)


def test_settings_are_checked_before_any_work(tmp_path):
    with pytest.raises(CtxirError, match="shard_size"):
        encode_sharded(ONE_DOC, "model", tmp_path, num_workers=2, shard_size=0)
    with pytest.raises(CtxirError, match=r"unknown option.*'workers'.*num_workers"):
        encode_sharded(ONE_DOC, "model", tmp_path, workers=2)
    with pytest.raises(CtxirError, match="index_type"):
        CollectionSettings(index_type="BTREE")
    meta = CollectionSettings(bm25=False).meta("fp", 4, "digest", 3)
    assert (meta["bm25"], meta["bm25_k1"], meta["analyzer"], meta["rows"]) == (False, None, None, 3)
